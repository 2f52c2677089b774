"""The daemon and nichealthctl on a host that lacks a Python library (runtime/libraries.py).

RHEL 9 has no D-Bus library for Python and ships grpcio only in EPEL: each run here makes one
of them missing (tests/without.py) and asserts that the daemon starts, says once at error
priority what is missing and how to install it, and serves the rest, and that nichealthctl gets
its answers over varlink. prometheus-client, which the metrics endpoint no longer needs, is
missing in one run too: the endpoint serves as usual. The connector's case (events kept in the
outbox and delivered later) is tests/connector/test_without_grpc.py.
"""

from __future__ import annotations

import json
import os
import socket
import subprocess
from pathlib import Path
from typing import Callable

from ..harness import NotifySocket
from ..netports import free_port
from ..without import command
from .conftest import REPO, SimHost
from .test_service import Daemon, notify  # noqa: F401 (fixture)

DBUS = "dbus_fast,dbus_next"


def ctl(without: str, *args: str, varlink: str = "") -> subprocess.CompletedProcess[str]:
    """nichealthctl without ``without``; NICHEALTHCTL_VARLINK_SOCKET is ``varlink``."""
    env = {**os.environ, "NICHEALTHCTL_VARLINK_SOCKET": varlink,
           "DBUS_SYSTEM_BUS_ADDRESS": "unix:path=/nonexistent/bus"}
    return subprocess.run(command(without, "nichealthd.cli.ctl", *args), cwd=REPO, env=env,
                          capture_output=True, text=True, timeout=60)



def test_without_a_dbus_library_the_daemon_serves_varlink_and_ctl_uses_it(
        sim_host: Callable[..., SimHost], notify: NotifySocket,  # noqa: F811
        tmp_path: Path) -> None:
    host = sim_host()
    varlink = str(tmp_path / "io.nichealthd.Monitor")
    daemon = Daemon(host, notify, "--dbus", "system", "--varlink-socket", varlink,
                    without=DBUS)
    try:
        assert "STATUS=12 ports: 12 healthy" in notify.wait_for("READY=1")
        daemon.wait_polls(2)
        ports = ctl(DBUS, "show", "ports", "--json", varlink=varlink)  # no --varlink
        assert ports.returncode == 0, ports.stderr
        assert len(json.loads(ports.stdout)) == 13  # the management port too
        check = ctl(DBUS, f"--varlink={varlink}", "check")
        assert check.returncode == 0 and check.stdout.startswith("NICHEALTH OK"), check.stdout
        nowhere = ctl(DBUS, "status", varlink=str(tmp_path / "absent"))
        assert nowhere.returncode == 3
        assert "no D-Bus library for Python is installed" in nowhere.stderr, nowhere.stderr
        assert "Traceback" not in nowhere.stderr
    finally:
        code, err = daemon.stop()
    assert code == 0, err
    said = [line for line in err.splitlines() if "the D-Bus API is off" in line]
    assert len(said) == 1 and " ERROR " in said[0], said
    assert "python3-dbus-fast or python3-dbus-next" in said[0]
    assert "Traceback" not in err


def test_without_prometheus_client_the_daemon_serves_metrics(
        sim_host: Callable[..., SimHost], notify: NotifySocket,  # noqa: F811
        tmp_path: Path) -> None:
    """The metrics endpoint needs no client library (surfaces/metrics_text.py)."""
    host = sim_host()
    port = free_port()
    daemon = Daemon(host, notify, "--metrics-listen", f"127.0.0.1:{port}",
                    without="prometheus_client")
    try:
        notify.wait_for("READY=1")
        daemon.wait_polls(2)
        with socket.create_connection(("127.0.0.1", port), timeout=10) as sock:
            sock.sendall(b"GET /metrics HTTP/1.0\r\n\r\n")
            answer = sock.makefile("rb").read().decode()
        assert answer.startswith("HTTP/1.0 200 OK\r\n"), answer[:200]
        assert "\nnichealthd_polls_total " in answer and "\nprocess_open_fds " in answer
    finally:
        code, err = daemon.stop()
    assert code == 0, err
    assert " is off" not in err and "Traceback" not in err, err


def test_once_without_grpc_commits_and_keeps_the_events(
        sim_host: Callable[..., SimHost], tmp_path: Path) -> None:
    host = sim_host()
    run = subprocess.run(
        command("grpc", "nichealthd.runtime.daemon", "--config", str(host.config), "--once",
                "--platform-connector-socket", f"unix://{tmp_path}/connector.sock"),
        cwd=REPO, capture_output=True, text=True, timeout=60)
    assert run.returncode == 0, run.stderr
    assert run.stderr.count("forwarding to the platform connector is off") == 1
    assert (host.root / "events.jsonl").read_text().strip()
