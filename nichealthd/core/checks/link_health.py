"""What the link-state family holds about health: each port's base and its open conditions.

The base of a monitored port is the health last reported for its state (the record of
:mod:`.link_section`): DEGRADED/FATAL with the state as the reason, uncabled for a port down
at first sight, healthy otherwise; a port read but not yet judged is unknown. Ports of a
monitored device that vanished from the poll, and every recorded port of a known device
absent from it, keep their record and are shown with ``present`` False: fatal ("port
missing", "<device> missing") once the spec's three polls are past.

Its conditions are the card verdicts (a card with fewer active ports than its group's mode
makes its ports that rest on the verdict, or are unhealthy, fatal; with none of them in the
poll, the host) and the missing devices that have no port to show it on.
"""

from __future__ import annotations

from typing import Iterable, Mapping, Optional

from ..events import CODE_CARD_PORTS, CODE_DEVICE_MISSING, CODE_PORT_MISSING, CODE_PORT_STATE
from ..family import Condition, PortBase, PortId
from ..model import HostSnapshot, PortSnapshot
from ..state import DEGRADED, FATAL, HEALTHY, SUPPRESSED, UNCABLED, UNKNOWN
from ..topology import Role
from .link_section import MISSES_BEFORE_GONE, LinkStateSection, PortRecord
from .ports import is_active, state_name

_HEALTHY = PortBase(HEALTHY)  # frozen: one for every port of the poll told healthy


def port_bases(section: LinkStateSection, snapshot: HostSnapshot, roles: Mapping[str, Role]
               ) -> dict[PortId, PortBase]:
    """The base of every monitored port of the poll and of the recorded ports it no longer
    sees (see the module doc)."""
    recorded: dict[str, list[PortRecord]] = {}  # device -> its port records (one pass)
    for each in section.port_states.values():
        recorded.setdefault(each.device, []).append(each)
    bases: dict[PortId, PortBase] = {}
    parts = snapshot.parts  # its VFs have the VF role: never monitored
    for device in parts.judged:
        role = roles.get(device.name)
        if not (role and role.monitored):
            continue
        states, seen = section.port_states, set()
        for port in device.ports:
            seen.add(port.port)
            record = states.get(port.key)
            if record is not None and record.health == HEALTHY:  # nearly every port
                bases[(device.name, port.port)] = _HEALTHY
                continue
            health, why = _base(port, record)
            bases[(device.name, port.port)] = PortBase(health, tuple(why),
                                                       code=_code(health, CODE_PORT_STATE))
        for record in recorded.get(device.name, ()):
            if record.port not in seen:
                health, why = _base(None, record)
                code = CODE_PORT_STATE
                if record.misses >= MISSES_BEFORE_GONE:
                    health, why, code = FATAL, [*why, "port missing"], CODE_PORT_MISSING
                bases[(record.device, record.port)] = PortBase(health, tuple(why), False,
                                                               _code(health, code))
    absent = set(section.known_devices) - parts.names
    for record in (r for name in sorted(absent) for r in recorded.get(name, ())):
        health, why = _base(None, record)
        code = CODE_PORT_STATE
        if record.device in section.missing_devices:
            health, why, code = FATAL, [f"{record.device} missing"], CODE_DEVICE_MISSING
        else:
            misses = section.device_misses.get(record.device, 0)
            if misses:
                why = [*why, f"{record.device} not seen ({misses} polls)"]
        bases[(record.device, record.port)] = PortBase(health, tuple(why), False,
                                                       _code(health, code))
    return bases


def _code(health: str, code: str) -> str:
    """The errorCode of an unhealthy base ("" for a healthy, uncabled or unknown one)."""
    return code if health in (DEGRADED, FATAL) else ""


def _base(port: Optional[PortSnapshot], record: Optional[PortRecord]) -> tuple[str, list[str]]:
    """The port-state condition: the health last reported for the port, and why."""
    if record is None:
        if port is None or not port.readable:
            return UNKNOWN, ["state unreadable"]
        if is_active(port.state, port.phys_state):
            return HEALTHY, []
        return UNKNOWN, ["not evaluated"]
    if record.health == SUPPRESSED:
        return UNCABLED, []
    if record.health in (DEGRADED, FATAL):
        return record.health, [f"{state_name(record.state)}/{state_name(record.physical_state)}"]
    return HEALTHY, []


def base_conditions(section: LinkStateSection, snapshot: HostSnapshot,
                    bases: Mapping[PortId, PortBase]) -> Iterable[Condition]:
    """The card verdicts and the missing devices without a port to show it on (module
    doc): a port of a short card is fatal when its fatal event rested on the verdict or its
    base is unhealthy; with none of them in the poll, the host."""
    if not section.card_anomalies:
        return
    card_of = {d.name: d.card or "" for d in snapshot.devices}
    for card, anomaly in sorted(section.card_anomalies.items()):
        reason = f"card {card} has {anomaly.active} of {anomaly.expected} ports active"
        short = [key for key, base in bases.items() if card_of.get(key[0]) == card
                 and (f"{key[0]}_{key[1]}" in anomaly.ports or base.health in (DEGRADED, FATAL))]
        for key in short:
            yield Condition(FATAL, reason, key, code=CODE_CARD_PORTS)
        if not short:
            yield Condition(FATAL, reason)
    attributed = {key[0] for key, base in bases.items() if not base.present}
    for name in sorted(section.missing_devices):
        if name not in attributed:
            yield Condition(FATAL, f"{name} missing")
