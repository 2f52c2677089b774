"""The event log (``eventLog``): every committed event once, in order, also those committed
while the file could not be written or before a restart; a poll that committed nothing, with
everything written, costs no look at the journal."""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Optional

from nichealthd.core.events import HealthEvent, make_event
from nichealthd.storage.store import Journal, JournalEntry
from nichealthd.surfaces.eventlog import EventLog

from .builders import at


def event(n: int) -> HealthEvent:
    return make_event("InfiniBandStateCheck", fatal=True, healthy=False, message=f"e{n}",
                      error_code="link_downed", entities=(("NIC", "mlx5_0"),), at=at(n))


class CountedJournal(Journal):
    """A real journal that counts the looks at what a consumer has pending."""

    looks = 0

    def pending(self, consumer: str, limit: Optional[int] = None) -> list[JournalEntry]:
        self.looks += 1
        return super().pending(consumer, limit)


def commit(journal: Journal, *numbers: int) -> list[JournalEntry]:
    journal.append(journal.stamp([event(n) for n in numbers], numbers[0], "node", "STORE_ONLY"))
    return journal.committed()[-len(numbers):]


def written(path: Path) -> list[str]:
    return [json.loads(line)["message"] for line in path.read_text().splitlines()]


def opened(tmp_path: Path, journal: Journal) -> EventLog:
    log = EventLog(str(tmp_path / "events.jsonl"), journal)
    journal.register([log.name])
    return log


def test_what_a_restart_left_pending_is_written_by_the_first_poll(tmp_path: Path) -> None:
    journal = CountedJournal(str(tmp_path))
    journal.recover(0)
    opened(tmp_path, journal)
    commit(journal, 1, 2)  # committed, then the daemon stopped before the log was written
    again = CountedJournal(str(tmp_path))
    again.recover(2)
    log = opened(tmp_path, again)
    log.publish([])
    assert written(tmp_path / "events.jsonl") == ["e1", "e2"]
    looks = again.looks
    for _ in range(5):
        log.publish([])  # steady polls: nothing committed, nothing pending
    assert again.looks == looks
    log.publish(commit(again, 3))
    assert written(tmp_path / "events.jsonl") == ["e1", "e2", "e3"]


def test_events_committed_while_the_log_was_unwritable_follow_when_it_is_back(
        tmp_path: Path) -> None:
    journal = Journal(str(tmp_path))
    journal.recover(0)
    path = tmp_path / "events.jsonl"
    path.mkdir()  # not a file: every append fails
    log = opened(tmp_path, journal)
    log.publish(commit(journal, 1))
    log.publish([])
    assert journal.depth(log.name) == 1
    os.rmdir(path)
    log.publish([])  # nothing new committed: the kept event is written now
    assert written(path) == ["e1"] and journal.depth(log.name) == 0
