"""The InfiniBand fabrics of the host's ports: a subnet-manager outage is one fabric event.

An InfiniBand port whose link is up (phys_state LinkUp) waits in INIT until the subnet
manager (SM) configures it, and in ARMED until the SM activates it (link-state-detection §3.2:
transient states). When the SM is down or unreachable every port of the fabric that retrains stays
there: without this view each card would be "short" of its port after
``cardVerdictHoldTime`` and get a REPLACE_VM — on every node of the fabric at once.

A port's fabric is the subnet it was last seen ACTIVE on (:attr:`PortSnapshot.fabric`, GID
prefix and SM LID), remembered in the state, since a port waiting for the SM may read SM LID
0. A fabric none of whose ports on this host is ACTIVE, with one or more of them waiting
for the SM (INIT/ARMED with LinkUp), is *out*: one non-fatal host-level event names it
(``errorCode`` ``fabric_event``, the NICs on it as entities), no card verdict rests on its
waiting ports while it lasts, and a healthy event closes it when one of its ports is ACTIVE
again; the per-port rules then judge the ports still waiting (a port stuck in INIT or ARMED
among ACTIVE peers is its own fault, after ``cardVerdictHoldTime``). Ports DOWN or Disabled
are physical faults and judged as ever; the port-state events of the waiting ports (non-fatal
degradations on InfiniBand) are sent as ever.

A fabric with one port of this host (a storage fabric, one port per rail) is a fabric like
any other: its port waiting for the SM has no ACTIVE peer to show that the NIC is at fault,
and a card verdict against it would send REPLACE_VM for an SM outage. A port stuck in INIT or
ARMED is a NIC fault only beside an ACTIVE port of its own fabric.

Limit: two fabrics with the same subnet prefix (the default ``fe80::``) whose SMs have the same
LID look like one; give each fabric its own subnet prefix (the SM's ``subnet_prefix``).
"""

from __future__ import annotations

from dataclasses import replace
from datetime import datetime
from typing import Iterable, Mapping, NamedTuple, Optional

from ..config import IB_STATE_CHECK
from ..events import ENTITY_NIC, HealthEvent, make_event
from ..model import DeviceSnapshot, PortSnapshot
from .link_section import FabricEvent, LinkStateSection
from .ports import is_active, known_reading, split_state, state_name

CODE_FABRIC_EVENT = "fabric_event"

_INIT, _ARMED, _LINKUP = 2, 3, 5


class FabricVerdict(NamedTuple):
    """What :func:`judge_fabrics` decided for one poll."""

    waiting: frozenset[str]  # port keys waiting for the SM on a fabric that is out
    events: list[HealthEvent]
    notes: list[str]


def waits_for_sm(state: Optional[str], phys_state: Optional[str]) -> bool:
    """INIT or ARMED with the link up: the port is cabled and trained, the SM has not (yet)
    configured or activated it."""
    return (split_state(state)[0] in (_INIT, _ARMED)
            and split_state(phys_state)[0] == _LINKUP)


def remember_fabrics(devices: Iterable[DeviceSnapshot], state: LinkStateSection) -> None:
    """Record the fabric of every InfiniBand port that reads ACTIVE with a fabric now.

    A port back on the subnet prefix it was remembered on, under another SM LID, keeps its
    fabric: that subnet's SM failed over (the standby took the master's place), and its peers
    that stayed ACTIVE still read the old SM LID (read once per stretch of ACTIVE). Taking
    the new one would make the ports that retrained since a fabric of their own beside their
    ACTIVE peers, and one of them stuck in INIT would pass for a one-port fabric's outage
    instead of its card's fault.
    """
    for device in devices:
        for port in device.ports:
            old = state.port_fabrics.get(port.key)
            if port.fabric and old != port.fabric and not (
                    old is not None and _prefix(old) == _prefix(port.fabric)):
                state.port_fabrics[port.key] = port.fabric


def _prefix(fabric: str) -> str:
    """The subnet prefix of ``fe80:0000:0000:0000/0x1``."""
    return fabric.partition("/")[0]


def judge_fabrics(previous: LinkStateSection, state: LinkStateSection,
                  devices: Iterable[DeviceSnapshot], enabled: frozenset[str],
                  now: datetime) -> FabricVerdict:
    """The fabrics out this poll: start, keep and end their events (``state.fabric_events``).

    ``devices``: the monitored devices of the poll; a port is judged on its reading, or,
    when unreadable, on its last record.
    """
    members = _members(previous, state, devices)
    waiting: set[str] = set()
    events: list[HealthEvent] = []
    notes: list[str] = []
    for fabric, ports in sorted(members.items()):
        held = [p for p, r in ports if waits_for_sm(*r)]
        out = bool(held) and not any(is_active(*r) for _, r in ports)
        event = previous.fabric_events.get(fabric)
        if out:
            waiting.update(p.key for p in held)
            if event is None:
                events.extend(_start(_Fabric(fabric, ports), state, enabled, now, notes))
        elif event is not None:
            events.extend(_end(_Fabric(fabric, ports), event, state, now, notes))
    for fabric in [f for f in state.fabric_events if f not in members]:
        del state.fabric_events[fabric]  # its ports are gone or unknown: nothing to hold
    return FabricVerdict(frozenset(waiting), events, notes)


Members = list[tuple[PortSnapshot, tuple[Optional[str], Optional[str]]]]


def _members(previous: LinkStateSection, state: LinkStateSection,
             devices: Iterable[DeviceSnapshot]) -> dict[str, Members]:
    """The ports of each fabric with a state known (read now, else as last recorded)."""
    members: dict[str, Members] = {}
    for device in devices:
        for port in device.ports:
            fabric = state.port_fabrics.get(port.key)
            if fabric is None:
                continue
            reading = known_reading(port, previous.port_states.get(port.key))
            if reading != (None, None):
                members.setdefault(fabric, []).append((port, reading))
    return members


class _Fabric(NamedTuple):
    """One fabric (its subnet prefix and SM LID) with this host's ports on it."""

    key: str
    ports: Members


def _start(members: _Fabric, state: LinkStateSection, enabled: frozenset[str], now: datetime,
           notes: list[str]) -> list[HealthEvent]:
    """A fabric just out: noted, recorded, and reported under the InfiniBand state check
    when it is on."""
    fabric, ports = members
    event = FabricEvent(now, tuple(sorted({p.device for p, _ in ports})))
    notes.append(_message(fabric, event, ports))
    told = []
    if IB_STATE_CHECK in enabled:
        told.append(_event(fabric, event, ports, now))
        event = replace(event, reported=True)
    state.fabric_events[fabric] = event
    return told


def _end(members: _Fabric, event: FabricEvent, state: LinkStateSection, now: datetime,
         notes: list[str]) -> list[HealthEvent]:
    """A fabric back: noted, forgotten, and its recovery sent if it was reported."""
    fabric, ports = members
    del state.fabric_events[fabric]
    notes.append(f"InfiniBand fabric {_name(fabric)} is back: "
                 f"{sum(is_active(*r) for _, r in ports)} of {len(ports)} ports ACTIVE")
    return [_recovery(fabric, event, ports, now)] if event.reported else []


def _name(fabric: str) -> str:
    """``fe80:0000:0000:0000 (SM LID 0x1)``."""
    prefix, _, lid = fabric.partition("/")
    return f"{prefix} (SM LID {lid})" if lid else prefix


def _message(fabric: str, event: FabricEvent,
             ports: Members) -> str:
    states = sorted({state_name(r[0]) for _, r in ports if waits_for_sm(*r)})
    left = (f"all {len(ports)} ports of this host on it left ACTIVE together" if len(ports) > 1
            else "the one port of this host on it left ACTIVE")
    return (f"InfiniBand fabric {_name(fabric)}: {left}, {'/'.join(states)} with the link up "
            f"({', '.join(event.devices)}): the subnet manager is down, unreachable or has not "
            f"configured them - a fabric event, not a NIC fault (no card verdict while it lasts)")


def _event(fabric: str, event: FabricEvent,
           ports: Members,
           now: datetime) -> HealthEvent:
    return make_event(IB_STATE_CHECK, fatal=False, healthy=False, error_code=CODE_FABRIC_EVENT,
                      entities=tuple((ENTITY_NIC, d) for d in event.devices), at=now,
                      message=_message(fabric, event, ports))


def _recovery(fabric: str, event: FabricEvent,
              ports: Members,
              now: datetime) -> HealthEvent:
    active = sum(is_active(*r) for _, r in ports)
    return make_event(IB_STATE_CHECK, fatal=False, healthy=True, error_code=CODE_FABRIC_EVENT,
                      entities=tuple((ENTITY_NIC, d) for d in event.devices), at=now,
                      message=(f"InfiniBand fabric {_name(fabric)} is back: {active} of "
                               f"{len(ports)} ports of this host on it ACTIVE again"))


def renamed_fabric_events(events: Mapping[str, FabricEvent], renames: Mapping[str, str]
                          ) -> dict[str, FabricEvent]:
    """The events with their devices under new names (a rename, core/checks/identity.py)."""
    return {f: replace(e, devices=tuple(sorted(renames.get(d, d) for d in e.devices)))
            for f, e in events.items()}
