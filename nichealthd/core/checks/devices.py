"""Device presence and card homogeneity verdicts (link-state-detection §7, §4.3) as events.

A device is declared gone only after three consecutive complete enumerations without it
(a lesson of the field: one unlistable directory once fabricated a disappearance of every NIC).
A card below its group's mode is latched until it is back at the expected count.
"""

from __future__ import annotations

from datetime import datetime
from typing import Mapping, Optional, Sequence

from ..config import ETH_STATE_CHECK, IB_STATE_CHECK
from ..events import (
    CODE_CARD_PORTS,
    CODE_DEVICE_MISSING,
    ENTITY_NIC,
    HealthEvent,
    device_entities,
    make_event,
)
from ..family import Cycle
from ..topology import CardCount, CardVerdict
from .link_section import MISSES_BEFORE_GONE, CardAnomaly, LinkStateSection, MissingDevice

# The state check a device's presence and its card's verdicts are reported under, by layer
# (a layer not listed: InfiniBand's).
STATE_CHECK_OF = {"InfiniBand": IB_STATE_CHECK, "Ethernet": ETH_STATE_CHECK}


def device_missing(name: str, link_layer: str, next_state: LinkStateSection, now: datetime,
                   held: bool = False) -> list[HealthEvent]:
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
        STATE_CHECK_OF.get(link_layer, IB_STATE_CHECK), fatal=True, healthy=False,
        error_code=CODE_DEVICE_MISSING,
        entities=device_entities(name), at=now,
        message=f"NIC {name} disappeared from /sys/class/infiniband/ - hardware failure")]


def device_present(name: str, next_state: LinkStateSection, now: datetime
                   ) -> list[HealthEvent]:
    """Forget the misses of a present device; recover it if it had been declared gone."""
    next_state.device_misses.pop(name, None)
    gone = next_state.missing_devices.pop(name, None)
    if gone is None:
        return []
    check = STATE_CHECK_OF.get(gone.link_layer, IB_STATE_CHECK)
    return [make_event(check, fatal=False, healthy=True, error_code=CODE_DEVICE_MISSING,
                       entities=device_entities(name), at=now,
                       message=f"NIC {name} is present again in /sys/class/infiniband/")]


def card_events(cards: Mapping[str, CardCount], verdicts: Mapping[str, CardVerdict],
                next_state: LinkStateSection, cycle: Cycle,
                raised: Optional[Mapping[str, Sequence[str]]] = None) -> list[HealthEvent]:
    """Latch newly anomalous cards (fatal) and release recovered ones (healthy).

    ``raised``: per card, the ports reported fatal on its verdict at this poll; the latch
    remembers them so that the card's release clears them too.
    """
    events: list[HealthEvent] = []
    now = cycle.now
    for card_id, verdict in sorted(verdicts.items()):
        count = verdict.count
        check = STATE_CHECK_OF.get(count.link_layer, IB_STATE_CHECK)
        if card_id in next_state.card_anomalies or check not in cycle.enabled:
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
