"""The kernel log's fact: the lines read this poll and the position after them.

The fact module of ``sources/kernel_log.py`` (ARCHITECTURE.md, the source seam): the source
reads from the position the kernel-log family's section holds, the family judges the lines and
puts the position in its section, so the position is committed with the poll's events.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Optional

from ..core.model import Fact, HostSnapshot, KernelLine


@dataclass(frozen=True)
class KernelBatch:
    """The kernel lines of one poll, oldest first, and the source's position after them."""

    lines: tuple[KernelLine, ...] = ()
    cursor: Optional[str] = None  # None: nothing was read, the position stays


KERNEL_LINES: Fact[KernelBatch] = Fact("kernel_log")


def batch_of(snapshot: HostSnapshot) -> KernelBatch:
    """The poll's batch: the source's fact, or the snapshot's ``kernel_lines`` and
    ``kernel_cursor`` fields where a table test built them (empty when neither)."""
    batch = snapshot.fact(KERNEL_LINES)
    if batch is not None:
        return batch
    return KernelBatch(snapshot.kernel_lines, snapshot.kernel_cursor)
