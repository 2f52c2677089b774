"""The floor of a poll: what it costs once a second when no check family judges anything.

The same in-process poll, run twice at once on one simulated host, half a second apart, so
that both see the same machine: once as shipped, once with every family's ``evaluate``
replaced by "nothing changed". The second still reads every file, classifies the devices,
assesses the health, commits and reads the slow PCI parts on their cadence: all a poll does
that is not judgement. So the floor is the least any evaluation could cost, and its ratio to
node_exporter's scrape says whether a ratio target is reachable by making the families
cheaper (bench/README.md, "The floor").

    python3 bench/floor.py                   # 34 devices, 60 polls each
    python3 bench/floor.py --devices 128 --polls 90
"""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
import tempfile
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent

PROBE = r"""
import gc, statistics, sys, time
from pathlib import Path
from nichealthd.core.checks import families
from nichealthd.core.family import Verdict
from nichealthd.runtime.monitor import Monitor
from nichealthd.runtime.startup import load_topology, prepare_state_dir
from nichealthd.sources.config_file import load_config

root, state, polls, offset, judging = (Path(sys.argv[1]), Path(sys.argv[2]), int(sys.argv[3]),
                                       float(sys.argv[4]), sys.argv[5] == "judging")
config = load_config(str(root / "nichealthd.toml"),
                     {"stateFile": str(state / "state.json"), "eventLog": ""})
prepare_state_dir(config)
monitor = Monitor(config, load_topology(config))
monitor.start()
observe, read = monitor.reader.observe, []

def timed_observe(now):
    started = time.process_time()
    try:
        return observe(now)
    finally:
        read.append(time.process_time() - started)

monitor.reader.observe = timed_observe
for _ in range(6):  # the baseline poll commits the healthy baselines; then warm caches
    monitor.poll()
if not judging:
    for family in families():
        family.evaluate = lambda previous, cycle, volatile: Verdict(previous, volatile=volatile)
gc.collect()
gc.freeze()
read.clear()
cpu = []
for _ in range(polls):
    time.sleep(1 - (time.time() - offset) % 1)
    started = time.process_time()
    monitor.poll()
    cpu.append(time.process_time() - started)
monitor.close()
print(statistics.mean(cpu), statistics.mean(read))
"""


def main() -> int:
    parser = argparse.ArgumentParser(description=(__doc__ or "").split("\n\n")[0])
    parser.add_argument("--devices", type=int, default=34)
    parser.add_argument("--polls", type=int, default=60)
    args = parser.parse_args()
    sys.path.insert(0, str(REPO))
    from nichealthd.sim import tree

    with tempfile.TemporaryDirectory() as work:
        root = Path(work) / "host"
        tree.create(root, "synthetic", devices=args.devices)
        runs: dict[str, subprocess.Popen[str]] = {}
        for index, mode in enumerate(("judging", "floor")):
            state = Path(work) / mode
            state.mkdir()
            runs[mode] = subprocess.Popen(
                [sys.executable, "-c", PROBE, str(root), str(state), str(args.polls),
                 str(0.5 * index), mode],
                env=dict(os.environ, PYTHONPATH=str(REPO)), stdout=subprocess.PIPE, text=True)
        figures: dict[str, tuple[float, float]] = {}
        for mode, process in runs.items():
            out, _ = process.communicate()
            if process.returncode != 0:
                print(f"the {mode} probe failed (exit {process.returncode})", file=sys.stderr)
                return 1
            poll_s, read_s = out.split()
            figures[mode] = (float(poll_s) * 1000, float(read_s) * 1000)
    (poll, read), (floor, floor_read) = figures["judging"], figures["floor"]
    print(f"{args.devices} devices, {args.polls} polls once a second each, side by side:")
    print(f"  poll as shipped:          {poll:.2f} ms CPU (its sysfs read {read:.2f} ms)")
    print(f"  poll judging nothing:     {floor:.2f} ms CPU (its sysfs read {floor_read:.2f} ms)")
    print(f"  the families' judgement:  {poll - floor:.2f} ms, {(poll - floor) / poll:.0%} "
          f"of the poll; the floor is {floor / floor_read:.2f} x its read")
    return 0


if __name__ == "__main__":
    sys.exit(main())
