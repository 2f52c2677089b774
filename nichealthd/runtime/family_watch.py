"""Which check families judge, which cannot and since when: the failure boundary's memory.

The evaluator contains a family that fails (core/evaluate.py); this keeps what the poll loop
needs to say about it: the log line once per failure (and per new reason), the recovery, and
for the metrics each family's last poll that judged (``nichealthd_family_up``,
``nichealthd_family_last_success_timestamp_seconds``).
"""

from __future__ import annotations

import logging
from dataclasses import dataclass
from datetime import datetime
from typing import Iterable, Mapping


@dataclass(frozen=True)
class FamilyFailure:
    """A family that cannot judge: why, since when, for how many polls."""

    why: str
    since: datetime
    polls: int = 1


class FamilyWatch:
    """Updated by the poll thread after each evaluation; read by the surfaces as values."""

    def __init__(self, log: logging.Logger) -> None:
        self.log = log
        self.failing: Mapping[str, FamilyFailure] = {}
        self.last_success: Mapping[str, datetime] = {}  # family id -> its last judging poll

    def update(self, enabled: Iterable[str], failed: Mapping[str, str], now: datetime) -> None:
        """One poll's outcome: ``failed`` (id -> why) among the ``enabled`` families."""
        failing = dict(self.failing)
        succeeded = dict(self.last_success)
        for family in enabled:
            why = failed.get(family)
            was = failing.get(family)
            if why is None:
                succeeded[family] = now
                if was is not None:
                    del failing[family]
                    self.log.info("check family %s judges again (it could not for %d "
                                  "poll%s)", family, was.polls, "" if was.polls == 1 else "s")
                continue
            if was is None or was.why != why:
                self.log.warning("check family %s cannot judge: %s; it keeps what it held, "
                                 "sends nothing, its ports show as unknown, and it tries "
                                 "again each poll", family, why)
            failing[family] = FamilyFailure(why, was.since if was else now,
                                            was.polls + 1 if was else 1)
        # Families switched off by a reload are forgotten (they are not failing).
        current = set(enabled)
        self.failing = {k: v for k, v in failing.items() if k in current}
        self.last_success = {k: v for k, v in succeeded.items() if k in current}
