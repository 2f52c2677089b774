"""``--event-log``: every committed event as one JSON line, resumed from a journal cursor.

The cursor makes the log complete across crashes: an event committed just before a crash is
written by the next process. ``-`` prints to stdout (no cursor; for interactive use).
"""

from __future__ import annotations

import json
import logging
import os
import sys
from typing import Sequence

from ..storage.appendfile import append as append_file
from ..storage.store import Journal, JournalEntry

log = logging.getLogger("nichealthd.eventlog")


def consumer_name(path: str) -> str:
    return "eventlog:" + (path if path == "-" else os.path.abspath(path))


class EventLog:
    """Appends committed events to a file (or stdout)."""

    def __init__(self, path: str, journal: Journal) -> None:
        self.path = path
        self.journal = journal
        self.name = consumer_name(path)
        self._broken = False
        self._caught_up = False  # what the journal held at start is written by the first call

    @property
    def durable(self) -> bool:
        return self.path != "-"

    def idle(self) -> bool:
        """Nothing to write at a poll that commits nothing (every event written, or stdout)."""
        return self._caught_up or not self.durable

    def publish(self, committed: Sequence[JournalEntry]) -> None:
        """Write what is pending for this log (file) or what was just committed (stdout)."""
        if not self.durable:
            for entry in committed:
                sys.stdout.write(json.dumps(entry.event.to_json()) + "\n")
            sys.stdout.flush()
            return
        if not committed and self._caught_up:  # never after a failed write
            return  # nothing committed since everything was written (most polls)
        entries = self.journal.pending(self.name)
        self._caught_up = not entries
        if not entries:
            return
        data = "".join(json.dumps(e.event.to_json()) + "\n" for e in entries).encode()
        try:
            append_file(self.path, data, 0o666)  # all lines or none, fsynced (umask applies)
        except OSError as exc:
            if not self._broken:
                log.error("cannot append to event log %s: %s (events are kept and written "
                          "when it works again)", self.path, exc.strerror)
            self._broken = True
            return
        if self._broken:
            log.info("event log %s is writable again", self.path)
            self._broken = False
        self.journal.advance(self.name, entries[-1].seq)
        self._caught_up = True
