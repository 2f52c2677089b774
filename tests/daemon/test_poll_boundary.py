"""The poll boundary (runtime/pollguard.py) through the running daemon: a poll that raises every
time, and commits that fail every time, leave the daemon running, with ``/healthz`` 503 and
the reason, ``STATUS=`` saying so, one log line per cause and a metric counting the failures.

The disk faults are real: a file-size limit of 0 on the daemon (every write fails with EFBIG,
as on a full disk) and the state path turned into a directory while the daemon runs. A poll
that raises has no real input left (see :class:`RaisingReader`).
"""

from __future__ import annotations

import argparse
import asyncio
import logging
import resource
import shutil
import threading
from datetime import datetime
from typing import Callable, Iterator

import pytest

from nichealthd.core.model import HostSnapshot
from nichealthd.runtime.monitor import Monitor
from nichealthd.runtime.notify import Notifier
from nichealthd.runtime.service import Daemon as ServiceDaemon
from nichealthd.runtime.startup import Startup, load_topology
from nichealthd.sim import mutate
from nichealthd.sources.config_file import load_config
from nichealthd.sources.sysfs import SysfsReader

from ..harness import NotifySocket, wait_until
from ..metrics.conftest import get, parse
from ..netports import free_port
from .conftest import SimHost
from .test_service import Daemon, notify  # noqa: F401 (fixture)


class Running:
    """The daemon with metrics on a free port, its stderr and its notify socket."""

    def __init__(self, host: SimHost, notify: NotifySocket) -> None:  # noqa: F811
        self.host = host
        self.notify = notify
        self.base = f"http://127.0.0.1:{free_port()}"
        self.daemon = Daemon(host, notify, "--metrics-listen", self.base[len("http://"):],
                             "--log-level", "info")
        self.lines = self.daemon.lines
        notify.wait_for("READY=1")

    def healthz(self) -> tuple[int, str]:
        return get(self.base + "/healthz")

    def failures(self, cause: str) -> float:
        status, text = get(self.base + "/metrics")
        assert status == 200, text
        samples = parse(text)
        return samples[("nichealthd_poll_failures_total", frozenset({("cause", cause)}))]

    def wait_for(self, predicate: Callable[[], bool], what: str) -> None:
        self.daemon.wait_until(predicate, what)


@pytest.fixture
def running(sim_host: Callable[..., SimHost], notify: NotifySocket  # noqa: F811
            ) -> Iterator[Running]:
    daemon = Running(sim_host(), notify)
    assert daemon.healthz() == (200, "ok\n")
    yield daemon
    code, err = daemon.daemon.stop()
    assert code == 0, err[-2000:]


class RaisingReader(SysfsReader):
    """The real reader on the sim tree, raising while ``failing`` is set.

    No real sysfs content makes the hardened reader or a rule raise any more (each found
    case became "unreadable", nichealthd/sources/sysfs.py), so the failure is injected here: the one
    stand-in of this module; everything around it (monitor, service loop, metrics HTTP
    server, notify socket) is the real daemon, in this process.
    """

    failing = False

    def observe(self, now: datetime) -> HostSnapshot:
        snapshot = super().observe(now)
        if self.failing:
            raise ValueError("invalid literal for int() with base 10: '\\xb2'")
        return snapshot


class InProcess:
    """The real service loop in this process (it needs the main thread for its signal
    handlers) on the sim host, with :class:`RaisingReader` and metrics on a free port."""

    def __init__(self, host: SimHost, notify: NotifySocket,  # noqa: F811
                 monkeypatch: pytest.MonkeyPatch, watchdog_usec: int = 0) -> None:
        monkeypatch.setenv("NOTIFY_SOCKET", str(notify.path))
        if watchdog_usec:
            monkeypatch.setenv("WATCHDOG_USEC", str(watchdog_usec))
            monkeypatch.delenv("WATCHDOG_PID", raising=False)
        port = free_port()
        self.base = f"http://127.0.0.1:{port}"
        config = load_config(str(host.config), {"pollingInterval": "100ms",
                                                "metricsListen": f"127.0.0.1:{port}"})
        self.reader = RaisingReader(config)
        self.monitor = Monitor(config, load_topology(config), reader=self.reader)
        self.monitor.start()
        self.daemon = ServiceDaemon(Startup(config, {}, self.monitor, None),
                                    argparse.Namespace(config=str(host.config)),
                                    notifier=Notifier.from_environment())

    def healthz(self) -> tuple[int, str]:
        return get(self.base + "/healthz")

    def failures(self, cause: str) -> float:
        samples = parse(get(self.base + "/metrics")[1])
        return samples[("nichealthd_poll_failures_total", frozenset({("cause", cause)}))]

    def run(self, drive: Callable[[], None]) -> None:
        """Run the daemon until ``drive`` (in a thread) returns; re-raise what it raised."""
        errors: list[BaseException] = []

        def side(loop: asyncio.AbstractEventLoop) -> None:
            try:
                drive()
            except BaseException as exc:  # handed to the main thread
                errors.append(exc)
            finally:
                loop.call_soon_threadsafe(self.daemon.request_stop)

        async def main() -> int:
            loop = asyncio.get_running_loop()
            thread = threading.Thread(target=side, args=(loop,))
            thread.start()
            try:
                return await self.daemon.run()
            finally:
                await loop.run_in_executor(None, thread.join)

        assert asyncio.run(main()) == 0
        if errors:
            raise errors[0]


def test_a_poll_that_raises_every_time_leaves_the_daemon_running_and_says_so(
        sim_host: Callable[..., SimHost], notify: NotifySocket,  # noqa: F811
        caplog: pytest.LogCaptureFixture, monkeypatch: pytest.MonkeyPatch) -> None:
    running = InProcess(sim_host(), notify, monkeypatch)
    seen: dict[str, str] = {}
    polls: list[int] = []

    def drive() -> None:
        wait_until(lambda: running.healthz() == (200, "ok\n"), "/healthz 200")
        polls.append(running.monitor.polls)
        running.reader.failing = True
        wait_until(lambda: running.failures("read") >= 5, "5 failed polls")
        polls.append(running.monitor.polls)
        status, seen["healthz"] = running.healthz()
        assert status == 503, seen["healthz"]
        seen["poll_error"] = str(running.daemon.status()["poll_error"])
        seen["notify"] = notify.wait_for("polls failing")
        recovered_at = len(notify.messages)
        running.reader.failing = False
        wait_until(lambda: running.healthz() == (200, "ok\n"), "/healthz 200 again")
        # STATUS= says so too: the first good poll reaches the loop although the host's
        # health is the same (a poll that changes nothing else stays in the poll thread).
        wait_until(lambda: any("STATUS=" in m and "failing" not in m
                               for _, m in notify.messages[recovered_at:]),
                   "STATUS= without the failure")

    with caplog.at_level(logging.INFO):
        running.run(drive)
    body = seen["healthz"]
    assert "polls failing to read since" in body and "ValueError" in body, body
    assert "ValueError" in seen["poll_error"] and "ValueError" in seen["notify"]
    assert polls[1] - polls[0] <= 1  # failed polls are not completed polls
    logged = [r for r in caplog.records if "poll failed to read" in r.getMessage()]
    assert len(logged) == 1, [r.getMessage() for r in caplog.records]  # once per cause
    assert "at test_poll_boundary.py" in logged[0].getMessage()  # where it raised
    assert any("read works again after" in r.getMessage() for r in caplog.records)
    assert running.daemon.status()["poll_error"] == ""


def test_the_watchdog_is_withheld_only_while_polls_keep_failing_past_its_interval(
        sim_host: Callable[..., SimHost], notify: NotifySocket,  # noqa: F811
        caplog: pytest.LogCaptureFixture, monkeypatch: pytest.MonkeyPatch) -> None:
    """WatchdogSec=2 s at 100 ms polls: a failure shorter than 2 s keeps the keepalive coming;
    failing longer withholds it (systemd would restart), and it resumes once polls work."""
    running = InProcess(sim_host(), notify, monkeypatch, watchdog_usec=2_000_000)

    def keepalives() -> int:
        return sum("WATCHDOG=1" in m for _, m in notify.messages)

    def drive() -> None:
        wait_until(lambda: keepalives() >= 1, "a keepalive")
        running.reader.failing = True  # briefly: about 0.5 s
        wait_until(lambda: running.failures("read") >= 5, "5 failed polls")
        running.reader.failing = False
        wait_until(lambda: running.healthz()[0] == 200, "/healthz 200")
        assert not [r for r in caplog.records if "withholding" in r.getMessage()]
        before = keepalives()
        running.reader.failing = True  # now for good
        wait_until(lambda: any("withholding" in r.getMessage() for r in caplog.records),
             "the keepalive withheld")
        withheld = keepalives()
        wait_until(lambda: running.failures("read") >= 30, "3 s more of failed polls")
        assert keepalives() == withheld and withheld >= before
        running.reader.failing = False
        wait_until(lambda: keepalives() > withheld, "the keepalive again")

    with caplog.at_level(logging.INFO):
        running.run(drive)
    assert any("watchdog resumed" in r.getMessage() for r in caplog.records)


def test_commits_failing_on_a_full_disk_make_healthz_503_until_there_is_room(
        running: Running) -> None:
    pid = running.daemon.proc.pid
    _, hard = resource.getrlimit(resource.RLIMIT_FSIZE)
    resource.prlimit(pid, resource.RLIMIT_FSIZE, (0, hard))  # the disk is full
    try:
        mutate.counter(running.host.root, "mlx5_0", 1, "link_downed", add=1)  # to commit
        running.wait_for(lambda: running.failures("commit") >= 3, "3 failed commits")
        status, body = running.healthz()
        assert status == 503 and "commits failing since" in body, body
        assert "File too large" in body, body
        assert running.daemon.proc.poll() is None
        logged = [line for line in running.lines.lines if "commit failed" in line]
        assert len(logged) == 1, logged
        running.notify.wait_for("commits failing")  # STATUS= says so too
    finally:
        resource.prlimit(pid, resource.RLIMIT_FSIZE, (hard, hard))  # room again
    running.wait_for(lambda: running.healthz() == (200, "ok\n"), "/healthz 200")
    running.lines.wait_for("commit works again after", proc=running.daemon.proc)


def test_a_state_path_that_is_a_directory_makes_healthz_503(running: Running) -> None:
    state = running.host.state_file
    state.unlink()
    state.mkdir()  # the next commit's rename onto it fails with EISDIR
    try:
        mutate.counter(running.host.root, "mlx5_0", 1, "link_downed", add=1)
        running.wait_for(lambda: running.healthz()[0] == 503, "/healthz 503")
        status, body = running.healthz()
        assert "commits failing" in body and "Is a directory" in body, body
    finally:
        shutil.rmtree(state)
    running.wait_for(lambda: running.healthz() == (200, "ok\n"), "/healthz 200")
    assert state.is_file()
