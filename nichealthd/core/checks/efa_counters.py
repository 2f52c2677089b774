"""The EFA counter family: the efa driver's hw_counters, with the shared counter engine.

The counters are ``Config.efa_counters`` (``DEFAULT_EFA_COUNTERS``: names from
drivers/infiniband/hw/efa/efa_verbs.c, thresholds and their reasons in core/config.py and
nichealthd.toml(5)); the reader looks for them on EFA devices only, and for the configured
(ConnectX) counters everywhere else, so neither is ever looked for on the other. Evaluation is
:func:`~nichealthd.core.checks.counters.evaluate_port_counters`, the engine of the link-counter
family: every counter files under ``EFADegradationCheck``, a fatal one
(``no_completion_cmds``, REPLACE_VM) too (``CheckNames.for_counter``). A counter the device
does not have (the network group before Nitro v4) reads as absent: skipped, and named once in
the start log's list of unavailable counters. Its section is a :class:`CounterSection` under
keys of its own (``efa_*``, :class:`EfaCounterSection`).
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime
from typing import Iterable, Mapping, Optional

from ..codec import Layout
from ..config import EFA_DEGRADATION_CHECK, EFA_STATE_CHECK, Config
from ..events import HealthEvent
from ..family import READS_COUNTERS, READS_PORTS, CheckFamily, Condition, Cycle, Verdict
from ..jsontypes import JsonObject
from ..model import DeviceSnapshot, HostSnapshot, PortSnapshot
from ..observed import CounterObservation
from .counter_rows import counter_rows
from .counter_section import CounterSection
from .counters import (
    CheckNames,
    CounterPoll,
    CounterTables,
    Observations,
    evaluate_port_counters,
    release_unconfigured,
    unless_same,
    urgent_counter_change,
)
from .link_counters import LINK_COUNTERS, renamed

EFA_CHECKS = CheckNames(EFA_STATE_CHECK, EFA_DEGRADATION_CHECK)


@dataclass
class EfaCounterSection(CounterSection):
    """The counter engine's records of the EFA counters, under ``efa_*`` keys, the empty ones
    left out: the state file of a host without EFA is what it was before this family (the
    golden traces of tests/core stay identical)."""

    LAYOUT = Layout(prefix="efa_", omit_empty=True)


class EfaCounters(CheckFamily[EfaCounterSection, Observations, CounterTables]):
    """Delta and velocity thresholds on the EFA counters, as for ConnectX."""

    id = "efa_counters"
    order = 25  # after link_counters
    keys = EfaCounterSection.keys()
    section_type = EfaCounterSection
    reads = frozenset({READS_PORTS, READS_COUNTERS})

    def enabled(self, config: Config) -> bool:
        return bool(config.active_efa_counters) and bool(
            {EFA_STATE_CHECK, EFA_DEGRADATION_CHECK} & set(config.checks))

    def evaluate(self, previous: EfaCounterSection, cycle: Cycle, volatile: Optional[CounterTables]
                 ) -> Verdict[EfaCounterSection, Observations, CounterTables]:
        if not previous.breach_flags and not any(d.is_efa for d in cycle.monitored):
            # Nothing to count and no latch to release (a host without EFA, most): the
            # section and the tables stay as they are, and nothing is shown.
            return Verdict(previous, picture={})
        state, memory = previous.copy(), CounterTables.next_of(volatile)
        events: list[tuple[str, HealthEvent]] = []
        notes: list[str] = []
        observations: dict[str, CounterObservation] = {}
        specs = cycle.config.active_efa_counters
        poll = CounterPoll(previous, state, memory, observations, cycle.now, cycle.baseline)
        for device in cycle.monitored:
            if not device.is_efa:
                continue
            for port in device.ports:
                events.extend((device.name, e) for e in evaluate_port_counters(
                    port, specs, EFA_CHECKS, cycle.enabled, poll, notes))
        if state.breach_flags:
            events.extend(release_unconfigured(
                state, frozenset(s.name for s in specs), cycle.enabled, cycle.now))
        return Verdict(unless_same(state, previous), tuple(events), observations,
                       notes=tuple(notes), volatile=memory, held_back=memory.held_back)

    def settled(self, section: EfaCounterSection, volatile: CounterTables) -> EfaCounterSection:
        """As for the link counters: the empty windows its memos hold back, closed."""
        return volatile.settled(section)

    def forget(self, volatile: CounterTables, names: frozenset[str]) -> CounterTables:
        return LINK_COUNTERS.forget(volatile, names)

    def rename(self, section: EfaCounterSection, renames: Mapping[str, str], now: datetime
               ) -> EfaCounterSection:
        return renamed(section, renames)

    def urgent(self, old: EfaCounterSection, new: EfaCounterSection, config: Config) -> bool:
        """As for the link counters: velocity snapshots that only advanced can wait."""
        return urgent_counter_change(old, new, config.active_efa_counters)

    def baseline_checks(self, snapshot: HostSnapshot) -> frozenset[str]:
        """Only on a host with an EFA device: a ConnectX host says what it said before."""
        return frozenset({EFA_DEGRADATION_CHECK}) if snapshot.parts.any_efa \
            else frozenset()

    def observations(self, picture: Optional[Observations]) -> Mapping[str, CounterObservation]:
        return LINK_COUNTERS.observations(picture)  # the EFA counters' keys are distinct

    def counter_rows(self, section: EfaCounterSection, picture: Optional[Observations],
                     device: DeviceSnapshot,
                     port: int, config: Config) -> Iterable[JsonObject]:
        """The EFA counters of an EFA device, judged by this family alone."""
        if not device.is_efa:
            return ()
        return counter_rows(section, self.observations(picture), device, port,
                            config.active_efa_counters)

    def judges(self, device: DeviceSnapshot, port: PortSnapshot) -> bool:
        """The EFA ports only."""
        return device.is_efa

    def conditions(self, section: EfaCounterSection,
                   picture: Optional[Observations]) -> Iterable[Condition]:
        return LINK_COUNTERS.conditions(section, picture)


FAMILY = EFA_COUNTERS = EfaCounters()
