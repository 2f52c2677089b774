"""What the daemon's log says of each committed event: a journal entry with fields, or a line.

Under systemd (``JOURNAL_STREAM`` set, as :mod:`.logsetup` reads it) every unhealthy event, and
the healthy ones of a poll that commits at most :data:`HEALTHY_EVENTS_LOGGED` of them, go to
journald as an entry of their own with the fields of
:func:`nichealthd.surfaces.journal_events.entry_fields` (``journalctl NICHEALTHD_DEVICE=mlx5_3``,
``journalctl -x`` with the catalog). More healthy events in one poll are the boot baselines
after a reboot: one summary line, as before. Without systemd, or while journald's socket
refuses (said once), each is the plain log line ``event <severity>: <message>``.
"""

from __future__ import annotations

import logging
import os
from typing import Optional, Sequence

from ..storage.store import JournalEntry
from ..surfaces.journal_events import JournalSender, entry_fields

log = logging.getLogger("nichealthd")

HEALTHY_EVENTS_LOGGED = 10


class EventJournal:
    """Logs the events a poll committed."""

    def __init__(self, sender: Optional[JournalSender] = None) -> None:
        if sender is None and os.environ.get("JOURNAL_STREAM"):
            sender = JournalSender()
        self.sender = sender
        self._refused = False

    def log(self, committed: Sequence[JournalEntry]) -> None:
        healthy = sum(1 for e in committed if e.event.is_healthy)
        for entry in committed:
            if not entry.event.is_healthy or healthy <= HEALTHY_EVENTS_LOGGED:
                self._one(entry)
        if healthy > HEALTHY_EVENTS_LOGGED:  # baselines after a reboot: one line
            log.info("%d healthy events committed (baselines and recoveries)", healthy)

    def _one(self, entry: JournalEntry) -> None:
        event = entry.event
        if self.sender is not None:
            if self.sender.send(entry_fields(event, entry.seq)):
                if self._refused:
                    log.info("journald takes events with their fields again")
                    self._refused = False
                return
            if not self._refused:
                log.warning("cannot send events to journald with their fields (%s): logging "
                            "them as plain lines", self.sender.failure)
                self._refused = True
        if event.is_healthy:
            log.info("event healthy: %s", event.message)
        else:
            log.warning("event %s: %s", event.severity, event.message)

    def close(self) -> None:
        if self.sender is not None:
            self.sender.close()
