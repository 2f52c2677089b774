"""The Slurm consumer of the journal: each committed event, in order, judged by
:mod:`.decide` and acted on with the configured commands, from its own cursor.

At-least-once, like the connector (:mod:`..connector.sender`): the cursor passes an event only
once what it called for has been done (or found needless: the node already drained by
nichealthd, or holding another reason, which nichealthd never overrides nor lifts) and the
drain record saved. Which reasons are nichealthd's the record says (:class:`DrainRecord`:
the exact reasons it set on this node), never a reason's prefix. An action is tried
``slurmRetries`` times with exponential backoff; when every attempt failed (slurmctld down,
scontrol missing) the event stays pending and the whole action is tried again after
:data:`PAUSE`, or after a restart. Synchronous: it runs in the service's own thread
(:mod:`.service`), so a hung slurmctld never delays a poll.
"""

from __future__ import annotations

import logging
from dataclasses import replace
from typing import Callable, Optional, Sequence

from ...core.config import Config
from ...core.events import format_timestamp
from ...storage.store import Journal, JournalEntry
from ..seam import JournalConsumer, Pace
from . import command
from .command import Outcome
from .decide import (
    DRAIN,
    RESUME,
    Decision,
    DrainRecord,
    current_reason,
    decide,
)
from .record import load_record, record_path, save_record
from .settings import SlurmSettings
from .status import DRY_RUN, NAME, OFF, ON, SlurmStatus

log = logging.getLogger("nichealthd.slurm")

CONSUMER = NAME  # its journal cursor, and its name on the status channel
PACE = Pace(backoff_base=1.0, backoff_cap=30.0, pause=60.0)  # pause: after every attempt failed

Runner = Callable[[tuple[str, ...], float], Outcome]


def settings_of(config: Config) -> SlurmSettings:
    return config.settings(SlurmSettings)


def node_of(config: Config) -> str:
    """The node's name in Slurm."""
    return settings_of(config).node_name or config.node_name


def mode_of(config: Config) -> str:
    settings = settings_of(config)
    if not settings.drain:
        return OFF
    return DRY_RUN if settings.dry_run else ON


class SlurmConsumer(JournalConsumer):
    """Works through the ``slurm`` consumer's backlog; :meth:`step` does what is due.

    ``pace.sleep(seconds)`` waits between attempts and returns False when the service is
    stopping (the action is then left for the next start)."""

    cursor = CONSUMER
    log = log

    def __init__(self, config: Config, journal: Journal, *, runner: Runner = command.run,
                 pace: Pace = PACE,
                 on_status: Callable[[SlurmStatus], None] = lambda status: None) -> None:
        super().__init__(config, journal, pace)
        self.runner = runner
        self.on_status = on_status
        self.node = node_of(config)
        self.path = record_path(config.state_dir)
        self.record = load_record(self.path, self.node)
        self.status = SlurmStatus(mode=mode_of(config))
        self._publish()
        self._told = ""  # the error last logged (each new one is logged once)

    def report(self) -> SlurmStatus:
        return self.status

    def apply(self, config: Config) -> None:
        node = node_of(config)
        super().apply(config)
        if node != self.node:
            self.node = node
            self.record = load_record(self.path, node)
        self._publish(mode=mode_of(config), failing="")  # the next step says it again

    # ------------------------------------------------------------------ the backlog

    @property
    def settings(self) -> SlurmSettings:
        return settings_of(self.config)

    def active(self) -> bool:
        return self.settings.drain

    def bound(self) -> None:
        self.journal.trim_backlog(CONSUMER, self.config.outbox_max_events,
                                  self.config.outbox_max_bytes)

    def settled(self) -> None:
        if self.status.failing:  # nothing pending failed this time
            self._publish(failing="")

    def act(self, entry: JournalEntry, following: Sequence[JournalEntry]) -> bool:
        """Judge one event and do what it calls for; False when that failed (the event
        stays pending)."""
        decision = decide(self.record, entry.event, self.settings.resume)
        deferred = decision.action == RESUME and any(
            e.event.is_fatal and not e.event.is_healthy for e in following)
        if deferred:
            # A fatal event follows in the same commit (a reboot's baselines clear every
            # condition, then the port still down is reported again): resuming now would
            # open the node to the scheduler for the moment before the drain.
            log.info("Slurm: resume of node %s skipped: a fatal event follows", self.node)
            decision = Decision(replace(decision.record, reason=self.record.reason))
        record: Optional[DrainRecord] = decision.record
        if decision.action:
            record = self._act(decision)
        elif self.record.conditions and not decision.record.conditions and not deferred:
            self._recovered(decision.record)
        if record is None:
            return False
        if record != self.record:
            error = save_record(self.path, record)
            if error is not None:
                self._failed(error)
                return False
            self.record = record
            self._publish()
        return True

    # ------------------------------------------------------------------ the actions

    def _act(self, decision: Decision) -> Optional[DrainRecord]:
        """Carry out a drain or a resume; the record after it, None when it failed."""
        action, record = decision.action, decision.record
        argv = command.fill(self.settings.drain_command if action == DRAIN
                            else self.settings.resume_command, self.node, decision.reason)
        if self.settings.dry_run:
            log.info("Slurm dry run: would run %s", " ".join(argv))
            self._done(action, "dry_run", f"would run: {' '.join(argv)}")
            return replace(record, reason=decision.reason if action == DRAIN else "")
        query = self._attempts(command.fill(self.settings.reason_command, self.node))
        if not query.ok:
            self._failed(f"cannot read node {self.node}'s drain reason: {query.error}", action)
            return None
        held = current_reason(query.output)
        if action == DRAIN and held is not None:
            if self.record.set_by_us(held):  # perhaps before a restart: the record says so
                self._done(action, "held", f"node {self.node} already drained by nichealthd "
                           f"({held})", level=logging.INFO)
                return replace(record, reason=held, draining="")
            self._done(action, "skipped", f"node {self.node} has another reason ({held}): "
                       f"not drained over it and never resumed by nichealthd")
            return replace(record, reason="", draining="")
        if action != DRAIN and held != decision.reason:
            self._done(action, "skipped", f"node {self.node}'s reason is now "
                       f"{held or 'none'}, not nichealthd's: left as it is")
            return record
        if action == DRAIN and not self._intend(decision.reason):
            return None
        outcome = self._attempts(argv)
        if not outcome.ok:
            self._failed(outcome.error, action)
            return None
        self._done(action, "ok", f"{' '.join(argv[:1])} {action} {self.node}"
                   + (f" ({decision.reason})" if action == DRAIN else ""))
        return replace(record, reason=decision.reason if action == DRAIN else "", draining="")

    def _intend(self, reason: str) -> bool:
        """Record the drain about to be run before running it (see :class:`DrainRecord`);
        False when that could not be saved (then nothing is run)."""
        if self.record.draining == reason:
            return True
        intent = replace(self.record, draining=reason)
        error = save_record(self.path, intent)
        if error is not None:
            self._failed(error, DRAIN)
            return False
        self.record = intent
        return True

    def _recovered(self, record: DrainRecord) -> None:
        """Every condition recovered and no resume to run: say why."""
        why = ("slurmResume is off" if record.reason else
               f"nichealthd holds no drain of node {self.node}")
        log.info("Slurm: every fatal condition recovered; nothing to resume (%s)", why)

    def _attempts(self, argv: tuple[str, ...]) -> Outcome:
        """Run ``argv`` up to slurmRetries times, backing off between attempts."""
        tried = [0]

        def attempt() -> Outcome:
            tried[0] += 1
            return self.runner(argv, self.settings.command_timeout)

        def again(outcome: Outcome) -> bool:
            if outcome.ok or not outcome.retry:
                return False
            log.debug("Slurm: %s failed (attempt %d of %d): %s", " ".join(argv), tried[0],
                      self.settings.retries, outcome.error)
            return True

        return self.attempts(attempt, again, self.settings.retries)

    # ------------------------------------------------------------------ status

    def _done(self, action: str, result: str, text: str, level: int = logging.WARNING) -> None:
        log.log(level, "Slurm %s: %s", action, text)
        self._count(action, result)
        if self._told:
            log.info("Slurm commands work again")
        self._told = ""
        self._publish(last_action=f"{action} {result} at {format_timestamp(self.pace.wall())}: "
                                  f"{text}", last_error="", failing="")

    def _failed(self, error: str, action: str = "") -> None:
        if error != self._told:
            log.error("Slurm %s failed: %s; retried in %.0f s (the event stays pending)",
                      action or "record", error, self.pause)
            self._told = error
        if action:
            self._count(action, "failed")
        what = f"{action} of node {self.node}" if action else "drain record"
        self._publish(last_error=f"{format_timestamp(self.pace.wall())}: {error}",
                      failing=f"{what}: {error}")

    def _count(self, action: str, result: str) -> None:
        actions = dict(self.status.actions)
        actions[(action, result)] = actions.get((action, result), 0) + 1
        self._publish(actions=actions)

    def _publish(self, **changes: object) -> None:
        record = self.record
        self.status = replace(self.status, drained_for=tuple(c.label() for c in
                                                             record.conditions),
                              holds_drain=bool(record.reason), **changes)  # type: ignore[arg-type]
        self.on_status(self.status)
