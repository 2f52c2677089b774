"""``/healthz``: 200 while polls complete, 503 with the reason when the poller hangs."""

from __future__ import annotations

import asyncio
import socket
import time
from pathlib import Path
from types import SimpleNamespace
from typing import Callable

import pytest

from nichealthd.metrics import MetricsService
from nichealthd.pollguard import COMMIT, PollGuard

from ..threadstop import ThreadStopper
from .conftest import INTERVAL, RunningDaemon, free_port, get

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
        assert "nichealthd_port_state_id" in running.text()
    finally:
        poller.resume()
    running.wait_for(lambda: get(running.base + "/healthz")[0] == 200, what="/healthz 200")


def _service(listen: str = "127.0.0.1:0") -> MetricsService:
    config = SimpleNamespace(metrics_listen=listen, polling_interval=1.0)
    fake = SimpleNamespace(config=config, last_poll_monotonic=None, started_at=time.time(),
                           monitor=SimpleNamespace(guard=PollGuard()))
    return MetricsService(fake)  # type: ignore[arg-type]


def test_healthz_before_the_first_poll() -> None:
    service = _service()
    ok, reason = service.healthz()
    assert not ok and "no poll has completed yet" in reason
    service.daemon.last_poll_monotonic = time.monotonic() - 2.9
    assert service.healthz() == (True, "ok")
    service.daemon.last_poll_monotonic = time.monotonic() - 3.5
    ok, reason = service.healthz()
    assert not ok and "3 polling intervals (3 s)" in reason


def test_healthz_503_with_the_reason_while_commits_fail() -> None:
    service = _service()
    service.daemon.last_poll_monotonic = time.monotonic()
    guard = service.daemon.monitor.guard
    guard.failed(COMMIT, "cannot write /s/state.json: File too large", "%s")
    ok, reason = service.healthz()
    assert not ok and reason.startswith("commits failing since ")
    assert reason.endswith("(1 in a row): cannot write /s/state.json: File too large")
    guard.succeeded(COMMIT)
    assert service.healthz() == (True, "ok")


def test_empty_listen_disables_the_service() -> None:
    assert _service("").enabled is False
    assert _service(":2112").enabled is True


def test_a_new_listen_address_on_reload_and_a_prompt_stop() -> None:
    """The HTTP thread sleeps until a request or the close (no 0.5 s polling), so closing
    must wake it: after a reload the old port is closed at once and stop() is immediate."""
    first, second = free_port(), free_port()
    service = _service(f"127.0.0.1:{first}")
    asyncio.run(service.start())
    assert get(f"http://127.0.0.1:{first}/healthz")[0] == 503  # serving, no poll yet
    old_thread = service._thread
    service.on_reload(SimpleNamespace(metrics_listen=f"127.0.0.1:{second}"))  # type: ignore[arg-type]
    assert get(f"http://127.0.0.1:{second}/healthz")[0] == 503
    assert old_thread is not None
    old_thread.join(2)
    assert not old_thread.is_alive()
    with pytest.raises(OSError):
        socket.create_connection(("127.0.0.1", first), timeout=2).close()
    thread = service._thread
    started = time.monotonic()
    asyncio.run(service.stop())
    assert time.monotonic() - started < 1.0
    assert thread is not None and not thread.is_alive()
