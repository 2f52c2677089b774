"""Logging for the journal or a terminal: one line per message, repeats rate-limited.

Under systemd (``JOURNAL_STREAM`` set) each line carries a ``<N>`` syslog priority prefix
that journald turns into the entry's priority, and no timestamp (journald adds its own).
A start failure goes through :func:`log_start_failure` at ERROR (``<3>``): printed plainly it
was an info entry, missing from ``systemctl status`` and ``journalctl -p warning``.
"""

from __future__ import annotations

import logging
import os
import sys
import time
from typing import Callable, Optional

_PRIORITY = {logging.DEBUG: 7, logging.INFO: 6, logging.WARNING: 4, logging.ERROR: 3,
             logging.CRITICAL: 2}
REPEAT_WINDOW = 300.0


class JournalFormatter(logging.Formatter):
    """``<4>nichealthd.sysfs: message`` — newlines folded so one message is one entry."""

    def format(self, record: logging.LogRecord) -> str:
        text = super().format(record).replace("\n", " | ")
        priority = _PRIORITY.get(record.levelno, 6)
        return f"<{priority}>{text}"


class RepeatFilter(logging.Filter):
    """Pass an identical (logger, level, message) at most once per window, counting the rest."""

    def __init__(self, window: float = REPEAT_WINDOW,
                 clock: Callable[[], float] = time.monotonic) -> None:
        super().__init__()
        self.window = window
        self.clock = clock
        self._seen: dict[tuple[str, int, str], tuple[float, int]] = {}

    def filter(self, record: logging.LogRecord) -> bool:
        if record.levelno < logging.WARNING:
            return True
        key = (record.name, record.levelno, record.getMessage())
        now = self.clock()
        first, suppressed = self._seen.get(key, (float("-inf"), 0))
        if now - first < self.window:
            self._seen[key] = (first, suppressed + 1)
            return False
        if suppressed:
            record.msg = f"{record.getMessage()} (repeated {suppressed} more times)"
            record.args = ()
        self._seen[key] = (now, 0)
        if len(self._seen) > 10_000:
            self._seen.clear()
        return True


def setup_logging(level: str, stream: Optional[object] = None) -> None:
    """Configure the root logger once for the daemon or a tool."""
    handler = logging.StreamHandler(stream or sys.stderr)  # type: ignore[arg-type]
    if os.environ.get("JOURNAL_STREAM"):
        handler.setFormatter(JournalFormatter("%(name)s: %(message)s"))
    else:
        handler.setFormatter(logging.Formatter(
            "%(asctime)s %(levelname)-7s %(name)s: %(message)s"))
    handler.addFilter(RepeatFilter())
    root = logging.getLogger()
    for old in list(root.handlers):
        root.removeHandler(old)
    root.addHandler(handler)
    root.setLevel(getattr(logging, level.upper(), logging.INFO))


def log_start_failure(message: str, logger: str = "nichealthd") -> None:
    """Log why the daemon cannot start at ERROR priority, setting up logging if the failure
    came before the config that configures it (an invalid config, a bad flag)."""
    if not logging.getLogger().handlers:
        setup_logging("info")
    logging.getLogger(logger).error("%s", message)
