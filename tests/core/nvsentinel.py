"""What NVSentinel does with our events (its platform connector, its fault-quarantine): a model.

Only the part a sender must respect to keep a node quarantined while a fault holds:
:class:`FaultQuarantine` is NVSentinel's fault-quarantine as NVSentinel #1492 describes the bug it
fixed there ("reusing the state check name causes an ACTIVE/LinkUp state recovery to clear a
counter-originated condition in fault-quarantine even though the counter latch remains
breached"): a fatal event of ``nic-health-monitor`` quarantines the node under its
``checkName`` with its entities; a healthy event under that ``checkName`` releases every entry
whose entities include all of its own (every entry of the check when it has none), whatever
their ``errorCode``.
"""

from __future__ import annotations

from typing import Iterable

from nichealthd.core.events import HealthEvent


class FaultQuarantine:
    """The quarantine entries of one node: checkName -> the entity sets that hold it."""

    def __init__(self) -> None:
        self.held: dict[str, set[frozenset[tuple[str, str]]]] = {}

    def apply(self, events: Iterable[HealthEvent]) -> None:
        """One batch of our events (agent nic-health-monitor), in the order of their
        timestamps (as the platform sorts a batch)."""
        for event in sorted(events, key=lambda e: e.generated_at):
            entities = frozenset(event.entities)
            if event.is_healthy:
                held = self.held.get(event.check_name, set())
                for entry in [e for e in held if entities <= e]:
                    held.discard(entry)
                if not held:
                    self.held.pop(event.check_name, None)
            elif event.is_fatal:
                self.held.setdefault(event.check_name, set()).add(entities)

    @property
    def quarantined(self) -> bool:
        return bool(self.held)
