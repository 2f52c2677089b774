"""``/healthz``: 200 while polls complete, 503 with the reason when the poller hangs."""

from __future__ import annotations

import asyncio
import time
from dataclasses import replace
from pathlib import Path
from typing import Callable, Optional

from nichealthd.runtime.pollguard import COMMIT, PollGuard
from nichealthd.sources.config_file import load_config
from nichealthd.storage.store import Journal
from nichealthd.surfaces.connector.status import ConnectorStatus
from nichealthd.surfaces.context import PollStats, ServiceContext
from nichealthd.surfaces.metrics import MetricsService

from ..harness import wait_until
from ..netports import free_port
from ..threadstop import ThreadStopper
from .conftest import INTERVAL, RunningDaemon, get

Start = Callable[[Path], RunningDaemon]


def test_healthz_503_while_a_sysfs_read_hangs(sim: Callable[..., Path], daemon: Start) -> None:
    """A hung poller: the poll thread is stopped (ptrace) while it waits for work.

    SIGSTOP would freeze the HTTP server too; this stops only the poll thread, as a sysfs
    read stuck in the kernel would, which is exactly the failure /healthz exists to reveal.
    (A FIFO in place of a sysfs file no longer hangs a poll: files are opened O_NONBLOCK.)
    """
    root = sim("synthetic", devices=2)
    running = daemon(root)
    assert get(running.base + "/healthz") == (200, "ok\n")
    poller = ThreadStopper(running.proc.pid)
    try:
        running.wait_for(lambda: get(running.base + "/healthz")[0] == 503,
                         timeout=3 * INTERVAL + 5, what="/healthz 503")
        status, body = get(running.base + "/healthz")
        assert status == 503
        assert "last poll completed" in body and "stuck" in body
        # /metrics keeps answering from the last completed poll.
        assert "nichealthd_port_health" in running.text()
    finally:
        poller.resume()
    running.wait_for(lambda: get(running.base + "/healthz")[0] == 200, what="/healthz 200")


class Loop:
    """The poll loop's side of a :class:`ServiceContext`, set by the test (no daemon)."""

    def __init__(self, listen: str) -> None:
        self.config = load_config("/nonexistent/nichealthd.toml",
                                  {"metricsListen": listen, "pollingInterval": "1s"})
        self.last_poll_monotonic: Optional[float] = None
        self.guard = PollGuard()
        self.started_at = time.time()

    def stats(self) -> PollStats:
        return PollStats(0, self.started_at, self.last_poll_monotonic, None,
                         self.guard.reason(), self.guard.totals(), 0, 0)

    def context(self) -> ServiceContext:
        return ServiceContext(
            journal=Journal("/nonexistent"), config_path="/nonexistent/nichealthd.toml",
            config=lambda: self.config, view=lambda: None, stats=self.stats,
            status=dict, reload_error=str, request_reload=lambda: None,
            connector=ConnectorStatus)


def _service(listen: str = "127.0.0.1:2112") -> tuple[MetricsService, Loop]:
    loop = Loop(listen)
    return MetricsService(loop.context()), loop


def test_healthz_before_the_first_poll() -> None:
    service, loop = _service()
    ok, reason = service.healthz()
    assert not ok and "no poll has completed yet" in reason
    loop.last_poll_monotonic = time.monotonic() - 2.9
    assert service.healthz() == (True, "ok")
    loop.last_poll_monotonic = time.monotonic() - 3.5
    ok, reason = service.healthz()
    assert not ok and "3 polling intervals (3 s)" in reason


def test_healthz_503_with_the_reason_while_commits_fail() -> None:
    service, loop = _service()
    loop.last_poll_monotonic = time.monotonic()
    guard = loop.guard
    guard.failed(COMMIT, "cannot write /s/state.json: File too large", "%s")
    ok, reason = service.healthz()
    assert not ok and reason.startswith("commits failing since ")
    assert reason.endswith("(1 in a row): cannot write /s/state.json: File too large")
    guard.succeeded(COMMIT)
    assert service.healthz() == (True, "ok")


def test_empty_listen_disables_the_service() -> None:
    assert _service("")[0].enabled is False
    assert _service(":2112")[0].enabled is True


def _own_listening_ports() -> set[int]:
    """The TCP ports this process listens on (/proc/self/fd and /proc/net/tcp{,6}): whether
    the old socket is closed, asked of the process itself. A connection to the old port
    number could reach another test's server that took the freed port meanwhile."""
    own = set()
    for fd in Path("/proc/self/fd").iterdir():
        try:
            target = fd.readlink()
        except OSError:
            continue
        if str(target).startswith("socket:["):
            own.add(str(target)[len("socket:["):-1])
    ports = set()
    for table in ("/proc/net/tcp", "/proc/net/tcp6"):
        try:
            lines = Path(table).read_text().splitlines()[1:]
        except OSError:
            continue
        for line in lines:
            fields = line.split()
            if fields[3] == "0A" and fields[9] in own:  # 0A: LISTEN
                ports.add(int(fields[1].rsplit(":", 1)[1], 16))
    return ports


def test_a_new_listen_address_on_reload_and_a_prompt_stop() -> None:
    """The HTTP thread sleeps until a request or the close (no 0.5 s polling), so closing
    must wake it: after a reload the old port is closed at once and stop() is immediate."""
    first, second = free_port(), free_port()
    service, loop = _service(f"127.0.0.1:{first}")
    asyncio.run(service.start())
    assert get(f"http://127.0.0.1:{first}/healthz")[0] == 503  # serving, no poll yet
    old_thread = service._thread
    assert first in _own_listening_ports()
    loop.config = replace(loop.config, metrics_listen=f"127.0.0.1:{second}")
    service.on_reload(loop.config)
    assert get(f"http://127.0.0.1:{second}/healthz")[0] == 503
    assert old_thread is not None
    old_thread.join(2)
    assert not old_thread.is_alive()
    # its sockets are closed by the thread that stopped it, right after it ended
    wait_until(lambda: first not in _own_listening_ports(), f"port {first} closed")
    thread = service._thread
    started = time.monotonic()
    asyncio.run(service.stop())
    assert time.monotonic() - started < 1.0
    assert thread is not None and not thread.is_alive()
