"""The state the adapter families keep: consecutive misses and latched conditions.

Each adapter family owns one :class:`LatchSection` subclass whose state-file keys carry the
family's prefix (``char_device_misses``, ``char_device_latched``, ...). A key names one
condition: ``<device>:uverbs``, ``<device>:<port>:umad``, ``<device>:firmware``,
``<device>:<port>:netdev``, or a PCI address for a function without an RDMA device. The
helpers here also hold what the families share: the driver-event hold and the rename of
device-keyed tables.
"""

from __future__ import annotations

from dataclasses import dataclass, field, replace
from datetime import datetime
from typing import Mapping, TypeVar

from ..codec import Section, stored
from ..events import BACKDATE, HealthEvent
from ..family import Cycle
from .identity import renamed_counter_table
from .link_state import LINK_STATE

L = TypeVar("L", bound="LatchSection")

ENTITY_PCI = "PCI"  # entity type of a PCI function (its address, 0000:47:00.0)


@dataclass(frozen=True)
class Latched:
    """A reported condition: since when, and what it was about (shown, and named again by
    the recovery event)."""

    since: datetime
    detail: str = field(default="", metadata=stored(legacy=""))


@dataclass
class LatchSection(Section):
    """Consecutive misses per key, the latched (reported) conditions, and whether the
    family's check-scoped clear of a fresh start was sent. A subclass names its keys by its
    ``LAYOUT``'s prefix (``char_device_misses``, ...)."""

    misses: dict[str, int] = field(default_factory=dict)
    latched: dict[str, Latched] = field(default_factory=dict)
    cleared: bool = False

    def miss(self, key: str, needed: int, now: datetime, detail: str) -> bool:
        """One more read that misses ``key``: counted, and latched (True) at the ``needed``-th
        in a row, so a missing file or a down link read once is not yet a condition."""
        misses = self.misses.get(key, 0) + 1
        if misses < needed:
            self.misses[key] = misses
            return False
        self.misses.pop(key, None)
        self.latched[key] = Latched(now, detail)
        return True

    def renamed(self: L, renames: Mapping[str, str]) -> L:
        """Device-keyed entries (``<device>:...``) under the devices' new names."""
        return replace(self, misses=renamed_counter_table(self.misses, renames),
                       latched=renamed_counter_table(self.latched, renames))


def held(cycle: Cycle) -> bool:
    """No verdict this poll: the enumeration was uncertain, or a driver reload or unload is
    in progress (the link-state family's ``driver_event``) — registrations come and go
    while the driver is away, and a missing device node then says nothing about the card."""
    return (not cycle.snapshot.complete
            or cycle.previous.section(LINK_STATE).driver_event is not None)


def scoped_clear(check: str, now: datetime, why: str) -> HealthEvent:
    """A healthy event with no entities for ``check`` (clears the check's whole condition on
    NVSentinel's platform connector), strictly older than the rest of its poll."""
    return HealthEvent(check_name=check, is_fatal=False, is_healthy=True,
                       message=f"{check}: {why} - clearing conditions of earlier boots",
                       recommended_action="NONE", error_code=(), entities=(),
                       generated_at=now - BACKDATE)
