"""Device presence (spec §7) and card homogeneity verdicts (spec §4.3) as events.

A device is declared gone only after three consecutive complete enumerations without it
(REFERENCE §2: one unlistable directory once fabricated a disappearance of every NIC).
A card below its group's mode is latched until it is back at the expected count.
"""

from __future__ import annotations

from datetime import datetime
from typing import Mapping, Optional, Sequence

from ..events import (
    CODE_CARD_PORTS,
    CODE_DEVICE_MISSING,
    ENTITY_NIC,
    HealthEvent,
    device_entities,
    make_event,
)
from ..topology import CardCount, CardVerdict
from .link_section import MISSES_BEFORE_GONE, CardAnomaly, LinkStateSection, MissingDevice


def device_missing(name: str, link_layer: str, check: str, next_state: LinkStateSection,
                   now: datetime, held: bool = False) -> list[HealthEvent]:
    """Count one more complete enumeration without ``name``; fatal from the third on.

    ``held``: part of a driver event (:mod:`.driver`): counted, not judged. When the event
    times out, a device missed three times already is fatal at once.
    """
    misses = next_state.device_misses.get(name, 0) + 1
    next_state.device_misses[name] = misses
    if held or misses < MISSES_BEFORE_GONE or name in next_state.missing_devices:
        return []
    next_state.missing_devices[name] = MissingDevice(link_layer, now)
    return [make_event(
        check, fatal=True, healthy=False, error_code=CODE_DEVICE_MISSING,
        entities=device_entities(name), at=now,
        message=f"NIC {name} disappeared from /sys/class/infiniband/ - hardware failure")]


def device_present(name: str, next_state: LinkStateSection, now: datetime,
                   check_of: Mapping[str, str]) -> list[HealthEvent]:
    """Forget the misses of a present device; recover it if it had been declared gone."""
    next_state.device_misses.pop(name, None)
    gone = next_state.missing_devices.pop(name, None)
    if gone is None:
        return []
    check = check_of.get(gone.link_layer, check_of["InfiniBand"])
    return [make_event(check, fatal=False, healthy=True, error_code=CODE_DEVICE_MISSING,
                       entities=device_entities(name), at=now,
                       message=f"NIC {name} is present again in /sys/class/infiniband/")]


def card_events(cards: Mapping[str, CardCount], verdicts: Mapping[str, CardVerdict],
                next_state: LinkStateSection, check_of: Mapping[str, str],
                enabled: frozenset[str], now: datetime,
                raised: Optional[Mapping[str, Sequence[str]]] = None) -> list[HealthEvent]:
    """Latch newly anomalous cards (fatal) and release recovered ones (healthy).

    ``raised``: per card, the ports reported fatal on its verdict at this poll; the latch
    remembers them so that the card's release clears them too.
    """
    events: list[HealthEvent] = []
    for card_id, verdict in sorted(verdicts.items()):
        count = verdict.count
        check = check_of.get(count.link_layer, check_of["InfiniBand"])
        if card_id in next_state.card_anomalies or check not in enabled:
            continue
        next_state.card_anomalies[card_id] = CardAnomaly(
            count.role, count.active, verdict.expected, check, now,
            tuple(sorted((raised or {}).get(card_id, ()))))
        next_state.card_pending.pop(card_id, None)
        events.append(make_event(
            check, fatal=True, healthy=False, error_code=CODE_CARD_PORTS,
            entities=tuple((ENTITY_NIC, d) for d in count.devices), at=now,
            message=(f"Card {card_id} ({count.role}) has {count.active} active ports, "
                     f"expected {verdict.expected}")))
    for card_id, anomaly in sorted(next_state.card_anomalies.items()):
        current = cards.get(card_id)
        if current is None or not current.known or current.active < anomaly.expected:
            continue
        del next_state.card_anomalies[card_id]
        events.append(make_event(
            anomaly.check_name, fatal=False, healthy=True, error_code=CODE_CARD_PORTS,
            entities=tuple((ENTITY_NIC, d) for d in current.devices), at=now,
            message=(f"Card {card_id} ({anomaly.role}) has {current.active} active ports "
                     f"again, expected {anomaly.expected}")))
    return events
