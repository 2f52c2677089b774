"""One poll cycle end to end: observe sysfs, evaluate, commit events and state together.

The :class:`Monitor` owns the only mutable copy of the state. It decides at start whether the
first poll is a baseline (no usable state, or the boot ID changed: link-counter-detection §6.5), and
it writes the state file only when something the next process must know changed: events, breaches,
port health, devices, delta counters. Velocity snapshots that merely advanced are flushed at
most every ``FLUSH_SECONDS`` (and at stop), with the windows a counter family's memo holds
back closed (:func:`~nichealthd.core.evaluate.settled`) — rewriting the file every second
on thousands of hosts is needless disk wear, and a velocity window resumed from an older
snapshot still computes an honest rate over its real elapsed time.
"""

from __future__ import annotations

import dataclasses
import functools
import logging
import time
from datetime import datetime, timezone
from typing import Callable, Mapping, Optional

from ..core.boot import decide_start
from ..core.checks import enabled_under
from ..core.config import Config
from ..core.evaluate import (
    CycleResult,
    PollMemory,
    Topology,
    due_reads,
    evaluate,
    settled,
    urgent_change,
    watched_functions,
)
from ..core.failure import describe_exception
from ..core.family import READS_COUNTERS
from ..core.model import HostSnapshot
from ..core.pcitopo import summary
from ..core.state import MonitorState
from ..core.topology import Role
from ..core.views import assess_host
from ..sources.boundary import SourceBoundary
from ..sources.kernel_log import KernelLogLines, KernelLogSource
from ..sources.kernel_log_facts import KERNEL_LINES
from ..sources.pcie import PCIE, PciFactsReader, PciSource
from ..sources.seam import Source, source_types
from ..sources.sysfs import SysfsReader
from ..storage.store import (
    CommitError,
    Journal,
    JournalEntry,
    LoadedState,
    load_state,
    move_aside,
    remove_stray_temporaries,
    save_state,
)
from ..surfaces.context import PollOutcome
from .family_watch import FamilyWatch
from .pollguard import COMMIT, EVALUATE, READ, PollFailed, PollGuard

log = logging.getLogger("nichealthd.monitor")

FLUSH_SECONDS = 60.0

# Reads the topology again (GPU matrix and default route) and says why it came from where it
# did: runtime.startup.choose_topology, bound to the config.
TopologyLoader = Callable[[], "tuple[Topology, str]"]


def utc_now() -> datetime:
    return datetime.now(timezone.utc)


class Monitor:
    """Runs cycles against one config; safe to reconfigure between cycles."""

    def __init__(self, config: Config, topology: Topology,
                 reader: Optional[SysfsReader] = None,
                 clock: Callable[[], datetime] = utc_now,
                 monotonic: Callable[[], float] = time.monotonic,
                 topology_loader: Optional[TopologyLoader] = None,
                 topology_reason: str = "",
                 kernel_log: Optional[KernelLogSource] = None) -> None:
        self.config = config
        self.topology = topology
        self.topology_loader = topology_loader
        self.topology_reason = topology_reason
        self.topology_summary = summary(topology.gpus)
        # RDMA devices the topology was read for: a device not among them (a driver loaded
        # after boot) makes the next poll read the topology again (discovery, not per poll).
        self._topology_devices: Optional[frozenset[str]] = None
        self._counters_logged = False  # logged at the first poll that sees a device
        self.reader = reader or SysfsReader(config)
        # The facts of the Source seam (the PCI side's among them), each read when a family
        # needing it is due, inside its own failure boundary.
        self._readers = [cls(self.config) for cls in source_types()]
        for source in self._readers:
            source.keep_open_in(self.reader.files)  # one open-file budget (runtime/fdplan.py)
        self.sources: dict[str, Source] = {fact: source for source in self._readers
                                           for fact in source.facts}
        self._boundaries: dict[str, SourceBoundary] = {
            fact: SourceBoundary(fact, what, log) for source in self._readers
            for fact, what in source.facts.items()}
        if kernel_log is not None:  # given (a test's): instead of the one the config names
            self._kernel_lines.close()
            self._kernel_lines.log = kernel_log
        self.families = FamilyWatch(log)
        self.clock = clock
        self.monotonic = monotonic
        self.journal = Journal(config.state_dir, config.event_history_size)
        self.state = MonitorState()
        self.memory = PollMemory()
        self.baseline = False
        self.earlier = True  # see start(): False until the first commit on a new host
        self.polls = 0
        self.guard = PollGuard(monotonic)
        self.last: Optional[PollOutcome] = None
        self._last_roles: dict[str, Role] = {}
        # What was last made of a poll's roles (asked every poll; the roles of 1,024 devices on
        # an SR-IOV host are the same poll after poll): (whether counters are read, the roles,
        # the devices not counted) and (GPUs, the roles, the topology summary).
        self._uncounted_of: Optional[tuple[bool, Mapping[str, Role], frozenset[str]]] = None
        self._summary_of: Optional[tuple[object, Mapping[str, Role], str]] = None
        self._flushed_at = monotonic()
        self._unflushed = False

    # ---------------------------------------------------------------- start

    def start(self) -> None:
        """Load the state, detect a reboot, recover the journal. Logs what it found."""
        stray = remove_stray_temporaries(self.config.state_dir)
        if stray:
            log.info("removed %d temporary file(s) of interrupted writes from %s: %s",
                     len(stray), self.config.state_dir, ", ".join(stray))
        loaded = load_state(self.config.state_file)
        boot_id = self.reader.observe_boot_id()
        if loaded.problem:
            log.warning("%s; starting with fresh state (healthy baselines will be sent)",
                        loaded.problem)
        for note in loaded.notes:
            log.warning("%s: %s", self.config.state_file, note)
        self.journal.recover(None if loaded.fresh else loaded.state.event_seq)
        recovery = self.journal.last_recovery
        if recovery.mismatch:  # the state is wrong, not the journal: nothing was dropped
            moved = move_aside(self.config.state_file)
            log.warning("%s is corrupt (%s)%s; starting with fresh state (healthy baselines "
                        "will be sent)", self.config.state_file, recovery.mismatch,
                        f"; moved aside to {moved}" if moved else "")
            loaded = LoadedState(MonitorState(), True, recovery.mismatch)
        if recovery.unfinished:
            log.warning("dropped %d journal line(s) of an unfinished commit; that poll is "
                        "evaluated again", recovery.unfinished)
        if recovery.damaged:
            log.error("%s is damaged: %d committed line(s) could not be read and are lost, "
                      "%d readable entries kept%s", self.journal.path, recovery.damaged,
                      recovery.kept,
                      f" (the damaged file is kept as {recovery.copy})" if recovery.copy
                      else "")
        decision = decide_start(None if loaded.fresh else loaded.state, boot_id,
                                self.journal.last_seq)
        if decision.warn:
            log.warning("%s", decision.reason)
        elif decision.baseline and not loaded.fresh:
            log.info("%s", decision.reason)
        self.state, self.baseline = decision.state, decision.baseline
        # No state file (not a corrupt one) and nothing ever committed: nichealthd never ran
        # here, so there are no conditions of earlier boots to clear (core/family.py Cycle).
        self.earlier = not (loaded.fresh and loaded.problem is None
                            and self.journal.last_seq == 0)

    # ---------------------------------------------------------------- cycle

    def _uncounted(self, roles: Mapping[str, Role]) -> frozenset[str]:
        """The devices whose counters the next poll need not read: not monitored, or every
        family that reads counters switched off."""
        counted = any(READS_COUNTERS in f.reads for f in enabled_under(self.config))
        last = self._uncounted_of
        if last is not None and last[0] == counted and (last[1] is roles or last[1] == roles):
            return last[2]
        uncounted = frozenset(name for name, role in roles.items()
                              if not (counted and role.monitored))
        self._uncounted_of = (counted, roles, uncounted)
        return uncounted

    def poll(self) -> PollOutcome:
        """Observe, evaluate and commit one cycle.

        The boundary around the poll: an exception from a reader or a rule raises
        :class:`PollFailed` (logged once per cause, counted, nothing committed, the state
        unchanged); a commit that fails is reported in the outcome. Either way the next poll
        starts from the last committed state.
        """
        started = self.monotonic()
        now = self.clock()
        stage = READ
        try:
            # The known devices' PCI functions: a poll in which one has no device lists the
            # bus, to tell a driver event from a NIC gone from the bus.
            self.reader.watched_functions = watched_functions(self.state)
            snapshot = self.reader.observe(now)
            slow = due_reads(self.config, self.memory, now)
            if slow:
                # Monitored devices, and those not classified yet (the evaluation of this
                # poll classifies them; the families judge the monitored ones only). An
                # SR-IOV VF of the index is never monitored (DeviceIndex).
                roles = self._last_roles
                monitored = [d.name for d in snapshot.parts.judged
                             if d.name not in roles or roles[d.name].monitored]
                snapshot = self._read_slow(snapshot, slow, monitored)
            self._rediscover_topology(snapshot)
            stage = EVALUATE
            if not self._counters_logged and snapshot.devices:
                self._counters_logged = True
                self._log_counter_availability()
            result = evaluate(self.state, snapshot, self.config, self.topology, self.memory,
                              now, baseline=self.baseline, earlier=self.earlier)
        except Exception as exc:
            detail = describe_exception(exc)
            raise PollFailed(self.guard.failed(
                stage, detail, f"poll failed to {stage}: %s; nothing is committed and the "
                f"next poll tries again (repeats are counted, not logged)", exc)) from exc
        self.guard.succeeded(READ, EVALUATE)
        self.families.update(self._enabled_families(), result.failed, now)
        for note in result.notes:
            log.info("%s", note)
        self._log_roles(result.roles)
        self._log_topology(result.roles)
        self.reader.skip_counters = self._uncounted(result.roles)
        outcome = PollOutcome(result, snapshot)
        try:
            outcome.committed, wrote = self._commit(result)
            self.baseline = False
            self.earlier = True
            if wrote:
                self.guard.succeeded(COMMIT)
        except CommitError as exc:
            outcome.commit_error = str(exc)
            self.guard.failed(COMMIT, str(exc), "commit failed, the state is unchanged and "
                              "this poll will be evaluated again: %s")
        self.polls += 1
        _assess_now(snapshot, result, self.state)
        outcome.duration = self.monotonic() - started
        self.last = outcome
        return outcome

    def _read_slow(self, snapshot: HostSnapshot, parts: frozenset[str],
                   monitored: list[str]) -> HostSnapshot:
        """The snapshot with each due fact of the Source seam in ``facts``, each read inside
        its own boundary; a fact that could not be read is named in ``unread`` with why."""
        unread, facts = dict(snapshot.unread), dict(snapshot.facts)
        for source in self._readers:
            source.resume(self.state)
        for part in sorted(parts):
            boundary = self._boundaries.get(part)
            if boundary is None:
                unread[part] = "no source provides it"
                continue
            value, problem = boundary.read(functools.partial(
                self.sources[part].read_fact, part, snapshot, monitored))
            if problem:
                unread[part] = problem
            elif value is not None:  # None: nothing read (no kernel log), as if absent
                facts[part] = value
        if unread == snapshot.unread and facts == snapshot.facts:
            return snapshot
        return dataclasses.replace(snapshot, unread=unread, facts=facts)

    def _enabled_families(self) -> list[str]:
        return [f.id for f in enabled_under(self.config)]

    def _commit(self, result: CycleResult) -> tuple[list[JournalEntry], bool]:
        """Commit events and state; returns the committed entries and whether a write
        happened (and succeeded). Raises :class:`CommitError` and leaves both unchanged."""
        next_state = result.state
        significant = bool(result.events) or urgent_change(self.state, next_state,
                                                           self.config)
        if not significant:
            if result.held_back or next_state != self.state:
                self._unflushed = True
            self.state, self.memory = next_state, result.memory
            if self.monotonic() - self._flushed_at >= FLUSH_SECONDS:
                return [], self.flush()
            return [], False
        entries = self.journal.stamp(result.events, next_state.event_seq + 1,
                                     self.config.node_name, self.config.processing_strategy)
        if entries:
            next_state.event_seq = entries[-1].seq
        size = 0
        try:
            if entries:
                size = self.journal.append(entries)
        except Exception as exc:  # the append undid itself (store.Journal.append)
            raise CommitError(f"cannot append to {self.journal.path}: {_why(exc)}") from exc
        try:
            save_state(self.config.state_file, settled(next_state, result.memory))
        except Exception as exc:  # not only OSError: the append must be undone either way
            if entries:
                self.journal.truncate(size)
            raise CommitError(f"cannot write {self.config.state_file}: {_why(exc)}") from exc
        self.state, self.memory = next_state, result.memory
        self._flushed_at, self._unflushed = self.monotonic(), False
        return self.journal.committed(), True

    def flush(self) -> bool:
        """Write deferred (velocity-only) state changes; called periodically and at stop.
        True when a write happened and succeeded; a failure counts as a failed commit."""
        if not self._unflushed:
            return False
        try:
            save_state(self.config.state_file, settled(self.state, self.memory))
        except Exception as exc:
            self.guard.failed(COMMIT, f"cannot write {self.config.state_file}: {_why(exc)}",
                              "cannot write the state (will retry): %s")
            return False
        self._flushed_at, self._unflushed = self.monotonic(), False
        return True

    def reconfigure(self, config: Config, topology: Topology,
                    topology_loader: Optional[TopologyLoader] = None,
                    topology_reason: str = "") -> None:
        """Apply a reloaded config; snapshots and breach latches are kept."""
        self.config = config
        self.topology = topology
        self.topology_loader = topology_loader or self.topology_loader
        self.topology_reason = topology_reason or self.topology_reason
        self.topology_summary = ""  # logged again with the roles of the next poll
        self.reader.reconfigure(config)
        for source in self._readers:
            source.reconfigure(config)
        self.journal.history_size = config.event_history_size

    @property
    def _kernel_lines(self) -> KernelLogLines:
        source = self.sources[KERNEL_LINES]
        assert isinstance(source, KernelLogLines)
        return source

    @property
    def kernel_log(self) -> Optional[KernelLogSource]:
        """The kernel log the kernel-log source reads (None: none, or the family is off)."""
        return self._kernel_lines.log

    @property
    def pci_facts(self) -> PciFactsReader:
        """The PCI source's reader (its kept-open AER tables have their own share of the
        open-file limit: :meth:`limit_open_files`)."""
        source = self.sources[PCIE]
        assert isinstance(source, PciSource)
        return source.reader

    def limit_open_files(self, sysfs: Optional[int], aer: int) -> None:
        """Keep at most this many sysfs files open (None: all) and this many AER tables: the
        share of the open-file limit the plan gives them (:mod:`.fdplan`)."""
        self.reader.files.set_budget(sysfs)
        self.pci_facts.aer_files.set_budget(aer)

    def close(self) -> None:
        self.flush()
        self.reader.close()
        for source in self._readers:
            source.close()

    # -------------------------------------------------------------- logging

    def _log_counter_availability(self) -> None:
        available, missing = self.reader.counter_availability()
        log.info("counters available: %s", ", ".join(available) or "none")
        if missing:
            log.info("counters not present on any port (skipped): %s", ", ".join(missing))

    def _rediscover_topology(self, snapshot: HostSnapshot) -> None:
        """Read the topology again when an RDMA device appears that it was not read for."""
        names = snapshot.parts.names
        known = self._topology_devices
        if names is known:  # the reader's names of a poll that listed nothing new
            return
        if known is None or not snapshot.devices:
            self._topology_devices = names if known is None else known
            return
        if names <= known:
            if len(names) == len(known):
                self._topology_devices = names  # equal: the next poll's is this object
            return
        self._topology_devices = known | names
        if self.topology_loader is None:
            return
        new = ", ".join(sorted(names - known))
        try:
            topology, reason = self.topology_loader()
        except Exception as exc:  # a metadata file that went bad: keep what classifies now
            log.warning("new RDMA device(s) %s: cannot read the topology again (%s); keeping "
                        "the one read before", new, exc)
            return
        log.info("new RDMA device(s) %s: topology read again (%s)", new, reason)
        self.topology, self.topology_reason = topology, reason

    def _log_topology(self, roles: dict[str, Role]) -> None:
        """``topology from sysfs: 8 GPUs on 2 NUMA nodes; 8 compute, …`` at the first poll and
        whenever it changes."""
        last = self._summary_of
        if last is not None and last[0] is self.topology.gpus and (last[1] is roles
                                                                    or last[1] == roles):
            text = last[2]
        else:
            text = summary(self.topology.gpus, roles.values())
            self._summary_of = (self.topology.gpus, roles, text)
        if text != self.topology_summary:
            self.topology_summary = text
            log.info("%s", text)

    def _log_roles(self, roles: dict[str, Role]) -> None:
        if roles is self._last_roles or roles == self._last_roles:
            return
        for name in sorted(roles):
            role = roles[name]
            if self._last_roles.get(name) != role:
                log.info("NIC %s: %s (%s)", name, role.role, role.reason)
        # Kept, not copied: a table of roles is not changed once made (core/topology.py).
        self._last_roles = roles


def _why(exc: BaseException) -> str:
    """``File too large`` for an OSError, ``ValueError: …`` for anything else."""
    if isinstance(exc, OSError) and exc.strerror:
        return exc.strerror
    return describe_exception(exc)


def _assess_now(snapshot: HostSnapshot, result: CycleResult, state: MonitorState) -> None:
    """Work out the health of the poll's picture here, on the poll thread, while it is still
    in cache: every surface asks for it on the main thread next, and the views keep the last
    answer (:func:`~nichealthd.core.views.assess_host`). A failure is theirs to report: they
    compute it again and log it."""
    try:
        assess_host(snapshot, result, state)
    except Exception:  # reported by the surfaces, see above
        pass
