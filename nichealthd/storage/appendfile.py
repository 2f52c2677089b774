"""The one way the daemon appends to a file: every byte or none, then fsync.

The journal, the event log and the dead-letter file are all appended to. ``os.write`` may
write fewer bytes than asked (a nearly full disk, a file-size limit) and returns the count;
ignoring it cuts an event in half and the rest of the line is lost. :func:`append` writes
until every byte is on disk, retries a write interrupted by a signal, fsyncs, and on any
failure truncates the file back to its size before, so a reader never sees a partial line.
"""

from __future__ import annotations

import contextlib
import errno
import os

FLAGS = os.O_WRONLY | os.O_APPEND | os.O_CREAT | os.O_CLOEXEC


def write_all(fd: int, data: bytes) -> None:
    """Write all of ``data``, continuing after short writes and EINTR."""
    view = memoryview(data)
    while view:
        try:
            written = os.write(fd, view)
        except InterruptedError:  # a signal handler ran (PEP 475 retries most, not all)
            continue
        if written <= 0:  # never for a regular file; do not spin if it happens
            raise OSError(errno.EIO, os.strerror(errno.EIO))
        view = view[written:]


def append(path: str, data: bytes, mode: int = 0o640, sync: bool = True) -> int:
    """Append ``data`` to ``path`` (created with ``mode``), fsynced when ``sync``.

    Returns the file size before the append, so that a caller can undo it. Raises OSError
    with the file as it was: whatever part was written is truncated away.
    """
    fd = os.open(path, FLAGS, mode)
    try:
        before = os.fstat(fd).st_size
        try:
            write_all(fd, data)
            if sync:
                os.fsync(fd)
        except BaseException:
            with contextlib.suppress(OSError):
                os.ftruncate(fd, before)
            raise
    finally:
        os.close(fd)
    return before
