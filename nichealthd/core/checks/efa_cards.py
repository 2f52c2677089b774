"""Card homogeneity over EFA devices (link-state-detection §4.3): counts, short ports, verdicts.

An EFA device is one PCI function with one port whose health is its netdev's (``efa_state``);
its card is its PCI bus:device, as for ConnectX. The rule of :mod:`nichealthd.core.topology`
applies unchanged to the EFA cards of each role group (never mixed with ConnectX cards: a p5's
one-port EFA cards and a host's two-port ConnectX cards have different modes): a card below
the group's decisive mode (the last decisive mode of the boot when this poll's is a tie) is
anomalous.

What it adds to the port rule of ``efa_state``:

- at first sight, a down port of an anomalous card is the evidence that makes it a failure
  (else it is taken as not connected, "uncabled");
- later, a card short of a port that was never reported on its own (down since first sight,
  when its peers were not decisively up) is a fatal card event, as a ConnectX card short of
  an uncabled port is. Unlike ConnectX, the verdict is held for ``cardVerdictHoldTime`` first:
  the netdevs of EFA interfaces are brought up by the OS after boot, one by one, so a group
  whose ports were all down at first sight passes through polls where some are up and the rest
  not yet; a port still down that long after its peers came up is stuck, not starting;
- a card short only of ports already reported fatal says nothing more (one failure, one
  event); its release (back at the mode) sends the healthy card event.
"""

from __future__ import annotations

from datetime import datetime, timedelta
from typing import Iterable, Mapping, Optional

from ..config import EFA_STATE_CHECK
from ..events import CODE_CARD_PORTS, ENTITY_NIC, HealthEvent, make_event
from ..model import DeviceSnapshot, PortSnapshot
from ..state import FATAL, HEALTHY
from ..topology import MANAGEMENT, CardCount, CardVerdict, Role
from .efa_section import EfaCardAnomaly, EfaStateSection

UP_OPERSTATES = ("up", "unknown")  # "unknown": drivers that never set it (RFC 2863)


def netdev_down(port: PortSnapshot) -> Optional[bool]:
    """True (DOWN), False (up) or None (nothing known this poll) from an EFA port's netdev:
    ``operstate`` other than up/unknown, or ``carrier`` 0 (an unreadable carrier, EINVAL on
    an administratively down interface, is no signal)."""
    operstate = (port.operstate or "").strip().lower()
    if operstate and operstate not in UP_OPERSTATES:
        return True
    if port.carrier == 0:
        return True
    if not operstate and port.carrier is None:
        return None
    return False


def port_is_down(port: PortSnapshot, health: Optional[str]) -> Optional[bool]:
    """Whether an EFA port with a netdev is down: read now, else as last told (``health``
    of its record); None when neither says (the card's count is then unknown)."""
    down = netdev_down(port)
    if down is None and health is not None:
        down = health != HEALTHY
    return down


def card_counts(devices: Iterable[DeviceSnapshot], roles: Mapping[str, Role],
                health: Mapping[str, str]) -> dict[str, CardCount]:
    """Up ports per EFA card, over the EFA devices of the poll with a netdev (those without
    one, "efa-only", are watched for presence only and count nowhere). ``health``: the port
    records' told health by port key, for ports unreadable this poll."""
    grouped: dict[str, list[DeviceSnapshot]] = {}
    for device in devices:
        if roles[device.name].role in ("vf", "excluded", "unsupported") or not device.card:
            continue
        if any(port.netdev for port in device.ports):
            grouped.setdefault(device.card, []).append(device)
    return {card: _card_count(card, members, roles, health)
            for card, members in sorted(grouped.items())}


def _card_count(card: str, members: list[DeviceSnapshot], roles: Mapping[str, Role],
                health: Mapping[str, str]) -> CardCount:
    """One card's up ports with a netdev; unknown when a member's ports are not listed or a
    port's state is known neither now nor as last told. Its role: a monitored member's."""
    active, known = 0, True
    for device in members:
        known = known and device.ports_listed
        for port in device.ports:
            if not port.netdev:
                continue
            down = port_is_down(port, health.get(port.key))
            if down is None:
                known = False
            else:
                active += not down
    member_roles = [roles[d.name].role for d in members]
    monitored = [r for r in member_roles if r != MANAGEMENT]
    return CardCount(card, monitored[0] if monitored else MANAGEMENT,
                     tuple(sorted(d.name for d in members)), active, known,
                     MANAGEMENT in member_roles, "Unknown")


def short_ports(devices: Iterable[DeviceSnapshot], verdicts: Mapping[str, CardVerdict],
                health: Mapping[str, str]) -> set[str]:
    """Port keys an anomalous card is short of: its down ports with a netdev."""
    short = set()
    for device in devices:
        if device.card not in verdicts:
            continue
        for port in device.ports:
            if port.netdev and port_is_down(port, health.get(port.key)):
                short.add(port.key)
    return short


def card_events(cards: Mapping[str, CardCount], verdicts: Mapping[str, CardVerdict],
                devices: Iterable[DeviceSnapshot], previous: EfaStateSection,
                state: EfaStateSection, hold_time: float, now: datetime, notes: list[str]
                ) -> list[HealthEvent]:
    """Latch anomalous cards whose shortfall no port event tells (after the hold), forget
    the hold of cards no longer short, release cards back at their mode.

    ``previous``/``state``: the EFA state sections (``card_anomalies``, ``card_pending``,
    ``ports``) before and after this poll's port verdicts; ``state`` is changed.
    """
    events: list[HealthEvent] = []
    health = {key: record.health for key, record in state.ports.items()}
    by_card: dict[str, list[PortSnapshot]] = {}
    for device in devices:
        if device.card and device.card in verdicts:
            by_card.setdefault(device.card, []).extend(p for p in device.ports if p.netdev)
    for card, verdict in sorted(verdicts.items()):
        if card in state.card_anomalies:
            continue
        untold = [p.key for p in by_card.get(card, ())
                  if port_is_down(p, health.get(p.key)) and health.get(p.key) != FATAL]
        if not untold:
            state.card_pending.pop(card, None)  # its ports told it: one failure, one event
            continue
        event = _latch_card(card, verdict, untold, previous, state, hold_time, now, notes)
        if event is not None:
            events.append(event)
    _forget_pending(cards, verdicts, state)
    events.extend(_released_cards(cards, previous, state, now))
    return events


def _latch_card(card: str, verdict: CardVerdict, untold: list[str], previous: EfaStateSection,
                state: EfaStateSection, hold_time: float, now: datetime, notes: list[str]
                ) -> Optional[HealthEvent]:
    """A short card whose down ports no event tells: held (noted once) for
    ``cardVerdictHoldTime`` since first seen short, then latched with one fatal event."""
    since = state.card_pending.get(card)
    if since is None:
        since = state.card_pending[card] = now
    if now - since < timedelta(seconds=hold_time):
        if card not in previous.card_pending:
            notes.append(f"EFA card {card} ({verdict.count.role}) has "
                         f"{verdict.count.active} of {verdict.expected} ports up; "
                         f"{', '.join(untold)} never up since first sight: reported if "
                         f"still down after cardVerdictHoldTime")
        return None
    count = verdict.count
    state.card_anomalies[card] = EfaCardAnomaly(count.role, count.active, verdict.expected,
                                                now, tuple(sorted(untold)))
    state.card_pending.pop(card, None)
    return make_event(
        EFA_STATE_CHECK, fatal=True, healthy=False, error_code=CODE_CARD_PORTS,
        entities=tuple((ENTITY_NIC, d) for d in count.devices), at=now,
        message=(f"EFA card {card} ({count.role}) has {count.active} active ports, "
                 f"expected {verdict.expected} (its peers are up; "
                 f"{', '.join(sorted(untold))} never came up)"))


def _forget_pending(cards: Mapping[str, CardCount], verdicts: Mapping[str, CardVerdict],
                    state: EfaStateSection) -> None:
    """Forget the hold of a card no longer short (kept while its count is unknown)."""
    for card in list(state.card_pending):
        pending = cards.get(card)
        if card not in verdicts and (pending is None or pending.known):
            del state.card_pending[card]


def _released_cards(cards: Mapping[str, CardCount], previous: EfaStateSection,
                    state: EfaStateSection, now: datetime) -> list[HealthEvent]:
    """Release each latched card back at its expected count, with a healthy event."""
    events: list[HealthEvent] = []
    for card, anomaly in sorted(previous.card_anomalies.items()):
        current = cards.get(card)
        if current is None or not current.known or current.active < anomaly.expected:
            continue
        state.card_anomalies.pop(card, None)
        events.append(make_event(
            EFA_STATE_CHECK, fatal=False, healthy=True, error_code=CODE_CARD_PORTS,
            entities=tuple((ENTITY_NIC, d) for d in current.devices), at=now,
            message=(f"EFA card {card} ({anomaly.role}) has {current.active} active ports "
                     f"again, expected {anomaly.expected}")))
    return events
