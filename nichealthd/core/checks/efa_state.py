"""The EFA state family: an AWS EFA port's health is its netdev's; devices that vanish.

The efa driver hard-codes ``ACTIVE`` / ``LinkUp`` (``efa_query_port`` in
drivers/infiniband/hw/efa/efa_verbs.c), so the port attributes say nothing. The netdev of the
network card does: ``operstate`` other than ``up`` or ``unknown``, or ``carrier`` 0, is DOWN,
fatal (REPLACE_VM) under ``EFAStateCheck``, as a RoCE port that goes DOWN. A ``carrier``
that cannot be read (EINVAL while the interface is administratively down) is no signal; the
``operstate`` then says "down" on its own. An EFA function without a netdev (an "efa-only"
interface) is watched for presence only.

The rules of the other adapters apply: at first sight a port already down is reported only
when its card is anomalous (link-state-detection §4.3's homogeneity over the EFA cards of its role
group,
:mod:`.efa_cards`), else it is taken as not connected ("uncabled" on every surface) and stays
quiet until it has been up once, unless its card later falls short of its peers for
``cardVerdictHoldTime`` (a fatal card event); a device is declared gone after three complete
enumerations without it (link-state-detection §7), and its return is a recovery; every EFA device
gone at once is an efa driver event, held as :mod:`.driver` holds mlx5's (``driverReloadGrace``,
``driverReloadTimeout``); a device back at the PCI function of a known one under another
name is that device renamed (its identity is recorded here, its records follow it).
The link-state family leaves EFA devices to this one (their link layer, ``Unknown``, is not
one it judges).
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from datetime import datetime
from typing import Iterable, Mapping, Optional, Sequence

from ..config import EFA_STATE_CHECK, Config
from ..events import (
    CODE_DEVICE_MISSING,
    CODE_PORT_STATE,
    ENTITY_NIC,
    HealthEvent,
    device_entities,
    format_timestamp,
    make_event,
    port_entities,
)
from ..family import (
    HOST,
    READS_DEVICES,
    READS_PORTS,
    CheckFamily,
    Condition,
    Cycle,
    PortId,
    Verdict,
)
from ..jsontypes import Json, JsonObject
from ..model import DeviceSnapshot, HostSnapshot, PortSnapshot
from ..observed import DeviceIdentity
from ..state import FATAL, HEALTHY, SUPPRESSED
from ..topology import CardCount, CardVerdict, anomalous_cards
from .efa_cards import card_counts, card_events, netdev_down, short_ports
from .efa_section import EfaDriverEvent, EfaPort, EfaStateSection
from .identity import (
    recorded_identities,
    renamed_identities,
    renamed_keys,
    renamed_names,
    renamed_port_key,
)
from .link_section import (
    MISSES_BEFORE_GONE,
    missing_device_row,
    rename_fields,
)
from .link_settings import LinkStateSettings

CODE_DRIVER_EVENT = "driver_event"
__all__ = ["EFA_STATE", "EfaPort", "EfaStateSection", "netdev_down"]


KEYS = EfaStateSection.keys()
_NOTHING_KNOWN = EfaStateSection()


def _describe(port: PortSnapshot) -> str:
    carrier = "unreadable" if port.carrier is None else str(port.carrier)
    return f"netdev {port.netdev} operstate {port.operstate or 'unknown'}, carrier {carrier}"


def _event(port: PortSnapshot, healthy: bool, now: datetime) -> HealthEvent:
    label = f"EFA port {port.device} port {port.port}"
    message = (f"{label}: healthy ({_describe(port)})" if healthy
               else f"{label}: {_describe(port)} - no connectivity")
    return make_event(EFA_STATE_CHECK, fatal=not healthy, healthy=healthy, message=message,
                      error_code=CODE_PORT_STATE, entities=port_entities(port.device, port.port),
                      at=now)


@dataclass(frozen=True)
class _PortPoll:
    """What one poll judges the ports of the present EFA devices by, and writes to: the
    sections before and after, the poll, the ports their short card is short of (the evidence
    against a port down at first sight) and the notes."""

    previous: EfaStateSection
    state: EfaStateSection
    cycle: Cycle
    short: set[str]
    notes: list[str]


class EfaState(CheckFamily[EfaStateSection, None, None]):
    """The netdev state of EFA ports, and EFA device presence."""

    id = "efa_state"
    order = 15  # after link_state, before the counters
    keys = KEYS
    section_type = EfaStateSection
    reads = frozenset({READS_DEVICES, READS_PORTS})
    device_field_types = {"missing_polls": "?int"}

    def enabled(self, config: Config) -> bool:
        return EFA_STATE_CHECK in config.checks

    def rename(self, section: EfaStateSection, renames: Mapping[str, str], now: datetime
               ) -> EfaStateSection:
        """Every record of a renamed device under its new name, as the link-state family
        does for ConnectX; its identity remembers the old name. EFA names come from
        the PCI address (rdma-core's udev rule, ``rdmap<bus>s<slot>``), so a rename is a
        changed udev rule or naming policy (``efa_0`` before rdma-core 27, ``rdmap…`` after)
        meeting devices the daemon already knows."""
        state = section.copy()
        moved = {}
        kept = {}
        for key, record in section.ports.items():
            new = renames.get(record.device)
            if new is None:
                kept[key] = record
            else:
                moved[f"{new}_{record.port}"] = replace(record, device=new)
        targets = set(renames.values())
        state.ports = {**{k: r for k, r in kept.items() if r.device not in targets}, **moved}
        state.known_devices = sorted({renames.get(n, n) for n in section.known_devices})
        state.device_misses = renamed_keys(section.device_misses, renames)
        state.missing_devices = renamed_keys(section.missing_devices, renames)
        state.identities = renamed_identities(section.identities, renames, now)
        if section.driver_event is not None:
            state.driver_event = replace(section.driver_event, devices=renamed_names(
                section.driver_event.devices, renames))
        state.card_anomalies = {
            card: replace(anomaly, ports=tuple(renamed_port_key(k, renames) for k in anomaly.ports))
            for card, anomaly in section.card_anomalies.items()}
        return state

    def evaluate(self, previous: EfaStateSection, cycle: Cycle, volatile: None
                 ) -> Verdict[EfaStateSection, None, None]:
        if previous == _NOTHING_KNOWN and not cycle.snapshot.parts.any_efa:
            return Verdict(previous)  # a host without EFA (most): nothing to judge or forget
        state = previous.copy()
        now = cycle.now
        events: list[tuple[str, HealthEvent]] = []
        notes: list[str] = []
        efa = [d for d in cycle.monitored if d.is_efa]
        cards, verdicts, short = _judge_cards(previous, state, cycle, efa)
        poll = _PortPoll(previous, state, cycle, short, notes)
        for device in efa:
            events.extend((device.name, e) for e in self._present(device, poll))
        present = set(cycle.snapshot.parts.names)
        efa_names = {d.name for d in efa}
        held = self._driver_event(previous, state, cycle, present, events)
        if cycle.snapshot.complete:
            events.extend((HOST, e) for e in _gone(previous, state, present, held, now))
        monitored = {d.name for d in cycle.monitored}
        state.known_devices = sorted(
            (set(previous.known_devices) - (present - monitored)) | efa_names)
        identities = recorded_identities(efa, previous.identities, state.known_devices)
        if identities != previous.identities:
            state.identities = identities
        events.extend((HOST, e) for e in card_events(
            cards, verdicts, efa, previous, state,
            cycle.config.settings(LinkStateSettings).card_verdict_hold_time, now, notes))
        return Verdict(state, tuple(events), notes=tuple(notes))

    def _present(self, device: DeviceSnapshot, poll: _PortPoll) -> list[HealthEvent]:
        """A present EFA device: its misses start again, a missing one is back, and each
        port with a netdev is judged (an efa-only port counts for presence only)."""
        name, state, cycle = device.name, poll.state, poll.cycle
        events: list[HealthEvent] = []
        state.device_misses.pop(name, None)
        if state.missing_devices.pop(name, None) is not None:
            events.append(make_event(
                EFA_STATE_CHECK, fatal=False, healthy=True, error_code=CODE_DEVICE_MISSING,
                entities=device_entities(name), at=cycle.now,
                message=f"EFA {name} is present again in /sys/class/infiniband/"))
        for port in device.ports:
            if port.netdev is None:
                continue  # efa-only: presence only
            event = self._port(port, poll)
            if event is not None:
                events.append(event)
        return events

    @staticmethod
    def _driver_event(previous: EfaStateSection, state: EfaStateSection, cycle: Cycle,
                      present: set[str], events: list[tuple[str, HealthEvent]]
                      ) -> frozenset[str]:
        """The rule of core/checks/driver.py for the efa driver: every known EFA device
        (two or more) gone in one complete enumeration is held from per-device judgement;
        after ``driverReloadGrace`` one non-fatal host event says so, after
        ``driverReloadTimeout`` they are judged one by one; the first one back ends it (a
        device still absent is then judged by the three-poll rule from that poll on)."""
        now, timings = cycle.now, cycle.config.settings(LinkStateSettings)
        event = _driver_event_of(previous, cycle, present)
        if event is None:
            return frozenset()
        entities = tuple((ENTITY_NIC, d) for d in event.devices)
        elapsed = (now - event.since).total_seconds()
        back = [n for n in event.devices if n in present]
        if back or elapsed >= timings.driver_reload_timeout:
            events.extend((HOST, e) for e in _end_driver_event(event, back, elapsed, state, now))
            return frozenset()
        if elapsed >= timings.driver_reload_grace and not event.told:
            event = replace(event, told=True)
            events.append((HOST, make_event(
                EFA_STATE_CHECK, fatal=False, healthy=False, error_code=CODE_DRIVER_EVENT,
                entities=entities, at=now,
                message=(f"All {len(event.devices)} EFA devices vanished at once {elapsed:.0f}s "
                         f"ago (efa driver unloaded or reloading): not judged per device "
                         f"before {timings.driver_reload_timeout:.0f}s"))))
        state.driver_event = event
        return frozenset(event.devices)

    @staticmethod
    def _port(port: PortSnapshot, poll: _PortPoll) -> Optional[HealthEvent]:
        down = netdev_down(port)
        if down is None:
            return None  # unknown this poll: hold the last state, say nothing
        record, now = poll.previous.ports.get(port.key), poll.cycle.now
        event = None
        if record is None:
            told, event = _first_sight(port, down, poll)
        else:
            told = record.health
            if not down and told != HEALTHY:
                told = HEALTHY
                event = _event(port, True, now) if record.health == FATAL else None
            elif down and told == HEALTHY:
                told = FATAL
                event = _event(port, False, now)
        new = EfaPort(port.device, port.port, port.netdev or "", port.operstate or "",
                      port.carrier, told,
                      record.since if record is not None and record.health == told else now)
        if new != record:
            poll.state.ports[port.key] = new
        return event

    def conditions(self, section: EfaStateSection, picture: None) -> Iterable[Condition]:
        """Each EFA port told DOWN, each port a latched card verdict rests on, each EFA
        device declared gone."""
        for key in sorted(section.ports):
            record = section.ports[key]
            if record.health == FATAL:
                port: PortId = (record.device, record.port)
                yield Condition(FATAL, f"netdev {record.netdev} down", port,
                                alone=f"EFA {record.device} port {record.port} netdev down")
        for card, anomaly in sorted(section.card_anomalies.items()):
            reason = f"card {card} has {anomaly.active} of {anomaly.expected} ports active"
            records = [section.ports[k] for k in anomaly.ports if k in section.ports]
            for record in records:
                yield Condition(FATAL, reason, (record.device, record.port),
                                alone=f"EFA {reason}")
            if not records:
                yield Condition(FATAL, f"EFA {reason}")
        for name in sorted(section.missing_devices):
            yield Condition(FATAL, f"EFA {name} missing")

    def identities(self, section: EfaStateSection
                   ) -> Optional[tuple[Mapping[str, DeviceIdentity], Sequence[str]]]:
        if not section.identities and not section.known_devices:
            return None
        return section.identities, section.known_devices

    def held_devices(self, section: EfaStateSection
                     ) -> Optional[tuple[tuple[str, ...], datetime]]:
        event = section.driver_event
        return (event.devices, event.since) if event is not None else None

    def baseline_checks(self, snapshot: HostSnapshot) -> frozenset[str]:
        """Only on a host with an EFA device: a ConnectX host says what it said before."""
        return frozenset({EFA_STATE_CHECK}) if snapshot.parts.any_efa \
            else frozenset()

    def port_fields(self, section: EfaStateSection, picture: None, port: PortId
                    ) -> Mapping[str, Json]:
        """An EFA port's ``since``: when the health it was last told began (ConnectX ports
        have theirs from the link-state record; nothing is added to them)."""
        if not section.ports:
            return {}
        record = section.ports.get(f"{port[0]}_{port[1]}")
        return {"since": format_timestamp(record.since)} if record is not None else {}

    def device_fields(self, section: EfaStateSection, picture: None, device: str,
                      present: bool) -> Mapping[str, Json]:
        """An EFA device's last rename at the same PCI function."""
        identity = section.identities.get(device)
        return rename_fields(identity) if identity is not None else {}

    def device_rows(self, section: EfaStateSection, picture: None, present: frozenset[str]
                    ) -> Iterable[JsonObject]:
        """Each known EFA device missing from the poll."""
        held = section.driver_event.devices if section.driver_event else ()
        for name in sorted(set(section.known_devices) - present):
            yield missing_device_row(name, section.identities.get(name),
                                     section.device_misses.get(name, 0), name in held,
                                     adapter="efa")

    def judges(self, device: DeviceSnapshot, port: PortSnapshot) -> bool:
        """The EFA ports only."""
        return device.is_efa

    def uncabled(self, section: EfaStateSection) -> frozenset[PortId]:
        return self.suppressed(section)

    def suppressed(self, section: EfaStateSection) -> frozenset[PortId]:
        """The EFA ports down since first sight without evidence: "uncabled" on every
        surface, as ConnectX ports suppressed at first sight are (core/health.py)."""
        return frozenset((r.device, r.port) for r in section.ports.values()
                         if r.health == SUPPRESSED)


def _gone(previous: EfaStateSection, state: EfaStateSection, present: set[str],
          held: frozenset[str], now: datetime) -> list[HealthEvent]:
    """Each known EFA device absent from a complete enumeration counts a miss; the
    MISSES_BEFORE_GONE-th is one fatal event, unless a driver event holds it."""
    events: list[HealthEvent] = []
    for name in sorted(set(previous.known_devices) - present):
        misses = state.device_misses.get(name, 0) + 1
        state.device_misses[name] = misses
        if (misses >= MISSES_BEFORE_GONE and name not in state.missing_devices
                and name not in held):
            state.missing_devices[name] = now
            events.append(make_event(
                EFA_STATE_CHECK, fatal=True, healthy=False, error_code=CODE_DEVICE_MISSING,
                entities=device_entities(name), at=now,
                message=f"EFA {name} disappeared from /sys/class/infiniband/ - hardware "
                        f"failure"))
    return events


def _judge_cards(previous: EfaStateSection, state: EfaStateSection, cycle: Cycle,
                 efa: list[DeviceSnapshot]
                 ) -> tuple[dict[str, CardCount], dict[str, CardVerdict], set[str]]:
    """Each EFA card's up ports (an unreadable port as last told), the cards below their
    role group's mode (the modes remembered), and the ports those cards are short of."""
    told = {key: record.health for key, record in previous.ports.items()}
    cards = card_counts((d for d in cycle.snapshot.devices if d.is_efa), cycle.roles, told)
    verdicts, modes = anomalous_cards(cards.values(), previous.group_modes)
    if any(previous.group_modes.get(role) != mode for role, mode in modes.items()):
        state.group_modes.update(modes)
    return cards, verdicts, short_ports(efa, verdicts, told)


def _driver_event_of(previous: EfaStateSection, cycle: Cycle, present: set[str]
                     ) -> Optional[EfaDriverEvent]:
    """The driver event going on: the one held, else one that starts now (every known EFA
    device, two or more, gone in one complete enumeration)."""
    event = previous.driver_event
    known = set(previous.known_devices)
    if (event is None and cycle.snapshot.complete and len(known) >= 2
            and not known & present):
        event = EfaDriverEvent(cycle.now, tuple(sorted(known)))
    return event


def _end_driver_event(event: EfaDriverEvent, back: list[str], elapsed: float,
                      state: EfaStateSection, now: datetime) -> list[HealthEvent]:
    """The event ends (a device back, or the timeout): its recovery if it was told; with a
    device back, the misses of the others start again (the three-poll rule from now on)."""
    events = []
    if event.told:
        events.append(make_event(
            EFA_STATE_CHECK, fatal=False, healthy=True, error_code=CODE_DRIVER_EVENT,
            entities=tuple((ENTITY_NIC, d) for d in event.devices), at=now,
            message=(f"EFA driver event over: {len(back)} of {len(event.devices)} "
                     f"EFA devices back") if back else (
                f"EFA devices still gone after {elapsed:.0f}s: judged one by one")))
    state.driver_event = None
    if back:
        for name in event.devices:
            state.device_misses.pop(name, None)
    return events


def _first_sight(port: PortSnapshot, down: bool, poll: _PortPoll
                 ) -> tuple[str, Optional[HealthEvent]]:
    """A port without a record: up (told only at the baseline), down told fatal only with
    evidence against its card, else suppressed as uncabled."""
    now = poll.cycle.now
    if not down:
        return HEALTHY, _event(port, True, now) if poll.cycle.baseline else None
    if port.key in poll.short:
        return FATAL, _event(port, False, now)
    poll.notes.append(f"{port.device} port {port.port}: {_describe(port)} at first "
                 f"sight and its peers are not decisively up: treated as not "
                 f"connected (uncabled), not reported")
    return SUPPRESSED, None


FAMILY = EFA_STATE = EfaState()
