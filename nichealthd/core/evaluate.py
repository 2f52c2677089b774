"""One poll's pure evaluation: (previous state, snapshot, config, now) -> (events, next state).

No files, no clock, no threads: every rule of both specs is a table of snapshots in the tests.
The evaluation is a loop over the enabled check families (:mod:`nichealthd.core.family`) with
the context they share (roles, monitored devices, the baseline flag). The only memory besides
the persisted state is :class:`PollMemory`: each family's volatile memory (the counter
engine's last value read of each counter, link-counter-detection §6.3 ``lastPollValue``, say), when
each slow family last ran, the picture of its last verdict and each device's role, which a restart
legitimately loses.
Neither input is changed: the result carries the next state and the next memory, which the
monitor adopts only once the poll is committed.

Each family runs inside its own failure boundary (ARCHITECTURE.md): one that raises, or that needs
a part of the snapshot whose source failed (``HostSnapshot.unread``), keeps its previous
section and volatile memory and emits nothing; the others judge as usual. The result names
it in :attr:`CycleResult.failed`, and the surfaces show what it judges as unknown.
"""

from __future__ import annotations

import functools
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from typing import Any, Mapping, Optional

from .checks import enabled_under, families, supplying
from .checks.identity import rename_notes, renames_of
from .config import Config
from .events import BACKDATE, HealthEvent
from .failure import describe_exception
from .family import EVERY_POLL, Cycle, Family, Verdict
from .model import HostSnapshot
from .observed import CounterObservation, DeviceIdentity
from .state import MonitorState
from .suspect import annotate, modules_of
from .topology import Role, Topology, classify_host

__all__ = ["CycleResult", "PollMemory", "Topology", "due_reads", "evaluate", "settled",
           "urgent_change", "watched_functions"]


@dataclass
class PollMemory:
    """What the evaluator keeps between polls that a restart may lose, by family id: each
    family's volatile memory (its ``V``: a value it never changes, it returns the next one
    in its verdict), when each slow family last ran, the picture of its last verdict
    (what the views show of a slow family between its runs, and of a family that failed),
    and each device's role (what a device keeps while its NUMA node cannot be read:
    :func:`~nichealthd.core.topology.classify`).
    """

    volatile: dict[str, object] = field(default_factory=dict)
    ran_at: dict[str, datetime] = field(default_factory=dict)
    pictures: dict[str, object] = field(default_factory=dict)
    roles: Mapping[str, Role] = field(default_factory=dict)

    def copy(self) -> PollMemory:
        """A copy whose tables can change without touching this one (the values are
        never changed)."""
        return PollMemory(dict(self.volatile), dict(self.ran_at), dict(self.pictures),
                          self.roles)


@dataclass(frozen=True)
class CycleResult:
    """The outcome of one evaluation, plus what the views (D-Bus, metrics) show."""

    events: tuple[HealthEvent, ...]
    state: MonitorState
    memory: PollMemory
    roles: dict[str, Role]
    pictures: Mapping[str, Any]  # family id -> what it shows of this poll
    notes: tuple[str, ...] = ()
    # The families that were due and could not judge this poll -> why (they raised, or a
    # part they read was not read): each kept its previous section and emitted nothing.
    failed: Mapping[str, str] = field(default_factory=dict)
    # A family's volatile memory holds back a change of the state (:func:`settled`).
    held_back: bool = False

    @functools.cached_property
    def observations(self) -> Mapping[str, CounterObservation]:
        """What the poll computed of each counter, of every family that counts
        (:meth:`CheckFamily.observations`; their keys are distinct)."""
        found = [seen for family in supplying("observations")
                 for seen in (family.observations(self.pictures.get(family.id)),) if seen]
        if len(found) == 1:
            return found[0]
        return {key: value for seen in found for key, value in seen.items()}


def evaluate(previous: MonitorState, snapshot: HostSnapshot, config: Config,
             topology: Topology, memory: PollMemory, now: datetime, *,
             baseline: bool, earlier: bool = True) -> CycleResult:
    """Evaluate one poll. ``baseline``: first poll after a reboot or with no usable state;
    ``earlier``: False on a host where nichealthd never ran (:attr:`Cycle.earlier`).

    Every enabled family that is due runs on the previous state; one that is not due (its
    cadence) or is disabled keeps its section. A device's events stay together, family after
    family, in the order of the snapshot's monitored devices; host-level events follow.
    """
    memory = memory.copy()
    notes: list[str] = []
    identities, known = _identities(previous)
    renames = renames_of(identities, snapshot, known)
    if renames:  # the same devices under new names: every family's records follow
        notes.extend(rename_notes(renames, identities, now))
        previous = _renamed(settled(previous, memory), renames, now)
        _forget(memory, frozenset(renames) | frozenset(renames.values()))
    enabled = _checks_of(config)
    roles = classify_host(snapshot, topology, config.nic_exclusion_regex,
                          config.nic_inclusion_regex_override, memory.roles)
    memory.roles = roles
    # A VF of the snapshot's index has the VF role: never monitored.
    monitored = tuple(d for d in snapshot.parts.judged if roles[d.name].monitored)
    cycle = Cycle(snapshot, config, topology, now, baseline, enabled, roles, monitored,
                  previous, earlier)
    next_state = previous.copy()
    if snapshot.boot_id:
        next_state.boot_id = snapshot.boot_id
    by_device: dict[str, list[HealthEvent]] = {d.name: [] for d in monitored}
    host: list[HealthEvent] = []
    pictures: dict[str, Any] = {}
    failed: dict[str, str] = {}
    held_back = False
    for family in enabled_under(config):
        if not _due(family, memory, now, config):
            # Between runs of a slow family the views show the picture of its last run.
            if family.id in memory.pictures:
                pictures[family.id] = memory.pictures[family.id]
            continue
        verdict, failure = _judge(family, previous, cycle, memory)
        if verdict is None:
            failed[family.id] = failure
            if family.id in memory.pictures:
                pictures[family.id] = memory.pictures[family.id]
            continue
        if family.interval(config):  # its cadence counts from this run
            memory.ran_at[family.id] = now
        next_state.sections[family.id] = verdict.section
        if verdict.volatile is not None:
            memory.volatile[family.id] = verdict.volatile
        held_back = held_back or verdict.held_back
        if verdict.picture is not None:
            memory.pictures[family.id] = verdict.picture
        if family.id in memory.pictures:
            pictures[family.id] = memory.pictures[family.id]
        notes.extend(verdict.notes)
        for device, event in verdict.events:
            by_device.get(device, host).append(event)
    events = (_check_scoped_clears(_cleared(enabled, snapshot), now) if baseline and earlier
              else [])
    for device_events in by_device.values():
        events.extend(device_events)
    events.extend(host)
    if any(not event.is_healthy for event in events):  # the modules only where one is told
        events = list(annotate(events, snapshot, modules_of(pictures)))
    return CycleResult(tuple(events), next_state, memory, roles, pictures, tuple(notes), failed,
                       held_back)


def settled(state: MonitorState, memory: PollMemory) -> MonitorState:
    """The state to persist: each family's section with what its volatile memory holds
    back (:meth:`CheckFamily.settled`), as a restart or a rename must find it."""
    made: Optional[MonitorState] = None
    for family in supplying("settled"):
        volatile = memory.volatile.get(family.id)
        if volatile is None:
            continue
        section = state.section(family)
        written = family.settled(section, volatile)
        if written is not section:
            made = made or state.copy()
            made.sections[family.id] = written
    return made or state


def _checks_of(config: Config) -> frozenset[str]:
    """The enabled check names, one set per config: the counter engine compares a port's
    entries with the set of each poll, which is then the same object (a config never
    changes; a reload makes a new one)."""
    global _checks
    if _checks is None or _checks[0] is not config:
        _checks = (config, frozenset(config.checks))
    return _checks[1]


_checks: Optional[tuple[Config, frozenset[str]]] = None


def _judge(family: Family, previous: MonitorState, cycle: Cycle,
           memory: PollMemory) -> tuple[Optional[Verdict[Any, Any, Any]], str]:
    """The family's verdict inside its failure boundary, or None and why it has none.

    A family changes neither its section nor its volatile memory (it returns the next of
    each), so one that raised has left both as they were.
    """
    missing = cycle.snapshot.unread  # empty in almost every poll
    unread = sorted(part for part in family.reads if part in missing) if missing else ()
    if unread:
        return None, "; ".join(f"{part} not read: {missing[part]}" for part in unread)
    try:
        return family.evaluate(previous.section(family), cycle,
                               memory.volatile.get(family.id)), ""
    except Exception as exc:  # the boundary: contained, reported, retried
        return None, describe_exception(exc)


def _identities(state: MonitorState) -> tuple[Mapping[str, DeviceIdentity], list[str]]:
    """The recorded hardware identities and known names of every device, of every family
    that keeps them (:meth:`CheckFamily.identities`; an earlier family's record wins)."""
    kept = [known for family in supplying("identities")
            for known in (family.identities(state.section(family)),) if known is not None
            and (known[0] or known[1])]  # a family with none (no EFA device) adds nothing
    if len(kept) == 1:
        return kept[0][0], list(kept[0][1])
    identities: dict[str, DeviceIdentity] = {}
    for table, _ in reversed(kept):
        identities.update(table)
    return identities, [name for _, names in kept for name in names]


def watched_functions(state: MonitorState) -> frozenset[str]:
    """The PCI functions of the known devices (their recorded identities): the reader lists
    the bus in a poll in which one of them has no device, so that a device gone with its
    function still on the bus is told from one that left the bus (core/checks/driver.py).

    Asked every poll; the last answer is kept while the sections that keep identities are
    the ones it was worked out of (a section is a value: a family that changes it makes a
    new one)."""
    global _watched
    sections = tuple(state.sections.get(f.id) for f in supplying("identities"))
    last = _watched
    if last is not None and len(last[0]) == len(sections) and all(
            a is b for a, b in zip(last[0], sections)):
        return last[1]
    identities, _ = _identities(state)
    functions = frozenset(i.pci_address for i in identities.values() if i.pci_address)
    _watched = (sections, functions)
    return functions


_watched: Optional[tuple[tuple[object, ...], frozenset[str]]] = None


def _renamed(state: MonitorState, renames: Mapping[str, str], now: datetime) -> MonitorState:
    """``state`` with every family's records of renamed devices under their new names."""
    renamed = state.copy()
    for family in families():
        renamed.sections[family.id] = family.rename(state.section(family), renames, now)
    return renamed


def _forget(memory: PollMemory, names: frozenset[str]) -> None:
    """Drop the volatile memory of renamed devices, old and new names (a permutation may
    give a name to another device): the persisted state stands in for it, as after a
    restart (:meth:`CheckFamily.forget`: the counter engine drops those devices' counters,
    the other families all they keep). The pictures go too: they name the old devices, and
    so do the roles."""
    for family in families():
        kept = memory.volatile.get(family.id)
        if kept is None:
            continue
        left = family.forget(kept, names)
        if left is None:
            del memory.volatile[family.id]
        else:
            memory.volatile[family.id] = left
    memory.pictures.clear()
    memory.roles = {name: role for name, role in memory.roles.items() if name not in names}


def _due(family: Family, memory: PollMemory, now: datetime, config: Config
         ) -> bool:
    """Every poll, or once per ``cadence`` since its last successful run (and at the first
    poll of a process, and when the wall clock went back)."""
    cadence = family.interval(config)
    if cadence:
        last = memory.ran_at.get(family.id)
        if last is not None and last <= now < last + timedelta(seconds=cadence):
            return False
    return True


def due_reads(config: Config, memory: PollMemory, now: datetime) -> frozenset[str]:
    """The parts not read every poll (the slow PCI parts, the facts of the Source seam) some
    enabled family reading them is due to judge at ``now``: the monitor reads those only,
    by the rule :func:`evaluate` applies to the same memory, so a part is read exactly in the
    polls that judge it."""
    wanted: set[str] = set()
    for family, slow in _slow_reads(config):
        if _due(family, memory, now, config):
            wanted |= slow
    return frozenset(wanted)


def _slow_reads(config: Config) -> tuple[tuple[Family, frozenset[str]], ...]:
    """The enabled families that read a part not read every poll, with those parts: worked
    out once per config (:func:`enabled_under`: a config never changes)."""
    global _slow
    enabled = enabled_under(config)
    if _slow is None or _slow[0] is not enabled:
        _slow = (enabled, tuple((f, f.reads - EVERY_POLL) for f in enabled
                                if f.reads - EVERY_POLL))
    return _slow[1]


_slow: Optional[tuple[tuple[Family, ...], tuple[tuple[Family, frozenset[str]], ...]]] = None


def urgent_change(old: MonitorState, new: MonitorState, config: Config) -> bool:
    """Whether the difference between two states must be written at once (see
    :meth:`CheckFamily.urgent`); the rest is flushed within a minute."""
    if (old.boot_id, old.event_seq) != (new.boot_id, new.event_seq):
        return True
    return any(family.urgent(old.section(family), new.section(family), config)
               for family in families()
               if old.sections[family.id] is not new.sections[family.id])


def _cleared(enabled: frozenset[str], snapshot: HostSnapshot) -> frozenset[str]:
    """The enabled checks whose conditions a baseline clears on this host: those the
    families name (:meth:`CheckFamily.baseline_checks`), enabled or not (a family switched
    off may have reported before the reboot)."""
    named: set[str] = set()
    for family in families():
        named |= family.baseline_checks(snapshot)
    return enabled & named


def _check_scoped_clears(enabled: frozenset[str], now: datetime) -> list[HealthEvent]:
    """One healthy event with no entities per check, strictly older than the rest (NVSentinel
    sorts a batch by time, unstably).

    It clears every condition of the check on the platform, including those of devices that
    no longer exist after the reboot.
    """
    return [
        HealthEvent(check_name=check, is_fatal=False, is_healthy=True,
                    message=f"{check}: no state from this boot - clearing conditions of "
                            f"earlier boots",
                    recommended_action="NONE", error_code=(), entities=(),
                    generated_at=now - BACKDATE)
        for check in sorted(enabled)
    ]
