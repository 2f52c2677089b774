"""The link-state family (spec link-state-detection): port state, device presence, card counts.

Per monitored device: its presence (a return after it was declared gone) and the state of
each port; then the devices that are gone (three complete enumerations without them) and the
card homogeneity verdicts (link-state-detection §4.3, held while the shortfall rests on transient
states). Card verdicts and port states are one family because each feeds the other: a port down at
first sight is fatal only on its card's verdict, and a card verdict is dropped when its ports
already told their own failure.
"""

from __future__ import annotations

from dataclasses import dataclass, field, replace
from datetime import datetime
from typing import Iterable, Mapping, NamedTuple, Optional, Sequence, TypeVar

from ..config import ETH_STATE_CHECK, IB_STATE_CHECK, Config
from ..events import HealthEvent, format_timestamp
from ..family import (
    HOST,
    READS_DEVICES,
    READS_PORTS,
    CheckFamily,
    Condition,
    Cycle,
    PortBase,
    PortId,
    Series,
    Verdict,
)
from ..jsontypes import Json, JsonObject
from ..model import DeviceSnapshot, HostSnapshot, PortSnapshot
from ..observed import DeviceIdentity
from ..state import SUPPRESSED
from ..topology import CardCount, Role, anomalous_cards
from .cards import (
    baseline_verdicts,
    card_counts,
    forget_pending,
    release_raised_ports,
    restart_pending,
    runtime_verdicts,
    short_ports,
)
from .devices import STATE_CHECK_OF, card_events, device_missing, device_present
from .driver import DriverPoll, judge_driver_event
from .fabric import judge_fabrics, remember_fabrics, renamed_fabric_events
from .identity import (
    recorded_identities,
    renamed_identities,
    renamed_keys,
    renamed_port_key,
)
from .link_health import base_conditions, port_bases
from .link_section import (
    KEYS,
    LinkStateSection,
    PortHold,
    PortRecord,
    missing_device_row,
    rename_fields,
)
from .link_settings import LinkStateSettings
from .ports import Judging, held_transition, missing_port, returned_port, split_state
from .readings import device_readings

V = TypeVar("V")


def recorded_layer(section: LinkStateSection, device: str) -> Optional[str]:
    """The link layer last recorded for ``device`` (a port's, or the missing device's)."""
    for record in section.port_states.values():
        if record.device == device and record.link_layer:
            return record.link_layer
    gone = section.missing_devices.get(device)
    return gone.link_layer if gone else None


def device_layer(device: DeviceSnapshot, previous: LinkStateSection) -> Optional[str]:
    """The layer a device is evaluated under: read now, else as last recorded."""
    return device.link_layer or recorded_layer(previous, device.name)


Cards = Mapping[str, CardCount]  # its picture: each card's active ports


class Unchanged(NamedTuple):
    """A poll whose verdict changed nothing and told nothing, with no clock running
    (:func:`clocked`): its section, config, roles and readings (:func:`device_readings`),
    and its picture and notes. A poll with the same inputs is judged the same, at any time:
    the rules read the clock only for what :func:`clocked` names (and to date what changes),
    so it changes nothing either (only what changed is judged)."""

    section: LinkStateSection
    config: Config
    roles: Mapping[str, Role]
    readings: tuple[object, ...]
    cards: Cards
    notes: tuple[str, ...]


def clocked(section: LinkStateSection) -> bool:
    """Whether a rule of the family waits for the clock: a hold-down (``stateHoldDown``), a
    card verdict held (``cardVerdictHoldTime``), a driver event's grace, a fabric out."""
    return bool(section.port_holds or section.card_pending or section.driver_event is not None
                or section.fabric_events)


class LinkState(CheckFamily[LinkStateSection, Cards, Unchanged]):
    """Port state, device presence and card homogeneity."""

    id = "link_state"
    order = 10
    keys = KEYS
    section_type = LinkStateSection
    reads = frozenset({READS_DEVICES, READS_PORTS})
    port_field_types = {"blips": "?int", "held": "?bool"}
    device_field_types = {"missing_polls": "?int"}
    settings = LinkStateSettings

    def rename(self, section: LinkStateSection, renames: Mapping[str, str], now: datetime
               ) -> LinkStateSection:
        """Every record of a renamed device under its new name; its identity remembers the
        old name (shown by ``nichealthctl show devices``)."""
        state = section.copy()
        moved = {}
        kept = {}
        for key, record in section.port_states.items():
            if record.device in renames:
                new = renames[record.device]
                moved[_renamed_port_key(key, record, renames)] = replace(record, device=new)
            else:
                kept[key] = record
        state.port_states = {**kept, **moved}
        state.port_states = {k: r for k, r in state.port_states.items()
                             if r.device not in renames.values() or k in moved}
        state.known_devices = sorted({renames.get(n, n) for n in section.known_devices})
        state.device_misses = renamed_keys(section.device_misses, renames)
        state.missing_devices = renamed_keys(section.missing_devices, renames)
        state.card_anomalies = {
            card: replace(anomaly, ports=tuple(renamed_port_key(k, renames) for k in anomaly.ports))
            for card, anomaly in section.card_anomalies.items()}
        state.identities = renamed_identities(section.identities, renames, now)
        if section.driver_event is not None:
            state.driver_event = section.driver_event.renamed(renames)
        state.port_holds = _renamed_port_table(section.port_holds, renames)
        state.port_blips = _renamed_port_table(section.port_blips, renames)
        state.port_fabrics = _renamed_port_table(section.port_fabrics, renames)
        state.fabric_events = renamed_fabric_events(section.fabric_events, renames)
        return state

    def evaluate(self, previous: LinkStateSection, cycle: Cycle, volatile: Optional[Unchanged]
                 ) -> Verdict[LinkStateSection, Cards, Unchanged]:
        """Ports and presence of each monitored device, then gone devices and card verdicts.

        Card homogeneity (link-state-detection §4.3) is judged every poll. At the baseline poll an
        anomalous card is reported (link-state-detection §7.2 case 3) unless it is short only of
        ports waiting for the subnet manager (then held as later: a reboot), and only the ports it
        is short of (those its peers have active) count as failed. Later a verdict is held while the
        ports it rests on are in a non-fatal state for less than ``cardVerdictHoldTime``
        (link-state-detection §3.2: INIT, ARMED, Polling, LinkErrorRecovery are transients; only a
        port that stays there is stuck), and is dropped when its shortfall is already told by its
        ports' own fatal events.

        Nothing is judged when the inputs are those of a poll that changed nothing
        (:class:`Unchanged`): its verdict is this one's.
        """
        readings = device_readings(cycle.snapshot)
        if (volatile is not None and volatile.section is previous and not cycle.baseline
                and volatile.config is cycle.config and volatile.readings == readings
                and (volatile.roles is cycle.roles or volatile.roles == cycle.roles)):
            return Verdict(previous, picture=volatile.cards, volatile=volatile,
                           notes=volatile.notes)
        cycle = without_efa(cycle)
        snapshot, now, enabled = cycle.snapshot, cycle.now, cycle.enabled
        state = previous.copy()
        notes: list[str] = []
        cards = card_counts(snapshot.parts.judged, cycle.roles, previous)  # VFs: no card
        verdicts, modes = anomalous_cards(cards.values(), previous.group_modes)
        state.group_modes.update(modes)
        short = short_ports(snapshot, cards, verdicts, previous)
        ports = _PortPoll(previous, state, short, notes)
        events = _judge_monitored(cycle, ports)
        present = set(snapshot.parts.names)
        events.extend(_judge_gone(cycle, previous, state, present, notes))
        monitored_names = {d.name for d in cycle.monitored}
        state.known_devices = sorted(
            (set(previous.known_devices) - (present - monitored_names)) | monitored_names)
        _remember_identities(cycle, previous, state)
        fabrics = judge_fabrics(previous, state, cycle.monitored, enabled, now)
        events.extend((HOST, e) for e in fabrics.events)
        notes.extend(fabrics.notes)
        forget_pending(cards, verdicts, state)
        if fabrics.waiting:
            restart_pending(cards, snapshot, state, fabrics.waiting)
        if cycle.baseline:
            verdicts = baseline_verdicts(verdicts, snapshot, state, short, now)
        else:
            verdicts = runtime_verdicts(verdicts, cycle, state, fabrics.waiting)
        events.extend((HOST, e) for e in card_events(cards, verdicts, state, cycle,
                                                     ports.raised))
        events.extend((HOST, e) for e in release_raised_ports(previous, state, now))
        # The picture: each card's active ports (CycleResult.cards).
        if events or cycle.baseline or clocked(state) or state != previous:
            return Verdict(state, tuple(events), cards, notes=tuple(notes))
        return Verdict(previous, picture=cards, notes=tuple(notes), volatile=Unchanged(
            previous, cycle.config, cycle.roles, readings, cards, tuple(notes)))

    def identities(self, section: LinkStateSection
                   ) -> tuple[Mapping[str, DeviceIdentity], Sequence[str]]:
        return section.identities, section.known_devices

    def held_devices(self, section: LinkStateSection
                     ) -> Optional[tuple[tuple[str, ...], datetime]]:
        event = section.driver_event
        return (event.devices, event.since) if event is not None else None

    def baseline_checks(self, snapshot: HostSnapshot) -> frozenset[str]:
        return frozenset({IB_STATE_CHECK, ETH_STATE_CHECK})

    def judges(self, device: DeviceSnapshot, port: PortSnapshot) -> bool:
        """Every port but an EFA's (:func:`without_efa`)."""
        return not device.is_efa

    def port_bases(self, section: LinkStateSection, snapshot: HostSnapshot,
                   roles: Mapping[str, Role]) -> Mapping[PortId, PortBase]:
        """:func:`port_bases`, the last answer while the section is the one it was worked
        out of and the roles and readings (:func:`device_readings`) are as then: the
        health model asks every poll, and its only inputs are these."""
        readings = device_readings(snapshot)
        last = _LAST_BASES[0] if _LAST_BASES else None
        if (last is not None and last.section is section and last.readings == readings
                and (last.roles is roles or last.roles == roles)):
            return last.bases
        bases = port_bases(section, snapshot, roles)
        _LAST_BASES[:] = [_Bases(section, roles, readings, bases)]
        return bases

    def base_conditions(self, section: LinkStateSection, snapshot: HostSnapshot,
                        bases: Mapping[PortId, PortBase]) -> Iterable[Condition]:
        return base_conditions(section, snapshot, bases)

    def port_fields(self, section: LinkStateSection, picture: Optional[Cards], port: PortId
                    ) -> Mapping[str, Json]:
        """Since when the port has had the health it was last told, and the hold-down:
        blips absorbed, and whether an edge is held now."""
        key = f"{port[0]}_{port[1]}"
        record = section.port_states.get(key)
        return {"since": format_timestamp(record.since) if record else "",
                "blips": section.port_blips.get(key, 0), "held": key in section.port_holds}

    def absent_port_fields(self, section: LinkStateSection, port: PortId
                           ) -> Mapping[str, Json]:
        """A recorded port the poll no longer lists: its last link layer, state and since."""
        gone = section.port_states.get(f"{port[0]}_{port[1]}")
        if gone is None:
            return {}
        return {"link_layer": gone.link_layer, "state": split_state(gone.state)[1],
                "phys_state": split_state(gone.physical_state)[1],
                "since": format_timestamp(gone.since)}

    def device_fields(self, section: LinkStateSection, picture: Optional[Cards], device: str,
                      present: bool) -> Mapping[str, Json]:
        """Its last rename at the same PCI function (``renamed_from``, ``renamed_at``)."""
        identity = section.identities.get(device)
        return rename_fields(identity) if identity is not None else {}

    def device_rows(self, section: LinkStateSection, picture: Optional[Cards],
                    present: frozenset[str]
                    ) -> Iterable[JsonObject]:
        """Each known device missing from the poll: its identity, misses, whether a driver
        event holds it."""
        held = section.driver_event.devices if section.driver_event else ()
        for name in sorted(set(section.known_devices) - present):
            gone = section.missing_devices.get(name)
            yield missing_device_row(name, section.identities.get(name),
                                     section.device_misses.get(name, 0), name in held,
                                     link_layer=gone.link_layer if gone else "")

    def series(self, section: LinkStateSection, picture: Optional[Cards]) -> Iterable[Series]:
        yield Series("port_state_blips",
                     "Unhealthy port states that recovered within stateHoldDown (not reported)",
                     "counter", ("device", "port"),
                     tuple(((r.device, str(r.port)), float(section.port_blips.get(k, 0)))
                           for k, r in sorted(section.port_states.items())))


class _Bases(NamedTuple):
    """The port bases of a section, roles and readings (:meth:`LinkState.port_bases`)."""

    section: LinkStateSection
    roles: Mapping[str, Role]
    readings: tuple[object, ...]
    bases: Mapping[PortId, PortBase]


_LAST_BASES: list[_Bases] = []


def without_efa(cycle: Cycle) -> Cycle:
    """The cycle less its EFA devices: their ports, presence and cards are the
    EFA state family's (``core/checks/efa_state.py``). The same object on a host without one."""
    if not cycle.snapshot.parts.any_efa:
        return cycle
    devices = tuple(d for d in cycle.snapshot.devices if not d.is_efa)
    return replace(cycle, snapshot=replace(cycle.snapshot, devices=devices, index=None),
                   monitored=tuple(d for d in cycle.monitored if not d.is_efa))


def _forget_fabrics_of_unknown(state: LinkStateSection) -> None:
    """Drop the remembered fabric of ports whose device is no longer known."""
    known = set(state.known_devices)
    stale = [k for k in state.port_fabrics if k.rpartition("_")[0] not in known]
    for key in stale:
        del state.port_fabrics[key]


def _renamed_port_key(key: str, record: PortRecord, renames: Mapping[str, str]) -> str:
    new = renames.get(record.device)
    if new is None:
        return key
    return f"{new}_{record.port}"


def _renamed_port_table(table: Mapping[str, V], renames: Mapping[str, str]) -> dict[str, V]:
    """A table keyed by port key, under the new names (a renamed device's record wins)."""
    if not table:
        return {}
    moved = {k: renamed_port_key(k, renames) for k in table}
    out = {k: v for k, v in table.items() if moved[k] == k}
    out.update((moved[k], v) for k, v in table.items() if moved[k] != k)
    return out


@dataclass
class _PortPoll:
    """What the port states of one poll are judged against and write to: the sections, the
    ports each short card is short of (the evidence against a port down at first sight), and
    per card the ports reported fatal on that evidence (its latch remembers them)."""

    previous: LinkStateSection
    state: LinkStateSection
    short: set[str]
    notes: list[str]
    raised: dict[str, list[str]] = field(default_factory=dict)


def _judge_monitored(cycle: Cycle, poll: _PortPoll) -> list[tuple[str, HealthEvent]]:
    """Presence and port states of each monitored device, under its layer's state check (a
    device of no known layer is noted, not judged)."""
    now, enabled = cycle.now, cycle.enabled
    previous, state, notes = poll.previous, poll.state, poll.notes
    hold_down = cycle.config.settings(LinkStateSettings).state_hold_down
    events: list[tuple[str, HealthEvent]] = []
    recorded_ports: dict[str, list[str]] = {}  # device -> its port keys in the state
    for key, record in previous.port_states.items():
        recorded_ports.setdefault(record.device, []).append(key)
    for device in cycle.monitored:
        name = device.name
        back = device_present(name, state, now)
        if back:  # rare: no generator made per device for nothing
            events.extend((name, e) for e in back)
        layer = device_layer(device, previous)
        if layer not in STATE_CHECK_OF:
            notes.append(f"{name}: link layer {layer or 'unknown'}; not evaluated")
            continue
        check = STATE_CHECK_OF[layer]
        if check in enabled:
            judging = Judging(check, now, cycle.baseline, hold_down)
            judged = _evaluate_ports(poll, device, layer, judging, recorded_ports.get(name, ()))
            if judged:
                events.extend((name, e) for e in judged)
    return events


def _judge_gone(cycle: Cycle, previous: LinkStateSection, state: LinkStateSection,
                present: set[str], notes: list[str]) -> list[tuple[str, HealthEvent]]:
    """The driver event and each known device absent from the poll (judged missing only on a
    complete enumeration; one a driver event holds is missing but held)."""
    snapshot, now, enabled = cycle.snapshot, cycle.now, cycle.enabled
    gone = sorted(set(previous.known_devices) - present)
    layers = {name: recorded_layer(previous, name) or "InfiniBand"
              for name in {*gone, *(previous.driver_event.devices
                                    if previous.driver_event else ())}}
    driver = judge_driver_event(
        DriverPoll(previous, snapshot, cycle.config, now, enabled, layers, STATE_CHECK_OF),
        state)
    events = [(HOST, e) for e in driver.events]
    notes.extend(driver.notes)
    if not snapshot.complete:
        return events
    for name in gone:
        layer = layers.get(name) or recorded_layer(previous, name) or "InfiniBand"
        check = STATE_CHECK_OF.get(layer, IB_STATE_CHECK)
        if check in enabled:
            events.extend((HOST, e) for e in device_missing(
                name, layer, state, now, held=name in driver.held))
    return events


def _remember_identities(cycle: Cycle, previous: LinkStateSection, state: LinkStateSection
                         ) -> None:
    """Forget the fabrics of devices no longer known; record each known device's identity
    (a rename is told by it) and each monitored port's fabric."""
    if state.port_fabrics:
        _forget_fabrics_of_unknown(state)
    identities = recorded_identities(cycle.monitored, previous.identities,
                                     state.known_devices)
    if identities != previous.identities:
        state.identities = identities
    remember_fabrics(cycle.monitored, state)


def _evaluate_ports(poll: _PortPoll, device: DeviceSnapshot, layer: str, judging: Judging,
                    recorded: Iterable[str]) -> list[HealthEvent]:
    """Each port's transition (with its hold-down), then the recorded ports no longer listed."""
    previous, state, short = poll.previous, poll.state, poll.short
    check, now = judging.check, judging.now
    raised = poll.raised.setdefault(device.card or "", [])
    against_card = judging._replace(evidence=True)  # once per device, not per port and poll
    events: list[HealthEvent] = []
    seen = set()
    for port in device.ports:
        seen.add(port.key)
        record = previous.port_states.get(port.key)
        if not port.readable:
            continue  # unknown: hold the previous state, say nothing
        if record is not None:
            events.extend(returned_port(record, check, now))
        new_record, port_events, hold, blip = held_transition(
            record, port, port.link_layer or layer,
            against_card if port.key in short else judging,
            previous.port_holds.get(port.key))
        _keep_hold(state, port.key, hold, blip)
        events.extend(port_events)
        if record is None and port.key in short and any(e.is_fatal for e in port_events):
            raised.append(port.key)
        if new_record is None:
            continue
        if new_record.health == SUPPRESSED and (record is None or record.health != SUPPRESSED):
            poll.notes.append(f"{device.name} port {port.port} is {port.state} / "
                              f"{port.phys_state} at first sight and its card is not "
                              f"anomalous: treated as uncabled, not reported")
        state.port_states[port.key] = new_record
    if device.ports_listed:
        events.extend(_unlisted_ports(poll, recorded, seen, judging))
    return events


def _unlisted_ports(poll: _PortPoll, recorded: Iterable[str], seen: set[str], judging: Judging
                    ) -> list[HealthEvent]:
    """The recorded ports a device that lists its ports no longer has: each is missing."""
    events: list[HealthEvent] = []
    for key in recorded:
        if key not in seen:
            new_record, port_events = missing_port(poll.previous.port_states[key],
                                                   judging.check, judging.now)
            poll.state.port_states[key] = new_record
            events.extend(port_events)
    return events


def _keep_hold(state: LinkStateSection, key: str, hold: Optional[PortHold], blip: bool) -> None:
    """Record a port's pending hold-down and count its blip."""
    if hold is None:
        state.port_holds.pop(key, None)
    elif state.port_holds.get(key) is not hold:
        state.port_holds[key] = hold
    if blip:
        state.port_blips[key] = state.port_blips.get(key, 0) + 1


FAMILY = LINK_STATE = LinkState()
