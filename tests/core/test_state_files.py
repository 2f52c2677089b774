"""Corrupt state files and damaged journals.

Every unusable state file gives a fresh start and is moved aside once (``.corrupt-<time>``);
no value in it can cost the journal an entry; a torn tail of the last unfinished commit is told
apart from damage to committed lines. Real files in ``tmp_path`` throughout."""

from __future__ import annotations

import copy
import json
import logging
import os
from pathlib import Path
from typing import Any, Callable

import pytest

from nichealthd.core.events import HealthEvent, make_event
from nichealthd.core.state import MonitorState
from nichealthd.runtime.monitor import Monitor
from nichealthd.runtime.startup import load_topology
from nichealthd.sources.config_file import load_config
from nichealthd.storage.store import Journal, load_state, save_state

from .. import simtrees
from .builders import at

TS = "2026-01-02T03:04:05Z"
VALID: dict[str, Any] = {
    "version": 1,
    "boot_id": "b",
    "counter_snapshots": {"mlx5_0:1:symbol_error": {"value": 5, "timestamp": TS}},
    "breach_flags": {"mlx5_0:1:link_downed": {"breached": True, "check_name": "c",
                                              "is_fatal": True, "since": TS}},
    "port_states": {"mlx5_0:1": {"state": "ACTIVE", "physical_state": "LinkUp",
                                 "device": "mlx5_0", "port": 1, "link_layer": "InfiniBand",
                                 "health": "healthy", "since": TS, "misses": 0}},
    "known_devices": ["mlx5_0"],
    "device_misses": {"mlx5_0": 0},
    "missing_devices": {"mlx5_9": {"link_layer": "Ethernet", "since": TS}},
    "card_anomalies": {"0000:01": {"role": "compute", "active": 1, "expected": 2,
                                   "check_name": "c", "since": TS}},
    "saturated_counters": {"mlx5_0:1:symbol_error": TS},
    "group_modes": {"compute": 2},
    "event_seq": 7,
}


def edit(path: list[Any], value: Any) -> Callable[[], bytes]:
    """The valid state with the value at ``path`` replaced."""
    def make() -> bytes:
        data = copy.deepcopy(VALID)
        node = data
        for key in path[:-1]:
            node = node[key]
        node[path[-1]] = value
        return json.dumps(data).encode()
    return make


def raw(text: bytes) -> Callable[[], bytes]:
    return lambda: text


CS, BF, PS = ("counter_snapshots", "mlx5_0:1:symbol_error"), (
    "breach_flags", "mlx5_0:1:link_downed"), ("port_states", "mlx5_0:1")
CORRUPT: dict[str, Callable[[], bytes]] = {
    "empty": raw(b""),
    "whitespace": raw(b" \n"),
    "truncated": lambda: json.dumps(VALID).encode()[:50],
    "invalid-utf8": raw(b'{"boot_id": "\xff\xfe"}'),
    "nul-bytes": raw(b"\x00" * 64),
    "top-level-list": raw(b"[]"),
    "top-level-string": raw(b'"state"'),
    "top-level-null": raw(b"null"),
    "deep-list": raw(b"[" * 100_000 + b"]" * 100_000),
    "deep-object": raw(b'{"a":' * 100_000 + b"1" + b"}" * 100_000),
    "deep-in-key": lambda: json.dumps({**VALID, "boot_id": None}).encode().replace(
        b"null", b"[" * 50_000 + b"]" * 50_000),
    "version-99": edit(["version"], 99),
    "version-string": edit(["version"], "1"),
    "boot-id-int": edit(["boot_id"], 1),
    "event-seq-negative": edit(["event_seq"], -1),
    "event-seq-huge": edit(["event_seq"], 2**70),
    "event-seq-float": edit(["event_seq"], 3.5),
    "event-seq-nan": lambda: json.dumps(VALID).encode().replace(b'"event_seq": 7',
                                                                b'"event_seq": NaN'),
    "event-seq-infinity": lambda: json.dumps(VALID).encode().replace(
        b'"event_seq": 7', b'"event_seq": Infinity'),
    "event-seq-bool": edit(["event_seq"], True),
    "event-seq-string": edit(["event_seq"], "7"),
    "event-seq-5000-digits": lambda: json.dumps(VALID).encode().replace(
        b'"event_seq": 7', b'"event_seq": ' + b"9" * 5000),
    "snapshots-list": edit(["counter_snapshots"], []),
    "snapshot-not-object": edit([*CS], 5),
    "snapshot-value-negative": edit([*CS, "value"], -5),
    "snapshot-value-huge": edit([*CS, "value"], 2**80),
    "snapshot-value-string": edit([*CS, "value"], "5"),
    "snapshot-timestamp-int": edit([*CS, "timestamp"], 0),
    "snapshot-timestamp-garbage": edit([*CS, "timestamp"], "yesterday"),
    "snapshot-timestamp-year-1": edit([*CS, "timestamp"], "0001-01-01T00:00:00Z"),
    "snapshot-timestamp-year-1-offset": edit([*CS, "timestamp"], "0001-01-01T00:00:00+05:00"),
    "snapshot-timestamp-year-9999-offset": edit([*CS, "timestamp"],
                                                "9999-12-31T23:59:59-05:00"),
    "snapshot-timestamp-1969": edit([*CS, "timestamp"], "1969-12-31T23:59:59Z"),
    "breach-is-fatal-string": edit([*BF, "is_fatal"], "no"),
    "breach-breached-int": edit([*BF, "breached"], 0),
    "breach-since-null": edit([*BF, "since"], None),
    "breach-missing-check": lambda: json.dumps({**VALID, "breach_flags": {
        "k": {"is_fatal": True, "since": TS}}}).encode(),
    "port-number-negative": edit([*PS, "port"], -1),
    "port-number-huge": edit([*PS, "port"], 2**40),
    "port-misses-negative": edit([*PS, "misses"], -3),
    "port-state-int": edit([*PS, "state"], 4),
    "known-devices-object": edit(["known_devices"], {"mlx5_0": 1}),
    "known-device-int": edit(["known_devices"], [1]),
    "device-misses-float": edit(["device_misses", "mlx5_0"], 1.5),
    "missing-device-since-bad": edit(["missing_devices", "mlx5_9", "since"], "2026-13-40"),
    "card-expected-negative": edit(["card_anomalies", "0000:01", "expected"], -2),
    "saturated-int": edit(["saturated_counters", "mlx5_0:1:symbol_error"], 17),
    "group-mode-null": edit(["group_modes", "compute"], None),
}


def test_the_valid_base_state_loads_and_round_trips(tmp_path: Path) -> None:
    path = tmp_path / "state.json"
    path.write_bytes(json.dumps(VALID).encode())
    loaded = load_state(str(path))
    assert not loaded.fresh and loaded.problem is None
    save_state(str(path), loaded.state)
    assert load_state(str(path)).state == loaded.state


@pytest.mark.parametrize("kind", sorted(CORRUPT))
def test_a_corrupt_state_file_is_moved_aside_once_and_starts_fresh(
        tmp_path: Path, kind: str) -> None:
    path = tmp_path / "state.json"
    content = CORRUPT[kind]()
    path.write_bytes(content)
    loaded = load_state(str(path))  # never raises, whatever the content
    assert loaded.fresh and loaded.state == MonitorState()
    assert loaded.problem and "corrupt" in loaded.problem and "moved aside" in loaded.problem
    assert not path.exists()
    aside = list(tmp_path.glob("state.json.corrupt-*"))
    assert len(aside) == 1 and aside[0].read_bytes() == content
    assert str(aside[0]) in loaded.problem
    # The next start finds no file: a fresh start without another warning.
    again = load_state(str(path))
    assert again.fresh and again.problem is None


@pytest.mark.parametrize("kind", ["directory", "fifo"])
def test_a_state_path_that_is_not_a_file_is_moved_aside(tmp_path: Path, kind: str) -> None:
    path = tmp_path / "state.json"
    if kind == "directory":
        path.mkdir()
        (path / "inside").write_text("x")
    else:
        os.mkfifo(path)  # opening it for reading would block forever
    loaded = load_state(str(path))
    assert loaded.fresh and "not a regular file" in (loaded.problem or "")
    assert not path.exists() and len(list(tmp_path.glob("state.json.corrupt-*"))) == 1


@pytest.mark.parametrize("year", [1970, 1999, 2026, 9999])
def test_every_timestamp_the_loader_accepts_is_written_back_loadable(
        tmp_path: Path, year: int) -> None:
    path = tmp_path / "state.json"
    stamp = f"{year:04d}-06-01T12:00:00.123456Z"
    path.write_bytes(edit([*CS, "timestamp"], stamp)())
    loaded = load_state(str(path))
    assert not loaded.fresh, loaded.problem
    save_state(str(path), loaded.state)
    assert load_state(str(path)).state == loaded.state


# ---------------------------------------------------------------- the journal


def event(n: int) -> HealthEvent:
    return make_event("InfiniBandStateCheck", fatal=False, healthy=False, message=f"e{n}",
                      error_code="link_downed", entities=(("NIC", "mlx5_0"),), at=at(n))


def committed_journal(directory: Path, count: int) -> Journal:
    journal = Journal(str(directory))
    journal.recover(0)
    journal.append(journal.stamp([event(n) for n in range(1, count + 1)], 1, "node",
                                 "STORE_ONLY"))
    journal.committed()
    return journal


def lines(journal: Journal) -> list[bytes]:
    return Path(journal.path).read_bytes().split(b"\n")[:-1]


def test_a_torn_tail_of_the_unfinished_commit_is_reported_as_such(tmp_path: Path) -> None:
    journal = committed_journal(tmp_path, 3)
    with open(journal.path, "ab") as handle:
        handle.write(b'{"seq":4,"event":{"ver')  # the crash cut the next append
    again = Journal(str(tmp_path))
    assert again.recover(3) == 1
    report = again.last_recovery
    assert (report.unfinished, report.damaged, report.kept) == (1, 0, 3)


@pytest.mark.parametrize("damage", ["garbage-in-the-middle", "truncated-middle-line",
                                    "truncated-last-committed-line", "duplicate-seq"])
def test_damage_to_committed_lines_is_reported_as_damage(tmp_path: Path, damage: str) -> None:
    journal = committed_journal(tmp_path, 5)
    content = lines(journal)
    if damage == "garbage-in-the-middle":
        content[2] = b"\x00\x01garbage"
    elif damage == "truncated-middle-line":
        content[2] = content[2][:20]
    elif damage == "duplicate-seq":
        content.insert(3, content[1])
    data = b"\n".join(content) + b"\n"
    if damage == "truncated-last-committed-line":
        data = data[:-30]  # the state says 5 was committed: this is not an unfinished commit
    Path(journal.path).write_bytes(data)
    again = Journal(str(tmp_path))
    again.recover(5)
    report = again.last_recovery
    assert report.unfinished == 0 and report.damaged == 1
    expected = [1, 2, 3, 4] if damage == "truncated-last-committed-line" else (
        [1, 2, 3, 4, 5] if damage == "duplicate-seq" else [1, 2, 4, 5])
    assert [e.seq for e in again.history(10)] == expected and report.kept == len(expected)
    assert report.copy and Path(report.copy).read_bytes() == data  # the evidence is kept


@pytest.mark.parametrize("event_seq", [-1, -100, 2**63, 2**80, "3", 2.0, None])
def test_no_event_seq_in_the_state_file_drops_journal_entries(
        event_seq: Any, caplog: pytest.LogCaptureFixture) -> None:
    """Through the monitor's start: an implausible value makes the state corrupt."""
    root = simtrees.take("dgx-h100")
    cfg = load_config(str(root / "nichealthd.toml"))
    os.makedirs(cfg.state_dir, exist_ok=True)
    committed_journal(Path(cfg.state_dir), 187)
    data = copy.deepcopy(VALID)
    data["event_seq"] = event_seq
    Path(cfg.state_file).write_text(json.dumps(data))
    monitor = Monitor(cfg, load_topology(cfg))
    with caplog.at_level(logging.WARNING):
        monitor.start()
    assert [e.seq for e in monitor.journal.history(1000)] == list(range(1, 188))
    assert monitor.baseline and monitor.state.event_seq == 187
    assert "unfinished commit" not in caplog.text
    assert "is corrupt" in caplog.text


@pytest.mark.parametrize("event_seq", [0, 50, 100])
def test_a_state_contradicting_the_journal_is_corrupt_not_the_journal(
        event_seq: int, caplog: pytest.LogCaptureFixture) -> None:
    """An unfinished commit starts right after the committed sequence number; a state whose
    event_seq points before a gap in the journal cannot be right."""
    root = simtrees.take("dgx-h100")
    cfg = load_config(str(root / "nichealthd.toml"))
    os.makedirs(cfg.state_dir, exist_ok=True)
    journal = committed_journal(Path(cfg.state_dir), 187)
    # Keep only seq 120..187, as compaction does.
    Path(journal.path).write_bytes(b"\n".join(lines(journal)[119:]) + b"\n")
    data = copy.deepcopy(VALID)
    data["event_seq"] = event_seq
    Path(cfg.state_file).write_text(json.dumps(data))
    monitor = Monitor(cfg, load_topology(cfg))
    with caplog.at_level(logging.WARNING):
        monitor.start()
    assert [e.seq for e in monitor.journal.history(1000)] == list(range(120, 188))
    assert monitor.baseline and "does not match the journal" in caplog.text
    assert "unfinished commit" not in caplog.text
    assert list(Path(cfg.state_dir).glob("state.json.corrupt-*"))
