"""Logging what a reader cannot use, once per file while it lasts (:class:`ProblemLog`).

Every reader of the host reports an unreadable or implausible value here instead of raising:
the first occurrence is logged, repeats are not, and the file's recovery is logged once.
:meth:`ProblemLog.number` is how a reader turns a file's content into a number of its
:class:`~nichealthd.core.numbers.Kind` (ARCHITECTURE.md, the source seam).
"""

from __future__ import annotations

import logging
from typing import Optional, Union

from ..core.numbers import Kind, Unreadable, parse


class ProblemLog:
    """Logs a problem once per key until it clears, so a broken file cannot flood the log."""

    def __init__(self, logger: logging.Logger) -> None:
        self._logger = logger
        self._active: dict[str, str] = {}

    def report(self, key: str, message: str, level: int = logging.WARNING) -> None:
        if self._active.get(key) != message:
            self._active[key] = message
            self._logger.log(level, "%s", message)

    def clear(self, key: str, message: Optional[str] = None) -> None:
        if self._active.pop(key, None) is not None:
            self._logger.info("%s", message or f"{key}: readable again")

    def number(self, path: str, raw: Union[bytes, str, None], kind: Kind) -> Optional[int]:
        """The content of ``path`` as a number of ``kind``; None when there is none (``raw``
        None: the file could not be read, the caller's business) or it is not one: logged
        once, as unreadable (never a fault)."""
        if raw is None:
            return None
        number = parse(raw, kind)
        if isinstance(number, Unreadable):
            self.report(path, f"{path}: {number.reason}; taken as unreadable")
            return None
        if self._active:
            self.clear(path)
        return number

    @property
    def active(self) -> int:
        return len(self._active)
