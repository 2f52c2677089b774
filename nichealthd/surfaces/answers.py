"""What the D-Bus and varlink APIs share beyond the poll's picture: events and reloads.

The records, the status and why a ``ListCounters`` for one device or port has nothing to
list come from the daemon's :class:`~nichealthd.core.picture.PollPicture`; this module adds
an event as the APIs send it (the event log's JSON plus ``seq`` and ``severity``) and the callers of
``Reload`` waiting for its outcome.
"""

from __future__ import annotations

import asyncio
from typing import Callable, Dict, List, Tuple

from ..storage.store import JournalEntry


def event_record(entry: JournalEntry) -> Dict[str, object]:
    """An event as the APIs send it: the event log's JSON plus ``seq`` and ``severity``."""
    record: Dict[str, object] = {"seq": entry.seq, "severity": entry.event.severity}
    record.update(entry.event.to_json())
    return record


RELOAD_WAIT = 10.0  # how long a Reload call waits for the outcome before answering "requested"


class ReloadWaiters:
    """Callers of D-Bus or varlink ``Reload`` waiting for the outcome of the reload they asked
    for: the daemon reloads after the poll that follows a request, and tells its services
    through ``on_reload`` (accepted) or, for a rejected reload, by the second poll after the
    request (``settle`` sees the reload error then)."""

    def __init__(self, polls: Callable[[], int], request: Callable[[], None]) -> None:
        self._polls = polls
        self._request = request
        self._waiting: List[Tuple[int, asyncio.Future[Tuple[bool, str]]]] = []

    async def request(self) -> Tuple[bool, str]:
        """Ask for a reload and wait (at most :data:`RELOAD_WAIT`) for its outcome."""
        future: asyncio.Future[Tuple[bool, str]] = asyncio.get_running_loop().create_future()
        self._waiting.append((self._polls(), future))
        self._request()
        try:
            return await asyncio.wait_for(asyncio.shield(future), RELOAD_WAIT)
        except asyncio.TimeoutError:
            return True, ("reload requested; it is applied after the poll in progress "
                          "completes (check `nichealthctl status`)")

    def settle(self, reload_error: str) -> None:
        """After a poll: by the second poll after a request, a waiter that ``resolve`` did not
        answer was rejected (the reload is attempted after the poll that follows)."""
        if not self._waiting:
            return
        polls = self._polls()
        still = []
        for requested_at, future in self._waiting:
            if future.done():
                continue
            if polls >= requested_at + 2:
                future.set_result((False, f"reload rejected, the running configuration is "
                                          f"kept: {reload_error}") if reload_error
                                  else (True, "reload requested"))
            else:
                still.append((requested_at, future))
        self._waiting = still

    def idle(self) -> bool:
        """No caller waits for an outcome that a later poll settles."""
        return not self._waiting

    def resolve(self, accepted: bool, message: str) -> None:
        """Answer every waiter (a reload applied, or the daemon stopping)."""
        for _, future in self._waiting:
            if not future.done():
                future.set_result((accepted, message))
        self._waiting = []
