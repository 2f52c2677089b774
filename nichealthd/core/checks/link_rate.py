"""The link-rate family: a port slower than the mode of its peers, with no SKU table.

Peers are the ACTIVE ports of monitored devices of the same role, ``hca_type``, ``board_id``
and link layer. A port whose rate (sysfs ``rate``, ``400 Gb/sec (4X NDR)``: speed, lanes and
generation) is below the group's mode gets one non-fatal event under the layer's degradation
check, ``errorCode`` ``link_rate``, naming both rates; one healthy event when it is back at the
mode (or the mode came down to it). A group of fewer than two ports or with a tied mode gives no
verdict, and neither does a port that is not ACTIVE: what was told stands until a verdict
changes it. gpud, Azure's checks and NHC compare with a per-SKU table; the peers are the table.
"""

from __future__ import annotations

import functools
import re
from collections import Counter
from dataclasses import dataclass, field, replace
from datetime import datetime
from typing import Iterable, Mapping, NamedTuple, Optional

from ..codec import Section, stored
from ..config import ETH_DEGRADATION_CHECK, IB_DEGRADATION_CHECK
from ..events import HealthEvent, make_event, port_entities
from ..family import (
    READS_DEVICES,
    READS_PORTS,
    CheckFamily,
    Condition,
    Cycle,
    PortId,
    Series,
    Verdict,
)
from ..jsontypes import Json
from ..model import DeviceSnapshot, PortSnapshot
from ..state import DEGRADED
from ..topology import Role
from .ports import is_active, port_label

CODE_LINK_RATE = "link_rate"
CHECK_OF = {"InfiniBand": IB_DEGRADATION_CHECK, "Ethernet": ETH_DEGRADATION_CHECK}
# "400 Gb/sec (4X NDR)", "2.5 Gb/sec (1X SDR)", "100 Gb/sec" (RoCE without the lanes).
_RATE = re.compile(r"\s*([0-9]+(?:\.[0-9]+)?) Gb/sec(?: \(([0-9]+)X ?([A-Za-z0-9]*)\))?\s*")


class Rate(NamedTuple):
    """A parsed ``rate``: Gb/s, lanes (0 unknown), and the text as the kernel wrote it."""

    gbps: float
    lanes: int
    text: str


@functools.lru_cache(maxsize=64)  # a host shows a handful of rates, read every poll
def parse_rate(raw: Optional[str]) -> Optional[Rate]:
    """``"400 Gb/sec (4X NDR)\\n"`` -> Rate(400.0, 4, "400 Gb/sec (4X NDR)"); None if not one."""
    if not raw:
        return None
    match = _RATE.fullmatch(raw)
    if match is None:
        return None
    return Rate(float(match.group(1)), int(match.group(2) or 0), raw.strip())


@dataclass(frozen=True)
class RateRecord:
    """A port told it runs below its peers: its rate and theirs then."""

    device: str
    port: int = field(metadata=stored(high=2**16))
    link_layer: str
    rate: str
    peers: str
    since: datetime


@dataclass
class RateSection(Section):
    """The ports told degraded (port key -> record); a value of one poll."""

    rate_degraded: dict[str, RateRecord] = field(default_factory=dict)


class Unchanged(NamedTuple):
    """The inputs of a poll whose verdict changed nothing: the monitored devices and their
    roles (the same objects while their files read the same bytes) and the section. A poll
    with these inputs again groups the same ports with the same rates, so it changes nothing
    either (only what changed is judged)."""

    devices: tuple[DeviceSnapshot, ...]
    roles: tuple[Role, ...]
    section: RateSection


class LinkRate(CheckFamily[RateSection, None, Unchanged]):
    """Rate and width below the mode of same-role, same-card-model peers."""

    id = "link_rate"
    order = 40
    keys = ("rate_degraded",)
    section_type = RateSection
    reads = frozenset({READS_DEVICES, READS_PORTS})
    port_field_types = {"rate_degraded": "?bool", "peer_rate": "?string"}

    def evaluate(self, previous: RateSection, cycle: Cycle, volatile: Optional[Unchanged]
                 ) -> Verdict[RateSection, None, Unchanged]:
        """Group the ACTIVE ports, find each group's mode, judge every port of a group;
        nothing if its inputs are those of a poll that changed nothing."""
        devices = cycle.monitored
        roles = tuple(cycle.roles[device.name] for device in devices)
        if (volatile is not None and volatile.section is previous
                and _same(volatile.devices, devices) and _same(volatile.roles, roles)):
            return Verdict(previous)
        told = previous.rate_degraded
        changed: dict[str, Optional[RateRecord]] = {}
        events: list[tuple[str, HealthEvent]] = []
        for members in _groups(cycle).values():
            mode = _mode(members)
            if mode is None:
                continue
            for name, number, layer, rate in members:
                key = f"{name}_{number}"
                slow = rate.gbps < mode.gbps
                check = CHECK_OF[layer]
                if slow and key not in told:
                    changed[key] = RateRecord(name, number, layer, rate.text, mode.text,
                                              cycle.now)
                    message = (f"{port_label(name, number, layer)}: LinkRate degraded - runs at "
                               f"{rate.text}, its peers at {mode.text}")
                elif not slow and key in told:
                    changed[key] = None
                    message = (f"{port_label(name, number, layer)}: LinkRate healthy - runs at "
                               f"{rate.text} like its peers")
                else:
                    continue
                if check in cycle.enabled:
                    events.append((name, make_event(
                        check, fatal=False, healthy=not slow, message=message,
                        error_code=CODE_LINK_RATE, entities=port_entities(name, number),
                        at=cycle.now)))
        if not changed:
            return Verdict(previous, volatile=Unchanged(devices, roles, previous))
        return Verdict(_changed(told, changed), tuple(events))

    def rename(self, section: RateSection, renames: Mapping[str, str], now: datetime
               ) -> RateSection:
        """Its ports of a renamed device under the new name."""
        table = section.rate_degraded
        if not any(r.device in renames for r in table.values()):
            return section
        out = {k: r for k, r in table.items() if r.device not in renames}
        out.update((f"{renames[r.device]}_{r.port}", replace(r, device=renames[r.device]))
                   for r in table.values() if r.device in renames)
        return RateSection(out)

    def judges(self, device: DeviceSnapshot, port: PortSnapshot) -> bool:
        """The InfiniBand and RoCE ports (compared with their peers)."""
        return (port.link_layer or "") in CHECK_OF

    def conditions(self, section: RateSection, picture: None) -> Iterable[Condition]:
        for key, record in sorted(section.rate_degraded.items()):
            yield Condition(DEGRADED, f"rate {record.rate} below peers' {record.peers}",
                            (record.device, record.port),
                            alone=f"{key} rate {record.rate} below peers' {record.peers}",
                            code=CODE_LINK_RATE)

    def port_fields(self, section: RateSection, picture: None, port: PortId
                    ) -> Mapping[str, Json]:
        record = section.rate_degraded.get(f"{port[0]}_{port[1]}")
        return {"rate_degraded": record is not None,
                "peer_rate": record.peers if record else ""}

    def series(self, section: RateSection, picture: None) -> Iterable[Series]:
        yield Series("port_rate_degraded",
                     "1 while a port runs below the rate of its peers (same role and card model)",
                     "gauge", ("device", "port", "rate", "peer_rate"),
                     tuple(((r.device, str(r.port), r.rate, r.peers), 1.0)
                           for _, r in sorted(section.rate_degraded.items())))


def _mode(members: list[tuple[str, int, str, Rate]]) -> Optional[Rate]:
    """The most common rate of a group of at least two; None when the top is tied."""
    if len(members) < 2:
        return None
    counts = Counter(m[3].gbps for m in members).most_common(2)
    if len(counts) > 1 and counts[0][1] == counts[1][1]:
        return None
    texts = Counter(m[3] for m in members if m[3].gbps == counts[0][0])
    return texts.most_common(1)[0][0]


Member = tuple[str, int, str, Rate]  # (device, port number, link layer, rate)


def _groups(cycle: Cycle) -> dict[tuple[str, ...], list[Member]]:
    """The ACTIVE ports with a rate, by (role, HCA type, board, link layer): the peers a
    port's rate is compared with."""
    groups: dict[tuple[str, ...], list[Member]] = {}
    for device in cycle.monitored:
        role = cycle.roles[device.name].role
        for port in device.ports:
            rate = parse_rate(port.rate)
            layer = port.link_layer or ""
            if rate is None or layer not in CHECK_OF \
                    or not is_active(port.state, port.phys_state):
                continue
            group = (role, device.hca_type or "", device.board_id or "", layer)
            groups.setdefault(group, []).append((device.name, port.port, layer, rate))
    return groups


def _same(these: tuple[object, ...], those: tuple[object, ...]) -> bool:
    """The same objects, in the same order."""
    return len(these) == len(those) and all(a is b for a, b in zip(these, those))


def _changed(told: Mapping[str, RateRecord], changed: Mapping[str, Optional[RateRecord]]
             ) -> RateSection:
    """The section with this poll's changes: a record for a newly slow port, none for one
    back at its peers' rate."""
    section = RateSection(dict(told))
    for port_key, record in changed.items():
        if record is None:
            del section.rate_degraded[port_key]
        else:
            section.rate_degraded[port_key] = record
    return section


FAMILY = LINK_RATE = LinkRate()
