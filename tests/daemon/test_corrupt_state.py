"""A corrupt state file through the real daemon (``--once``): a corrupt state file gives one
warning, is moved aside to ``state.json.corrupt-<time>`` and the daemon starts fresh; the next
start is quiet. Never a traceback, never a crash loop."""

from __future__ import annotations

import json
from typing import Any, Callable

import pytest

from .conftest import SimHost


def deep(_: dict[str, Any]) -> bytes:
    return b"[" * 200_000 + b"]" * 200_000


def year_one(state: dict[str, Any]) -> bytes:
    for snap in state["counter_snapshots"].values():
        snap["timestamp"] = "0001-01-01T00:00:00Z"
    return json.dumps(state).encode()


def negative_seq(state: dict[str, Any]) -> bytes:
    state["event_seq"] = -1
    return json.dumps(state).encode()


def invalid_utf8(_: dict[str, Any]) -> bytes:
    return b'{"version": 1, "boot_id": "\xff"}'


@pytest.mark.parametrize("damage", [deep, year_one, negative_seq, invalid_utf8, "directory"],
                         ids=["deep-nesting", "year-1", "negative-event-seq", "invalid-utf8",
                              "directory"])
def test_a_corrupt_state_file_is_moved_aside_and_the_daemon_starts_fresh(
        sim_host: Callable[..., SimHost], damage: Any) -> None:
    host = sim_host()
    first = host.once()
    assert first.returncode == 0 and first.events
    history = (host.root / "events.jsonl").read_text()
    state = json.loads(host.state_file.read_text())
    if damage == "directory":
        host.state_file.unlink()
        host.state_file.mkdir()
    else:
        host.state_file.write_bytes(damage(state))
    run = host.once()
    assert run.returncode == 0, run.stderr
    assert "Traceback" not in run.stderr
    warnings = [line for line in run.stderr.splitlines() if "is corrupt" in line]
    assert len(warnings) == 1 and "moved aside to" in warnings[0], run.stderr
    assert len(list(host.state_file.parent.glob("state.json.corrupt-*"))) == 1
    assert host.state_file.is_file()  # the fresh state was committed
    assert all(e["isHealthy"] for e in run.events)  # a fresh start: healthy baselines
    # The journal lost nothing: the old history is still the event log's prefix.
    assert (host.root / "events.jsonl").read_text().startswith(history)
    again = host.once()
    assert again.returncode == 0 and "corrupt" not in again.stderr


def test_a_journal_that_cannot_be_read_is_a_clear_start_error(
        sim_host: Callable[..., SimHost]) -> None:
    """The journal holds undelivered events, so it is never moved aside: the operator is told."""
    host = sim_host()
    journal = host.state_file.parent / "outbox.jsonl"
    journal.mkdir(parents=True)
    run = host.once()
    assert run.returncode == 1
    assert "Traceback" not in run.stderr
    assert f"cannot read {journal}: Is a directory" in run.stderr
    assert "move the file or directory out of the way" in run.stderr


def test_temporary_files_of_interrupted_writes_are_removed_at_start(
        sim_host: Callable[..., SimHost]) -> None:
    """A SIGKILL between the temporary file's creation and its rename leaves it behind (two
    of them after 100 SIGKILLs of a busy daemon): the next start removes them, once."""
    host = sim_host()
    assert host.once().returncode == 0
    state_dir = host.state_file.parent
    full = host.state_file.read_bytes()
    (state_dir / ".tmp-k1ll3d01").write_bytes(full[: len(full) // 2])  # torn mid-write
    (state_dir / ".tmp-k1ll3d02").write_bytes(b"")  # killed before the first byte
    (state_dir / "operator-notes.txt").write_text("keep me\n")
    run = host.once()
    assert run.returncode == 0, run.stderr
    assert sorted(p.name for p in state_dir.iterdir() if p.name.startswith(".tmp-")) == []
    assert (state_dir / "operator-notes.txt").exists()
    [line] = [x for x in run.stderr.splitlines() if "temporary file" in x]
    assert "removed 2 temporary file(s) of interrupted writes" in line
    assert ".tmp-k1ll3d01, .tmp-k1ll3d02" in line
    assert "temporary file" not in host.once().stderr  # nothing left to say
