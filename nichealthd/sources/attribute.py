"""Reading one small sysfs attribute: its first line (or whole text), or None, never raising.

Every reader of the host (discovery, the PCI walk, the adapter facts) reads hundreds of these
on a big host: three syscalls each (open, read, close). O_NONBLOCK: a FIFO (or anything else
that blocks on open) must not hang a poll; sysfs attributes ignore the flag.
"""

from __future__ import annotations

import os
from typing import Optional

OPEN_FLAGS = os.O_RDONLY | os.O_CLOEXEC | os.O_NONBLOCK


def read_text(path: str, whole: bool = False) -> Optional[str]:
    """A small file's text (first line unless ``whole``), stripped; None when it cannot be
    read (and, for the first line, when it is empty)."""
    try:
        fd = os.open(path, OPEN_FLAGS)
        try:
            raw = os.read(fd, 4096)
        finally:
            os.close(fd)
    except OSError:
        return None
    text = raw.decode("ascii", errors="replace")
    return text.strip() if whole else text.split("\n", 1)[0].strip() or None
