"""sd_notify: READY, STATUS, WATCHDOG, RELOADING, STOPPING for a ``Type=notify`` unit.

The protocol is spoken here (one datagram per message to ``$NOTIFY_SOCKET``, a path or an
abstract ``@name``), not through the sdnotify package: RHEL 9 ships that only in EPEL, and
the few lines below are all of it. Nothing is sent without ``NOTIFY_SOCKET``; a failed send is
logged once and never stops the daemon. The watchdog period comes from ``WATCHDOG_USEC``,
honoured only when ``WATCHDOG_PID`` is unset or ours. The daemon's status comes as a
:class:`StatusLine`, the values it is made of: STATUS= is sent when one of them changes,
and the text is written only then.
"""

from __future__ import annotations

import logging
import os
import socket
import time
from dataclasses import dataclass
from typing import Optional, Union

log = logging.getLogger("nichealthd.notify")


def notify_address(socket_path: str) -> str:
    """The socket address of a ``NOTIFY_SOCKET`` value (``@name``: abstract namespace)."""
    return "\0" + socket_path[1:] if socket_path.startswith("@") else socket_path


@dataclass(frozen=True)
class StatusLine:
    """What STATUS= says (``32 ports: 30 healthy, …; connector connected``), as values.

    Nothing in it goes stale between two polls (no time of the last poll): a quiet host sends
    STATUS= once. ``nichealthctl status`` shows the rest."""

    health: str  # the health model's summary (PollPicture.summary)
    connector: str  # ``connector down since <time> (<error>), 12 queued``
    reload_error: str = ""  # why the last reload was rejected
    poll_error: str = ""  # what fails in the polls now (runtime/pollguard.py)
    slurm_failing: str = ""  # a Slurm drain or resume that cannot be done (surfaces/slurm/)

    def __str__(self) -> str:
        parts = [self.health, self.connector]
        if self.reload_error:
            parts.append(f"reload rejected: {self.reload_error}")
        if self.poll_error:
            parts.append(self.poll_error)
        if self.slurm_failing:
            parts.append(f"slurm failing ({self.slurm_failing})")
        return "; ".join(parts)


Status = Union[StatusLine, str]


class _Socket:
    """An unconnected AF_UNIX datagram socket that sends to the notify address."""

    def __init__(self, socket_path: str) -> None:
        self.address = notify_address(socket_path)
        self.socket = socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM | socket.SOCK_CLOEXEC)
        self._warned = False

    def notify(self, message: str) -> None:
        try:
            self.socket.sendto(message.encode(), self.address)
        except OSError as exc:
            if not self._warned:  # the service manager went away: nothing to tell it
                log.warning("sd_notify to %s failed: %s", self.address.lstrip("\0"), exc)
                self._warned = True


class Notifier:
    """Thin wrapper that keeps the protocol in one place."""

    def __init__(self, socket_path: Optional[str], watchdog_seconds: float = 0.0) -> None:
        self.enabled = bool(socket_path)
        self.watchdog_seconds = watchdog_seconds if self.enabled else 0.0
        self._notifier = _Socket(socket_path) if socket_path else None
        self._last_status: Status = ""

    @classmethod
    def from_environment(cls) -> Notifier:
        socket_path = os.environ.get("NOTIFY_SOCKET")
        period = 0.0
        usec = os.environ.get("WATCHDOG_USEC", "")
        pid = os.environ.get("WATCHDOG_PID", "")
        if usec.isdigit() and (not pid or pid == str(os.getpid())):
            period = int(usec) / 1_000_000
        return cls(socket_path, period)

    def _send(self, message: str) -> None:
        if self._notifier is not None:
            self._notifier.notify(message)

    def ready(self, status: Status) -> None:
        self._last_status = status
        self._send(f"READY=1\nSTATUS={status}")

    def status(self, status: Status) -> None:
        """Send STATUS= when its values changed: a quiet host sends none."""
        if status != self._last_status:
            self._last_status = status
            self._send(f"STATUS={status}")

    def watchdog(self) -> None:
        self._send("WATCHDOG=1")

    def reloading(self) -> None:
        usec = time.clock_gettime_ns(time.CLOCK_MONOTONIC) // 1000
        self._send(f"RELOADING=1\nMONOTONIC_USEC={usec}\nSTATUS=reloading configuration")

    def stopping(self) -> None:
        self._send("STOPPING=1\nSTATUS=stopping")

    def close(self) -> None:
        """Close the notify socket; sends nothing more."""
        sock = getattr(self._notifier, "socket", None)
        if sock is not None:
            sock.close()
        self._notifier = None
