"""The link-counter family (spec link-counter-detection): every configured counter of each port.

Evaluates the counters of every port of each monitored device whose link layer is known (read
now or recorded), under the layer's degradation check, fatal counters too (beyond the spec:
``CheckNames.for_counter`` says why), with the engine of
:mod:`nichealthd.core.checks.counters`. Its open conditions are latched breaches and
saturation reported as an event.
"""

from __future__ import annotations

from dataclasses import replace
from datetime import datetime
from typing import Iterable, Mapping, Optional, TypeVar

from ..config import (
    ETH_DEGRADATION_CHECK,
    ETH_STATE_CHECK,
    IB_DEGRADATION_CHECK,
    IB_STATE_CHECK,
    Config,
)
from ..events import HealthEvent
from ..family import READS_COUNTERS, READS_PORTS, CheckFamily, Condition, Cycle, PortId, Verdict
from ..jsontypes import JsonObject
from ..model import DeviceSnapshot, HostSnapshot, PortSnapshot, Unreadable, is_value
from ..observed import CounterObservation
from ..state import DEGRADED, FATAL, counter_key
from .counter_rows import counter_rows
from .counter_section import KEYS, CounterSection, CounterSnap
from .counters import (
    CheckNames,
    CounterPoll,
    CounterTables,
    Observations,
    evaluate_port_counters,
    release_unconfigured,
    settle,
    unless_same,
    urgent_counter_change,
)
from .identity import renamed_counter_table
from .link_section import LinkStateSection
from .link_settings import LinkStateSettings
from .link_state import LINK_STATE, device_layer
from .ports import BLIP, hold_phase, port_health

CHECK_NAMES_OF = {
    "InfiniBand": CheckNames(IB_STATE_CHECK, IB_DEGRADATION_CHECK),
    "Ethernet": CheckNames(ETH_STATE_CHECK, ETH_DEGRADATION_CHECK),
}


C = TypeVar("C", bound=CounterSection)


def renamed(section: C, renames: Mapping[str, str]) -> C:
    """``section`` with the records of each renamed device under its new name."""
    return replace(section,
                   counter_snapshots=renamed_counter_table(section.counter_snapshots, renames),
                   breach_flags=renamed_counter_table(section.breach_flags, renames),
                   saturated=renamed_counter_table(section.saturated, renames),
                   saturated_quiet=renamed_counter_table(section.saturated_quiet, renames))


class LinkCounters(CheckFamily[CounterSection, Observations, CounterTables]):
    """Delta and velocity thresholds with latching breaches, resets and saturation."""

    id = "link_counters"
    order = 20
    keys = KEYS
    section_type = CounterSection
    reads = frozenset({READS_PORTS, READS_COUNTERS})

    def evaluate(self, previous: CounterSection, cycle: Cycle, volatile: Optional[CounterTables]
                 ) -> Verdict[CounterSection, Observations, CounterTables]:
        """The counters of every port of each monitored device with a known link layer, into
        copies of the section and of the counter tables of the last poll."""
        state, memory = previous.copy(), CounterTables.next_of(volatile)
        links = cycle.previous.section(LINK_STATE)
        events: list[tuple[str, HealthEvent]] = []
        notes: list[str] = []
        observations: dict[str, CounterObservation] = {}
        specs = cycle.config.active_counters
        holding = (cycle.config.settings(LinkStateSettings).state_hold_down > 0
                   or bool(links.port_holds))
        # Devices back from a driver event: what their counters did while the driver
        # was away is the reload's own doing (links retrain); a decrease is the reset it
        # implies (latched breaches recover), anything else starts a fresh window.
        returning = frozenset(links.driver_event.devices) if links.driver_event else frozenset()
        poll = CounterPoll(previous, state, memory, observations, cycle.now, cycle.baseline)
        for device in cycle.monitored:
            layer = device_layer(device, links)
            names = CHECK_NAMES_OF.get(layer or "")
            if names is None:
                continue  # the link-state family says so
            rebase = device.name in returning
            for port in device.ports:
                phase = _hold_phase(port, layer or "", links, cycle) if holding else None
                found = evaluate_port_counters(
                    _held(port) if phase else port, specs,
                    CHECK_NAMES_OF.get(port.link_layer or "", names),
                    cycle.enabled, poll, notes, rebase=rebase)
                if found:  # rare: no generator made per port for nothing
                    events.extend((device.name, e) for e in found)
                if phase == BLIP:
                    _absorb(port, state, memory, cycle.now)
        if state.breach_flags and cycle.config.counter_detection_enabled:
            events.extend(release_unconfigured(state, cycle.config.active_names, cycle.enabled,
                                               cycle.now))
        # The picture: what the last poll computed of each counter (CycleResult.observations).
        return Verdict(unless_same(state, previous), tuple(events), observations,
                       notes=tuple(notes), volatile=memory, held_back=memory.held_back)

    def settled(self, section: CounterSection, volatile: CounterTables) -> CounterSection:
        """The empty windows its memos hold back, closed (:meth:`CounterTables.settled`)."""
        return volatile.settled(section)

    def forget(self, volatile: CounterTables, names: frozenset[str]) -> CounterTables:
        """The counters of the other devices are kept (a rename is no restart for them)."""
        return volatile.without(names)

    def rename(self, section: CounterSection, renames: Mapping[str, str], now: datetime
               ) -> CounterSection:
        """Snapshots, latched breaches and saturation of a renamed device under its new name
        (a breach latched before a rename stays latched)."""
        return renamed(section, renames)

    def urgent(self, old: CounterSection, new: CounterSection, config: Config) -> bool:
        """Anything but velocity snapshots that advanced (:func:`urgent_counter_change`)."""
        return urgent_counter_change(old, new, config.active_counters)

    def baseline_checks(self, snapshot: HostSnapshot) -> frozenset[str]:
        return frozenset({IB_DEGRADATION_CHECK, ETH_DEGRADATION_CHECK})

    def observations(self, picture: Optional[Observations]) -> Mapping[str, CounterObservation]:
        seen: Mapping[str, CounterObservation] = picture or {}
        return seen

    def counter_rows(self, section: CounterSection, picture: Optional[Observations],
                     device: DeviceSnapshot,
                     port: int, config: Config) -> Iterable[JsonObject]:
        """The configured counters of a ConnectX device (an EFA device's are EFA's)."""
        if device.is_efa:
            return ()
        return counter_rows(section, self.observations(picture), device, port,
                            config.active_counters)

    def judges(self, device: DeviceSnapshot, port: PortSnapshot) -> bool:
        """Every port but an EFA's (the EFA counter family's)."""
        return not device.is_efa

    def conditions(self, section: CounterSection,
                   picture: Optional[Observations]) -> Iterable[Condition]:
        """Each latched breach (fatal or not) and each saturation reported as an event."""
        for key in sorted(section.breach_flags):
            flag = section.breach_flags[key]
            yield _condition(key, FATAL if flag.is_fatal else DEGRADED, "breached")
        for key in sorted(section.saturated):
            yield _condition(key, DEGRADED, "saturated")


# Counters that count the outage a port-state edge is: held with the edge, and a blip's
# rise is absorbed, so that a blip within stateHoldDown publishes nothing.
LINK_DOWN_COUNTERS = ("link_downed", "carrier_changes")
_HELD = Unreadable("held down with the port state (stateHoldDown)")


def _hold_phase(port: PortSnapshot, layer: str, links: LinkStateSection, cycle: Cycle
                ) -> Optional[str]:
    health = (port_health(port.state, port.phys_state, port.link_layer or layer)
              if port.readable else None)
    return hold_phase(links.port_states.get(port.key), links.port_holds.get(port.key), health,
                      cycle.now, cycle.config.settings(LinkStateSettings).state_hold_down)


def _held(port: PortSnapshot) -> PortSnapshot:
    """The port with its link-down counters unknown this poll: their rise waits."""
    if not any(name in port.counters for name in LINK_DOWN_COUNTERS):
        return port
    counters = {name: _HELD if name in LINK_DOWN_COUNTERS else value
                for name, value in port.counters.items()}
    return replace(port, counters=counters)


def _absorb(port: PortSnapshot, state: CounterSection, memory: CounterTables,
            now: datetime) -> None:
    """A blip ended: its link-down counters start again from their value now (unless a
    breach is latched on them: the engine judges those as ever)."""
    held = memory.memos.pop((port.device, port.port), None)  # judged afresh next poll
    if held is not None:
        settle(held, state.counter_snapshots, memory.last_times)
    for name in LINK_DOWN_COUNTERS:
        value = port.counters.get(name)
        key = counter_key(port.device, port.port, name)
        if is_value(value) and key not in state.breach_flags:
            assert isinstance(value, int)
            state.counter_snapshots[key] = CounterSnap(value, now)
            memory.last_values[key] = value
            memory.last_times[key] = now


def _condition(key: str, health: str, kind: str) -> Condition:
    parsed = _split_key(key)
    if parsed is None:
        return Condition(health, f"{key} {kind}")
    return Condition(health, f"{parsed[1]} {kind}", parsed[0], alone=f"{key} {kind}",
                     code=parsed[1])


def _split_key(key: str) -> Optional[tuple[PortId, str]]:
    """``mlx5_0:1:link_downed`` -> ((``mlx5_0``, 1), ``link_downed``)."""
    parts = key.split(":", 2)
    if len(parts) != 3 or not parts[1].isdigit():
        return None
    return (parts[0], int(parts[1])), parts[2]


FAMILY = LINK_COUNTERS = LinkCounters()
