"""STATUS= tells what the health model tells (``nichealthctl check`` and ``status``), on a real
sd_notify socket: during a driver reload, when nothing goes stale, and on a quiet host."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path
from typing import Any, Callable

from nichealthd.sim import mutate

from ..harness import NotifySocket, ctl
from .conftest import REPO, SimHost
from .test_service import Daemon, notify  # noqa: F401 (fixture)

NO_DEVICES = "no InfiniBand/RoCE devices found"


def sim(host: SimHost, *args: str) -> None:
    proc = subprocess.run([sys.executable, "-m", "nichealthd.sim", args[0], str(host.root),
                           *args[1:]], cwd=REPO, capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stderr


def status(socket: Path) -> dict[str, Any]:
    out = ctl(socket, "--json", "status")
    assert out.returncode == 0, out.stderr
    data: dict[str, Any] = json.loads(out.stdout)
    return data


def test_during_a_driver_reload_status_says_what_check_says(
        sim_host: Callable[..., SimHost], notify: NotifySocket) -> None:  # noqa: F811
    """A fatal port, then every device gone at once: STATUS= keeps the counts and the fatal
    port that ``check`` reports (CRITICAL) and names the reload, instead of "no InfiniBand/RoCE
    devices found"; ``status`` lists the held devices. When they are back it says so."""
    host = sim_host()
    socket = host.root.parent / "varlink.sock"
    daemon = Daemon(host, notify, "--varlink-socket", str(socket))
    try:
        notify.wait_for("READY=1")
        sim(host, "uncable", "mlx5_0", "1")
        notify.wait_for("1 fatal (mlx5_0/1")
        sim(host, "driver-unload")
        line = notify.wait_for("driver event: 12 RDMA devices gone, PCI function on the bus")
        assert NO_DEVICES not in line
        assert "12 ports: 11 healthy, 0 degraded, 1 fatal (mlx5_0/1" in line, line
        check = ctl(socket, "check")
        assert check.returncode == 2, check.stdout + check.stderr
        assert "healthy=11 degraded=0 fatal=1 ports=12" in check.stdout
        now = status(socket)
        assert now["health"] == "fatal" and now["devices_found"] is True
        assert now["rdma_devices"] == 0  # what the poll saw: nothing, but held
        assert len(now["devices_reloading"]) == 12 and now["reloading_since"]
        text = ctl(socket, "status").stdout
        assert NO_DEVICES not in text and "reloading" in text, text
        sim(host, "driver-load")
        back = notify.wait_for("connector")  # the next STATUS= after the return
        while "driver event" in back:
            back = notify.wait_for("connector")
        assert "1 fatal (mlx5_0/1" in back, back
        assert status(socket)["devices_reloading"] == []
    finally:
        code, err = daemon.stop()
    assert code == 0, err


def test_status_is_sent_when_it_changes_and_holds_nothing_that_goes_stale(
        sim_host: Callable[..., SimHost], notify: NotifySocket) -> None:  # noqa: F811
    """No time of the last poll in STATUS= (it lagged up to 10 s behind, as it was sent only
    every 10 s to spare the service manager a message per poll): a quiet host sends STATUS=
    once, with READY=1, and then only when something changes."""
    host = sim_host()
    daemon = Daemon(host, notify)
    try:
        ready = notify.wait_for("READY=1")
        assert "last poll" not in ready
        daemon.wait_polls(12)  # 2.4 s of 200 ms polls, quiet
        assert len(notify.statuses) == 1, notify.statuses
        mutate.set_port(host.root, "mlx5_0", 1, state="DOWN", phys_state="Disabled")
        notify.wait_for("1 fatal")
        daemon.wait_polls(3)
        assert len(notify.statuses) == 2, notify.statuses
    finally:
        code, err = daemon.stop()
    assert code == 0, err
