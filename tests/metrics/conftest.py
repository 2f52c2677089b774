"""Fixtures for the metrics tests: a fake host and a real ``nichealthd`` serving /metrics on it.

The daemon is a subprocess on a sim tree, scraped over HTTP — the same path Prometheus takes.
"""

from __future__ import annotations

import contextlib
import os
import shutil
import subprocess
import sys
import urllib.error
import urllib.request
from pathlib import Path
from typing import Callable, Iterator, Optional

import pytest
from prometheus_client.parser import text_string_to_metric_families

from .. import simtrees
from ..harness import DEADLINE, stop_process, wait_until
from ..netports import free_port

REPO = Path(__file__).resolve().parents[2]
INTERVAL = 0.2


def pytest_configure(config: pytest.Config) -> None:
    config.addinivalue_line("markers", "slow: takes tens of seconds (benchmark smoke run)")
    config.addinivalue_line("markers", "promtool: runs promtool check metrics (skipped without "
                            "promtool unless NICHEALTHD_REQUIRE_PROMTOOL is set)")



def get(url: str, timeout: float = 5.0) -> tuple[int, str]:
    """(status, body) of a GET, also for 4xx/5xx answers."""
    try:
        with urllib.request.urlopen(url, timeout=timeout) as response:
            return response.status, response.read().decode()
    except urllib.error.HTTPError as exc:
        return exc.code, exc.read().decode()


Samples = dict[tuple[str, frozenset[tuple[str, str]]], float]


def parse(text: str) -> Samples:
    """Exposition text -> {(sample name, labels): value}."""
    return {(s.name, frozenset(s.labels.items())): s.value
            for family in text_string_to_metric_families(text) for s in family.samples}


def value(samples: Samples, name: str, **labels: str) -> float:
    """The sample's value; a missing sample fails the test, naming it."""
    found = samples.get((name, frozenset(labels.items())))
    assert found is not None, f"no sample {name}{labels}"
    return found


def count(samples: Samples, name: str, **labels: str) -> float:
    """A counter's value, 0 when no such series was exported yet (nothing counted)."""
    return samples.get((name, frozenset(labels.items())), 0.0)


def series(samples: Samples, name: str, **labels: str) -> list[dict[str, str]]:
    """Label sets of every sample of ``name`` that carries ``labels``."""
    want = set(labels.items())
    return [dict(key) for (sample, key) in samples if sample == name and want <= key]


class RunningDaemon:
    """A ``nichealthd`` subprocess on a sim tree with metrics on a free localhost port."""

    def __init__(self, root: Path) -> None:
        self.root = root
        self.port = free_port()
        self.base = f"http://127.0.0.1:{self.port}"
        self.log = open(root / "daemon.log", "w")  # noqa: SIM115 - closed in stop()
        env = dict(os.environ, PYTHONPATH=str(REPO))
        self.proc = subprocess.Popen(
            [sys.executable, "-m", "nichealthd.runtime.daemon",
             "--config", str(root / "nichealthd.toml"),
             "--metrics-listen", f"127.0.0.1:{self.port}",
             "--polling-interval", f"{int(INTERVAL * 1000)}ms"],
            cwd=REPO, env=env, stdout=self.log, stderr=subprocess.STDOUT)
        self.wait_for(lambda: get(self.base + "/healthz")[0] == 200, what="/healthz 200")

    def wait_for(self, predicate: Callable[[], bool], timeout: float = DEADLINE,
                 what: str = "condition") -> None:
        """The shared harness's wait, failing with the daemon's log."""
        wait_until(predicate, what, timeout, self.proc,
                   lambda: "\n" + (self.root / "daemon.log").read_text())

    def text(self) -> str:
        status, body = get(self.base + "/metrics")
        assert status == 200, body
        return body

    def scrape(self) -> Samples:
        return parse(self.text())

    def polls(self) -> float:
        return value(self.scrape(), "nichealthd_polls_total") or 0.0

    def next_polls(self, count: int = 2) -> Samples:
        """Scrape after ``count`` more polls completed (so a mutation has been seen)."""
        start = self.polls()
        self.wait_for(lambda: self.polls() >= start + count, what=f"{count} more polls")
        return self.scrape()

    def stop(self) -> None:
        stop_process(self.proc, 10)
        self.log.close()


def node_exporter_binary() -> Optional[str]:
    """Debian's ``prometheus-node-exporter`` (.ci/metrics-deps.sh), None if not installed."""
    return shutil.which("prometheus-node-exporter") or shutil.which("node_exporter")


@contextlib.contextmanager
def node_exporter(root: Path, binary: str) -> Iterator[str]:
    """node_exporter's infiniband collector alone on a sim tree: its ``HOST:PORT``, once it
    answers with the tree's ports."""
    address = f"127.0.0.1:{free_port()}"
    proc = subprocess.Popen(
        [binary, f"--path.sysfs={root / 'sys'}", f"--path.procfs={root / 'proc'}",
         "--collector.disable-defaults", "--collector.infiniband",
         f"--web.listen-address={address}"],
        stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        wait_until(lambda: "node_infiniband" in get(f"http://{address}/metrics")[1],
                   "node_exporter", DEADLINE, proc)
        yield address
    finally:
        stop_process(proc, 10)


@pytest.fixture
def sim() -> Callable[..., Path]:
    """sim(profile, **kw) -> ROOT of a fake host the test may change (tests/simtrees.py)."""
    return simtrees.take


@pytest.fixture
def daemon(sim: Callable[..., Path]) -> Iterator[Callable[[Path], RunningDaemon]]:
    """daemon(root) -> RunningDaemon, stopped at the end of the test."""
    started: list[RunningDaemon] = []

    def start(root: Path) -> RunningDaemon:
        running = RunningDaemon(root)
        started.append(running)
        return running

    yield start
    for running in started:
        running.stop()


@pytest.fixture
def sim_root(sim: Callable[..., Path]) -> Path:
    """A dgx-h100 fake host (mlx5_0 is a compute port with peers)."""
    return sim()
