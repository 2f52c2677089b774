"""The state the adapter families keep (#16.3-6): consecutive misses and latched conditions.

Each adapter family owns one :class:`LatchSection` subclass whose state-file keys carry the
family's prefix (``char_device_misses``, ``char_device_latched``, ...). A key names one
condition: ``<device>:uverbs``, ``<device>:<port>:umad``, ``<device>:firmware``,
``<device>:<port>:netdev``, or a PCI address for a function without an RDMA device. The
helpers here also hold what the families share: the driver-event hold and the rename of
device-keyed tables.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from datetime import datetime
from typing import Any, ClassVar, Mapping, TypeVar

from ..events import BACKDATE, HealthEvent, format_timestamp
from ..family import Cycle
from ..state import parse_bool, parse_int, parse_str, parse_table, parse_when
from .identity import renamed_counter_table
from .link_state import LINK_STATE

L = TypeVar("L", bound="LatchSection")

ENTITY_PCI = "PCI"  # entity type of a PCI function (its address, 0000:47:00.0)


@dataclass(frozen=True)
class Latched:
    """A reported condition: since when, and what it was about (shown, and named again by
    the recovery event)."""

    since: datetime
    detail: str = ""


@dataclass
class LatchSection:
    """Consecutive misses per key, the latched (reported) conditions, and whether the
    family's check-scoped clear of a fresh start was sent."""

    PREFIX: ClassVar[str] = ""

    misses: dict[str, int] = field(default_factory=dict)
    latched: dict[str, Latched] = field(default_factory=dict)
    cleared: bool = False

    @classmethod
    def latch_keys(cls) -> tuple[str, str, str]:
        return (f"{cls.PREFIX}_misses", f"{cls.PREFIX}_latched", f"{cls.PREFIX}_cleared")

    @classmethod
    def keys(cls) -> tuple[str, ...]:
        """Its top-level keys of the state file (a subclass with more fields adds its own)."""
        return cls.latch_keys()

    def copy(self: L) -> L:
        return type(self)(dict(self.misses), dict(self.latched), self.cleared)

    def to_json(self) -> dict[str, Any]:
        misses, latched, cleared = self.latch_keys()
        return {
            misses: dict(sorted(self.misses.items())),
            latched: {k: {"since": format_timestamp(v.since), "detail": v.detail}
                      for k, v in sorted(self.latched.items())},
            cleared: self.cleared,
        }

    @classmethod
    def parse_latches(cls, data: Mapping[str, Any]
                      ) -> tuple[dict[str, int], dict[str, Latched], bool]:
        """The three common fields from the state file; raises on anything malformed."""
        misses, latched, cleared = cls.latch_keys()
        return (
            {parse_str(k): parse_int(v) for k, v in parse_table(data, misses).items()},
            {parse_str(k): Latched(parse_when(v["since"]), parse_str(v.get("detail", "")))
             for k, v in parse_table(data, latched).items()},
            parse_bool(data.get(cleared, False)))

    @classmethod
    def from_json(cls: type[L], data: Mapping[str, Any]) -> L:
        return cls(*cls.parse_latches(data))

    def renamed(self: L, renames: Mapping[str, str]) -> L:
        """Device-keyed entries (``<device>:...``) under the devices' new names."""
        return type(self)(renamed_counter_table(self.misses, renames),
                          renamed_counter_table(self.latched, renames), self.cleared)


def held(cycle: Cycle) -> bool:
    """No verdict this poll: the enumeration was uncertain, or a driver reload or unload is
    in progress (#19.2: the link-state family's ``driver_event``) — registrations come and go
    while the driver is away, and a missing device node then says nothing about the card."""
    return (not cycle.snapshot.complete
            or cycle.previous.section(LINK_STATE).driver_event is not None)


def scoped_clear(check: str, now: datetime, why: str) -> HealthEvent:
    """A healthy event with no entities for ``check`` (clears the check's whole condition on
    the platform: REFERENCE §1), strictly older than the rest of its poll."""
    return HealthEvent(check_name=check, is_fatal=False, is_healthy=True,
                       message=f"{check}: {why} - clearing conditions of earlier boots",
                       recommended_action="NONE", error_code=(), entities=(),
                       generated_at=now - BACKDATE)
