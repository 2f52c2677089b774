"""A simulated host and the real ``nichealthd --once`` run against it, as a subprocess; or
the daemon's poll loop (:class:`Monitor`) in-process on one."""

from __future__ import annotations

import contextlib
import json
import os
import subprocess
import sys
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable, Iterator, Mapping

import pytest

from nichealthd.runtime.monitor import Monitor
from nichealthd.runtime.startup import load_topology
from nichealthd.sources.config_file import load_config

from .. import simtrees
from ..harness import Lines

REPO = Path(__file__).resolve().parents[2]


@dataclass
class Run:
    returncode: int
    stderr: str
    events: list[dict[str, Any]]

    def fatal(self) -> list[dict[str, Any]]:
        return [e for e in self.events if e["isFatal"]]

    def by_code(self, code: str) -> list[dict[str, Any]]:
        return [e for e in self.events if e["errorCode"] == [code]]


@dataclass
class SimHost:
    root: Path
    manifest: dict[str, Any]
    extra_args: list[str] = field(default_factory=list)
    _seen: int = 0

    @property
    def config(self) -> Path:
        return self.root / "nichealthd.toml"

    @property
    def state_file(self) -> Path:
        return self.root / "var/lib/nichealthd/state.json"

    def once(self, *args: str) -> Run:
        """Run ``nichealthd --once``; returns the events it appended to the event log."""
        proc = subprocess.run(
            [sys.executable, "-m", "nichealthd.runtime.daemon",
             "--config", str(self.config), "--once",
             *self.extra_args, *args],
            cwd=REPO, capture_output=True, text=True, timeout=60)
        log = self.root / "events.jsonl"
        lines = log.read_text().splitlines() if log.exists() else []
        events = [json.loads(line) for line in lines[self._seen:]]
        self._seen = len(lines)
        return Run(proc.returncode, proc.stderr, events)


@pytest.fixture
def sim_host() -> Callable[..., SimHost]:
    """sim_host(profile, **kw) -> a SimHost on a tree the test may change (tests/simtrees.py)."""
    def make(profile: str = "dgx-h100", **kwargs: Any) -> SimHost:
        root = simtrees.take(profile, **kwargs)
        return SimHost(root, simtrees.manifest_of(root))
    return make


@pytest.fixture
def monitor() -> Iterator[Monitor]:
    """The daemon's monitor, started (not yet polled), on a DGX H100 tree the test may change."""
    root = simtrees.take("dgx-h100")
    config = load_config(str(root / "nichealthd.toml"))
    os.makedirs(config.state_dir, exist_ok=True)
    made = Monitor(config, load_topology(config))
    made.start()
    yield made
    made.close()


@contextlib.contextmanager
def running_daemon(config: Path, env: Mapping[str, str], *args: str, cwd: Path = REPO
                   ) -> Iterator[tuple[subprocess.Popen[str], Lines]]:
    """The real daemon on ``config`` polling every 200 ms with ``args`` (its surfaces), run
    from ``cwd`` (a copy of the package, for the tests that extend it); its stderr followed
    line by line. Stopped at the end, and it must have exited cleanly."""
    proc = subprocess.Popen(
        [sys.executable, "-m", "nichealthd.runtime.daemon", "--config", str(config),
         "--polling-interval", "200ms", *args],
        cwd=cwd, env=dict(env), stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
    assert proc.stderr is not None
    lines = Lines(proc.stderr)
    try:
        yield proc, lines
    finally:
        proc.terminate()
        proc.wait(timeout=20)
        lines.join()
        proc.stderr.close()
    assert proc.returncode == 0, lines.tail(20)
