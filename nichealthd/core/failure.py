"""One line that says what failed and where: for the failure boundaries of polls, sources and
families (ARCHITECTURE.md), which log it once and show it on the surfaces."""

from __future__ import annotations

import os
import traceback


def describe_exception(exc: BaseException) -> str:
    """``ValueError: bad value (at sysfs.py:552 in read_device)``: the cause, in one line."""
    text = f"{type(exc).__name__}: {exc}".rstrip(": ")
    frames = traceback.extract_tb(exc.__traceback__)
    if frames:
        last = frames[-1]
        text += f" (at {os.path.basename(last.filename)}:{last.lineno} in {last.name})"
    return text
