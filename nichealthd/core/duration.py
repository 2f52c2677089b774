"""Parse human durations such as ``500ms``, ``1s``, ``2m``, ``1h`` (config and flags)."""

from __future__ import annotations

import math
import re

from .config_errors import show

_UNITS = {"ms": 0.001, "s": 1.0, "m": 60.0, "h": 3600.0}
_PATTERN = re.compile(r"^\s*(\d+(?:\.\d+)?)\s*(ms|s|m|h)?\s*$")


def parse_duration(text: object, *, allow_zero: bool = False) -> float:
    """Return seconds; a bare number means seconds. Raises ValueError with a readable message.

    Anything but a string or a number (a TOML table, an array, a boolean) is a ValueError
    too, and so is a number too large for a float: callers validate, they never crash.
    """
    shown = show(text)
    if isinstance(text, bool) or not isinstance(text, (str, int, float)):
        raise ValueError(f"expected a duration like '1s' or '500ms', got {shown}")
    try:
        if isinstance(text, str):
            match = _PATTERN.match(text)
            if not match:
                raise ValueError(f"expected a duration like '1s', '500ms' or '2m', got {shown}")
            seconds = float(match.group(1)) * _UNITS[match.group(2) or "s"]
        else:
            seconds = float(text)
    except OverflowError:
        seconds = math.inf
    if not math.isfinite(seconds):
        raise ValueError(f"duration must be a finite number, got {shown}")
    if seconds < 0 or (seconds == 0 and not allow_zero):
        raise ValueError(f"duration must be {'>= 0' if allow_zero else 'positive'}, "
                         f"got {shown}")
    return seconds


def format_duration(seconds: float) -> str:
    """Inverse of parse_duration for display (``0.5`` -> ``500ms``)."""
    if seconds < 1:
        return f"{seconds * 1000:g}ms"
    for unit, size in (("h", 3600.0), ("m", 60.0)):
        if seconds >= size and seconds % size == 0:
            return f"{seconds / size:g}{unit}"
    return f"{seconds:g}s"
