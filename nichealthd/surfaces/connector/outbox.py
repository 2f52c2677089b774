"""The connector's outbox in the journal: its consumer name and its bound, without grpcio.

Shared by the sender (:mod:`.sender`) and by the outbox kept without it (:mod:`.held`), so
that a host lacking the gRPC library bounds its outbox exactly as one whose connector is down.
"""

from __future__ import annotations

import logging

from ...core.config import Config
from ...core.events import format_timestamp
from ...storage.store import Journal, JournalEntry
from .status import NAME

CONSUMER = NAME  # its journal cursor, and its name on the status channel


def trim_outbox(journal: Journal, config: Config, state: str, dropped_before: int,
                log: logging.Logger, level: int = logging.WARNING) -> list[JournalEntry]:
    """Apply the outbox bound (``outboxMaxEvents``, ``outboxMaxBytes``: the oldest degraded
    events go first, see :meth:`Journal.trim_backlog`) and log what it dropped at ``level``.
    ``state`` is the connector's, for the log line; ``dropped_before`` the count so far."""
    dropped = journal.trim_backlog(CONSUMER, config.outbox_max_events, config.outbox_max_bytes)
    if dropped:
        log.log(level, "outbox over its bound (%d events or %d bytes) while the platform "
                       "connector is %s: dropped the %d oldest degraded event(s) (seq %d..%d, "
                       "committed %s..%s); fatal and healthy events are kept; %d dropped since "
                       "start", config.outbox_max_events, config.outbox_max_bytes, state,
                len(dropped), dropped[0].seq, dropped[-1].seq,
                format_timestamp(dropped[0].event.generated_at),
                format_timestamp(dropped[-1].event.generated_at),
                dropped_before + len(dropped))
    return dropped
