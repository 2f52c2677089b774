"""sd_notify: READY, STATUS, WATCHDOG, RELOADING, STOPPING for a ``Type=notify`` unit.

Uses the sdnotify package (it silently does nothing without ``NOTIFY_SOCKET``). The watchdog
period comes from ``WATCHDOG_USEC``, honoured only when ``WATCHDOG_PID`` is unset or ours.
"""

from __future__ import annotations

import os
import time
from typing import Optional

import sdnotify


class Notifier:
    """Thin wrapper that keeps the protocol in one place."""

    def __init__(self, socket_path: Optional[str], watchdog_seconds: float = 0.0) -> None:
        self.enabled = bool(socket_path)
        self.watchdog_seconds = watchdog_seconds if self.enabled else 0.0
        self._notifier = sdnotify.SystemdNotifier() if self.enabled else None
        self._last_status = ""
        self._last_summary = ""
        self._sent_at = float("-inf")

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

    def ready(self, status: str) -> None:
        self._last_status = status
        self._last_summary = status.rsplit("; last poll", 1)[0]
        self._sent_at = time.monotonic()
        self._send(f"READY=1\nSTATUS={status}")

    def status(self, status: str, refresh: float = 0.0) -> None:
        """Send STATUS= when the summary changed (ignoring the time of the last poll), or
        every ``refresh`` seconds so that ``systemctl status`` shows a recent poll time."""
        summary = status.rsplit("; last poll", 1)[0]
        now = time.monotonic()
        if summary != self._last_summary or now - self._sent_at >= refresh:
            self._last_status, self._last_summary, self._sent_at = status, summary, now
            self._send(f"STATUS={status}")

    def watchdog(self) -> None:
        self._send("WATCHDOG=1")

    def reloading(self) -> None:
        usec = time.clock_gettime_ns(time.CLOCK_MONOTONIC) // 1000
        self._send(f"RELOADING=1\nMONOTONIC_USEC={usec}\nSTATUS=reloading configuration")

    def stopping(self) -> None:
        self._send("STOPPING=1\nSTATUS=stopping")

    def close(self) -> None:
        """Close the notify socket (sdnotify opens one and never closes it); sends nothing more."""
        sock = getattr(self._notifier, "socket", None)
        if sock is not None:
            sock.close()
        self._notifier = None
