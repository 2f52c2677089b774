"""The bearer token file (nichealthd.toml(5)): a world-readable token is used with one warning, as
ssh warns about keys; a FIFO or other non-regular file is refused with a clear error and
never blocks delivery. A real gRPC server on a unix socket receives (or not) the events."""

from __future__ import annotations

import logging
import os
import socket
from pathlib import Path

import pytest

from .connector_fixtures import (
    FakeConnector,
    Outbox,
    fast_sender,
    fatal,
    make_config,
    running,
    wait_for,
)


def _token_lines(caplog: pytest.LogCaptureFixture) -> list[str]:
    return [r.getMessage() for r in caplog.records if "token file" in r.getMessage()]


@pytest.mark.parametrize("mode, who", [(0o644, "others"), (0o640, "its group")])
def test_a_readable_token_warns_once_and_is_used(tmp_path: Path, connector: FakeConnector,
                                                 caplog: pytest.LogCaptureFixture, mode: int,
                                                 who: str) -> None:
    connector.start()
    token = tmp_path / "token"
    token.write_text("secret\n")
    token.chmod(mode)
    config = make_config(tmp_path, connector.target, platform_connector_token_path=str(token))
    outbox = Outbox(config)
    sender = fast_sender(config, outbox.journal)
    with caplog.at_level(logging.WARNING, logger="nichealthd.connector"):
        for i in range(3):
            outbox.commit([fatal(i)])
            sender.drain(sender.pace.clock() + 5)
    assert [r.metadata.get("authorization") for r in connector.accepted] == \
        ["Bearer secret"] * 3
    lines = _token_lines(caplog)
    assert len(lines) == 1, lines
    assert f"readable by {who} (mode {mode:04o})" in lines[0] and "chmod 600" in lines[0]


def test_a_private_token_gives_no_warning(tmp_path: Path, connector: FakeConnector,
                                          caplog: pytest.LogCaptureFixture) -> None:
    connector.start()
    token = tmp_path / "token"
    token.write_text("secret")
    token.chmod(0o600)
    config = make_config(tmp_path, connector.target, platform_connector_token_path=str(token))
    outbox = Outbox(config)
    sender = fast_sender(config, outbox.journal)
    outbox.commit([fatal(1)])
    with caplog.at_level(logging.WARNING, logger="nichealthd.connector"):
        sender.drain(sender.pace.clock() + 5)
    assert len(connector.accepted) == 1
    assert _token_lines(caplog) == []


def test_a_fifo_token_is_refused_without_blocking(tmp_path: Path, connector: FakeConnector,
                                                  caplog: pytest.LogCaptureFixture) -> None:
    """A FIFO nobody writes to: a plain open() would block the connector thread for good."""
    connector.start()
    token = tmp_path / "token"
    os.mkfifo(token, 0o600)
    config = make_config(tmp_path, connector.target, platform_connector_token_path=str(token))
    outbox = Outbox(config)
    entries = outbox.commit([fatal(1), fatal(2)])
    sender = fast_sender(config, outbox.journal)
    with caplog.at_level(logging.WARNING, logger="nichealthd.connector"), running(sender):
        wait_for(lambda: sender.status.errors >= 5, what="refusals (not a hang)")
        assert connector.received == []
        assert sender.status.state == "down"
        assert "is a FIFO, not a regular file" in sender.status.last_error
        staged = tmp_path / "token.new"
        staged.write_text("now-a-file")
        staged.chmod(0o600)
        staged.rename(token)  # replaces the FIFO
        wait_for(lambda: len(connector.event_ids()) == 2, what="delivery after the fix")
    assert connector.event_ids() == [e.event.event_id for e in entries]
    assert sender.status.dead_letters == 0
    lines = [line for line in _token_lines(caplog) if "FIFO" in line]
    assert len(lines) == 1, lines  # logged once, not per retry


@pytest.mark.parametrize("kind", ["directory", "character device", "socket"])
def test_other_non_regular_tokens_are_refused(tmp_path: Path, connector: FakeConnector,
                                              kind: str) -> None:
    connector.start()
    listener = None
    if kind == "directory":
        path = tmp_path / "tokendir"
        path.mkdir()
    elif kind == "character device":
        path = Path("/dev/zero")  # also endless: reading it would never stop
    else:
        path = tmp_path / "t.sock"
        listener = socket.socket(socket.AF_UNIX)
        listener.bind(str(path))
    try:
        config = make_config(tmp_path, connector.target,
                             platform_connector_token_path=str(path))
        outbox = Outbox(config)
        outbox.commit([fatal(1)])
        sender = fast_sender(config, outbox.journal)
        sender.drain(sender.pace.clock() + 5)
        assert connector.received == []
        assert f"is a {kind}, not a regular file" in sender.status.last_error or \
            (kind == "socket" and "cannot read token file" in sender.status.last_error)
        assert outbox.journal.depth("connector") == 1  # kept for later, not dropped
    finally:
        if listener is not None:
            listener.close()
