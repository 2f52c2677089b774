"""The status channel (surfaces/status.py) and what the seam publishes through it.

A consumer on the seam, given the channel, publishes its status after every step with no
code of its own: ok and caught up, failing with the reason its ``act`` gave and the event
still pending on its cursor, off while switched off; the board lists every surface, and a
richer status (the connector's) is listed as what it says it is while its own keys read it
back typed. A real journal in a temporary directory; the clocks are the ``Pace``'s.
"""

from __future__ import annotations

from dataclasses import replace
from datetime import datetime, timezone
from pathlib import Path
from typing import Sequence

from nichealthd.core.config import Config
from nichealthd.core.events import format_timestamp, make_event, port_entities
from nichealthd.storage.store import Journal, JournalEntry
from nichealthd.surfaces.connector.status import ConnectorStatus
from nichealthd.surfaces.seam import ConsumerService, JournalConsumer, Pace
from nichealthd.surfaces.status import FAILING, OFF, OK, Board, SurfaceStatus

T0 = datetime(2026, 12, 2, 8, 0, tzinfo=timezone.utc)


class Toy(JournalConsumer):
    """Takes each event while ``taking``, else fails it with a reason."""

    cursor = "toy"

    def __init__(self, journal: Journal) -> None:
        super().__init__(Config(), journal, Pace(pause=0.0, clock=lambda: 0.0, wall=lambda: T0))
        self.taking = True
        self.on = True
        self.taken: list[int] = []

    def active(self) -> bool:
        return self.on

    def act(self, entry: JournalEntry, following: Sequence[JournalEntry]) -> bool:
        if not self.taking:
            self.last_error = f"refused event {entry.seq}"
            return False
        self.taken.append(entry.seq)
        return True


def commit(journal: Journal, n: int) -> None:
    event = make_event("InfiniBandStateCheck", fatal=True, healthy=False, message="down",
                       error_code="link_downed", entities=port_entities("mlx5_0", 1), at=T0)
    entries = journal.stamp([event] * n, journal.last_seq + 1, "node-a", "EXECUTE_REMEDIATION")
    journal.append(entries)
    journal.committed()


def journal_with(tmp_path: Path, *consumers: str) -> Journal:
    journal = Journal(str(tmp_path))
    journal.recover(None)
    journal.register(consumers)
    return journal


def test_a_consumer_on_the_seam_publishes_its_status_after_every_step(tmp_path: Path) -> None:
    journal = journal_with(tmp_path, "toy")
    board = Board()
    toy = Toy(journal)
    ConsumerService(toy, board.publish)  # publishes at once: nothing pending yet
    assert board.surfaces() == (SurfaceStatus("toy", OK, "", 0, ""),)
    commit(journal, 2)
    toy.step()
    toy.publish()  # what run() does after each step
    assert board.surfaces() == (SurfaceStatus("toy", OK, "", 0, format_timestamp(T0)),)
    toy.taking = False
    commit(journal, 1)
    toy.step()
    toy.publish()
    failing = board.surfaces()[0]
    assert (failing.state, failing.last_error, failing.pending) == (FAILING, "refused event 3",
                                                                    1)
    toy.taking = True
    toy.step()
    toy.publish()
    assert board.surfaces()[0] == SurfaceStatus("toy", OK, "", 0, format_timestamp(T0))
    assert toy.taken == [1, 2, 3]
    toy.on = False
    commit(journal, 1)
    toy.step()
    toy.publish()
    assert (board.surfaces()[0].state, board.surfaces()[0].pending) == (OFF, 1)


def test_the_board_lists_every_surface_as_each_says_it_is(tmp_path: Path) -> None:
    """A richer status is listed generically and read back typed by its own keys."""
    board = Board()
    down = ConnectorStatus(state="down", last_error="UNAVAILABLE", outbox_depth=4,
                           last_sent="2026-12-02T08:00:00Z")
    board.publish("connector", down)
    board.publish("webhook", SurfaceStatus("webhook", OK, pending=0))
    assert board.typed("connector", ConnectorStatus, ConnectorStatus()) is down
    assert board.typed("slurm", ConnectorStatus, ConnectorStatus()) == ConnectorStatus()
    assert board.records() == [
        {"name": "connector", "state": "down", "last_error": "UNAVAILABLE",
         "last_success": "2026-12-02T08:00:00Z", "pending": 4},
        {"name": "webhook", "state": "ok", "last_error": "", "last_success": "",
         "pending": 0}]
    before = board.surfaces()
    board.publish("connector", replace(down, state="connected", last_error=""))
    assert before[0].state == "down"  # a reader's value is never changed under it
    assert board.surfaces()[0].state == "connected"
    # An equal status is no change: the same value, so the next poll may stay quiet
    # (runtime/service.py); a different one is a new value.
    latest = board.latest()
    board.publish("connector", replace(down, state="connected", last_error=""))
    assert board.latest() is latest
    board.publish("connector", replace(down, state="connected", last_error="", outbox_depth=5))
    assert board.latest() is not latest and board.typed(
        "connector", ConnectorStatus, ConnectorStatus()).outbox_depth == 5
