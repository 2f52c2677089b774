"""Parse human durations such as ``500ms``, ``1s``, ``2m``, ``1h`` (config and flags)."""

from __future__ import annotations

import math
import re

_UNITS = {"ms": 0.001, "s": 1.0, "m": 60.0, "h": 3600.0}
_PATTERN = re.compile(r"^\s*(\d+(?:\.\d+)?)\s*(ms|s|m|h)?\s*$")


def parse_duration(text: str | float | int) -> float:
    """Return seconds; a bare number means seconds. Raises ValueError with a readable message."""
    if isinstance(text, bool):
        raise ValueError(f"expected a duration like '1s' or '500ms', got {text!r}")
    if isinstance(text, (int, float)):
        seconds = float(text)
    else:
        match = _PATTERN.match(text)
        if not match:
            raise ValueError(f"expected a duration like '1s', '500ms' or '2m', got {text!r}")
        seconds = float(match.group(1)) * _UNITS[match.group(2) or "s"]
    if not math.isfinite(seconds):
        raise ValueError(f"duration must be a finite number, got {text!r}")
    if seconds <= 0:
        raise ValueError(f"duration must be positive, got {text!r}")
    return seconds


def format_duration(seconds: float) -> str:
    """Inverse of parse_duration for display (``0.5`` -> ``500ms``)."""
    if seconds < 1:
        return f"{seconds * 1000:g}ms"
    for unit, size in (("h", 3600.0), ("m", 60.0)):
        if seconds >= size and seconds % size == 0:
            return f"{seconds / size:g}{unit}"
    return f"{seconds:g}s"
