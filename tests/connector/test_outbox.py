"""The outbox on top of the journal: the bound (degraded dropped oldest first, fatal and
healthy kept), persistence of drops and cursors, and sharing the journal with the poller."""

from __future__ import annotations

import json
import logging
import threading
from pathlib import Path
from types import SimpleNamespace
from typing import Callable

import pytest

from nichealthd.storage.store import Journal
from nichealthd.surfaces.connector.held import HeldOutbox
from nichealthd.surfaces.connector.outbox import CONSUMER
from nichealthd.surfaces.connector.status import UNAVAILABLE, ConnectorStatus

from .connector_fixtures import (
    FakeConnector,
    Outbox,
    degraded,
    fast_sender,
    fatal,
    healthy,
    make_config,
)


def reload(config_dir: str) -> Journal:
    journal = Journal(config_dir)
    journal.recover(None)
    return journal


def test_bound_drops_oldest_degraded_first_and_keeps_fatal_and_healthy(
        tmp_path: Path) -> None:
    config = make_config(tmp_path, "unix:/nonexistent")
    outbox = Outbox(config)
    kinds = []
    for i in range(30):  # interleaved: fatal, degraded x3, healthy
        kinds += [fatal(i), degraded(3 * i), degraded(3 * i + 1), degraded(3 * i + 2),
                  healthy(i)]
    entries = outbox.commit(kinds)  # 150 pending
    dropped = outbox.journal.trim_backlog(CONSUMER, max_events=100, max_bytes=1 << 30)
    # down to the 90 % low-water mark: 60 of 150 go, all degraded, oldest first
    assert len(dropped) == 60
    assert all(e.event.severity == "degraded" for e in dropped)
    degraded_seqs = [e.seq for e in entries if e.event.severity == "degraded"]
    assert [e.seq for e in dropped] == degraded_seqs[:60]
    left = outbox.journal.pending(CONSUMER)
    assert len(left) == 90
    assert sum(e.event.severity != "degraded" for e in left) == 60  # every fatal + healthy
    assert [e.seq for e in left] == sorted(e.seq for e in left)
    # the drop is durable: a restart sees the same backlog
    assert [e.seq for e in reload(config.state_dir).pending(CONSUMER)] == [e.seq for e in left]
    # within the bound: nothing happens
    assert outbox.journal.trim_backlog(CONSUMER, 100, 1 << 30) == []


def test_bound_never_drops_fatal_or_healthy_even_when_over(tmp_path: Path) -> None:
    config = make_config(tmp_path, "unix:/nonexistent")
    outbox = Outbox(config)
    outbox.commit([fatal(i) for i in range(50)] + [healthy(i) for i in range(50)] +
                  [degraded(1)])
    dropped = outbox.journal.trim_backlog(CONSUMER, max_events=10, max_bytes=1 << 30)
    assert [e.event.severity for e in dropped] == ["degraded"]
    assert outbox.journal.depth(CONSUMER) == 100


def test_dropping_the_newest_entry_never_reuses_its_sequence_number(tmp_path: Path) -> None:
    """Fatal events alone can exceed the bound, so every degraded one goes — the newest too."""
    config = make_config(tmp_path, "unix:/nonexistent")
    outbox = Outbox(config)
    entries = outbox.commit([fatal(i) for i in range(20)] + [degraded(1)])
    assert outbox.journal.trim_backlog(CONSUMER, 10, 1 << 30) == entries[-1:]
    assert outbox.journal.last_seq == entries[-1].seq
    assert outbox.commit([fatal(99)])[0].seq == entries[-1].seq + 1


def test_byte_bound(tmp_path: Path) -> None:
    config = make_config(tmp_path, "unix:/nonexistent")
    outbox = Outbox(config)
    outbox.commit([degraded(i) for i in range(100)] + [fatal(1)])
    size = outbox.journal.backlog_bytes(CONSUMER)
    assert size == Path(outbox.journal.path).stat().st_size
    dropped = outbox.journal.trim_backlog(CONSUMER, max_events=10**6, max_bytes=size // 2)
    assert outbox.journal.backlog_bytes(CONSUMER) <= size // 2 * 0.9
    assert len(dropped) >= 50
    assert outbox.journal.pending(CONSUMER)[-1].event.severity == "fatal"


def test_sender_applies_the_bound_and_logs_once_per_burst(
        tmp_path: Path, connector: FakeConnector, caplog: pytest.LogCaptureFixture) -> None:
    config = make_config(tmp_path, connector.target, outbox_max_events=100)
    outbox = Outbox(config)
    sender = fast_sender(config, outbox.journal)
    kept = outbox.commit([fatal(0)])
    outbox.commit([degraded(i) for i in range(150)])
    kept += outbox.commit([healthy(0)])
    # The connector's socket never existed: "not installed", the trim is said at INFO.
    with caplog.at_level(logging.INFO, "nichealthd.connector"):
        sender.step()  # the bound still applies
        sender.step()
    drops = [r for r in caplog.records if "dropped" in r.getMessage()]
    assert len(drops) == 1
    assert sender.status.dropped == 62  # 152 -> 90
    assert sender.status.outbox_depth == 90
    connector.start()
    assert sender.drain(sender.pace.clock() + 5) == 90
    ids = connector.event_ids()
    assert ids[0] == kept[0].event.event_id and ids[-1] == kept[1].event.event_id


def test_journal_shared_with_a_concurrent_poller(tmp_path: Path) -> None:
    """Appends (poller thread) racing advances, compactions and trims (sender thread) lose
    nothing: after a reload every committed, undropped event is still there, in order."""
    config = make_config(tmp_path, "unix:/nonexistent")
    outbox = Outbox(config)
    outbox.journal.history_size = 5  # compact often
    outbox.journal.register([CONSUMER, "other"])
    committed: list[int] = []
    stop = threading.Event()

    def poller() -> None:
        for i in range(400):
            entries = outbox.journal.stamp([fatal(i), degraded(i)], outbox.journal.last_seq + 1,
                                           "n", "EXECUTE_REMEDIATION")
            size = outbox.journal.append(entries)
            if i % 7 == 3:  # a failed state commit: undone
                outbox.journal.truncate(size)
                assert last_seq_on_disk() < entries[0].seq
                continue
            committed.extend(e.seq for e in outbox.journal.committed())
            # what a crash right now would recover: the commit must be on disk
            assert last_seq_on_disk() >= entries[0].seq  # the fatal one is never dropped
        stop.set()

    def last_seq_on_disk() -> int:
        lines = Path(outbox.journal.path).read_bytes().splitlines()
        return json.loads(lines[-1])["seq"] if lines else 0

    dropped: set[int] = set()
    seen: list[int] = []

    def consumer() -> None:
        while not stop.is_set():
            for name in (CONSUMER, "other"):
                pending = outbox.journal.pending(name, 10)
                if pending:
                    if name == "other":
                        seen.extend(e.seq for e in pending)
                    outbox.journal.advance(name, pending[-1].seq)
            dropped.update(e.seq for e in outbox.journal.trim_backlog(CONSUMER, 40, 1 << 30))

    failures: list[BaseException] = []

    def guarded(func: Callable[[], None]) -> Callable[[], None]:
        def run() -> None:
            try:
                func()
            except BaseException as exc:
                failures.append(exc)
                stop.set()
        return run

    threads = [threading.Thread(target=guarded(poller)), threading.Thread(target=guarded(consumer))]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(60)
    assert not failures, failures[0]
    journal = reload(config.state_dir)
    journal.register([CONSUMER, "other"])
    on_disk = [e.seq for e in journal.history(10**6)]
    assert on_disk == sorted(on_disk)
    expected_tail = [s for s in committed if s not in dropped and s > journal.cursor("other")]
    remaining = [e.seq for e in journal.pending("other")]
    assert remaining == expected_tail
    assert len(committed) == len(set(committed))  # a sequence number is never reused
    # the other consumer saw every committed event that was not dropped, once, in order
    assert seen + remaining == sorted(seen + remaining)
    assert set(committed) - dropped <= set(seen + remaining) <= set(committed)
    assert journal.cursor(CONSUMER) <= committed[-1]


def test_without_grpcio_the_outbox_is_kept_and_bounded_as_when_the_connector_is_down(
        tmp_path: Path) -> None:
    """surfaces/connector/held.py: the same bound (oldest degraded first), the depth and the
    drops in the status it publishes, state ``unavailable``."""
    config = make_config(tmp_path, "unix:/nonexistent", outbox_max_events=10)
    outbox = Outbox(config)
    published: list[ConnectorStatus] = []
    context = SimpleNamespace(journal=outbox.journal, config=lambda: config,
                              publisher=lambda name: published.append)
    held = HeldOutbox(context)  # type: ignore[arg-type]
    assert published[-1].state == UNAVAILABLE and "grpcio" in published[-1].last_error
    committed = outbox.commit([fatal(0)] + [degraded(i) for i in range(14)])
    held.on_poll(SimpleNamespace(committed=committed))  # type: ignore[arg-type]
    status = published[-1]
    assert (status.outbox_depth, status.dropped) == (9, 6)  # to 90 % of 10
    left = outbox.journal.pending(CONSUMER)
    assert left[0].event.is_fatal and [e.seq for e in left[1:]] == [
        e.seq for e in committed[7:]]
