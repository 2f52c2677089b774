"""A simulated host and the real ``nichealthd --once`` run against it, as a subprocess."""

from __future__ import annotations

import json
import subprocess
import sys
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable

import pytest

from .. import simtrees

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
