"""A big host under a small open-file limit stays monitored (runtime/fdplan.py)."""

from __future__ import annotations

import json
import os
import resource
import subprocess
import sys
from typing import Callable

from ..harness import Lines, NotifySocket
from .conftest import REPO, SimHost
from .test_service import notify  # noqa: F401  (fixture)


def _small_limit() -> None:
    resource.setrlimit(resource.RLIMIT_NOFILE, (256, 256))


def _no_file_growth() -> None:
    _, hard = resource.getrlimit(resource.RLIMIT_FSIZE)
    resource.setrlimit(resource.RLIMIT_FSIZE, (0, hard))


def test_257_devices_become_healthy_under_a_nofile_limit_of_256(
        sim_host: Callable[..., SimHost], notify: NotifySocket) -> None:  # noqa: F811
    """More devices than open files: tests/sim/test_large.py's host (one tree for the large
    hosts' tests, tests/simtrees.py)."""
    host = sim_host("synthetic", devices=257)
    env = dict(os.environ, NOTIFY_SOCKET=str(notify.path))
    env.pop("JOURNAL_STREAM", None)
    proc = subprocess.Popen(
        [sys.executable, "-m", "nichealthd.runtime.daemon", "--config", str(host.config),
         "--polling-interval", "500ms", "--log-level", "debug"],
        cwd=REPO, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True,
        preexec_fn=_small_limit)
    assert proc.stderr is not None
    lines = Lines(proc.stderr)
    try:
        ready = notify.wait_for("READY=1", seconds=60)
        assert "257 ports: 257 healthy" in ready, ready
        lines.wait_polls(3, proc=proc)  # polls keep completing after the first
    finally:
        proc.terminate()
        proc.wait(30)
        err = lines.join()
        proc.stderr.close()
    assert proc.returncode == 0, err
    assert err.count("poll started") >= 4, err[-2000:]
    state = json.loads(host.state_file.read_text())
    ports = state["port_states"]
    assert len(ports) == 257 and all(p["health"] == "healthy" for p in ports.values()), ports
    assert "Too many open files" not in err and "out of file descriptors" not in err, err
    budget = [line for line in err.splitlines() if "read without keeping them open" in line]
    assert len(budget) == 1, err
    assert "open-file limit 256" in budget[0] and "LimitNOFILE=" in budget[0]


def test_ready_waits_for_a_committed_poll(
        sim_host: Callable[..., SimHost], notify: NotifySocket) -> None:  # noqa: F811
    """A poll whose commit fails is not "started": READY=1 comes with the first commit.

    Commits fail as on a full disk: a file-size limit of 0 makes every write to a regular
    file fail with EFBIG (Python ignores SIGXFSZ), until the test lifts it with prlimit."""
    host = sim_host()
    env = dict(os.environ, NOTIFY_SOCKET=str(notify.path))
    env.pop("JOURNAL_STREAM", None)
    proc = subprocess.Popen(
        [sys.executable, "-m", "nichealthd.runtime.daemon", "--config", str(host.config),
         "--polling-interval", "200ms", "--log-level", "debug"],
        cwd=REPO, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True,
        preexec_fn=_no_file_growth)
    assert proc.stderr is not None
    lines = Lines(proc.stderr)
    try:
        lines.wait_for("commit failed", proc=proc)  # a poll ran and could not commit
        lines.wait_polls(3, proc=proc)  # more polls, and still no commit
        assert not any("READY=1" in m for _, m in notify.messages), notify.messages
        assert not host.state_file.exists()
        _, hard = resource.getrlimit(resource.RLIMIT_FSIZE)
        resource.prlimit(proc.pid, resource.RLIMIT_FSIZE, (hard, hard))
        notify.wait_for("READY=1")
        assert host.state_file.is_file()
    finally:
        proc.terminate()
        proc.wait(30)
        err = lines.join()
        proc.stderr.close()
    assert proc.returncode == 0, err
