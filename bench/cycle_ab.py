"""A/B of the in-process poll cycle between two git revisions, interleaved on one host.

On a shared, loaded machine absolute figures drift by ±20 % from run to run; running the two
revisions alternately, round after round, on the same simulated host keeps the comparison
fair. Each round starts a fresh process per revision (``PYTHONPATH`` = a checkout of it) that
builds nothing itself: it drives ``Monitor.poll()`` back to back on one ``nichealthd-sim`` tree
and prints the median CPU (``time.process_time``) per cycle.

    python3 bench/cycle_ab.py dd25288            # that revision vs the working tree
    python3 bench/cycle_ab.py A B --devices 128 --rounds 7 --cycles 300
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path
from typing import Iterator, Optional

REPO = Path(__file__).resolve().parent.parent

PROBE = Path(__file__).resolve().parent / "probe.py"  # the in-process poll, as JSON


def checkout(rev: Optional[str], into: Path) -> Path:
    """A detached work tree of ``rev`` (None: this working tree as it is)."""
    if rev is None:
        return REPO
    subprocess.run(["git", "-C", str(REPO), "worktree", "add", "-q", "--detach", str(into),
                    rev], check=True)
    return into


@contextlib.contextmanager
def revisions(a: str, b: Optional[str], work: Path) -> Iterator[dict[str, Path]]:
    """Name -> work tree of revisions ``a`` and ``b`` (None: this working tree), removed after."""
    trees = {a: checkout(a, work / "a"), b or "working tree": checkout(b, work / "b")}
    try:
        yield trees
    finally:
        for tree in trees.values():
            if tree != REPO:
                subprocess.run(["git", "-C", str(REPO), "worktree", "remove", "--force",
                                str(tree)], check=False)


def ab_arguments(description: str) -> argparse.ArgumentParser:
    """The arguments both A/B scripts take: two revisions, the host's size, the rounds."""
    parser = argparse.ArgumentParser(description=description)
    parser.add_argument("a", help="git revision A")
    parser.add_argument("b", nargs="?", help="git revision B (default: the working tree)")
    parser.add_argument("--devices", type=int, default=34)
    parser.add_argument("--rounds", type=int, default=5)
    return parser


def cycle_cpu(tree: Path, host: Path, state: Path, cycles: int) -> float:
    """The median CPU per poll of ``cycles`` back to back, of the revision in ``tree``."""
    return probe_figures(tree, host, state, "--polls", str(cycles))["cpu_median"]


def probe_figures(tree: Path, host: Path, state: Path, *options: str) -> dict[str, float]:
    """What bench/probe.py prints of the revision in ``tree`` on ``host``."""
    figures: dict[str, float] = json.loads(subprocess.run(
        probe_command(host, state, *options), env=probe_env(tree), check=True,
        capture_output=True, text=True, cwd=tree).stdout)
    return figures


def probe_command(host: Path, state: Path, *options: str) -> list[str]:
    return [sys.executable, str(PROBE), str(host), str(state), *options]


def probe_env(tree: Path) -> dict[str, str]:
    return dict(os.environ, PYTHONPATH=str(tree))


def main(argv: Optional[list[str]] = None) -> int:
    parser = ab_arguments(__doc__.split("\n\n")[0])
    parser.add_argument("--cycles", type=int, default=300)
    parser.add_argument("--profile", default="synthetic",
                        help="nichealthd-sim profile of the host (e.g. p5); "
                             "--devices applies to synthetic only")
    args = parser.parse_args(argv)
    sys.path.insert(0, str(REPO))
    from nichealthd.sim import tree as simtree

    with tempfile.TemporaryDirectory(prefix="nichealthd-ab-") as tmp:
        work = Path(tmp)
        host = work / "host"
        simtree.create(host, args.profile,
                       devices=args.devices if args.profile == "synthetic" else None)
        with revisions(args.a, args.b, work) as trees:
            medians: dict[str, list[float]] = {name: [] for name in trees}
            for round_ in range(args.rounds):
                for name, tree in trees.items():
                    state = work / f"state-{round_}-{len(medians[name])}-{abs(hash(name))}"
                    medians[name].append(cycle_cpu(tree, host, state, args.cycles))
        shape = (f"{args.devices} devices" if args.profile == "synthetic"
                 else f"profile {args.profile}")
        print(f"{shape}, {args.rounds} interleaved rounds of {args.cycles} "
              f"cycles: median of the per-round median CPU per cycle")
        for name, values in medians.items():
            shown = ", ".join(f"{v * 1000:.2f}" for v in values)
            print(f"  {name:>14}: {statistics.median(values) * 1000:.2f} ms  ({shown})")
    return 0


if __name__ == "__main__":
    sys.exit(main())
