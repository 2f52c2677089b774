"""Counter evaluation: delta and velocity thresholds with latching breaches.

The rules of link-counter-detection §6.3 and §10.4. Pure: it reads a port's counter values from the
snapshot and the previous state, and writes the next state into the ``next_state`` and the next
:class:`CounterTables` it is given (both copies the caller adopts only when the poll is committed).
What a counter is comes from the reader as data (``PortSnapshot.counter_kinds``, a
:class:`~nichealthd.core.model.CounterKind`): this module never looks at a file's path. Rules beyond
the spec (the kernel's counter widths):

- A wrapping counter (a 32-bit ``hw_counters`` value) that drops from near 2^32 wrapped (it
  is not a reset). While a breach is latched, the last value seen is persisted with it, so
  that a wrap across a restart is judged against that value and not against the snapshot
  taken at the breach.
- Saturation. A saturating counter (IB PMA under ``counters/``) stops at all-ones; a
  delta monitor is blind on such a counter until it is cleared. Saturation is judged once per
  counter *file* of a port (``symbol_error`` and ``symbol_error_fatal`` read one file: one
  report), every poll, on the value read, outside the per-entry rules (so no branch of them can skip
  it). What it is depends on the counter:

  * an **error counter** (``symbol_error``, ``link_downed``, ``port_rcv_errors``, ...) that
    goes blind is one non-fatal event under the layer's degradation check, ``errorCode`` the
    file's counter name; when the counter leaves the limit (cleared) one healthy event closes
    it. An event of the same identity in the same poll (the threshold breach that took the
    counter to its limit, the recovery of its latched breach when it is cleared) carries the
    news instead; and while the identity is open already (a latched breach of that check on
    the counter, or the saturation report itself when a velocity window fills only after the
    counter reached its limit) no second unhealthy event is sent: one report per condition;
  * a **traffic or congestion counter** (``port_xmit_wait``, ``port_{xmit,rcv}_data``,
    ``*_packets``: ``TRAFFIC_COUNTERS``) reaches its limit on a healthy busy host
    (``port_xmit_wait`` at 5,000 ticks/s in about ten days): no event, only a log line and
    the ``saturated`` flag (views, D-Bus, the ``nichealthd_saturated`` metric).

- Every counter files under the layer's degradation check, a fatal one too (NVSentinel's
  own monitor since NVSentinel #1492; :meth:`CheckNames.for_counter` says why), so a fatal breach
  and its counter's saturation are one identity: one report.
"""

from __future__ import annotations

from dataclasses import dataclass, field, replace
from datetime import datetime, timedelta
from typing import Collection, Mapping, MutableMapping, NamedTuple, Optional, TypeVar

from ..config import CounterSpec
from ..events import HealthEvent, make_event, port_entities
from ..model import CounterKind, CounterReading, PortSnapshot
from ..observed import CounterObservation
from ..state import counter_key
from .counter_section import BreachFlag, CounterSection, CounterSnap

C = TypeVar("C", bound=CounterSection)

# Traffic and congestion counters: saturation is what a busy healthy host does, not a fault.
# Of these only port_xmit_wait saturates (mlx5 shows the data and packet counters as 64-bit
# extended counters); the others are listed so that the rule holds if one is added.
TRAFFIC_COUNTERS = frozenset({
    "port_xmit_wait", "port_xmit_data", "port_rcv_data", "port_xmit_packets",
    "port_rcv_packets", "unicast_xmit_packets", "unicast_rcv_packets",
    "multicast_xmit_packets", "multicast_rcv_packets",
})


T = TypeVar("T")

# The picture of a family that counts: what the poll computed of each counter it judges.
Observations = Mapping[str, CounterObservation]


@dataclass
class CounterTables:
    """The counter engine's volatile memory, a counting family's own (its ``V``,
    core/family.py): the last value read of each counter and when (link-counter-detection §6.3
    ``lastPollValue``), and each velocity counter's last closed window.

    Not persisted: after a restart the persisted snapshot stands in for it. Like a section it
    is a value of one poll: a family counts into a :meth:`copy` and returns it in its
    verdict, which the evaluator keeps only if the family succeeds and the monitor only with
    the commit, so a poll whose commit failed leaves no trace (a reset it saw is seen again
    by the next poll, and its recovery is sent).
    """

    last_values: dict[str, int] = field(default_factory=dict)
    last_times: dict[str, datetime] = field(default_factory=dict)
    # The last closed window of each velocity counter: while the next one fills, its delta
    # and rate are what the counter shows.
    closed_windows: dict[str, CounterObservation] = field(default_factory=dict)
    # Each port's counter entries under the current config, so that a poll does not work
    # out again which counters a port has, under which check and state key. A cache of
    # what config and files determine, not state: copies share it.
    port_entries: dict[tuple[str, int], PortEntries] = field(default_factory=dict)
    # What the last judgement of each port's counters left steady (:class:`PortMemo`): the
    # counters a poll with the same readings need not judge again. Values of one poll, like
    # the tables above (a memo is never changed, a poll makes a new one).
    memos: dict[tuple[str, int], PortMemo] = field(default_factory=dict)
    # Whether this poll held back the closing of empty windows (:func:`_unchanged`): the
    # section then differs from :meth:`settled`, the one a restart must find.
    held_back: bool = False

    @staticmethod
    def next_of(volatile: Optional[CounterTables]) -> CounterTables:
        """What a counting family counts into: a copy of its tables of the last poll, or
        new ones (a first poll, a restart, a rename)."""
        return volatile.copy() if volatile is not None else CounterTables()

    def copy(self) -> CounterTables:
        """A copy whose values can change without touching this one (the cache is shared)."""
        return CounterTables(dict(self.last_values), dict(self.last_times),
                             dict(self.closed_windows), self.port_entries, dict(self.memos))

    def settled(self, section: C) -> C:
        """``section`` with what the memos hold back written (:func:`settle`): the section
        of an engine that closed every empty window at every poll (a snapshot advances at
        each full window: link-counter-detection §6.6), which is the one persisted and
        renamed. ``section`` itself when nothing is held back."""
        held = [memo for memo in self.memos.values() if memo.whole and memo.closing]
        if not held:
            return section
        made = section.copy()
        for memo in held:
            settle(memo, made.counter_snapshots, {})  # the read times are not persisted
        return made

    def without(self, names: Collection[str]) -> CounterTables:
        """A copy without the counters of the devices ``names`` (renamed: the persisted
        snapshots stand in for them, as after a restart)."""
        def kept(table: Mapping[str, T]) -> dict[str, T]:
            return {k: v for k, v in table.items() if k.partition(":")[0] not in names}
        return CounterTables(kept(self.last_values), kept(self.last_times),
                             kept(self.closed_windows),
                             {k: v for k, v in self.port_entries.items() if k[0] not in names},
                             {k: v for k, v in self.memos.items() if k[0] not in names})


def unless_same(section: C, previous: C) -> C:
    """``previous`` itself when the poll wrote nothing new into ``section``, its copy: on a
    quiet host the section stays the same value, which the commit then compares by identity
    (:func:`~nichealthd.core.evaluate.urgent_change`) and a restart finds as it was."""
    return previous if section == previous else section


class SaturatingFile(NamedTuple):
    """A counter file of a port that can saturate, read through the entry ``name``."""

    name: str  # the first enabled entry reading the file: its reading is the file's value
    file: str  # the counter's own name (the file name): errorCode of the report
    key: str  # ``<device>:<port>:<file>``, the key in CounterSection.saturated(_quiet)
    limit: int
    reported: bool  # an event (error counter, degradation check enabled), else quiet


CounterEntry = tuple[CounterSpec, str, str, CounterKind]  # (spec, check name, state key, kind)


@dataclass(frozen=True)
class PortEntries:
    """The enabled counter entries of one port: (spec, check name, state key) each."""

    specs: tuple[CounterSpec, ...]
    checks: CheckNames
    enabled: frozenset[str]
    kinds: Mapping[str, CounterKind]
    entries: tuple[CounterEntry, ...]
    saturating: tuple[SaturatingFile, ...] = ()
    # Entry keys of saturating files that are not the file's key (symbol_error_fatal): where
    # state files written before saturation was kept per file recorded it a second time.
    stale: tuple[str, ...] = ()
    # The port's event entities and its name in messages (used only when an event is made).
    entities: tuple[tuple[str, str], ...] = ()
    where: str = ""
    device: str = ""
    port: int = 0

    @classmethod
    def of(cls, port: PortSnapshot, specs: tuple[CounterSpec, ...], checks: CheckNames,
           enabled: frozenset[str], memory: CounterTables) -> PortEntries:
        """The port's entries, remembered in ``memory`` while config and files stay the same."""
        known = memory.port_entries.get((port.device, port.port))
        if known is not None and known.fits(port, specs, checks, enabled):
            return known
        made = cls._made(port, specs, checks, enabled)
        memory.port_entries[(port.device, port.port)] = made
        return made

    def fits(self, port: PortSnapshot, specs: tuple[CounterSpec, ...], checks: CheckNames,
             enabled: frozenset[str]) -> bool:
        """Whether these are the entries of ``port`` under this config (its files' kinds)."""
        kinds = port.counter_kinds
        return (self.specs is specs and self.checks is checks
                and (self.enabled is enabled or self.enabled == enabled)
                and (self.kinds is kinds or self.kinds == kinds))

    @classmethod
    def _made(cls, port: PortSnapshot, specs: tuple[CounterSpec, ...], checks: CheckNames,
              enabled: frozenset[str]) -> PortEntries:
        """The port's entries worked out: each enabled counter's check, state key and kind,
        and each counter file that can saturate, once (read through its first entry)."""
        kinds = port.counter_kinds
        entries = []
        saturating: dict[str, SaturatingFile] = {}
        stale = []
        for spec in specs:
            check = checks.for_counter(spec)
            if check not in enabled:
                continue
            key = counter_key(port.device, port.port, spec.name)
            kind = kinds.get(spec.name, PLAIN)
            entries.append((spec, check, key, kind))
            limit = kind.limit
            if limit is None:
                continue
            file = kind.file
            if file != spec.name:
                stale.append(key)
            if file not in saturating:
                saturating[file] = SaturatingFile(
                    spec.name, file, counter_key(port.device, port.port, file), limit,
                    file not in TRAFFIC_COUNTERS and checks.degradation in enabled)
        files = {sat.key for sat in saturating.values()}
        return cls(specs, checks, enabled, kinds, tuple(entries), tuple(saturating.values()),
                   tuple(k for k in stale if k not in files),
                   port_entities(port.device, port.port), f"port {port.device} port {port.port}",
                   port.device, port.port)


@dataclass(frozen=True)
class CheckNames:
    """The check names of one link layer."""

    state: str
    degradation: str

    def for_counter(self, spec: CounterSpec) -> str:
        """Every counter files under the degradation check, a fatal one too.

        Beyond the spec (link-counter-detection §11.1 files fatal counters under the state check),
        as NVSentinel's own monitor does since NVSentinel #1492: a latched breach outlives any
        port-state recovery, and a recovery (``ACTIVE``/``LinkUp``) under the state check's name
        would clear the counter's condition in NVSentinel's fault-quarantine while the latch still
        holds.
        ``isFatal`` (REPLACE_VM) is unchanged. A breach persisted under the state check by
        an older nichealthd keeps that name (:class:`BreachFlag` ``check_name``): its
        recovery is sent under the name it was raised with.
        """
        return self.degradation


# A counter the reader said nothing about (no file, a test's bare snapshot): 64-bit, plain.
PLAIN = CounterKind("")


def wrapped_delta(kind: CounterKind, old: int, new: int) -> Optional[int]:
    """The increase from ``old`` to ``new``, or None when the counter was reset.

    A decrease of a wrapping counter (a 32-bit ``hw_counters`` value) from the top quarter to
    the bottom quarter of its range is a wrap: the increase is ``new + 2^width - old``.
    """
    if new >= old:
        return new - old
    modulus = kind.modulus
    if modulus is not None and modulus * 3 // 4 <= old < modulus and new < modulus // 4:
        return new + modulus - old
    return None


class Steady(NamedTuple):
    """A counter that a poll reading the same ``value`` need not judge again: what the full
    path would show of it then (``observation``), and for how long that holds.

    ``window`` (a velocity window's ``window_full_after``): a window with nothing in it,
    closed at the memo's poll. Judged again with the same reading it closes again, empty, as
    soon as ``window`` seconds have passed (its snapshot moves to that poll and nothing else
    changes), and stays open until then. ``due``: a velocity window still filling, judged
    again from then on. Neither: a quiet delta counter or a latched breach, never due.
    """

    value: int
    observation: CounterObservation
    window: float = 0.0
    due: Optional[datetime] = None


class PortMemo(NamedTuple):
    """What judging one port's counters at ``at`` left steady (:class:`Steady`, by key), so
    that the next poll judges only the counters that moved or are due.

    ``whole``: every entry was steady or not read; a poll whose readings are those of
    ``counters`` then skips the port at once: it shows ``observations`` again and, if no
    window is due (``due``, ``window``), judges and writes nothing. It closes the empty
    windows of ``closing`` and reads the counters of ``read`` all the same, by making the
    port's memo of that poll: a whole memo's ``at`` is when they last closed and were read,
    which the section and the tables learn only when they need it (:func:`settle`). Valid
    only while the port's entries are ``entries`` (the same config and files) and the clock
    does not go back before ``at``.
    """

    entries: PortEntries
    counters: Mapping[str, CounterReading]
    at: datetime
    steady: Mapping[str, Steady]
    whole: bool = False
    observations: Mapping[str, CounterObservation] = {}
    read: tuple[str, ...] = ()  # the keys read as values (last read at ``at``)
    closing: tuple[tuple[int, tuple[str, ...]], ...] = ()  # empty windows by value
    window: float = 0.0  # the longest of those windows
    due: Optional[datetime] = None  # the earliest window still filling is due


# A window still filling is judged again a millisecond before it is full by the clock, so
# that the float comparison of the full path (elapsed < window_full_after) decides.
_MARGIN = timedelta(milliseconds=1)
_NOTHING_STEADY: Mapping[str, Steady] = {}


@dataclass(frozen=True)
class CounterPoll:
    """One poll of a counting family, as every reading of it is judged: the last poll's
    section, the next one and the volatile memory it writes, the observations it shows.

    Made once per family and poll (slotted: read for every counter of every port).
    ``remember``: keep a :class:`PortMemo` of each port, so that an unchanged counter is not
    judged again. A family whose section something besides the engine changes between polls
    (the AER family drops the records of root ports) does not."""

    __slots__ = ("previous", "next_state", "memory", "observations", "now", "baseline",
                 "snapshots", "flags", "last_values", "last_times", "steady", "memos")

    previous: CounterSection
    next_state: CounterSection
    memory: CounterTables
    observations: MutableMapping[str, CounterObservation]
    now: datetime
    baseline: bool  # a fresh start: a counter's first reading tells it is healthy
    # The tables every reading looks up, taken out of the sections once (see __init__).
    # next_state.counter_snapshots: each counter is judged once a poll, so before its own
    # judgement it holds the previous poll's snapshot, or the one a memo held back.
    snapshots: Mapping[str, CounterSnap]
    flags: dict[str, BreachFlag]  # next_state.breach_flags (written in place)
    last_values: dict[str, int]  # memory's
    last_times: dict[str, datetime]  # memory's
    # Where the full path says a counter it judged is steady (key -> Steady), for the memo.
    steady: Optional[dict[str, Steady]]
    memos: Optional[dict[tuple[str, int], PortMemo]]  # memory's, if remembered

    def __init__(self, previous: CounterSection, next_state: CounterSection,
                 memory: CounterTables, observations: MutableMapping[str, CounterObservation],
                 now: datetime, baseline: bool, *, remember: bool = True) -> None:
        fields = dict(previous=previous, next_state=next_state, memory=memory,
                      observations=observations, now=now, baseline=baseline,
                      snapshots=next_state.counter_snapshots, flags=next_state.breach_flags,
                      last_values=memory.last_values, last_times=memory.last_times,
                      steady={} if remember else None,
                      memos=memory.memos if remember else None)
        for name, value in fields.items():
            object.__setattr__(self, name, value)  # frozen


def evaluate_port_counters(
    port: PortSnapshot,
    specs: tuple[CounterSpec, ...],
    checks: CheckNames,
    enabled_checks: frozenset[str],
    poll: CounterPoll,
    notes: Optional[list[str]] = None,
    *,
    rebase: bool = False,
) -> list[HealthEvent]:
    """Evaluate every configured counter of one port; returns the events in order.

    Only what changed is judged. A counter whose reading is the one a steady judgement of it
    saw (the port's :class:`PortMemo`) is shown as then, at the cost of a comparison; a port
    whose readings are all as then is skipped whole. Every other reading takes the one path
    of :func:`_evaluate_one`, and the outcome is the one that path gives in every case
    (tests/core/test_counter_memo.py replays both side by side). ``notes`` receives the log
    lines of saturation that is not an event (traffic counters). ``rebase``: the port's
    device is back from a driver event: a decrease is a reset as always, any other reading
    starts a fresh window without being judged (nothing is skipped).
    """
    now, memos = poll.now, poll.memos
    where = (port.device, port.port)
    remembered = poll.memory.port_entries.get(where)
    readings = port.counters
    kept = memos.get(where) if memos is not None else None
    memo = kept if not rebase else None
    if memo is not None and (memo.entries is not remembered or now < memo.at
                             or not memo.entries.fits(port, specs, checks, enabled_checks)):
        memo = None  # another config or other files; or the clock went back
    if memo is not None:
        gap = (now - memo.at).total_seconds()
        if (memo.whole and gap >= memo.window and (memo.due is None or now < memo.due)
                and (memo.counters is readings or memo.counters == readings)):
            _unchanged(poll, memo, where)
            return []
        known = memo.entries
    else:
        gap = 0.0
        known = PortEntries.of(port, specs, checks, enabled_checks, poll.memory)
    if kept is not None:  # judged in full: what its memo held back first
        settle(kept, poll.next_state.counter_snapshots, poll.last_times)
    events: list[HealthEvent] = []
    observations = poll.observations
    last_values, last_times = poll.last_values, poll.last_times
    old = memo.steady if memo is not None else _NOTHING_STEADY
    scratch = poll.steady
    steady: dict[str, Steady] = {}
    whole = True
    for entry in known.entries:
        key = entry[2]
        reading = readings.get(entry[0].name)
        if type(reading) is not int:  # ABSENT or Unreadable (is_value, inline: a hot loop)
            observations[key] = _UNKNOWN
            continue
        was = old.get(key)
        if was is not None and was.value == reading:
            if was.window:  # an empty window: closed again, or open until full
                if gap >= was.window:
                    poll.next_state.counter_snapshots[key] = _new(CounterSnap, (reading, now))
                else:
                    assert memo is not None
                    was = _new(Steady, (reading, was.observation, 0.0,
                                        memo.at + timedelta(seconds=was.window) - _MARGIN))
            elif was.due is not None and now >= was.due:
                was = None
            if was is not None:
                steady[key] = was
                observations[key] = was.observation
                last_times[key] = now
                continue
        event = _evaluate_one(poll, known, entry, reading, rebase)
        if event is not None:
            events.append(event)
        last_values[key] = reading
        last_times[key] = now
        if scratch is not None:
            said = scratch.pop(key, None)
            if said is None:
                whole = False
            else:
                steady[key] = said
    next_state = poll.next_state
    if known.saturating or next_state.saturated or next_state.saturated_quiet:
        _saturation(poll, known, port, events, notes, checks.degradation,
                    rebuilt=known is not remembered)
    if memos is not None:
        memos[where] = _memo(known, readings, now, steady, whole and not events, observations)
    return events


def _memo(known: PortEntries, readings: Mapping[str, CounterReading], now: datetime,
          steady: dict[str, Steady], whole: bool,
          observations: Mapping[str, CounterObservation]) -> PortMemo:
    """The port's memo after a poll that judged it (:class:`PortMemo`)."""
    if not whole:
        return PortMemo(known, readings, now, steady)
    closing: dict[int, list[str]] = {}
    window = 0.0
    due: Optional[datetime] = None
    for key, said in steady.items():
        if said.window:
            closing.setdefault(said.value, []).append(key)
            window = max(window, said.window)
        elif said.due is not None and (due is None or said.due < due):
            due = said.due
    return PortMemo(known, readings, now, steady, True,
                    {entry[2]: observations[entry[2]] for entry in known.entries},
                    tuple(steady), tuple((value, tuple(keys)) for value, keys in closing.items()),
                    window, due)


def _unchanged(poll: CounterPoll, memo: PortMemo, where: tuple[str, int]) -> None:
    """A port whose readings are all as its memo saw them, with no window due: shown as
    then, and nothing else is written. Its empty windows close and its counters are read at
    this poll, which the memo of this poll holds (its ``at``) until the port is judged in
    full, renamed or persisted (:func:`settle`, :meth:`CounterTables.settled`)."""
    poll.observations.update(memo.observations)
    assert poll.memos is not None
    poll.memos[where] = _new(PortMemo, (memo[0], memo[1], poll.now) + memo[3:])
    if memo.closing:
        poll.memory.held_back = True


def settle(memo: PortMemo, snapshots: dict[str, CounterSnap],
           last_times: dict[str, datetime]) -> None:
    """What a port's memo holds back, written: a whole memo's empty windows closed (one
    shared snapshot per value) and its counters read at its ``at``."""
    if not memo.whole:
        return
    at = memo.at
    for value, keys in memo.closing:
        snapshots.update(dict.fromkeys(keys, _new(CounterSnap, (value, at))))
    last_times.update(dict.fromkeys(memo.read, at))


_UNKNOWN = CounterObservation(None, None, None)
# A NamedTuple's constructor is a Python function; the readings of every counter of every
# port make theirs with tuple's own (a third of the cost), in the hot branches only.
_new = tuple.__new__


def _evaluate_one(poll: CounterPoll, known: PortEntries, entry: CounterEntry, value: int,
                  rebase: bool) -> Optional[HealthEvent]:
    """One reading of one counter entry: its observation, next snapshot, latch, and event.

    Ordered so that the common case (a counter that has not moved) costs a few dictionary
    look-ups and comparisons; the arithmetic of a delta or a window runs only when needed,
    and the rare cases (first reading, reset, rebase, latched, fresh window) are helpers.
    """
    spec, check, key, kind = entry
    snap = poll.snapshots.get(key)
    if snap is None:
        return _first_reading(poll, known, spec, check, key, value)
    flags = poll.flags
    flag = flags.get(key) if flags else None
    last = poll.last_values.get(key)
    if last is None:  # first poll after a restart: the last value persisted with a latch
        last = _persisted_last(snap, flag)
    if value < last and wrapped_delta(kind, last, value) is None:
        return _reset(poll, known, spec, key, value, flag)
    if rebase:
        _rebased(poll, key, value, flag)
        return None
    if flag is not None:
        _latched(poll, key, kind, snap, value, flag)
        return None
    old = snap.value
    delta = value - old if value >= old else wrapped_delta(kind, old, value)
    now = poll.now
    if delta is None or now < snap.timestamp:
        _fresh_window(poll, key, value)
        return None
    if spec.is_velocity:
        elapsed = (now - snap.timestamp).total_seconds()
        if elapsed < spec.window_full_after:
            seen = poll.observations[key] = _carry(poll.memory.closed_windows.get(key), value)
            if poll.steady is not None:  # shown the same until the window is full
                poll.steady[key] = _new(Steady, (value, seen, 0.0, snap.timestamp + timedelta(
                    seconds=spec.window_full_after) - _MARGIN))
            return None  # window not full yet: keep the snapshot, never extrapolate
        rate = delta / elapsed * spec.window_seconds
        poll.next_state.counter_snapshots[key] = _new(CounterSnap, (value, now))
        seen = poll.observations[key] = poll.memory.closed_windows[key] = _new(
            CounterObservation, (value, delta, rate))
        if not delta:  # an empty window (a rate of 0 never exceeds a threshold: >= 0)
            if poll.steady is not None:
                poll.steady[key] = _new(Steady, (value, seen, spec.window_full_after, None))
            return None
        breached = rate > spec.threshold
    elif not delta:
        # Quiet over the poll: no rate to work out, and the snapshot stays (an idle counter
        # never forces a state write).
        seen = poll.observations[key] = _new(CounterObservation, (value, 0, 0.0))
        if poll.steady is not None:
            poll.steady[key] = _new(Steady, (value, seen, 0.0, None))
        return None  # a delta of 0 never exceeds a threshold (config: threshold >= 0)
    else:
        # Delta over one poll interval; the rate shown uses the last poll's time.
        since = poll.last_times.get(key, snap.timestamp)
        interval = (now - since).total_seconds()
        rate = delta / interval if interval > 0 else 0.0
        poll.next_state.counter_snapshots[key] = CounterSnap(value, now)
        poll.observations[key] = CounterObservation(value, delta, rate)
        breached = delta > spec.threshold
    if not breached:
        return None
    return _breach(poll, known, spec, check, key, value, delta, rate)


def _first_reading(poll: CounterPoll, known: PortEntries, spec: CounterSpec, check: str,
                   key: str, value: int) -> Optional[HealthEvent]:
    """First poll for this key: establish the baseline; after a reboot (or with no state)
    tell the platform the counter is healthy, clearing any stale condition."""
    _fresh_window(poll, key, value)
    if not poll.baseline:
        return None
    return make_event(
        check, fatal=False, healthy=True, error_code=spec.name, entities=known.entities,
        message=f"Counter {spec.name} healthy after reboot on {known.where}", at=poll.now)


def _persisted_last(snap: CounterSnap, flag: Optional[BreachFlag]) -> int:
    """The last value seen before a restart: the one persisted with a latch, else the
    snapshot's."""
    return snap.value if flag is None or flag.last_value is None else flag.last_value


def _reset(poll: CounterPoll, known: PortEntries, spec: CounterSpec, key: str, value: int,
           flag: Optional[BreachFlag]) -> Optional[HealthEvent]:
    """Reset (driver reload, device reset, admin clear): restart the window from here and
    clear a latched breach with a recovery carrying the breach's own check name."""
    _fresh_window(poll, key, value)
    poll.memory.closed_windows.pop(key, None)
    if poll.next_state.breach_flags.pop(key, None) is None or flag is None:
        return None
    return make_event(
        flag.check_name, fatal=False, healthy=True, error_code=spec.name,
        entities=known.entities, message=f"Counter {spec.name} recovered on {known.where}",
        at=poll.now)


def _rebased(poll: CounterPoll, key: str, value: int, flag: Optional[BreachFlag]) -> None:
    """Back from a driver event: start a fresh window here (a latch stays latched, at the
    last value seen)."""
    _fresh_window(poll, key, value)
    poll.memory.closed_windows.pop(key, None)
    if flag is not None and flag.last_value != value:
        poll.next_state.breach_flags[key] = replace(flag, last_value=value)


def _latched(poll: CounterPoll, key: str, kind: CounterKind, snap: CounterSnap, value: int,
             flag: BreachFlag) -> None:
    """A latched breach says nothing until a reset or a reboot; its counter is still shown
    (its delta), and its window restarts as any other's would."""
    if flag.last_value != value:
        # Latched and still moving: persist where it is, so that a wrap across a restart is
        # judged against the last value seen, not against the breach's snapshot.
        poll.next_state.breach_flags[key] = replace(flag, last_value=value)
    old = snap.value
    delta = value - old if value >= old else wrapped_delta(kind, old, value)
    if delta is None or poll.now < snap.timestamp:
        _fresh_window(poll, key, value)
    else:
        seen = poll.observations[key] = CounterObservation(value, delta, None)
        if poll.steady is not None:  # nothing changes until a reset or a reboot
            poll.steady[key] = Steady(value, seen)


def _fresh_window(poll: CounterPoll, key: str, value: int) -> None:
    """A new snapshot (a window) starts at this reading: after increments that overflowed
    the window or a wall clock that went backwards (the window is meaningless), a reset or
    a rebase; and at a counter's first reading."""
    poll.next_state.counter_snapshots[key] = CounterSnap(value, poll.now)
    poll.observations[key] = CounterObservation(value, None, None)


def _breach(poll: CounterPoll, known: PortEntries, spec: CounterSpec, check: str, key: str,
            value: int, delta: int, rate: float) -> HealthEvent:
    """Latch a threshold breach (the last value seen is kept with it) and make its event."""
    poll.next_state.breach_flags[key] = BreachFlag(check, spec.is_fatal, poll.now,
                                                   last_value=value)
    return make_event(
        check, fatal=spec.is_fatal, healthy=False, error_code=spec.name,
        entities=known.entities,
        message=(f"Port {known.device} port {known.port}: {spec.name} - {spec.description} "
                 f"(value={value}, delta={delta}, rate={rate:.2f}{spec.unit_label})"),
        at=poll.now)


def release_unconfigured(state: CounterSection, configured: frozenset[str],
                         enabled_checks: frozenset[str], now: datetime
                         ) -> list[tuple[str, HealthEvent]]:
    """Latched breaches of counters no longer configured (switched off or removed), released.

    Such a counter is not read any more, so no reset can ever clear its latch: it would hold
    its port's condition until the next boot. One healthy event under the breach's own check
    name closes it (a check switched off keeps what it reported, as everywhere). Returns
    (device, event) pairs; ``state`` loses the flags.
    """
    released = []
    for key in sorted(state.breach_flags):
        device, port, name = (key.split(":", 2) + ["", ""])[:3]
        flag = state.breach_flags[key]
        if name in configured or not port.isdigit() or flag.check_name not in enabled_checks:
            continue
        del state.breach_flags[key]
        released.append((device, make_event(
            flag.check_name, fatal=False, healthy=True, error_code=name,
            entities=port_entities(device, int(port)), at=now,
            message=(f"Counter {name} on port {device} port {port} is no longer monitored "
                     f"(switched off in the configuration): its latched breach is released"))))
    return released


def _carry(previous: Optional[CounterObservation], value: int) -> CounterObservation:
    """Keep the last full window's delta and rate while a new window fills (the closed
    window itself while the counter has not moved since)."""
    if previous is None:
        return CounterObservation(value, None, None)
    if previous.value == value:
        return previous
    return CounterObservation(value, previous.delta, previous.rate)


def urgent_counter_change(old: CounterSection, new: CounterSection,
                          specs: tuple[CounterSpec, ...]) -> bool:
    """Whether a counter section changed in more than velocity snapshots that advanced.

    Those are flushed within a minute (a window resumed from an older snapshot still
    computes an honest rate); anything else is written at once. Asked at every commit, when
    a per-second window closes on every poll: only the other snapshots are compared, and
    which keys they are is worked out once per set of keys (:func:`_fixed_keys`).
    """
    if (old.breach_flags, old.saturated, old.saturated_quiet) != (
            new.breach_flags, new.saturated, new.saturated_quiet):
        return True
    was_snaps, snaps = old.counter_snapshots, new.counter_snapshots
    if was_snaps.keys() != snaps.keys():
        return True
    for key in _fixed_keys(snaps, specs):
        snap, was = snaps[key], was_snaps[key]
        if snap is not was and snap != was:
            return True
    return False


# The last answer of _fixed_keys: (specs, the snapshot keys, those of no velocity counter).
_FIXED_KEYS: list[tuple[tuple[CounterSpec, ...], frozenset[str], tuple[str, ...]]] = []


def _fixed_keys(snaps: Mapping[str, object], specs: tuple[CounterSpec, ...]
                ) -> tuple[str, ...]:
    """The keys of ``snaps`` (``<device>:<port>:<name>``, the name may hold ":") whose
    counter is no velocity counter of ``specs``; the last answer while the keys and specs
    are the same (comparing the keys is one C-level pass, naming them a Python one)."""
    if _FIXED_KEYS:
        known_specs, keys, fixed = _FIXED_KEYS[0]
        if known_specs is specs and keys == snaps.keys():
            return fixed
    velocity = frozenset(spec.name for spec in specs if spec.is_velocity)
    fixed = tuple(key for key in snaps if key.split(":", 2)[-1] not in velocity)
    _FIXED_KEYS[:] = [(specs, frozenset(snaps), fixed)]
    return fixed


def saturation_key(device: str, port: int, kind: Optional[CounterKind]) -> Optional[str]:
    """A counter file's key in ``CounterSection.saturated(_quiet)``; None if it cannot saturate."""
    if kind is None or kind.limit is None:
        return None
    return counter_key(device, port, kind.file)


def _saturation(poll: CounterPoll, known: PortEntries, port: PortSnapshot,
                events: list[HealthEvent], notes: Optional[list[str]], check: str,
                rebuilt: bool) -> None:
    """Open or close the saturation report of each counter file of the port (module doc)."""
    reported, quiet = poll.next_state.saturated, poll.next_state.saturated_quiet
    if reported or quiet:
        _forget_unknown(known, port, reported, quiet, rebuilt)
    readings = port.counters
    for sat in known.saturating:
        value = readings.get(sat.name)
        if type(value) is not int:
            continue  # absent or unreadable: nothing is known, the report stays as it is
        table = reported if sat.reported else quiet
        if value == sat.limit:
            _at_limit(poll, known, sat, value, table, events, notes, check)
        elif table.pop(sat.key, None) is not None:
            _off_limit(poll, known, sat, value, events, notes, check)


def _at_limit(poll: CounterPoll, known: PortEntries, sat: SaturatingFile, value: int,
              table: dict[str, datetime], events: list[HealthEvent],
              notes: Optional[list[str]], check: str) -> None:
    """A counter file at its limit: its report opened once (one report per condition)."""
    where = known.where
    if sat.key in table:
        if sat.reported:
            # Told already. A breach of the same identity now (a velocity window
            # that filled after the counter reached its limit) would say it twice.
            same = _same_identity(events, check, sat.file, healthy=False)
            if same is not None:
                del events[same]
        return
    table[sat.key] = poll.now
    if not sat.reported:
        if notes is not None:
            notes.append(f"{sat.file} on {where} is saturated at {value}: a traffic "
                         f"counter (or the degradation check is off), no event")
        return
    news = (f"saturated at {value} - monitoring of this counter is blind until it is "
            f"cleared")
    same = _same_identity(events, check, sat.file, healthy=False)
    flag = poll.next_state.breach_flags.get(sat.key)
    if same is not None:  # the breach that took it there says it too
        events[same] = replace(events[same], message=f"{events[same].message} - {news}")
    elif flag is not None and flag.check_name == check:
        # A breach of the same identity is latched: the platform holds the condition
        # open already; its recovery (the counter's reset) closes both.
        if notes is not None:
            notes.append(f"{sat.file} on {where} is {news} (its latched breach is "
                         f"the open report)")
    else:
        events.append(make_event(
            check, fatal=False, healthy=False, error_code=sat.file, entities=known.entities,
            at=poll.now, message=f"Counter {sat.file} on {where} is {news}"))


def _off_limit(poll: CounterPoll, known: PortEntries, sat: SaturatingFile, value: int,
               events: list[HealthEvent], notes: Optional[list[str]], check: str) -> None:
    """A counter file off its limit again (cleared) whose report was open: closed, by its
    own healthy event unless an event of the same identity in this poll says it."""
    if not sat.reported:
        if notes is not None:
            notes.append(f"{sat.file} on {known.where} is no longer saturated ({value})")
    elif _same_identity(events, check, sat.file, healthy=True) is None:
        events.append(make_event(
            check, fatal=False, healthy=True, error_code=sat.file, entities=known.entities,
            at=poll.now, message=(f"Counter {sat.file} on {known.where} is no longer "
                                  f"saturated (value={value})")))


def _same_identity(events: list[HealthEvent], check: str, name: str, healthy: bool
                   ) -> Optional[int]:
    for index, event in enumerate(events):
        if (event.check_name == check and event.error_code == (name,)
                and event.is_healthy == healthy and event.entities):
            return index
    return None


def _forget_unknown(known: PortEntries, port: PortSnapshot, reported: dict[str, datetime],
                    quiet: dict[str, datetime], rebuilt: bool) -> None:
    """Drop this port's saturation records that no longer match a file it reads.

    A config change, or a state file written before saturation was kept per file (it held
    ``symbol_error_fatal`` beside ``symbol_error``, and ``port_xmit_wait`` as an event). A
    record that changed kind moves to its table silently: what was said stays said. Both
    happen when the port's entries are built (start, reload): then every record of the port
    is checked; otherwise only the port's own keys, so that a busy host with saturated
    traffic counters on every port does not scan the whole table for each port.
    """
    if not rebuilt:
        for key in known.stale:
            reported.pop(key, None)
            quiet.pop(key, None)
        for sat in known.saturating:
            wrong = quiet if sat.reported else reported
            if sat.key in wrong:
                (reported if sat.reported else quiet).setdefault(sat.key, wrong.pop(sat.key))
        return
    prefix = f"{port.device}:{port.port}:"
    kinds = {sat.key: sat.reported for sat in known.saturating}
    for table, is_reported in ((reported, True), (quiet, False)):
        for key in [k for k in table if k.startswith(prefix) and kinds.get(k) is not is_reported]:
            since = table.pop(key)
            if key in kinds:
                (reported if kinds[key] else quiet).setdefault(key, since)
