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
import time
from dataclasses import replace
from datetime import datetime, timezone
from typing import Callable, Optional

from ...core.config import Config
from ...core.events import format_timestamp
from ...storage.store import Journal
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
from .status import DRY_RUN, OFF, ON, SlurmStatus

log = logging.getLogger("nichealthd.slurm")

CONSUMER = "slurm"
BATCH = 500
BACKOFF_BASE = 1.0
BACKOFF_CAP = 30.0
PAUSE = 60.0  # after an action failed every attempt
IDLE = 60.0

Runner = Callable[[tuple[str, ...], float], Outcome]


def _sleep(seconds: float) -> bool:
    time.sleep(seconds)
    return True


def mode_of(config: Config) -> str:
    if not config.slurm_drain:
        return OFF
    return DRY_RUN if config.slurm_dry_run else ON


class SlurmConsumer:
    """Works through the ``slurm`` consumer's backlog; :meth:`step` does what is due.

    ``sleep(seconds)`` waits between attempts and returns False when the service is
    stopping (the action is then left for the next start)."""

    def __init__(self, config: Config, journal: Journal, *, runner: Runner = command.run,
                 sleep: Callable[[float], bool] = _sleep,
                 clock: Callable[[], float] = time.monotonic,
                 wall: Callable[[], datetime] = lambda: datetime.now(timezone.utc),
                 backoff_base: float = BACKOFF_BASE, backoff_cap: float = BACKOFF_CAP,
                 pause: float = PAUSE,
                 on_status: Callable[[SlurmStatus], None] = lambda status: None) -> None:
        self.config = config
        self.journal = journal
        self.runner = runner
        self.sleep = sleep
        self.clock = clock
        self.wall = wall
        self.backoff_base, self.backoff_cap, self.pause = backoff_base, backoff_cap, pause
        self.on_status = on_status
        self.node = config.slurm_node_name or config.node_name
        self.path = record_path(config.state_dir)
        self.record = load_record(self.path, self.node)
        self.status = SlurmStatus(mode=mode_of(config))
        self._publish()
        self._retry_at = 0.0
        self._told = ""  # the error last logged (each new one is logged once)
        self._next_config: Optional[Config] = None

    def reconfigure(self, config: Config) -> None:
        """Take a reloaded config at the next step (called from another thread: a step in
        progress may be waiting for slurmctld, and the caller must not wait for it)."""
        self._next_config = config

    def _apply(self, config: Config) -> None:
        node = config.slurm_node_name or config.node_name
        self.config = config
        if node != self.node:
            self.node = node
            self.record = load_record(self.path, node)
        self._retry_at = 0.0
        self._publish(mode=mode_of(config), failing="")  # the next step says it again

    # ------------------------------------------------------------------ the backlog

    def step(self) -> float:
        """Act on what is pending; the seconds until something may be due."""
        config, self._next_config = self._next_config, None
        if config is not None:
            self._apply(config)
        if not self.config.slurm_drain:
            return IDLE
        now = self.clock()
        if now < self._retry_at:
            return self._retry_at - now
        self.journal.trim_backlog(CONSUMER, self.config.outbox_max_events,
                                  self.config.outbox_max_bytes)
        entries = self.journal.pending(CONSUMER, BATCH)
        done: Optional[int] = None
        failed = False
        for index, entry in enumerate(entries):
            decision = decide(self.record, entry.event, self.config.slurm_resume)
            deferred = decision.action == RESUME and any(
                e.event.is_fatal and not e.event.is_healthy for e in entries[index + 1:])
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
                failed = True
                break
            if record != self.record:
                error = save_record(self.path, record)
                if error is not None:
                    self._failed(error)
                    failed = True
                    break
                self.record = record
                self._publish()
            done = entry.seq
        if done is not None:
            self.journal.advance(CONSUMER, done)
        if failed:
            self._retry_at = self.clock() + self.pause
            return self.pause
        if self.status.failing:  # nothing pending failed this time
            self._publish(failing="")
        return 0.0 if len(entries) == BATCH else IDLE

    # ------------------------------------------------------------------ the actions

    def _act(self, decision: Decision) -> Optional[DrainRecord]:
        """Carry out a drain or a resume; the record after it, None when it failed."""
        action, record = decision.action, decision.record
        argv = command.fill(self.config.slurm_drain_command if action == DRAIN
                            else self.config.slurm_resume_command, self.node, decision.reason)
        if self.config.slurm_dry_run:
            log.info("Slurm dry run: would run %s", " ".join(argv))
            self._done(action, "dry_run", f"would run: {' '.join(argv)}")
            return replace(record, reason=decision.reason if action == DRAIN else "")
        query = self._attempts(command.fill(self.config.slurm_reason_command, self.node))
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
        outcome = Outcome(argv, error="not run")
        for attempt in range(self.config.slurm_retries):
            if attempt:
                delay = min(self.backoff_cap, self.backoff_base * 2.0 ** (attempt - 1))
                if not self.sleep(delay):
                    break
            outcome = self.runner(argv, self.config.slurm_command_timeout)
            if outcome.ok or not outcome.retry:
                break
            log.debug("Slurm: %s failed (attempt %d of %d): %s", " ".join(argv),
                      attempt + 1, self.config.slurm_retries, outcome.error)
        return outcome

    # ------------------------------------------------------------------ status

    def _done(self, action: str, result: str, text: str, level: int = logging.WARNING) -> None:
        log.log(level, "Slurm %s: %s", action, text)
        self._count(action, result)
        if self._told:
            log.info("Slurm commands work again")
        self._told = ""
        self._publish(last_action=f"{action} {result} at {format_timestamp(self.wall())}: "
                                  f"{text}", last_error="", failing="")

    def _failed(self, error: str, action: str = "") -> None:
        if error != self._told:
            log.error("Slurm %s failed: %s; retried in %.0f s (the event stays pending)",
                      action or "record", error, self.pause)
            self._told = error
        if action:
            self._count(action, "failed")
        what = f"{action} of node {self.node}" if action else "drain record"
        self._publish(last_error=f"{format_timestamp(self.wall())}: {error}",
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
