"""Paired A/B of the whole daemon's CPU per cycle between two git revisions, run side by side.

One daemon cycle on a shared VM varies by about ±0.4 ms from one 60 s run to the next, more
than most changes are worth, and back-to-back runs of A then B see different neighbours. Here
both revisions run at the same time, each a real ``nichealthd`` as ``bench/run.py`` deploys it
(1 s polling, metrics, event log, D-Bus service on its own private bus, an absent connector
socket) on its own copy of one simulated host, started a third of a second apart; the CPU
time of all threads of each over the same window, divided by its polls, gives one pair per
round, and the order of starting alternates. The median of the per-round differences is the
figure: it cancels what both saw. Both trees are busy healthy hosts, as ``bench/run.py``
measures by default (bench/traffic.py: traffic counters move every second, error counters do
not); ``--quiet-tree`` leaves every counter still.

    python3 bench/daemon_ab.py fa4a836                 # that revision vs the working tree
    python3 bench/daemon_ab.py A B --rounds 7 --seconds 60 --devices 34 [--quiet-tree]

Windows of a whole number of minutes keep one periodic re-discovery and state flush in each.
"""

from __future__ import annotations

import statistics
import sys
import tempfile
import time
from pathlib import Path
from typing import Optional

from cycle_ab import ab_arguments, revisions
from run import DaemonProcess, Settings, build_host, busy, cpu_seconds, parse_args
from testbus import start_bus  # tests/dbus, on the path once run is imported

WARMUP_SECONDS = 8.0
STAGGER_SECONDS = 0.33  # the two daemons do not poll in the same instant


def cpu_per_poll(daemons: dict[str, DaemonProcess], seconds: float) -> dict[str, float]:
    """CPU seconds per poll of each daemon over the same ``seconds``."""
    before = {name: (d.polls(), cpu_seconds(d.pid)) for name, d in daemons.items()}
    time.sleep(seconds)
    after = {name: (d.polls(), cpu_seconds(d.pid)) for name, d in daemons.items()}
    return {name: (after[name][1] - before[name][1]) / max(after[name][0] - before[name][0], 1)
            for name in daemons}


def one_round(trees: dict[str, Path], work: Path, devices: int, seconds: float,
              reverse: bool, settings: Settings) -> dict[str, float]:
    daemons: dict[str, DaemonProcess] = {}
    buses = []
    names = list(reversed(list(trees)) if reverse else list(trees))
    roots = [build_host(work / f"host-{n}", devices) for n in range(len(names))]
    try:
        with busy(roots, settings):
            for name, root in zip(names, roots):
                bus = start_bus()
                buses.append(bus)
                daemons[name] = DaemonProcess(root, bus.address, repo=trees[name])
                time.sleep(STAGGER_SECONDS)
            time.sleep(WARMUP_SECONDS)
            return cpu_per_poll(daemons, seconds)
    finally:
        for daemon in daemons.values():
            daemon.stop()
        for bus in buses:
            bus.stop()


def main(argv: Optional[list[str]] = None) -> int:
    parser = ab_arguments(__doc__.split("\n\n")[0])
    parser.add_argument("--seconds", type=float, default=60.0)
    parser.add_argument("--quiet-tree", action="store_true",
                        help="every counter still (default: a busy healthy host)")
    args = parser.parse_args(argv)
    settings = parse_args(["--quiet-tree"] if args.quiet_tree else [])[0]
    b_name = args.b or "working tree"
    differences = []
    with tempfile.TemporaryDirectory(prefix="nichealthd-daemon-ab-") as tmp:
        work = Path(tmp)
        with revisions(args.a, args.b, work) as trees:
            tree = "quiet tree" if args.quiet_tree else "busy healthy tree"
            print(f"{args.devices} devices ({tree}), {args.rounds} rounds of "
                  f"{args.seconds:.0f} s, both daemons at once: CPU per cycle (ms)")
            for round_ in range(args.rounds):
                cpu = one_round(trees, work / f"round-{round_}", args.devices, args.seconds,
                                reverse=bool(round_ % 2), settings=settings)
                difference = cpu[b_name] - cpu[args.a]
                differences.append(difference)
                print(f"  round {round_ + 1}: {args.a} {cpu[args.a] * 1000:.2f}, {b_name} "
                      f"{cpu[b_name] * 1000:.2f}, difference {difference * 1000:+.2f}",
                      flush=True)
    lower = sum(d < 0 for d in differences)
    print(f"{b_name} - {args.a}: median {statistics.median(differences) * 1000:+.2f} ms per "
          f"cycle, mean {statistics.mean(differences) * 1000:+.2f}; lower in {lower} of "
          f"{len(differences)} rounds")
    return 0


if __name__ == "__main__":
    sys.exit(main())
