"""The failure boundary of one source (ARCHITECTURE.md): a read that raises costs only its part.

Sources never raise on bad content, but a bug, an unexpected kernel interface or a library
that breaks does. Around each source the reader or the monitor asks :class:`SourceBoundary`
for the part: on failure it gives no value and says why (the snapshot's ``unread``), so the
families that need the part are not judged in that poll and the surfaces show them as
unknown; the families that do not judge as usual. Each distinct problem is logged once, and
the recovery too.
"""

from __future__ import annotations

import logging
from typing import Callable, Optional, TypeVar

from ..core.failure import describe_exception

T = TypeVar("T")


class SourceBoundary:
    """One part's reads: the value, or None and why; logged once per distinct problem."""

    def __init__(self, part: str, description: str, log: logging.Logger) -> None:
        self.part = part
        self.description = description
        self.log = log
        self.problem = ""  # why the last read failed, "" when it worked

    def read(self, reader: Callable[[], T]) -> tuple[Optional[T], str]:
        """``reader()``, or (None, why) when it raised."""
        try:
            value = reader()
        except Exception as exc:  # the boundary: contained, reported, retried
            problem = describe_exception(exc)
            if problem != self.problem:
                self.log.warning("cannot read %s (%s): %s; the checks that need it are not "
                                 "judged (shown as unknown) and it is read again each poll",
                                 self.description, self.part, problem)
                self.log.debug("traceback of %s", problem, exc_info=exc)
                self.problem = problem
            return None, problem
        if self.problem:
            self.log.info("%s (%s) readable again", self.description, self.part)
            self.problem = ""
        return value, ""
