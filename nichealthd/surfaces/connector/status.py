"""The platform connector's status as a value: the sender thread replaces it, others read it.

A frozen dataclass rather than a dict shared between threads: a reader (the event loop, the
metrics HTTP thread) holds one consistent value, and no thread can change another's copy.
"""

from __future__ import annotations

from dataclasses import dataclass

from ..status import SurfaceStatus

NAME = "connector"  # its name on the status channel and its journal cursor (outbox.py)

UNAVAILABLE = "unavailable"  # configured, but the gRPC library is missing (connector/held.py)


@dataclass(frozen=True)
class ConnectorStatus:
    """Where delivery stands; ``state`` is ``disabled``, ``not installed`` (its socket has
    not existed since start: a host without NVSentinel), ``down``, ``connected`` or
    ``unavailable`` (the gRPC library is missing: events wait in the outbox)."""

    state: str = "disabled"
    since: str = ""
    last_error: str = ""
    outbox_depth: int = 0
    dead_letters: int = 0
    sent: int = 0
    errors: int = 0
    dropped: int = 0
    target: str = ""
    last_sent: str = ""  # when the connector last accepted a batch (RFC 3339)

    def surface_status(self) -> SurfaceStatus:
        """What it is on the status channel: its state, pending = the outbox's depth."""
        return SurfaceStatus(NAME, self.state, self.last_error, self.outbox_depth,
                             self.last_sent)
