"""The EFA state family's section of the state: port records, device presence, card verdicts.

Its keys are ``efa_*`` ones, each left out when empty (a host without EFA writes what it wrote
before the family). Its own module, as the link-state family's is (:mod:`.link_section`):
the family (:mod:`.efa_state`) and the card rule (:mod:`.efa_cards`) both read and write it,
and neither imports the other's section from the other.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from datetime import datetime
from typing import Any, Optional

from ..codec import Layout, Section, dump_record, load_record, stored
from ..observed import DeviceIdentity
from ..state import FATAL, HEALTHY, SUPPRESSED


@dataclass(frozen=True)
class EfaCardAnomaly:
    """A latched verdict: the card had ``active`` up ports where its group has ``expected``;
    ``ports`` are the port keys it was short of that had no event of their own."""

    role: str
    active: int = field(metadata=stored(high=1 << 16))
    expected: int = field(metadata=stored(high=1 << 16))
    since: datetime
    ports: tuple[str, ...] = field(default=(), metadata=stored(legacy=()))


def _known_health(health: str) -> str:
    if health not in (HEALTHY, FATAL, SUPPRESSED):
        raise ValueError(f"unknown EFA port health {health!r}")
    return health


@dataclass(frozen=True)
class EfaPort:
    """The health the platform was last told about an EFA port, and what was read."""

    device: str
    port: int = field(metadata=stored(high=256))
    netdev: str
    operstate: str
    carrier: Optional[int] = field(metadata=stored(high=2, legacy=None))
    # HEALTHY, FATAL or SUPPRESSED (down at first sight, no evidence)
    health: str = field(metadata=stored(after=_known_health))
    since: datetime


@dataclass(frozen=True)
class EfaDriverEvent:
    """Every known EFA device gone at once (an efa driver unload or reload; the rule of
    core/checks/driver.py)."""

    since: datetime
    devices: tuple[str, ...]
    told: bool = field(default=False, metadata=stored(legacy=False))


def _driver_event(raw: Any) -> Optional[EfaDriverEvent]:
    """None is written as ``{}`` (and so left out of the file); any empty value reads None."""
    return load_record(EfaDriverEvent, raw) if raw else None


@dataclass
class EfaStateSection(Section):
    """Port records by ``<device>_<port>``, known devices, misses, devices declared gone, the
    hardware identity of each known device, and card homogeneity (decisive modes by
    role, latched and held card verdicts by card), under ``efa_*`` keys: the empty ones are
    left out (a host without EFA writes what it wrote before this family)."""

    LAYOUT = Layout(prefix="efa_", omit_empty=True)

    ports: dict[str, EfaPort] = field(default_factory=dict)
    known_devices: list[str] = field(default_factory=list, metadata=stored(sort=True))
    device_misses: dict[str, int] = field(default_factory=dict, metadata=stored(high=1 << 20))
    missing_devices: dict[str, datetime] = field(default_factory=dict)
    driver_event: Optional[EfaDriverEvent] = field(default=None, metadata=stored(
        parse=_driver_event, format=lambda event: dump_record(event) if event else {}))
    identities: dict[str, DeviceIdentity] = field(default_factory=dict,
                                                  metadata=stored(key="device_identities"))
    group_modes: dict[str, int] = field(default_factory=dict, metadata=stored(high=1 << 16))
    card_anomalies: dict[str, EfaCardAnomaly] = field(default_factory=dict)
    card_pending: dict[str, datetime] = field(default_factory=dict)
