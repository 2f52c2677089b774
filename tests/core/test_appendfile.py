"""Every append (journal, event log, dead letters) goes through one helper
that loses no byte to a short write or EINTR and leaves no partial line when it fails.

Short writes are made two ways: a real one, by the kernel, under a file-size limit in a child
process (the write stops at the limit and returns the short count; the next one fails with
EFBIG); and 1-byte writes with an EINTR in between, by wrapping ``os.write`` for the test's
duration, to check the loop itself on every append path (buffered file objects do not call
``os.write``, so the count of calls also shows that each path goes through the helper).
"""

from __future__ import annotations

import errno
import json
import os
import subprocess
import sys
import textwrap
from dataclasses import replace
from datetime import datetime, timezone
from pathlib import Path
from typing import Iterator

import pytest

from nichealthd.core.events import HealthEvent, make_event
from nichealthd.sources.config_file import load_config
from nichealthd.storage.appendfile import append
from nichealthd.storage.store import Journal, JournalEntry
from nichealthd.surfaces.connector.sender import PACE, Sender, SendError
from nichealthd.surfaces.eventlog import EventLog

from .builders import at

REPO = Path(__file__).resolve().parents[2]
REAL_WRITE = os.write


def event(n: int) -> HealthEvent:
    return make_event("InfiniBandStateCheck", fatal=True, healthy=False, message=f"e{n} " * 40,
                      error_code="link_downed", entities=(("NIC", "mlx5_0"),), at=at(n))


@pytest.fixture
def dribble(monkeypatch: pytest.MonkeyPatch) -> Iterator[list[int]]:
    """``os.write`` as the helper sees it writes 1 byte per call, and every third call is
    interrupted by a signal (EINTR) before writing anything. Yields the call count."""
    calls = [0]

    def write(fd: int, data: bytes | memoryview) -> int:
        calls[0] += 1
        if calls[0] % 3 == 0:
            raise InterruptedError(errno.EINTR, "Interrupted system call")
        return REAL_WRITE(fd, bytes(data[:1]))

    monkeypatch.setattr(os, "write", write)
    yield calls


def test_one_byte_writes_and_eintr_lose_nothing(tmp_path: Path, dribble: list[int]) -> None:
    path = tmp_path / "log"
    path.write_bytes(b"first\n")
    data = "".join(f"line {n} \N{GREEK SMALL LETTER MU}\n" for n in range(50)).encode()
    assert append(str(path), data) == len(b"first\n")
    assert path.read_bytes() == b"first\n" + data
    assert dribble[0] > len(data)  # it really was written a byte at a time


def test_the_journal_appends_through_it(tmp_path: Path, dribble: list[int]) -> None:
    journal = Journal(str(tmp_path))
    journal.recover(0)
    entries = journal.stamp([event(1), event(2), event(3)], 1, "node", "STORE_ONLY")
    journal.append(entries)
    journal.committed()
    again = Journal(str(tmp_path))
    again.recover(3)
    assert [e.event.message for e in again.history(10)] == [e.event.message for e in entries]
    assert dribble[0] > os.path.getsize(journal.path)


def test_the_event_log_appends_through_it(tmp_path: Path, dribble: list[int]) -> None:
    journal = Journal(str(tmp_path))
    journal.recover(0)
    log = EventLog(str(tmp_path / "events.jsonl"), journal)
    journal.register([log.name])
    journal.append(journal.stamp([event(1), event(2)], 1, "node", "STORE_ONLY"))
    log.publish(journal.committed())
    lines = (tmp_path / "events.jsonl").read_text().splitlines()
    assert [json.loads(line)["message"] for line in lines] == [event(1).message,
                                                              event(2).message]
    assert journal.depth(log.name) == 0
    assert dribble[0] > os.path.getsize(tmp_path / "events.jsonl")  # through the helper


def test_dead_letters_append_through_it(tmp_path: Path, dribble: list[int]) -> None:
    (tmp_path / "nichealthd.toml").write_text(
        f'stateFile = "{tmp_path}/state.json"\nplatformConnectorSocket = '
        f'"unix://{tmp_path}/none.sock"\n')
    config = load_config(str(tmp_path / "nichealthd.toml"))
    journal = Journal(config.state_dir)
    journal.recover(0)
    sender = Sender(config, journal,
                    pace=replace(PACE, wall=lambda: datetime(2026, 1, 1, tzinfo=timezone.utc)))
    try:
        batch = [JournalEntry(1, event(1).stamped("n", "STORE_ONLY", "id1")),
                 JournalEntry(2, event(2).stamped("n", "STORE_ONLY", "id2"))]
        assert sender._dead_letter(batch, SendError("INVALID_ARGUMENT", "refused", False))
    finally:
        sender.link.close()
    lines = Path(sender.deadletter_path).read_text().splitlines()
    assert [json.loads(line)["seq"] for line in lines] == [1, 2]
    assert dribble[0] > os.path.getsize(sender.deadletter_path)  # through the helper


CHILD = textwrap.dedent("""
    import os, resource, sys
    from nichealthd.storage.appendfile import append
    path, raw = sys.argv[1], sys.argv[2]
    size = os.path.getsize(path)
    resource.setrlimit(resource.RLIMIT_FSIZE, (size + 10, resource.RLIM_INFINITY))
    fd = os.open(raw, os.O_WRONLY | os.O_APPEND)
    print(os.write(fd, b"x" * 100))  # what an unchecked write would have done: 10 of 100
    os.close(fd)
    try:
        append(path, b"y" * 100)
    except OSError as exc:
        print(exc.errno)
""")


def test_a_real_short_write_leaves_the_file_as_it_was(tmp_path: Path) -> None:
    """Under a file-size limit the kernel writes up to the limit and returns a short count;
    the helper goes on, gets EFBIG, and truncates back: no partial line remains."""
    path, raw = tmp_path / "journal", tmp_path / "raw"
    path.write_bytes(b"committed\n")
    raw.write_bytes(b"committed\n")
    out = subprocess.run([sys.executable, "-c", CHILD, str(path), str(raw)], cwd=REPO,
                         capture_output=True, text=True, timeout=60, check=True).stdout.split()
    assert out == ["10", str(errno.EFBIG)], out
    assert raw.read_bytes() == b"committed\n" + b"x" * 10  # the cut an unchecked write leaves
    assert path.read_bytes() == b"committed\n"  # the helper leaves none
