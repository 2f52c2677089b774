"""``/healthz``: 200 while polls complete, 503 with the reason when the poller hangs."""

from __future__ import annotations

import os
import time
from pathlib import Path
from types import SimpleNamespace
from typing import Callable

from nichealthd.metrics import MetricsService
from nichealthd.sim.tree import BOOT_ID

from .conftest import INTERVAL, RunningDaemon, get

Start = Callable[[Path], RunningDaemon]


def test_healthz_503_while_a_sysfs_read_hangs(sim: Callable[..., Path], daemon: Start) -> None:
    """A real hung read: the boot ID (opened every poll) becomes a FIFO with no writer.

    SIGSTOP would freeze the HTTP server too; this blocks only the poll thread, which is
    exactly the failure /healthz exists to reveal.
    """
    root = sim("synthetic", devices=2)
    running = daemon(root)
    assert get(running.base + "/healthz") == (200, "ok\n")
    boot_id = root / BOOT_ID
    saved = boot_id.with_name("boot_id.saved")
    fifo = root / "hang.fifo"
    os.mkfifo(fifo)
    os.replace(boot_id, saved)
    boot_id.symlink_to(fifo)
    try:
        running.wait_for(lambda: get(running.base + "/healthz")[0] == 503,
                         timeout=3 * INTERVAL + 5, what="/healthz 503")
        status, body = get(running.base + "/healthz")
        assert status == 503
        assert "last poll completed" in body and "stuck" in body
        # /metrics keeps answering from the last completed poll.
        assert "nichealthd_port_state_id" in running.text()
    finally:
        os.replace(saved, boot_id)  # later polls read the real file again
        fd = os.open(fifo, os.O_WRONLY | os.O_NONBLOCK)  # the hung open is the reader
        os.write(fd, saved.with_name("boot_id").read_bytes())
        os.close(fd)
    running.wait_for(lambda: get(running.base + "/healthz")[0] == 200, what="/healthz 200")


def _service(listen: str = "127.0.0.1:0") -> MetricsService:
    config = SimpleNamespace(metrics_listen=listen, polling_interval=1.0)
    fake = SimpleNamespace(config=config, last_poll_monotonic=None, started_at=time.time())
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


def test_empty_listen_disables_the_service() -> None:
    assert _service("").enabled is False
    assert _service(":2112").enabled is True
