"""The status channel every surface publishes through, under its own name.

A surface's status is a frozen value it replaces (never changes) from its own thread: the
generic :class:`SurfaceStatus` (its state, last error, events pending on its journal cursor,
its last success), or a richer value of its own that says what it is as a
:class:`SurfaceStatus` (:class:`Reported`, as the connector's and Slurm's do). The daemon keeps
the latest of each on a :class:`Board` and lists them all in its status dict under
``surfaces`` (D-Bus ``GetStatus``, varlink ``Status``, ``nichealthctl status``) and in
``/metrics``, whatever the surface: a new one needs no edit to any of them.
"""

from __future__ import annotations

import threading
from dataclasses import dataclass
from typing import Mapping, Optional, Protocol, TypeVar

from ..core.jsontypes import JsonRecord

R = TypeVar("R")

# The generic states (a surface may publish others: the connector's connected, down, ...).
OFF = "off"  # switched off by the configuration: its events wait
OK = "ok"  # acting on its events
FAILING = "failing"  # the event it acts on failed: pending, tried again after a pause


@dataclass(frozen=True)
class SurfaceStatus:
    """Where one surface stands. ``pending``: committed events its cursor has not passed
    (its lag, in events; None where it reads no journal); ``last_success``: when it last
    acted on an event (RFC 3339, "" before the first)."""

    name: str
    state: str
    last_error: str = ""
    pending: Optional[int] = None
    last_success: str = ""

    def surface_status(self) -> SurfaceStatus:
        return self

    def record(self) -> JsonRecord:
        """Its entry in the status dict's ``surfaces`` (varlink ``SurfaceStatus``)."""
        record: dict[str, object] = {"name": self.name, "state": self.state,
                                     "last_error": self.last_error,
                                     "last_success": self.last_success}
        if self.pending is not None:
            record["pending"] = self.pending
        return record


class Reported(Protocol):
    """A status a surface publishes: whatever it holds, it says what it is generically."""

    def surface_status(self) -> SurfaceStatus: ...


_NONE = object()  # no status published yet (never equal to one)


class Board:
    """The latest status each surface published, by name; published from any thread, read
    as one consistent value (:meth:`latest`: a new mapping per change).

    A status equal to the one there is no change: the connector's sender publishes its depth
    at every step, and a new value would send the next poll to the event loop for nothing
    (runtime/service.py)."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._latest: Mapping[str, Reported] = {}

    def publish(self, name: str, status: Reported) -> None:
        with self._lock:
            if self._latest.get(name, _NONE) != status:
                self._latest = {**self._latest, name: status}

    def latest(self) -> Mapping[str, Reported]:
        """Every surface's status, one consistent value (never changed afterwards)."""
        return self._latest

    def typed(self, name: str, kind: type[R], default: R) -> R:
        return typed(self._latest, name, kind, default)

    def surfaces(self) -> tuple[SurfaceStatus, ...]:
        return listed(self._latest)

    def records(self) -> list[JsonRecord]:
        return records(self._latest)


def typed(latest: Mapping[str, Reported], name: str, kind: type[R], default: R) -> R:
    """``name``'s status when it is a ``kind``, else ``default`` (before it published)."""
    found = latest.get(name)
    return found if isinstance(found, kind) else default


def listed(latest: Mapping[str, Reported]) -> tuple[SurfaceStatus, ...]:
    """Every surface's status as a :class:`SurfaceStatus`, by name."""
    return tuple(latest[name].surface_status() for name in sorted(latest))


def records(latest: Mapping[str, Reported]) -> list[JsonRecord]:
    """The status dict's ``surfaces``."""
    return [status.record() for status in listed(latest)]
