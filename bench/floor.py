"""The floor of a poll: what it costs once a second when no check family judges anything.

The same in-process poll (bench/probe.py), run twice at once on one simulated host, half a
second apart, so that both see the same machine: once as shipped, once with every family's
``evaluate`` replaced by "nothing changed". The second still reads every file, classifies
the devices, assesses the health, commits and reads the slow PCI parts on their cadence: all
a poll does that is not judgement. So the floor is the least any evaluation could cost, and
its ratio to node_exporter's scrape says whether a ratio target is reachable by making the
families cheaper (bench/README.md, "The floor").

    python3 bench/floor.py                   # 34 devices, 60 polls each
    python3 bench/floor.py --devices 128 --polls 90
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import tempfile
from pathlib import Path

from cycle_ab import probe_command, probe_env

REPO = Path(__file__).resolve().parent.parent


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
            command = probe_command(root, state, "--polls", str(args.polls),
                                    "--offset", str(0.5 * index))
            if mode == "floor":
                command.append("--judging-nothing")
            runs[mode] = subprocess.Popen(command, env=probe_env(REPO), stdout=subprocess.PIPE,
                                          text=True)
        figures: dict[str, tuple[float, float]] = {}
        for mode, process in runs.items():
            out, _ = process.communicate()
            if process.returncode != 0:
                print(f"the {mode} probe failed (exit {process.returncode})", file=sys.stderr)
                return 1
            shown = json.loads(out)
            figures[mode] = (shown["cpu_mean"] * 1000, shown["read_mean"] * 1000)
    (poll, read), (floor, floor_read) = figures["judging"], figures["floor"]
    print(f"{args.devices} devices, {args.polls} polls once a second each, side by side:")
    print(f"  poll as shipped:          {poll:.2f} ms CPU (its sysfs read {read:.2f} ms)")
    print(f"  poll judging nothing:     {floor:.2f} ms CPU (its sysfs read {floor_read:.2f} ms)")
    print(f"  the families' judgement:  {poll - floor:.2f} ms, {(poll - floor) / poll:.0%} "
          f"of the poll; the floor is {floor / floor_read:.2f} x its read")
    return 0


if __name__ == "__main__":
    sys.exit(main())
