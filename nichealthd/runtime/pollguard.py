"""The boundary around every poll: what failed, since when, how often — logged once per cause.

An input that makes a reader or a rule raise recurs every poll, and so does a full disk: a log
line per poll would flood the journal, and an exception let through would end in a dead unit
that monitors nothing. :class:`PollGuard` turns each failure into a counted, rate-limited
:class:`PollProblem` that ``/healthz``, ``STATUS=`` and ``nichealthctl status`` report until
the failing step works again. Causes form a fixed set, so the metric's label set is bounded.
"""

from __future__ import annotations

import logging
import threading
import time
from dataclasses import dataclass
from datetime import datetime, timezone
from typing import Callable, Optional

log = logging.getLogger("nichealthd.monitor")

READ, EVALUATE, COMMIT = "read", "evaluate", "commit"
CAUSES = (READ, EVALUATE, COMMIT)
REMIND_SECONDS = 300.0  # a cause still failing is logged again this often, with its count
MAX_KEYS = 100  # distinct causes remembered for rate limiting (messages may vary)


class PollFailed(Exception):
    """The poll could not read or evaluate: nothing was committed, the state is unchanged."""

    def __init__(self, problem: PollProblem) -> None:
        super().__init__(problem.describe())
        self.problem = problem


@dataclass(frozen=True)
class PollProblem:
    """One failing step of the poll: an immutable value, safe to hand to other threads."""

    cause: str
    detail: str
    since: datetime
    failures: int

    def describe(self) -> str:
        """``commits failing since 17:40:01 (12 in a row): cannot write …: File too large``"""
        what = "commits failing" if self.cause == COMMIT else f"polls failing to {self.cause}"
        return (f"{what} since {self.since.astimezone():%H:%M:%S} "
                f"({self.failures} in a row): {self.detail}")


class PollGuard:
    """Counts failures per cause and logs each distinct one once, then every few minutes."""

    def __init__(self, clock: Callable[[], float] = time.monotonic,
                 wall: Callable[[], datetime] = lambda: datetime.now(timezone.utc),
                 remind: float = REMIND_SECONDS) -> None:
        self.clock = clock
        self.wall = wall
        self.remind = remind
        self._lock = threading.Lock()
        self._totals = dict.fromkeys(CAUSES, 0)
        self._problems: dict[str, PollProblem] = {}
        self._logged: dict[str, tuple[float, int]] = {}  # key -> (logged at, repeats since)

    # --------------------------------------------------------------- record

    def failed(self, cause: str, detail: str, message: str,
               exc: Optional[BaseException] = None) -> PollProblem:
        """Record a failure of ``cause``; ``message`` is the first log line (``%s`` = detail)."""
        with self._lock:
            self._totals[cause] += 1
            previous = self._problems.get(cause)
            problem = PollProblem(cause, detail, previous.since if previous else self.wall(),
                                  (previous.failures if previous else 0) + 1)
            self._problems = {**self._problems, cause: problem}
        self._log(f"{cause}: {detail}", message, detail, exc)
        return problem

    def succeeded(self, *causes: str) -> None:
        """The steps ``causes`` worked this poll: their problems end, with one line."""
        ended = [self._problems[c] for c in causes if c in self._problems]
        if not ended:
            return
        with self._lock:
            self._problems = {c: p for c, p in self._problems.items() if c not in causes}
        for problem in ended:
            log.warning("%s works again after %d failed poll(s) since %s", problem.cause,
                        problem.failures, f"{problem.since.astimezone():%H:%M:%S}")
            prefix = problem.cause + ": "
            for key in [k for k in self._logged if k.startswith(prefix)]:
                del self._logged[key]

    def _log(self, key: str, message: str, detail: str, exc: Optional[BaseException]) -> None:
        now = self.clock()
        seen = self._logged.get(key)
        if seen is None:
            if len(self._logged) >= MAX_KEYS:
                self._logged.clear()
            self._logged[key] = (now, 0)
            log.error(message, detail)
            if exc is not None:
                log.debug("traceback of %s", detail, exc_info=exc)
            return
        logged_at, repeats = seen[0], seen[1] + 1
        if now - logged_at >= self.remind:
            log.error("still failing, %d more time(s) in the last %.0f s: %s", repeats,
                      now - logged_at, detail)
            self._logged[key] = (now, 0)
        else:
            self._logged[key] = (logged_at, repeats)

    # ----------------------------------------------------------------- read

    def problems(self) -> list[PollProblem]:
        """What fails now, reading and evaluating before committing (any thread)."""
        current = self._problems
        return [current[c] for c in CAUSES if c in current]

    def reason(self) -> str:
        """One line for ``/healthz``, ``STATUS=`` and the status dict; "" while all works."""
        return "; ".join(p.describe() for p in self.problems())

    def totals(self) -> dict[str, int]:
        """Failed polls per cause since start (every cause present, for a bounded metric)."""
        with self._lock:
            return dict(self._totals)
