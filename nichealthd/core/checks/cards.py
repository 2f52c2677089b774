"""Card homogeneity over a poll (link-state-detection §4.3): counts, short ports, held verdicts.

The rules of :mod:`nichealthd.core.topology` (modes, verdicts) applied to a poll: the active
ports of each physical card (unreadable ports held at their last reading), which ports a short
card is short of, which verdicts to report now, and the release of ports raised on a verdict.
"""

from __future__ import annotations

from dataclasses import replace
from datetime import datetime, timedelta
from typing import Iterator, Mapping, Optional

from ..events import CODE_PORT_STATE, HealthEvent, make_event, port_entities
from ..family import Cycle
from ..model import DeviceSnapshot, HostSnapshot, PortSnapshot
from ..state import FATAL, HEALTHY, SUPPRESSED
from ..topology import MANAGEMENT, CardCount, CardVerdict, Role
from .fabric import waits_for_sm
from .link_section import LinkStateSection, PortRecord
from .link_settings import LinkStateSettings
from .ports import is_active, is_known, known_reading, port_health, port_label


def runtime_verdicts(verdicts: dict[str, CardVerdict], cycle: Cycle, state: LinkStateSection,
                     waiting: frozenset[str] = frozenset()) -> dict[str, CardVerdict]:
    """The verdicts to report after the first poll (the first: :func:`baseline_verdicts`).

    A card short only of ports in a non-fatal state (INIT, ARMED, ACTIVE_DEFER, Polling,
    LinkErrorRecovery...) is held until it has been short for ``cardVerdictHoldTime``; the
    since-time is persisted (``card_pending``), so a restart neither restarts the clock nor
    reports early. A card short of a DOWN/Disabled port keeps the rule of
    :func:`_explained_by_ports`.

    The default hold, 4 minutes, is gpud's drop rule (leptonai/gpud: a port down for >= 4 min
    is "dropped"), the peer threshold for "stuck" rather than "retraining". The shorter
    anchors do not fit: the spec's 30 s INIT hint is shorter than a subnet-manager re-sweep
    of a large fabric (30 s in INIT must stay non-fatal there), and
    NVIDIA's 30 s ``rdma_linkflap_fatal`` is about a DOWN outage, which is fatal here at once.

    A card with a port whose unhealthy state is held down (``stateHoldDown``) says
    nothing while the hold lasts: a blip of its port is not a short card either. Nor does a
    card short only of ports ``waiting`` for the subnet manager on a fabric that is out
    (:mod:`.fabric`): its hold clock starts when the fabric is back.
    """
    snapshot, now = cycle.snapshot, cycle.now
    hold = timedelta(seconds=cycle.config.settings(LinkStateSettings).card_verdict_hold_time)
    kept = {}
    for card, verdict in verdicts.items():
        if card in state.card_anomalies:
            kept[card] = verdict  # latched already: card_events ignores it
            continue
        if state.port_holds and any(
                port.key in state.port_holds for name in verdict.count.devices
                for port in _ports(snapshot, name)):
            continue
        if waiting and _rests_on(verdict.count.devices, snapshot, state, waiting):
            continue  # its clock was dropped by restart_pending
        classes = _short_classes(verdict.count.devices, snapshot, state)
        if classes and FATAL not in classes:
            since = state.card_pending.setdefault(card, now)
            if now - since < hold:
                continue
        elif _explained_by_ports(verdict.count.devices, snapshot, state):
            continue
        kept[card] = verdict
    return kept


def baseline_verdicts(verdicts: dict[str, CardVerdict], snapshot: HostSnapshot,
                      state: LinkStateSection, short: set[str], now: datetime
                      ) -> dict[str, CardVerdict]:
    """The verdicts of the first poll after a reboot (or without usable state).

    Every verdict is reported at once (link-state-detection §7.2 case 3: a port dead at boot),
    except that of a card whose ``short`` ports (:func:`short_ports`: inactive where its peers are
    active) all wait for the subnet manager, INIT or ARMED with the link up: a reboot meets
    every port there and the SM activates them over seconds to minutes, sweep after sweep.
    Such a card is held from this poll on, as after it (:func:`runtime_verdicts`), whether
    or not its ports were ever ACTIVE.
    """
    kept = {}
    for card, verdict in verdicts.items():
        readings = [known_reading(port, record)
                    for port, record in _card_ports(verdict.count.devices, snapshot, state)
                    if port.key in short]
        if readings and all(waits_for_sm(*reading) for reading in readings):
            state.card_pending.setdefault(card, now)
            continue
        kept[card] = verdict
    return kept


def _ports(snapshot: HostSnapshot, name: str) -> tuple[PortSnapshot, ...]:
    device = snapshot.device(name)
    return device.ports if device else ()


def _short_classes(devices: tuple[str, ...], snapshot: HostSnapshot,
                   state: LinkStateSection) -> set[str]:
    """Health classes of the card's inactive ports not yet told as fatal on their own.

    Ports uncabled at first sight (suppressed) and ports with their own fatal event are left
    out: what remains is what a card verdict would add to the port events. A port waiting
    for the subnet manager is cabled whatever its first sight was (:func:`_told_apart`).
    """
    classes = set()
    for port, record in _card_ports(devices, snapshot, state):
        reading = known_reading(port, record)
        if reading == (None, None) or _told_apart(record, reading):
            continue
        if not is_active(*reading):
            classes.add(port_health(reading[0], reading[1], port.link_layer
                                    or (record.link_layer if record else "")))
    return classes


def _rests_on(devices: tuple[str, ...], snapshot: HostSnapshot, state: LinkStateSection,
              keys: frozenset[str]) -> bool:
    """Whether every inactive port of the card not told fatal on its own (nor uncabled at
    first sight) is among ``keys``: the card's shortfall is theirs alone."""
    short = [port.key for port, record in _card_ports(devices, snapshot, state)
             for reading in (known_reading(port, record),)
             if not _told_apart(record, reading) and not is_active(*reading)]
    return bool(short) and all(key in keys for key in short)


def _told_apart(record: Optional[PortRecord], reading: tuple[Optional[str], Optional[str]]
                ) -> bool:
    """Whether a port is left out of its card's shortfall: told fatal on its own, or
    uncabled since first sight (suppressed) and not waiting for the subnet manager now.

    A port in INIT or ARMED with the link up is cabled and trained: at first sight after a
    reboot it is merely not yet activated by the SM, so its card is held like any other
    card short of a transient port (``cardVerdictHoldTime``), never reported at once."""
    if record is None:
        return False
    return record.health == FATAL or (record.health == SUPPRESSED
                                      and not waits_for_sm(*reading))


def _card_ports(devices: tuple[str, ...], snapshot: HostSnapshot, state: LinkStateSection
                ) -> Iterator[tuple[PortSnapshot, Optional[PortRecord]]]:
    """Each port of the card's devices in this poll, with its record."""
    for name in devices:
        device = snapshot.device(name)
        for port in device.ports if device is not None else ():
            yield port, state.port_states.get(port.key)


def forget_pending(cards: dict[str, CardCount], verdicts: dict[str, CardVerdict],
                   state: LinkStateSection) -> None:
    """Drop the hold clock of cards no longer short. An unknown card keeps its clock, and so
    does a card still below its group's remembered mode while no peer shows it (no evidence
    either way this poll: :func:`~nichealthd.core.topology.anomalous_cards`)."""
    for card in list(state.card_pending):
        count = cards.get(card)
        if card in state.card_anomalies:
            del state.card_pending[card]
        elif card in verdicts or (count is not None and not count.known):
            continue
        elif count is None or count.active >= state.group_modes.get(count.role, 0):
            del state.card_pending[card]


def restart_pending(cards: dict[str, CardCount], snapshot: HostSnapshot,
                    state: LinkStateSection, waiting: frozenset[str]) -> None:
    """Drop the hold clock of cards short only of ports ``waiting`` for the subnet manager
    on a fabric that is out (:mod:`.fabric`): it starts again when the fabric is back."""
    for card in list(state.card_pending):
        count = cards.get(card)
        if count is not None and _rests_on(count.devices, snapshot, state, waiting):
            del state.card_pending[card]


def short_ports(snapshot: HostSnapshot, cards: dict[str, CardCount],
                verdicts: dict[str, CardVerdict], previous: LinkStateSection) -> set[str]:
    """Port keys an anomalous card is short of: inactive where its peers are active.

    A port position (PCI function on the card, port number) that most peer cards of the
    same role have inactive is uncabled by design: the card is not short of it, and it is
    never reported fatal on the card's verdict. A position no peer has counts as short.
    """
    if not verdicts:
        return set()
    by_name = {d.name: d for d in snapshot.devices}
    layout = {card: _positions(count, by_name, previous) for card, count in cards.items()}
    short: set[str] = set()
    for card, verdict in verdicts.items():
        peers = [layout[c] for c, n in cards.items()
                 if c != card and n.role == verdict.count.role and n.known and not n.exempt]
        for name in verdict.count.devices:
            device = by_name.get(name)
            for port in device.ports if device else ():
                position = (_function(device), port.port)
                if not layout[card].get(position) and not _uncabled(position, peers):
                    short.add(port.key)
    return short


Positions = dict[tuple[str, int], bool]  # (PCI function, port number) -> active


def _positions(count: CardCount, by_name: Mapping[str, DeviceSnapshot],
               previous: LinkStateSection) -> Positions:
    """Whether each port position of a card is active (read now, else as last recorded)."""
    positions = {}
    for name in count.devices:
        device = by_name.get(name)
        for port in device.ports if device else ():
            reading = known_reading(port, previous.port_states.get(port.key))
            positions[(_function(device), port.port)] = is_active(*reading)
    return positions


def _uncabled(position: tuple[str, int], peers: list[Positions]) -> bool:
    """A position inactive on most peer cards that have it: uncabled like them (a position
    no peer has is not)."""
    seen = [p[position] for p in peers if position in p]
    return bool(seen) and 2 * sum(seen) <= len(seen)


def _function(device: Optional[DeviceSnapshot]) -> str:
    """The PCI function of a device (``1`` of ``0000:47:00.1``): a port's place on its card."""
    address = (device.pci_address if device else None) or ""
    return address.rpartition(".")[2]


def release_raised_ports(previous: LinkStateSection, state: LinkStateSection,
                         now: datetime) -> list[HealthEvent]:
    """Healthy events for ports raised on a card verdict that has just been released.

    Their fatal rested on the card being short; with the card back at its group's mode the
    condition is cleared, and a port still down is from now on uncabled (suppressed).
    """
    events = []
    for card, anomaly in sorted(previous.card_anomalies.items()):
        if card in state.card_anomalies:
            continue
        for key in anomaly.ports:
            record = state.port_states.get(key)
            if record is None or record.health in (HEALTHY, SUPPRESSED):
                continue
            state.port_states[key] = replace(record, health=SUPPRESSED, since=now)
            label = port_label(record.device, record.port, record.link_layer)
            events.append(make_event(
                anomaly.check_name, fatal=False, healthy=True, error_code=CODE_PORT_STATE,
                entities=port_entities(record.device, record.port), at=now,
                message=(f"{label}: no longer counted as failed - card {card} is back at "
                         f"{anomaly.expected} active ports (state {record.state}, "
                         f"phys_state {record.physical_state})")))
    return events


def _explained_by_ports(devices: tuple[str, ...], snapshot: HostSnapshot,
                        state: LinkStateSection) -> bool:
    """True when every inactive port of the card already has its own fatal report.

    Then a card verdict would only repeat the port events (a single-port card that went DOWN
    is one failure, not two). It still speaks when an inactive port was never reported: a port
    stuck in Polling/INIT, or a card whose cabled port failed beside an uncabled one.
    """
    for port, record in _card_ports(devices, snapshot, state):
        held = (record.state, record.physical_state) if record else (None, None)
        state_now = (port.state, port.phys_state) if port.readable else held
        if not is_active(*state_now) and (record is None or record.health != FATAL):
            return False
    return True


def card_counts(devices: tuple[DeviceSnapshot, ...], roles: Mapping[str, Role],
                previous: LinkStateSection) -> dict[str, CardCount]:
    """Active ports per physical card (PCI bus:device), with unreadable ports held.

    A reading without its state numbers (garbage) is unknown like an unreadable one: the last
    known reading is held, and with none the card's count is unknown (never evidence).

    Asked every poll. The reader gives an unchanged device as the same (immutable) snapshot
    and :func:`~nichealthd.core.topology.classify` the same role as the same object, so the
    last answer is kept while every device and role is the one it was computed from, and no
    port needed ``previous`` (all were read and known).
    """
    last = _LAST_COUNTS[0] if _LAST_COUNTS else None
    if (last is not None and len(last[0]) == len(devices)
            and all(a is b for a, b in zip(last[0], devices))
            and all(roles.get(d.name) is r for d, r in zip(devices, last[1]))):
        return dict(last[2])
    cards, held = _count_cards(devices, roles, previous)
    _LAST_COUNTS[:] = [] if held else [
        (tuple(devices), tuple(roles.get(d.name) for d in devices), cards)]
    return dict(cards)


# The last answer of card_counts: (devices, their roles, the counts).
_LAST_COUNTS: list[tuple[tuple[DeviceSnapshot, ...], tuple[Optional[Role], ...],
                         dict[str, CardCount]]] = []


def _count_cards(devices: tuple[DeviceSnapshot, ...], roles: Mapping[str, Role],
                 previous: LinkStateSection) -> tuple[dict[str, CardCount], bool]:
    """The counts, and whether a port's held record was needed (the answer then rests on
    ``previous`` too and is not kept)."""
    held = False
    grouped: dict[str, list[DeviceSnapshot]] = {}
    for device in devices:
        if roles[device.name].role in ("vf", "excluded", "unsupported") or not device.card:
            continue
        grouped.setdefault(device.card, []).append(device)
    cards = {}
    for card, members in grouped.items():
        cards[card], needed = _card_count(card, members, roles, previous)
        held = held or needed
    return cards, held


def _card_count(card: str, members: list[DeviceSnapshot], roles: Mapping[str, Role],
                previous: LinkStateSection) -> tuple[CardCount, bool]:
    """One card's active ports (an unreadable port as last recorded; unknown without a
    record), its role (a monitored member's), and whether a held record was needed."""
    held = False
    active, known = 0, True
    for device in members:
        known = known and device.ports_listed
        for port in device.ports:
            if port.readable and is_known(port.state, port.phys_state):
                active += is_active(port.state, port.phys_state)
                continue
            held = True
            record: Optional[PortRecord] = previous.port_states.get(port.key)
            if record is None or not is_known(record.state, record.physical_state):
                known = False
            else:
                active += is_active(record.state, record.physical_state)
    member_roles = [roles[d.name].role for d in members]
    monitored_roles = [r for r in member_roles if r != MANAGEMENT]
    return CardCount(
        card=card,
        role=monitored_roles[0] if monitored_roles else MANAGEMENT,
        devices=tuple(sorted(d.name for d in members)),
        active=active,
        known=known,
        exempt=MANAGEMENT in member_roles,
        link_layer=next((d.link_layer for d in members if d.link_layer), "InfiniBand"),
    ), held
