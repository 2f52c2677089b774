"""Port state evaluation: one event per crossing of the healthy boundary.

The rules of link-state-detection §3 and §13.1. Healthy is ACTIVE + LinkUp. DOWN or Disabled is
fatal; Polling, LinkErrorRecovery and other non-active states are degradations; INIT/ARMED are
degradations on InfiniBand and not reported on Ethernet, where they are sub-second transients. The
health the platform was last told is persisted per port, so a restart compares against it and a DOWN
that was fixed while the daemon was away still produces its recovery.
"""

from __future__ import annotations

import functools
from dataclasses import replace
from datetime import datetime, timedelta
from typing import NamedTuple, Optional

from ..events import CODE_PORT_MISSING, CODE_PORT_STATE, HealthEvent, make_event, port_entities
from ..model import PortSnapshot
from ..state import DEGRADED, FATAL, HEALTHY, SUPPRESSED
from .link_section import MISSES_BEFORE_GONE, PortHold, PortRecord

QUIET = "quiet"  # a state that is not reported (Ethernet INIT/ARMED): hold the last health

_STATE_DOWN, _STATE_INIT, _STATE_ARMED, _STATE_ACTIVE = 1, 2, 3, 4
_PHYS_DISABLED, _PHYS_LINKUP = 3, 5


@functools.lru_cache(maxsize=256)
def split_state(raw: Optional[str]) -> tuple[Optional[int], str]:
    """``"4: ACTIVE"`` -> ``(4, "ACTIVE")``; tolerant of a missing number.

    Cached: a host shows a handful of distinct readings, asked for several times per port
    per poll (port state, cards, flaps, rate); garbage readings only cycle through the cache.
    """
    if not raw:
        return None, ""
    number, sep, name = raw.partition(":")
    number = number.strip()
    # isdigit() accepts "²", which int() rejects: only ASCII decimals are a state number.
    if sep and number.isascii() and number.isdecimal():
        return int(number), name.strip()
    return None, raw.strip()


def state_name(raw: Optional[str]) -> str:
    """The name for messages; a reading with unprintable bytes is shown as ``unknown``."""
    name = split_state(raw)[1]
    return name if name and name.isprintable() else "unknown"


def is_active(state: Optional[str], phys_state: Optional[str]) -> bool:
    """ACTIVE and LinkUp: the definition of a healthy, counted-as-active port."""
    return (split_state(state)[0] == _STATE_ACTIVE
            and split_state(phys_state)[0] == _PHYS_LINKUP)


def is_known(state: Optional[str], phys_state: Optional[str]) -> bool:
    """Both readings carry their number: anything else is unknown, never evidence."""
    return split_state(state)[0] is not None and split_state(phys_state)[0] is not None


def known_reading(port: PortSnapshot, record: Optional[PortRecord]
                  ) -> tuple[Optional[str], Optional[str]]:
    """The port's (state, phys_state) now, or as last recorded when it cannot be judged now
    (unreadable, or a reading without its numbers); (None, None) with neither."""
    if port.readable and is_known(port.state, port.phys_state):
        return port.state, port.phys_state
    return (record.state, record.physical_state) if record else (None, None)


def port_health(state: Optional[str], phys_state: Optional[str], link_layer: str) -> str:
    """Classify one reading as HEALTHY, FATAL, DEGRADED or QUIET."""
    logical, physical = split_state(state)[0], split_state(phys_state)[0]
    if logical == _STATE_ACTIVE and physical == _PHYS_LINKUP:
        return HEALTHY
    if logical == _STATE_DOWN or physical == _PHYS_DISABLED:
        return FATAL
    if logical in (_STATE_INIT, _STATE_ARMED) and physical == _PHYS_LINKUP \
            and link_layer == "Ethernet":
        return QUIET
    return DEGRADED


def port_label(device: str, port: int, link_layer: str) -> str:
    """``Port mlx5_0 port 1`` or ``RoCE port mlx5_0 port 1`` (link-state-detection §13.1)."""
    prefix = "RoCE port" if link_layer == "Ethernet" else "Port"
    return f"{prefix} {device} port {port}"


def describe(port: PortSnapshot, link_layer: str) -> str:
    """``state DOWN, phys_state Disabled`` (+ ``, operstate down`` for RoCE)."""
    text = f"state {state_name(port.state)}, phys_state {state_name(port.phys_state)}"
    if link_layer == "Ethernet":
        text += f", operstate {port.operstate or 'unknown'}"
    return text


def state_event(check: str, port: PortSnapshot, link_layer: str, health: str,
                now: datetime) -> HealthEvent:
    """The consolidated event for a port reaching ``health``."""
    label = port_label(port.device, port.port, link_layer)
    if health == HEALTHY:
        message = (f"{label}: healthy ({state_name(port.state)}, "
                   f"{state_name(port.phys_state)})")
    elif health == FATAL:
        # link-state-detection §3.4
        message = f"{label}: {describe(port, link_layer)} - no connectivity"
    else:
        message = f"{label}: {describe(port, link_layer)}"
    return make_event(check, fatal=health == FATAL, healthy=health == HEALTHY, message=message,
                      error_code=CODE_PORT_STATE, entities=port_entities(port.device, port.port),
                      at=now)


class Judging(NamedTuple):
    """How one port's reading is judged this poll: the same for every port of a device but
    ``evidence``, so a caller makes it once and replaces that per port."""

    check: str  # the state check the events are under
    now: datetime
    # There is no record to compare with and the platform must be told the truth (first poll
    # after a reboot or with no state).
    first_sight: bool
    hold_down: float = 0.0  # stateHoldDown, seconds
    # The port's card is proven anomalous by homogeneity: the only reason to call a port that
    # is already down at first sight fatal (a tie, a group of one card or a zero mode is none).
    evidence: bool = False


def transition(previous: Optional[PortRecord], port: PortSnapshot, link_layer: str,
               judging: Judging) -> tuple[Optional[PortRecord], list[HealthEvent]]:
    """Next record and events for one readable port (its ``judging.hold_down`` aside)."""
    check, now = judging.check, judging.now
    health = port_health(port.state, port.phys_state, link_layer)
    if previous is None:
        return _first_record(port, link_layer, health, judging)
    state, phys = port.state or "", port.phys_state or ""
    events: list[HealthEvent] = []
    told, since = previous.health, previous.since
    if health == QUIET:
        pass
    elif health == HEALTHY:
        if told != HEALTHY:
            events.append(state_event(check, port, link_layer, HEALTHY, now))
            told, since = HEALTHY, now
    elif told == SUPPRESSED:
        pass  # uncabled since first sight; a card that now falls short has its own event
    elif health == FATAL and told != FATAL:
        events.append(state_event(check, port, link_layer, FATAL, now))  # incl. escalation
        told, since = FATAL, now
    elif health == DEGRADED and told == HEALTHY:
        events.append(state_event(check, port, link_layer, DEGRADED, now))
        told, since = DEGRADED, now
    if (previous.state, previous.physical_state, previous.link_layer, previous.health,
            previous.since, previous.misses) == (state, phys, link_layer, told, since, 0):
        return previous, events  # the common case: nothing changed, no new object
    record = replace(previous, state=state, physical_state=phys, link_layer=link_layer,
                     health=told, since=since, misses=0)
    return record, events


def _first_record(port: PortSnapshot, link_layer: str, health: str, judging: Judging
                  ) -> tuple[Optional[PortRecord], list[HealthEvent]]:
    """A port without a record: healthy (told only at first sight), unhealthy told only
    with evidence against its card, else suppressed (uncabled); a quiet state makes none."""
    check, now = judging.check, judging.now
    events: list[HealthEvent] = []
    if health == QUIET:
        return None, events
    if health == HEALTHY:
        if judging.first_sight:
            events.append(state_event(check, port, link_layer, HEALTHY, now))
        told = HEALTHY
    elif judging.evidence:
        events.append(state_event(check, port, link_layer, health, now))
        told = health
    else:
        told = SUPPRESSED
    state, phys = port.state or "", port.phys_state or ""
    return PortRecord(port.device, port.port, state, phys, link_layer, told, now), events


HELD, BLIP = "held", "blip"


def hold_phase(previous: Optional[PortRecord], hold: Optional[PortHold], health: Optional[str],
               now: datetime, hold_down: float) -> Optional[str]:
    """What the hold-down (``stateHoldDown``) makes of a port's reading this poll.

    :data:`HELD`: an unhealthy edge of a port told healthy, within the hold-down (or a held
    port unreadable now); :data:`BLIP`: a held edge that ended within it (healthy again, or
    RoCE INIT/ARMED: on its way back); None: no hold applies. ``health`` is the reading's
    :func:`port_health`, None when unreadable. The link-state family reports by it, and the
    counter family holds the counters that count the same outage (``link_downed``).
    """
    if previous is None or previous.health != HEALTHY or (hold is None and hold_down <= 0):
        return None
    within = hold is None or now - hold.since < timedelta(seconds=hold_down)
    if health in (FATAL, DEGRADED):
        return HELD if within else None
    if hold is None:
        return None
    if health is None:
        return HELD
    return BLIP if within else None


class Held(NamedTuple):
    """The outcome of :func:`held_transition`."""

    record: Optional[PortRecord]
    events: list[HealthEvent]
    hold: Optional[PortHold]  # the pending hold after this poll
    blip: bool  # a held edge ended healthy within the hold-down


def held_transition(previous: Optional[PortRecord], port: PortSnapshot, link_layer: str,
                    judging: Judging, hold: Optional[PortHold]) -> Held:
    """:func:`transition` with the hold-down (``stateHoldDown``).

    Only a healthy->unhealthy edge of a port the platform was told is healthy is held: it is
    reported when the port is still unhealthy once its hold-down has passed, and is a blip
    (nothing published) when the port is back before (see :func:`hold_phase`). Recovery,
    escalation and a port unhealthy at first sight go through at once. A hold found expired
    when the port is already back (a restart or a late poll in between) reports the outage,
    dated when it began, and its recovery: nothing proves it was short.
    """
    now, hold_down = judging.now, judging.hold_down
    if hold is None and hold_down <= 0:  # the default: no hold-down (every port, every poll)
        return Held(*transition(previous, port, link_layer, judging), None, False)

    def plain(record: Optional[PortRecord], reading: PortSnapshot, at: datetime
              ) -> tuple[Optional[PortRecord], list[HealthEvent]]:
        return transition(record, reading, link_layer, judging._replace(now=at))

    health = port_health(port.state, port.phys_state, link_layer)
    phase = hold_phase(previous, hold, health, now, hold_down)
    if phase == HELD:
        return Held(previous, [], hold or PortHold(now, port.state or "", port.phys_state or ""),
                    False)
    if phase == BLIP:
        return Held(*plain(previous, port, now), None, True)
    if hold is not None and previous is not None and health not in (FATAL, DEGRADED):
        outage = replace(port, state=hold.state, phys_state=hold.physical_state)
        record, events = plain(previous, outage, hold.since)
        record, recovery = plain(record, port, now)
        return Held(record, events + recovery, None, False)
    return Held(*plain(previous, port, now), None, False)


def missing_port(previous: PortRecord, check: str, now: datetime
                 ) -> tuple[PortRecord, list[HealthEvent]]:
    """A port absent from a device whose ports were listed: fatal on the third miss."""
    misses = previous.misses + 1
    events = []
    if misses == MISSES_BEFORE_GONE:
        label = port_label(previous.device, previous.port, previous.link_layer)
        events.append(make_event(
            check, fatal=True, healthy=False, error_code=CODE_PORT_MISSING,
            entities=port_entities(previous.device, previous.port), at=now,
            message=(f"{label} disappeared from /sys/class/infiniband/{previous.device}/ports/ "
                     f"- hardware failure")))
    return replace(previous, misses=misses), events


def returned_port(previous: PortRecord, check: str, now: datetime) -> list[HealthEvent]:
    """The recovery of a port that had been declared gone."""
    if previous.misses < MISSES_BEFORE_GONE:
        return []
    label = port_label(previous.device, previous.port, previous.link_layer)
    return [make_event(check, fatal=False, healthy=True, error_code=CODE_PORT_MISSING,
                       entities=port_entities(previous.device, previous.port), at=now,
                       message=f"{label} is present again")]
