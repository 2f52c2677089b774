"""The atomic commit of events + state, its recovery, and a full disk (pyfakefs sizes it)."""

from __future__ import annotations

import json
import os
import uuid
from pathlib import Path

import pytest
from pyfakefs.fake_filesystem import FakeFilesystem

from nichealthd.core.checks.link_counters import LINK_COUNTERS
from nichealthd.core.checks.link_state import LINK_STATE
from nichealthd.core.events import HealthEvent, make_event
from nichealthd.core.state import MonitorState
from nichealthd.runtime.monitor import FLUSH_SECONDS, Monitor
from nichealthd.runtime.startup import load_topology
from nichealthd.sim import mutate
from nichealthd.sources.config_file import load_config
from nichealthd.storage import store
from nichealthd.storage.store import Journal, load_state, save_state

from .. import simtrees
from .builders import at, config, gpus, with_fields


def event(n: int, fatal: bool = False) -> HealthEvent:
    return make_event("InfiniBandStateCheck", fatal=fatal, healthy=False, message=f"e{n}",
                      error_code="link_downed", entities=(("NIC", "mlx5_0"),), at=at(n))


def test_state_round_trip_and_corrupt_files(tmp_path: Path) -> None:
    path = tmp_path / "state.json"
    assert load_state(str(path)).fresh and load_state(str(path)).problem is None
    state = with_fields(MonitorState(boot_id="b", event_seq=7), LINK_STATE,
                        known_devices=["mlx5_0"])
    save_state(str(path), state)
    assert load_state(str(path)).state == state
    for junk in ('{"version": 1, "counter_snapshots": {"k": {"value": -1, "timestamp": '
                 '"2026-01-01T00:00:00Z"}}}', "[]", "{", '{"version": 99}'):
        path.write_text(junk)
        loaded = load_state(str(path))
        assert loaded.fresh and "corrupt" in (loaded.problem or "")


def test_the_state_file_has_one_top_level_key_per_line(tmp_path: Path) -> None:
    """Written by the C encoder, key by key: the same JSON as an indented dump, still
    readable with grep (``grep breach_flags state.json``)."""
    path = tmp_path / "state.json"
    state = with_fields(MonitorState(boot_id="b", event_seq=7), LINK_STATE,
                        known_devices=["mlx5_1", "mlx5_0"])
    save_state(str(path), state)
    text = path.read_text()
    lines = text.splitlines()
    assert lines[0] == "{" and lines[-1] == "}" and text.endswith("}\n")
    keys = [json.loads("{" + line.rstrip(",") + "}") for line in lines[1:-1]]
    assert [next(iter(k)) for k in keys] == list(state.to_json())
    assert json.loads(text) == state.to_json()
    assert '"known_devices": ["mlx5_0", "mlx5_1"]' in text


def test_journal_drops_an_unfinished_commit_and_torn_lines(tmp_path: Path) -> None:
    journal = Journal(str(tmp_path))
    journal.recover(0)
    journal.append(journal.stamp([event(1), event(2)], 1, "node", "STORE_ONLY"))
    journal.committed()
    journal.append(journal.stamp([event(3)], 3, "node", "STORE_ONLY"))  # state never saved
    with open(journal.path, "a") as handle:
        handle.write('{"seq": 4, "ev')  # torn by a crash
    again = Journal(str(tmp_path))
    assert again.recover(2) == 2
    assert [e.seq for e in again.history(10)] == [1, 2]
    assert again.history(10)[0].event.node_name == "node"
    assert again.history(10)[0].event.event_id


def test_consumer_cursors_and_compaction_keep_history(tmp_path: Path) -> None:
    journal = Journal(str(tmp_path), history_size=3)
    journal.recover(0)
    journal.register(["log", "connector"])
    entries = journal.stamp([event(n) for n in range(1, 11)], 1, "n", "STORE_ONLY")
    journal.append(entries)
    journal.committed()
    journal.advance("log", 10)
    assert [e.seq for e in journal.pending("connector")] == list(range(1, 11))
    journal.advance("connector", 4)
    reloaded = Journal(str(tmp_path), history_size=3)
    reloaded.recover(10)
    assert [e.seq for e in reloaded.pending("connector")] == list(range(5, 11))
    reloaded.advance("connector", 10)
    # Compaction is amortised: delivered entries go once the file holds twice the history.
    assert [e.seq for e in reloaded.history(100)] == [5, 6, 7, 8, 9, 10]
    assert [json.loads(line)["seq"] for line in Path(reloaded.path).read_text().splitlines()
            ] == [5, 6, 7, 8, 9, 10]
    reloaded.register(["log"])  # a consumer that is gone no longer pins the journal
    assert json.loads(Path(reloaded.cursors_path).read_text()) == {"log": 10}


def test_full_disk_rolls_the_commit_back_and_retries(fs: FakeFilesystem) -> None:
    root = Path("/host")
    boot = root / "proc/sys/kernel/random/boot_id"
    fs.create_file(boot, contents="boot-1\n")
    fs.create_dir(root / "sys/class/infiniband")
    cfg = config(sysfsRoot=str(root / "sys"), procRoot=str(root / "proc"),
                 stateFile="/var/lib/nichealthd/state.json")
    # An unusable state file: the baseline's check-wide clears are events to commit (a host
    # where nichealthd never ran would have none, and nothing to write at once).
    fs.create_file("/var/lib/nichealthd/state.json", contents="{")
    monitor = Monitor(cfg, gpus())
    monitor.start()
    fs.set_disk_usage(2000, "/")  # the next commit does not fit
    outcome = monitor.poll()
    assert outcome.commit_error is not None and "No space" in outcome.commit_error
    assert outcome.committed == []
    assert monitor.baseline  # nothing was committed: the baseline poll is evaluated again
    assert not Path(monitor.journal.path).exists() or Path(monitor.journal.path).stat(
        ).st_size == 0
    fs.set_disk_usage(10_000_000, "/")
    retried = monitor.poll()
    assert retried.commit_error is None
    assert retried.committed and all(e.event.is_healthy for e in retried.committed)
    assert load_state(cfg.state_file).state.event_seq == retried.committed[-1].seq


def test_state_is_written_only_when_something_significant_changed() -> None:
    root = simtrees.take("dgx-h100")
    cfg = load_config(str(root / "nichealthd.toml"))
    clock = iter(at(n) for n in range(100))
    monitor = Monitor(cfg, load_topology(cfg), clock=lambda: next(clock))
    monitor.start()
    monitor.poll()
    state_file = Path(cfg.state_file)
    before = state_file.stat().st_mtime_ns
    for _ in range(3):  # velocity windows advance every second: deferred, not written
        assert monitor.poll().committed == []
    assert state_file.stat().st_mtime_ns == before
    mutate.counter(root, "mlx5_0", 1, "link_downed", add=1)
    assert len(monitor.poll().committed) == 1
    assert state_file.stat().st_mtime_ns != before
    written = load_state(cfg.state_file).state.section(LINK_COUNTERS).counter_snapshots
    assert written["mlx5_1:1:symbol_error"].timestamp == at(4)  # held back, written too
    monitor.poll()  # not quiet yet: the families still write what the breach changed
    assert monitor.poll().committed == []  # quiet again: deferred
    monitor.close()  # the deferred velocity snapshots are flushed at stop
    saved = load_state(cfg.state_file).state.section(LINK_COUNTERS).counter_snapshots
    assert saved["mlx5_0:1:symbol_error"].timestamp == at(6)
    # A port quiet since the first poll: its windows closed at every poll, in its memo only
    # (counters.PortMemo); what is written is where they closed last.
    assert saved["mlx5_1:1:symbol_error"].timestamp == at(6)
    assert monitor.state.section(LINK_COUNTERS).counter_snapshots[
        "mlx5_1:1:symbol_error"].timestamp < at(6)


@pytest.mark.parametrize("text", ["", "x", "{}\n"])
def test_unreadable_cursors_file_is_not_fatal(tmp_path: Path, text: str) -> None:
    (tmp_path / "cursors.json").write_text(text)
    journal = Journal(str(tmp_path))
    journal.recover(0)
    journal.register(["log"])
    assert journal.cursor("log") == 0


def test_a_directory_in_place_of_the_cursors_file_is_moved_aside(tmp_path: Path) -> None:
    """Else no cursor could ever be saved: each ``--once`` run would restart from the
    oldest entry and, with a short connectorTimeout, never reach the newest."""
    journal = Journal(str(tmp_path))
    journal.recover(None)
    journal.append(journal.stamp([event(n) for n in range(3)], 1, "n", "EXECUTE_REMEDIATION"))
    journal.committed()
    (tmp_path / "cursors.json").mkdir()
    again = Journal(str(tmp_path))
    again.recover(None)
    again.register(["connector"])
    assert len(again.pending("connector")) == 3  # lost: from the oldest entry
    again.advance("connector", 2)
    assert json.loads((tmp_path / "cursors.json").read_text()) == {"connector": 2}
    assert [p.name.startswith("cursors.json.corrupt-") for p in tmp_path.iterdir()
            if p.is_dir()] == [True]


def test_a_deferred_write_that_fails_counts_as_a_failing_commit() -> None:
    """Failing commits on a quiet host: no event to commit, only the periodic write of the
    velocity windows, and that fails (the state path is a directory): the commit problem is
    reported until a write works again."""
    root = simtrees.take("dgx-h100")
    cfg = load_config(str(root / "nichealthd.toml"))
    clock = iter(at(n) for n in range(100))
    ticks = iter(float(n) * FLUSH_SECONDS for n in range(100))  # every poll is due to flush
    monitor = Monitor(cfg, load_topology(cfg), clock=lambda: next(clock),
                      monotonic=lambda: next(ticks))
    monitor.start()
    monitor.poll()
    state_file = Path(cfg.state_file)
    state_file.unlink()
    state_file.mkdir()
    try:
        for _ in range(3):
            assert monitor.poll().commit_error is None  # nothing to commit: the poll is fine
        problems = monitor.guard.problems()
        assert [p.cause for p in problems] == ["commit"] and problems[0].failures == 3
        assert "Is a directory" in monitor.guard.reason()
    finally:
        state_file.rmdir()
    monitor.poll()
    assert monitor.guard.reason() == "" and state_file.is_file()
    monitor.close()


def test_stray_temporary_files_go_regular_files_only(tmp_path: Path) -> None:
    (tmp_path / ".tmp-abc12345").write_text("{")
    (tmp_path / ".tmp-dir").mkdir()  # not ours: a directory is never a temporary file
    (tmp_path / ".tmp-link").symlink_to(tmp_path / "state.json")
    (tmp_path / "state.json").write_text("{}")
    (tmp_path / "x.tmp-1").write_text("")
    assert store.remove_stray_temporaries(str(tmp_path)) == [".tmp-abc12345"]
    assert sorted(p.name for p in tmp_path.iterdir()) == [
        ".tmp-dir", ".tmp-link", "state.json", "x.tmp-1"]
    assert store.remove_stray_temporaries(str(tmp_path / "absent")) == []


def test_atomic_write_leaves_the_new_file_whole_and_no_temporary(tmp_path: Path) -> None:
    target = tmp_path / "state.json"
    target.write_text("old")
    store.atomic_write(str(target), b"new", 0o640)
    assert target.read_bytes() == b"new"
    assert target.stat().st_mode & 0o777 == 0o640
    assert [p.name for p in tmp_path.iterdir()] == ["state.json"]


def test_a_taken_temporary_name_is_not_reused(tmp_path: Path,
                                             monkeypatch: pytest.MonkeyPatch) -> None:
    names = iter([b"\x00" * 6, b"\x00" * 6, b"\x01" * 6])
    monkeypatch.setattr(os, "urandom", lambda n: next(names))
    (tmp_path / ".tmp-000000000000").write_text("another writer's")
    fd, path = store._make_temporary(str(tmp_path))
    os.close(fd)
    assert path == str(tmp_path / ".tmp-010101010101")
    assert (tmp_path / ".tmp-000000000000").read_text() == "another writer's"
    assert (tmp_path / ".tmp-010101010101").stat().st_mode & 0o777 == 0o600


def test_event_ids_are_random_version_4_uuids() -> None:
    ids = {store.event_id() for _ in range(200)}
    assert len(ids) == 200
    for text in ids:
        parsed = uuid.UUID(hex=text)
        assert parsed.hex == text and parsed.version == 4
        assert parsed.variant == uuid.RFC_4122
