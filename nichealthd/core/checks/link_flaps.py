"""The link-flap family: down/up cycles of a port within a sliding window.

A cycle is a port going down and coming back, counted per port from three sources that see
the same outages, so they are never added up:

- the port state: ACTIVE/LinkUp -> anything else is a down; the next ACTIVE/LinkUp closes it;
- the ``link_downed`` counter's delta (each unit a down, including those shorter than a poll);
- the ``carrier_changes`` delta (two changes per cycle). The carrier's own up/down is followed
  by the parity of its changes, not taken from the port state: a netdev's carrier follows the
  port a little later (``nichealthd-sim flap`` too writes ACTIVE before the carrier's up
  change), so a poll between the two closes the outage on the state, and the up change read
  a poll later is that outage's, not the down of another one. The parity starts from the
  port state whenever the counter gives no delta.

An outage closes as max(1 if the state was seen down, the counters' downs while it was open)
cycles. Counter downs seen while the port reads ACTIVE all along are cycles shorter than a
poll; they are closed one poll later, because the counter may have moved between the reads of
the state and of the counter (the state then says DOWN at the next poll: one outage, one
cycle). A counter gives no delta at its saturation limit (an IB PMA counter stuck at
all-ones, IBTA vol. 1 §16.1.3.5), across a decrease (cleared), or without a previous value (first
poll of a process: that memory is volatile), and none when switched off in the config.

Defaults and the peers they come from (gpud, NVSentinel, Azure HPC health checks): at least
``linkFlapCount`` = 3 cycles within ``linkFlapWindow`` = 1 h give ONE non-fatal event with
``recommendedAction`` CONTACT_SUPPORT (NVSentinel's analyzer counts 3 NIC events in 1 h and moved
flaps from REPLACE_VM to CONTACT_SUPPORT; gpud counts >= 3 returns to ACTIVE, over 12 h; Azure's HPC
checks >= 5 "lost carrier" in 24 h; NVIDIA's health validation fails one outage >= 30 s, which
the port-state event already reports). ``linkFlapFatalCount`` (default 0, off) makes a port
with that many cycles fatal (REPLACE_VM); it must be at least ``linkFlapCount`` and 2, so one
outage is never fatal twice (its port-state event and the ``link_downed`` counter breach tell
it). The healthy event is sent when the window holds fewer cycles than the count (or the fatal
count) again.

The hold-down escalation: ``stateHoldDown`` (``ports.hold_phase``) absorbs an outage shorter
than it, which without it is a fatal port-state event (DOWN or Disabled) and a fatal
``link_downed`` breach; so a link that flaps often enough would never be fatal with it. While
``stateHoldDown`` > 0, ``linkFlapFatalCount`` = 0 and flap detection is on, the fatal count is
``linkFlapCount`` (at least 2, so one reseat is never fatal), counted over the cycles of fatal
outages the hold-down absorbed: the outage that brings them to the count within the window
gives one fatal ``link_flap`` event (REPLACE_VM) under the state check, recovered when fewer
are left. So the hold-down keeps at most ``linkFlapCount`` - 1 cycles of fatal outages per port
and window quiet. Only absorbed outages count: one that outlasted the hold-down (or ended while
the daemon was away, ``held_transition``) was reported fatal on its own, and an outage that
only read INIT/ARMED (a Subnet Manager's doing) or LinkErrorRecovery, never fatal without the
hold-down, is not made fatal by it. Whether an outage was absorbed is what the link-state
family makes of the same reading (:func:`_absorption`); each outage remembers whether it read
fatal and was absorbed, and each cycle of the window whether it was. An explicit
``linkFlapFatalCount`` replaces the escalation (its count of every cycle, as without a
hold-down). With ``linkFlapCount`` = 0 nothing escalates: the config loader warns about it.

Identity: the layer's degradation check (fatal: its state check), ``errorCode`` ``link_flap``,
the port's entities — the checks the spec names and NVSentinel's analyzer counts, kept apart
from ``port_state`` and ``link_downed`` so only a flap recovery clears a flap. The message never
contains ``link_downed``: the analyzer's RepeatedNICLinkFlap rule counts messages that do.
The window is persisted (it survives a restart); a reboot clears it with the rest of the state.
"""

from __future__ import annotations

from dataclasses import dataclass, field, replace
from datetime import datetime, timedelta
from typing import Any, Iterable, Mapping, NamedTuple, Optional

from ..codec import Section, parse_bool, parse_int, parse_list, parse_when, stored
from ..config import Config
from ..duration import format_duration
from ..events import HealthEvent, make_event, port_entities
from ..family import (
    READS_COUNTERS,
    READS_PORTS,
    CheckFamily,
    Condition,
    Cycle,
    PortId,
    Series,
    Verdict,
)
from ..jsontypes import Json
from ..model import PortSnapshot, is_value
from ..settings import AllSettings, Duration, Integer, Report, Settings, setting
from ..state import DEGRADED, FATAL
from .counters import CheckNames
from .link_counters import CHECK_NAMES_OF
from .link_section import LinkStateSection
from .link_settings import LinkStateSettings
from .link_state import LINK_STATE, device_layer
from .ports import BLIP, HELD, hold_phase, is_active, is_known, port_health, port_label

CODE_LINK_FLAP = "link_flap"
COUNTERS = ("link_downed", "carrier_changes")
_NOTHING = (None, None)


@dataclass(frozen=True)
class LinkFlapSettings(Settings):
    """nichealthd.toml(5): linkFlapCount, linkFlapWindow, linkFlapFatalCount."""

    # gpud: >= 3 returns to ACTIVE in 12 h; NVSentinel's analyzer: 3 in 1 h.
    link_flap_count: int = setting(
        "linkFlapCount", 3, Integer(0, 10_000),
        "How many down/up cycles of one port within linkFlapWindow make it flapping")
    link_flap_window: float = setting("linkFlapWindow", 3600.0, Duration(1.0, 7 * 86400.0),
                                      "The sliding window of linkFlapCount.")
    link_flap_fatal_count: int = setting(
        "linkFlapFatalCount", 0, Integer(0, 10_000),
        "How many cycles within the window make a flapping port fatal")

    def validate(self, config: AllSettings, report: Report) -> None:
        """A fatal flap count below the flap count, or of 1, would make one outage fatal twice
        (its port-state event and its flap) or skip the non-fatal stage.

        A hold-down with flap detection off is valid (an operator's explicit choice, and a
        config that loaded before must not stop the daemon) but is warned about: nothing then
        escalates the outages the hold-down absorbs (:func:`_escalation_count`).
        """
        fatal, count = self.link_flap_fatal_count, self.link_flap_count
        if fatal and (fatal < 2 or (count and fatal < count)):
            report.problem("linkFlapFatalCount",
                           f"must be 0 (never fatal) or at least linkFlapCount ({count}) and 2, "
                           f"got {fatal}")
        hold_down = config.settings(LinkStateSettings).state_hold_down
        if count == 0 and hold_down > 0:
            report.notice(f"stateHoldDown ({format_duration(hold_down)}) with linkFlapCount = 0: "
                          f"an outage shorter than the hold-down is never reported, however "
                          f"often the link flaps (flap detection is off, so nothing escalates)")


class _Counted(NamedTuple):
    """One port's counters as of the last poll (volatile, like every counter memory)."""

    values: tuple[Optional[int], ...]  # link_downed, carrier_changes
    carrier_down: bool  # the carrier after the changes counted so far


Counted = Mapping[str, _Counted]  # each port's counters, by port key


class _Unchanged(NamedTuple):
    """A poll whose verdict changed no record and told nothing, while no step read the clock
    but to see a record's first cycle leave the window (:func:`_at_rest`): its section,
    config, the committed link-state section it read, the oldest of those first cycles and
    what it read of each port. A poll with the same inputs, while that cycle is still in its
    window, counts no down and steps every record to itself again (only what changed is
    judged)."""

    section: FlapSection
    config: Config
    links: LinkStateSection
    oldest: Optional[datetime]
    readings: tuple[object, ...]


class Memory(NamedTuple):
    """Its volatile memory: the counters of each port, and the last poll that changed
    nothing (None: the last poll changed something, or was not judged in full)."""

    counted: Counted
    unchanged: Optional[_Unchanged] = None


MAX_ENTRIES = 4096  # polls with cycles kept per port: bounds the state of a port flapping forever


def _cycle(raw: Any) -> tuple[datetime, int, bool]:
    """A cycle of the window: when, how many, absorbed. An older nichealthd wrote two items
    (it knew no escalation: nothing absorbed) and reads the first two of three."""
    items = parse_list(raw, "cycle")
    if len(items) < 2:
        raise ValueError(f"a cycle has a time and a count, got {len(items)} items")
    return parse_when(items[0]), parse_int(items[1]), len(items) > 2 and parse_bool(items[2])


@dataclass(frozen=True)
class FlapRecord:
    """One port: its last known link, its outage not yet closed (the state seen down, the
    counters' downs, whether it read fatal and whether the hold-down absorbed it), its cycles
    in the window (when, how many, absorbed), the checks told it flaps."""

    device: str
    port: int = field(metadata=stored(high=2**16))
    link_layer: str
    up: bool
    down_seen: bool = False
    open_downs: int = 0
    cycles: tuple[tuple[datetime, int, bool], ...] = field(default=(), metadata=stored(
        parse=lambda raw: tuple([_cycle(c) for c in parse_list(raw, "cycles")])))
    told: tuple[str, ...] = ()
    outage_fatal: bool = field(default=False, metadata=stored(legacy=False))
    outage_absorbed: bool = field(default=False, metadata=stored(legacy=False))

    @property
    def count(self) -> int:
        """Cycles in the window as of the last poll."""
        return sum(n for _, n, _ in self.cycles)

    @property
    def absorbed(self) -> int:
        """Those of them that were fatal outages the hold-down absorbed (blips)."""
        return sum(n for _, n, absorbed in self.cycles if absorbed)


@dataclass
class FlapSection(Section):
    """Every port seen (port key -> record); a value of one poll."""

    link_flaps: dict[str, FlapRecord] = field(default_factory=dict)


class LinkFlaps(CheckFamily[FlapSection, None, Memory]):
    """Down/up cycles per port in a sliding window."""

    id = "link_flaps"
    order = 30
    keys = ("link_flaps",)
    section_type = FlapSection
    reads = frozenset({READS_PORTS, READS_COUNTERS})
    port_field_types = {"flaps": "?int", "flapping": "?bool"}
    settings = LinkFlapSettings

    def evaluate(self, previous: FlapSection, cycle: Cycle, volatile: Optional[Memory]
                 ) -> Verdict[FlapSection, None, Memory]:
        """Each port of the monitored devices: its downs, its closed cycles, its verdict.

        Switched off (``linkFlapCount = 0``, at start or by a reload) it forgets every
        port, with the recovery of each flap it had reported. Nothing is judged when the
        inputs are those of a poll that changed nothing (:class:`_Unchanged`).
        """
        if not cycle.config.settings(LinkFlapSettings).link_flap_count:
            return replace(_switched_off(previous, cycle), volatile=Memory({}))
        links = cycle.previous.section(LINK_STATE)
        downed, carrier = _used_counters(cycle.config)
        readings = _readings(cycle, downed, carrier)
        window = _Window(
            cycle.now, cycle.now - timedelta(
                seconds=cycle.config.settings(LinkFlapSettings).link_flap_window),
            links, (cycle.config.settings(LinkStateSettings).state_hold_down
                    if _escalation_count(cycle.config) else 0.0))
        same = volatile.unchanged if volatile is not None else None
        if (same is not None and same.section is previous and same.links is links
                and same.config is cycle.config
                and (same.oldest is None or same.oldest > window.horizon)
                and same.readings == readings):
            return Verdict(previous, volatile=volatile)
        last: Counted = volatile.counted if volatile is not None else {}
        counted: dict[str, _Counted] = {}
        changed: dict[str, FlapRecord] = {}
        events: list[tuple[str, HealthEvent]] = []
        for device in cycle.monitored:
            layer = device_layer(device, links)
            for port in device.ports:
                key = port.key
                now_values = (_reading(port, downed), _reading(port, carrier))
                record = previous.link_flaps.get(key)
                downs, carrier_down = _counter_downs(now_values, last.get(key))
                if now_values != _NOTHING:
                    if carrier_down is None:  # no delta: the parity starts from the state
                        carrier_down = _down_by_state(port, record)
                    counted[key] = _Counted(now_values, carrier_down)
                new = _step(record, port, port.link_layer or layer or "", downs, window)
                if new is None:
                    continue
                if new.told or new.cycles:  # else nothing to tell (nearly every port)
                    new, port_events = _verdict(new, cycle)
                    events.extend((device.name, e) for e in port_events)
                if new is not record:
                    changed[key] = new
        if changed or events:
            return Verdict(FlapSection({**previous.link_flaps, **changed}), tuple(events),
                           volatile=Memory(counted))
        if not all(_at_rest(r, window) for r in previous.link_flaps.values()):
            return Verdict(previous, volatile=Memory(counted))
        return Verdict(previous, volatile=Memory(counted, _Unchanged(
            previous, cycle.config, links, _oldest(previous), readings)))

    def rename(self, section: FlapSection, renames: Mapping[str, str], now: datetime
               ) -> FlapSection:
        """Its ports of a renamed device under the new name."""
        table = section.link_flaps
        if not any(r.device in renames for r in table.values()):
            return section
        out = {k: r for k, r in table.items() if r.device not in renames}
        out.update((f"{renames[r.device]}_{r.port}", replace(r, device=renames[r.device]))
                   for r in table.values() if r.device in renames)
        return FlapSection(out)

    def conditions(self, section: FlapSection, picture: None) -> Iterable[Condition]:
        for key, record in sorted((k, r) for k, r in section.link_flaps.items() if r.told):
            if record.told:
                names = CHECK_NAMES_OF.get(record.link_layer)
                health = FATAL if names and names.state in record.told else DEGRADED
                reason = f"{record.count} link flaps"
                yield Condition(health, reason, (record.device, record.port),
                                alone=f"{key}: {reason}", code=CODE_LINK_FLAP)

    def port_fields(self, section: FlapSection, picture: None, port: PortId
                    ) -> Mapping[str, Json]:
        record = section.link_flaps.get(f"{port[0]}_{port[1]}")
        return {"flaps": record.count if record else 0,
                "flapping": bool(record and record.told)}

    def series(self, section: FlapSection, picture: None) -> Iterable[Series]:
        yield Series("port_link_flaps",
                     "Down/up cycles of the port within linkFlapWindow (as of the last poll)",
                     "gauge", ("device", "port"),
                     tuple(((r.device, str(r.port)), float(r.count))
                           for _, r in sorted(section.link_flaps.items())))


def _readings(cycle: Cycle, downed: str, carrier: str) -> tuple[object, ...]:
    """What the poll read that a step reads: each monitored port's state, layer and flap
    counters (their kinds too: a saturated value reads as none)."""
    return tuple([(port.key, port.state, port.phys_state, port.link_layer,
                   port.counters.get(downed), port.counters.get(carrier), port.counter_kinds)
                  for device in cycle.monitored for port in device.ports])


def _at_rest(record: FlapRecord, window: _Window) -> bool:
    """Whether its step reads the clock only to see its first cycle leave the window (as
    :func:`_step` and :func:`_slid` do): no outage open whose absorption the hold-down
    judges (:func:`_absorption`)."""
    return not (record.down_seen and window.hold_down > 0)


def _oldest(section: FlapSection) -> Optional[datetime]:
    """The oldest of the records' first cycles: the first to leave the window (the one
    :func:`_step` looks at), None without any."""
    return min((r.cycles[0][0] for r in section.link_flaps.values() if r.cycles), default=None)


def _switched_off(previous: FlapSection, cycle: Cycle) -> Verdict[FlapSection, None, Memory]:
    if not previous.link_flaps:
        return Verdict(previous)
    events: list[tuple[str, HealthEvent]] = []
    for record in sorted(previous.link_flaps.values(), key=lambda r: (r.device, r.port)):
        label = port_label(record.device, record.port, record.link_layer)
        events.extend((record.device, make_event(
            check, fatal=False, healthy=True, error_code=CODE_LINK_FLAP, at=cycle.now,
            entities=port_entities(record.device, record.port),
            message=f"{label}: LinkFlap recovered - flap detection switched off"))
            for check in record.told if check in cycle.enabled)
    return Verdict(FlapSection(), tuple(events))


def _reading(port: PortSnapshot, name: str) -> Optional[int]:
    """A counter's value, None when absent, unreadable or saturated (no information)."""
    value = port.counters.get(name) if name else None
    if not is_value(value):
        return None
    assert isinstance(value, int)
    kind = port.counter_kinds.get(name)
    if kind is not None and kind.limit is not None and value >= kind.limit:
        return None
    return value


def _counter_downs(now_values: tuple[Optional[int], ...], last: Optional[_Counted]
                   ) -> tuple[int, Optional[bool]]:
    """Downs the counters saw since the last poll (the larger of the two counters' counts),
    and the carrier after them (None without a carrier delta)."""
    if last is None:
        return 0, None
    (ld_now, cc_now), (ld_was, cc_was) = now_values, last.values
    downs = 0
    if ld_now is not None and ld_was is not None and ld_now > ld_was:
        downs = ld_now - ld_was
    if cc_now is None or cc_was is None or cc_now < cc_was:
        return downs, None
    changes = cc_now - cc_was  # alternating: from a carrier that was up, down comes first
    downs = max(downs, changes // 2 if last.carrier_down else (changes + 1) // 2)
    return downs, last.carrier_down != (changes % 2 == 1)


def _link_up(port: PortSnapshot) -> Optional[bool]:
    """ACTIVE/LinkUp, anything else known, or None (unreadable: no information)."""
    if not port.readable or not is_known(port.state, port.phys_state):
        return None
    return is_active(port.state, port.phys_state)


def _used_counters(config: Config) -> tuple[str, str]:
    """The flap counters to read, link_downed and carrier_changes ("" for one switched off in
    the config: not read for flaps either)."""
    downed, carrier = (n if n in config.active_names else "" for n in COUNTERS)
    return downed, carrier


def _down_by_state(port: PortSnapshot, record: Optional[FlapRecord]) -> bool:
    """Whether the carrier is down by the port's state (as last recorded while unreadable):
    where the carrier parity starts when the counters give no delta."""
    up = _link_up(port)
    return (not up) if up is not None else bool(record and not record.up)


class _Window(NamedTuple):
    """What every port's step of one poll is judged by: the poll's time, the start of the
    flap window (cycles at or before it leave), the committed link-state section and the
    hold-down of the escalation (> 0 while it applies: an open outage then also learns
    whether it read fatal and whether the hold-down absorbed it, :func:`_absorption`)."""

    now: datetime
    horizon: datetime
    links: LinkStateSection
    hold_down: float


def _step(record: Optional[FlapRecord], port: PortSnapshot, layer: str, downs: int,
          window: _Window) -> Optional[FlapRecord]:
    """The record after this poll (``downs``: the counters' since the last): downs opened,
    closed into cycles, the window slid."""
    up = _link_up(port)
    if record is None:
        return _first_sight(port, layer, up)
    if (not downs and up is record.up and not record.down_seen and not record.open_downs
            and (not record.cycles or record.cycles[0][0] > window.horizon)):
        return record  # the common case: nothing happened
    return _moved(record, port, layer, downs, window)


def _moved(record: FlapRecord, port: PortSnapshot, layer: str, downs: int, window: _Window
           ) -> FlapRecord:
    """:func:`_step` of a port on which something happened: an outage seen or closed,
    counted downs, or a cycle leaving the window."""
    now, horizon = window.now, window.horizon
    up = _link_up(port)
    down_seen = record.down_seen or (record.up and up is False)
    fatal, absorbed = record.outage_fatal, record.outage_absorbed
    if down_seen and up is not None and window.hold_down > 0:
        fatal, absorbed = _absorption(record, port, layer, window)
    open_downs, closed, closed_absorbed = record.open_downs + downs, 0, False
    if up and down_seen:  # back from an outage the state saw
        closed, down_seen, open_downs = max(1, open_downs), False, 0
        closed_absorbed, fatal, absorbed = fatal and absorbed, False, False
    elif up and record.up:  # up all along: the counters' downs of earlier polls were short
        closed, open_downs = record.open_downs, downs
    cycles = _slid(record.cycles, (now, closed, closed_absorbed), horizon)
    link_up = record.up if up is None else up
    if (link_up, down_seen, open_downs, cycles, layer, fatal, absorbed) == (
            record.up, record.down_seen, record.open_downs, record.cycles, record.link_layer,
            record.outage_fatal, record.outage_absorbed):
        return record
    return replace(record, up=link_up, down_seen=down_seen, open_downs=open_downs,
                   cycles=cycles, link_layer=layer, outage_fatal=fatal,
                   outage_absorbed=absorbed)


def _first_sight(port: PortSnapshot, layer: str, up: Optional[bool]) -> Optional[FlapRecord]:
    """A port's first record (none while its state is unreadable). Down at first sight is an
    open outage: its return to ACTIVE is a cycle (gpud)."""
    if up is None:
        return None
    return FlapRecord(port.device, port.port, layer, up, down_seen=not up)


def _slid(cycles: tuple[tuple[datetime, int, bool], ...], closing: tuple[datetime, int, bool],
          horizon: datetime) -> tuple[tuple[datetime, int, bool], ...]:
    """The window's cycles with this poll's (``closing``: none when its count is 0) added,
    the last MAX_ENTRIES kept, and those at or before ``horizon`` dropped."""
    if closing[1]:
        cycles = (*cycles, closing)[-MAX_ENTRIES:]
    if cycles and cycles[0][0] <= horizon:
        cycles = tuple(c for c in cycles if c[0] > horizon)
    return cycles


def _absorption(record: FlapRecord, port: PortSnapshot, layer: str, window: _Window
                ) -> tuple[bool, bool]:
    """The open outage after this (readable) reading: whether it read fatal (DOWN or
    Disabled: a fatal port-state event without the hold-down), and whether the hold-down
    absorbed it so far.

    The link-state family judges this reading by :func:`hold_phase` on the same committed
    section (both families read ``cycle.previous``), so the phase found here is the one it
    acts on: a blip (healthy again, or RoCE INIT/ARMED on its way back, within the hold-down)
    absorbs the outage; an unhealthy reading that is not held, or a hold that ended without
    a blip, is reported by the port state, so the outage is not absorbed.
    """
    health = port_health(port.state, port.phys_state, layer)
    links = window.links
    hold = links.port_holds.get(port.key)
    phase = hold_phase(links.port_states.get(port.key), hold, health, window.now,
                       window.hold_down)
    absorbed = record.outage_absorbed
    if phase == BLIP:
        absorbed = True
    elif phase != HELD and (hold is not None or health in (FATAL, DEGRADED)):
        absorbed = False
    return record.outage_fatal or health == FATAL, absorbed


def _escalation_count(config: Config) -> int:
    """The fatal count of the hold-down escalation; 0 where it does not apply.

    It applies while ``stateHoldDown`` > 0 leaves ``linkFlapFatalCount`` at 0 and flap
    detection on: ``linkFlapCount`` (at least 2, so a single reseat is never fatal) cycles
    of fatal outages absorbed within the window are fatal, as each outage would have been
    without the hold-down.
    """
    flaps = config.settings(LinkFlapSettings)
    if (flaps.link_flap_fatal_count or config.settings(LinkStateSettings).state_hold_down <= 0
            or not flaps.link_flap_count):
        return 0
    return max(flaps.link_flap_count, 2)


def _verdict(record: FlapRecord, cycle: Cycle) -> tuple[FlapRecord, list[HealthEvent]]:
    """Tell the checks that must know the port flaps; clear those that no longer must."""
    flaps = cycle.config.settings(LinkFlapSettings)
    names = CHECK_NAMES_OF.get(record.link_layer)
    if names is None or (not record.told and (not record.cycles
                                              or record.count < flaps.link_flap_count)):
        return record, []  # the common case, cheaply
    return _retold(record, cycle, names, flaps)


def _retold(record: FlapRecord, cycle: Cycle, names: CheckNames, flaps: LinkFlapSettings
            ) -> tuple[FlapRecord, list[HealthEvent]]:
    """:func:`_verdict` of a port that flaps or was told: the checks it must be told under
    now (fatal by the escalation's absorbed outages, else by its count), and the events of
    those that change."""
    count, escalation = record.count, _escalation_count(cycle.config)
    fatal_count = escalation or flaps.link_flap_fatal_count
    fatal = bool(fatal_count) and (record.absorbed if escalation else count) >= fatal_count
    wanted: set[str] = {names.state} if fatal else set()
    if count >= flaps.link_flap_count and (not fatal or names.degradation in record.told):
        wanted.add(names.degradation)
    wanted &= cycle.enabled
    told = set(record.told) & cycle.enabled
    if wanted == told:
        return (record if told == set(record.told)
                else replace(record, told=tuple(sorted(told)))), []
    label = port_label(record.device, record.port, record.link_layer)
    events = []
    for check in sorted(told - wanted):
        events.append(make_event(
            check, fatal=False, healthy=True, error_code=CODE_LINK_FLAP, at=cycle.now,
            entities=port_entities(record.device, record.port),
            message=f"{label}: LinkFlap recovered - "
                    f"{_tally(record, check, names, cycle, escalation)} "
                    f"(threshold {flaps.link_flap_count})"))
    for check in sorted(wanted - told):
        is_fatal = check == names.state
        limit = (f"fatal at {fatal_count}" if is_fatal
                 else f"threshold {flaps.link_flap_count}")
        event = make_event(
            check, fatal=is_fatal, healthy=False, error_code=CODE_LINK_FLAP, at=cycle.now,
            entities=port_entities(record.device, record.port),
            message=f"{label}: LinkFlap - {_tally(record, check, names, cycle, escalation)} "
                    f"({limit}) - unstable link")
        events.append(event if is_fatal else replace(event, recommended_action="CONTACT_SUPPORT"))
    return replace(record, told=tuple(sorted(wanted))), events


def _tally(record: FlapRecord, check: str, names: CheckNames, cycle: Cycle,
           escalation: int) -> str:
    """What a flap event says of the port's cycles: their count within the window and, on
    the escalated state check, the outages the hold-down absorbed."""
    window = format_duration(cycle.config.settings(LinkFlapSettings).link_flap_window)
    held = (f", {record.absorbed} absorbed by stateHoldDown "
            f"{format_duration(cycle.config.settings(LinkStateSettings).state_hold_down)}"
            if escalation and check == names.state else "")
    return f"{record.count} down/up cycles within {window}{held}"


FAMILY = LINK_FLAPS = LinkFlaps()
