"""The in-process poll as every bench drives it: one ``Monitor`` on a simulated tree.

Its sysfs reads (the ports' files every poll, the PCI side and the sources on their own
cadence) are timed on their own, and it is warmed up as the daemon is: the baseline poll
(which commits the healthy baselines), five more to warm the caches, then ``gc.freeze()`` as
runtime/service.py does once it is ready. bench/run.py measures it in-process; run as a
script it is the probe of the A/B benches (bench/cycle_ab.py, bench/floor.py), which start it
with ``PYTHONPATH`` naming the revision it measures, and it prints its figures as JSON:

    PYTHONPATH=<tree> python3 bench/probe.py HOST STATE --polls 300              # back to back
    PYTHONPATH=<tree> python3 bench/probe.py HOST STATE --polls 60 --offset 0.5  # once a second
    PYTHONPATH=<tree> python3 bench/probe.py HOST STATE --offset 0 --judging-nothing
"""

from __future__ import annotations

import argparse
import gc
import json
import statistics
import sys
import time
from pathlib import Path
from typing import Any, Callable, NamedTuple, Optional, TypeVar

from nichealthd.runtime.monitor import Monitor
from nichealthd.runtime.startup import load_topology, prepare_state_dir
from nichealthd.sources.config_file import load_config
from nichealthd.surfaces.seam import surfaces

surfaces()  # the surfaces' keys (a sim host's platformConnectorSocket) are the config's
WARM_UP_POLLS = 6
T = TypeVar("T")


class Polls(NamedTuple):
    """CPU and wall seconds of each poll, and the CPU of each poll's sysfs reads."""

    cpu: list[float]
    wall: list[float]
    read: list[float]


class Probe:
    """A warmed-up monitor on ``root`` (state under ``state_dir``), with its read timed."""

    def __init__(self, root: Path, state_dir: Path) -> None:
        config = load_config(str(root / "nichealthd.toml"),
                             {"stateFile": str(state_dir / "state.json"), "eventLog": ""})
        prepare_state_dir(config)
        self.monitor = Monitor(config, load_topology(config))
        self.monitor.start()
        self._reads: list[float] = []
        self._read = 0.0  # this poll's reading so far
        self.monitor.reader.observe = self._timed(self.monitor.reader.observe)  # type: ignore[method-assign]
        self.monitor._read_slow = self._timed(self.monitor._read_slow)  # type: ignore[method-assign]
        for _ in range(WARM_UP_POLLS):
            self.monitor.poll()
        gc.collect()
        gc.freeze()

    def _timed(self, read: Callable[..., T]) -> Callable[..., T]:
        """``read`` adding its CPU to this poll's read: the sysfs read of every poll and the
        parts read on their own cadence (the PCI side, the sources), which are sysfs reads of
        the poll as much as the ports' are."""
        def timed(*args: Any) -> T:
            started = time.process_time()
            try:
                return read(*args)
            finally:
                self._read += time.process_time() - started
        return timed

    def judge_nothing(self) -> None:
        """Every family's ``evaluate`` replaced by "nothing changed" (bench/floor.py): the
        polls then cost all that is not judgement."""
        from nichealthd.core.checks import families
        from nichealthd.core.family import Verdict

        for family in families():
            family.evaluate = (  # type: ignore[method-assign]
                lambda previous, cycle, volatile: Verdict(previous, volatile=volatile))

    def polls(self, count: int, offset: Optional[float] = None) -> Polls:
        """``count`` polls back to back, or once a second ``offset`` s into each second (a
        poll after a sleep runs on cold caches, as the daemon's do)."""
        self._reads.clear()
        cpu: list[float] = []
        wall: list[float] = []
        for _ in range(count):
            if offset is not None:
                time.sleep(1 - (time.time() - offset) % 1)
            self._read = 0.0
            c0, w0 = time.process_time(), time.perf_counter()
            self.monitor.poll()
            wall.append(time.perf_counter() - w0)
            cpu.append(time.process_time() - c0)
            self._reads.append(self._read)
        return Polls(cpu, wall, list(self._reads))

    def close(self) -> None:
        self.monitor.close()
        gc.unfreeze()


def main(argv: Optional[list[str]] = None) -> int:
    parser = argparse.ArgumentParser(description=(__doc__ or "").split("\n\n")[0])
    parser.add_argument("host", type=Path, help="a nichealthd-sim tree")
    parser.add_argument("state", type=Path, help="a directory for the state file")
    parser.add_argument("--polls", type=int, default=300)
    parser.add_argument("--offset", type=float,
                        help="poll once a second, this many seconds into each (default: back "
                             "to back)")
    parser.add_argument("--judging-nothing", action="store_true",
                        help="every check family judges nothing (the floor of a poll)")
    args = parser.parse_args(argv)
    probe = Probe(args.host, args.state)
    if args.judging_nothing:
        probe.judge_nothing()
    try:
        polls = probe.polls(args.polls, args.offset)
    finally:
        probe.close()
    json.dump({"cpu_mean": statistics.mean(polls.cpu),
               "cpu_median": statistics.median(polls.cpu),
               "read_mean": statistics.mean(polls.read)}, sys.stdout)
    print()
    return 0


if __name__ == "__main__":
    sys.exit(main())
