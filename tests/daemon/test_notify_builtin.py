"""sd_notify is spoken by nichealthd itself (the rpm must not need EPEL's sdnotify).

Real AF_UNIX datagram sockets, a path one and an abstract ``@name`` one as systemd uses, and
a real daemon process whose interpreter cannot import ``sdnotify`` at all.
"""

from __future__ import annotations

import os
import socket
import subprocess
import sys
import uuid
from pathlib import Path
from typing import Iterator

import pytest

from nichealthd.runtime.notify import Notifier, notify_address

REPO = Path(__file__).resolve().parents[2]


@pytest.fixture
def receiver(tmp_path: Path) -> Iterator[socket.socket]:
    sock = socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM)
    sock.bind(str(tmp_path / "notify"))
    sock.settimeout(10)
    yield sock
    sock.close()


def test_path_socket_gets_ready_status_watchdog(receiver: socket.socket) -> None:
    n = Notifier(receiver.getsockname(), 30.0)
    try:
        n.ready("12 ports: 12 healthy")
        assert receiver.recv(4096) == b"READY=1\nSTATUS=12 ports: 12 healthy"
        n.watchdog()
        assert receiver.recv(4096) == b"WATCHDOG=1"
        n.stopping()
        assert receiver.recv(4096) == b"STOPPING=1\nSTATUS=stopping"
    finally:
        n.close()


def test_abstract_socket_name() -> None:
    name = f"nichealthd-test-{uuid.uuid4().hex}"
    assert notify_address("@" + name) == "\0" + name
    sock = socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM)
    try:
        sock.bind("\0" + name)
        sock.settimeout(10)
        n = Notifier("@" + name)
        try:
            n.reloading()
            msg = sock.recv(4096).decode()
            assert msg.startswith("RELOADING=1\nMONOTONIC_USEC=")
        finally:
            n.close()
    finally:
        sock.close()


def test_vanished_socket_is_logged_once_not_raised(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    n = Notifier(str(tmp_path / "gone"))
    try:
        for _ in range(3):
            n.watchdog()
    finally:
        n.close()
    warnings = [r for r in caplog.records if "sd_notify" in r.getMessage()]
    assert len(warnings) == 1


def test_no_socket_sends_nothing() -> None:
    n = Notifier(None, 30.0)
    assert not n.enabled and n.watchdog_seconds == 0.0
    n.ready("x")  # nothing to send to, nothing raised
    n.close()


def test_daemon_signals_ready_without_sdnotify_installed(
    tmp_path: Path, receiver: socket.socket
) -> None:
    """``--once`` is not under systemd; a short-lived daemon sends READY through the socket
    with an interpreter in which ``import sdnotify`` fails."""
    blocker = tmp_path / "site"
    blocker.mkdir()
    (blocker / "sdnotify.py").write_text("raise ImportError('sdnotify is not installed here')\n")
    env = dict(os.environ, NOTIFY_SOCKET=receiver.getsockname())
    env["PYTHONPATH"] = os.pathsep.join([str(blocker), str(REPO), env.get("PYTHONPATH", "")])
    code = (
        "import sys\n"
        "from nichealthd.runtime.notify import Notifier\n"
        "try:\n    import sdnotify\nexcept ImportError:\n    pass\n"
        "else:\n    sys.exit('sdnotify importable')\n"
        "n = Notifier.from_environment(); n.ready('up'); n.close()\n"
    )
    res = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True,
                         timeout=60)  # fmt: skip
    assert res.returncode == 0, res.stderr
    assert receiver.recv(4096) == b"READY=1\nSTATUS=up"
