"""STATUS= is given its values (runtime/notify.py StatusLine), not a line to compare back."""

from __future__ import annotations

import socket
from pathlib import Path
from typing import Iterator

import pytest

from nichealthd.runtime.notify import Notifier, StatusLine


@pytest.fixture
def receiver(tmp_path: Path) -> Iterator[socket.socket]:
    sock = socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM)
    sock.bind(str(tmp_path / "notify"))
    sock.settimeout(0.2)
    yield sock
    sock.close()


def received(sock: socket.socket) -> list[bytes]:
    out = []
    try:
        while True:
            out.append(sock.recv(4096))
    except socket.timeout:
        return out


def test_the_line_is_written_from_its_values() -> None:
    line = StatusLine("12 ports: 12 healthy", "connector connected")
    assert str(line) == "12 ports: 12 healthy; connector connected"
    assert str(StatusLine("h", "c", reload_error="bad key", poll_error="read failing")) == \
        "h; c; reload rejected: bad key; read failing"
    assert str(StatusLine("h", "c", slurm_failing="drain of node n1: Invalid user id")) == \
        "h; c; slurm failing (drain of node n1: Invalid user id)"


def test_status_is_sent_when_a_value_changes(receiver: socket.socket) -> None:
    n = Notifier(receiver.getsockname())
    try:
        n.ready(StatusLine("12 ports: 12 healthy", "connector connected"))
        n.status(StatusLine("12 ports: 12 healthy", "connector connected"))  # same values
        n.status(StatusLine("12 ports: 12 healthy", "connector down"))
        assert received(receiver) == [
            b"READY=1\nSTATUS=12 ports: 12 healthy; connector connected",
            b"STATUS=12 ports: 12 healthy; connector down"]
    finally:
        n.close()
