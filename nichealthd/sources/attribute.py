"""Reading small sysfs attributes: once (:func:`read_text`) or kept open (:class:`AttributeFiles`).

Every reader of the host (discovery, the PCI walk, the adapter facts) reads hundreds of these
on a big host: three syscalls each (open, read, close) once, one (pread) for a file that is
read again and again and so kept open. O_NONBLOCK: a FIFO (or anything else
that blocks on open) must not hang a poll; sysfs attributes ignore the flag.
"""

from __future__ import annotations

import contextlib
import errno
import os
from typing import Callable, Iterable, Optional, Sequence

OPEN_FLAGS = os.O_RDONLY | os.O_CLOEXEC | os.O_NONBLOCK
# A counter, a state or a version string: one short line.
READ_SIZE = 128
FD_EXHAUSTED = (errno.EMFILE, errno.ENFILE)


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


class AttributeFiles:
    """Open-once, pread-many access to small attribute files.

    ``opener``/``preader`` default to the os functions; tests inject failures that cannot be
    produced with regular files (EINVAL, EIO from firmware queries).
    """

    def __init__(self, opener: Callable[[str, int], int] = os.open,
                 preader: Callable[[int, int, int], bytes] = os.pread,
                 budget: Optional[int] = None) -> None:
        self._open = opener
        self._pread = preader
        self._fds: dict[str, int] = {}
        self.reads = 0
        # At most this many files stay open (None: all); the rest are opened for each read.
        self.budget = budget
        self.transient_reads = 0

    def read(self, path: str) -> bytes:
        """Current content; raises OSError (ENOENT when the file does not exist)."""
        fd = self._fds.get(path)
        if fd is None:
            fd = self._open_file(path)
            if self.budget is not None and len(self._fds) >= self.budget:
                return self._read_once(path, fd)
            self._fds[path] = fd
        self.reads += 1
        try:
            return self._pread(fd, READ_SIZE, 0)
        except OSError:
            # Reopen on the next read: the file may have been replaced (ENODEV, ESTALE) or
            # repaired, and a failing file is rare enough that the extra open costs nothing.
            self.forget(path)
            raise

    def read_open(self, paths: Sequence[str]) -> Optional[list[bytes]]:
        """Every file of ``paths``, when all of them are open already (a steady poll), in one
        tight loop; None when one is not open or a read fails: the caller then reads them one
        by one with :meth:`read`, which opens, forgets and reports as usual."""
        fds = self._fds
        try:
            opened = [fds[path] for path in paths]
        except KeyError:
            return None
        pread = self._pread
        try:
            raws = [pread(fd, READ_SIZE, 0) for fd in opened]
        except OSError:
            return None
        self.reads += len(opened)
        return raws

    def _open_file(self, path: str) -> int:
        """Open ``path``; when the process is out of fds, keep fewer open and try once more."""
        try:
            return self._open(path, OPEN_FLAGS)
        except OSError as exc:
            if exc.errno not in FD_EXHAUSTED or not self._fds:
                raise
        # The limit is smaller than the budget assumed (fds used elsewhere): shed an eighth
        # of the kept files (at least 16) for good, so this does not repeat every poll.
        shed = max(16, len(self._fds) // 8)
        self.budget = max(0, len(self._fds) - shed)
        for kept in list(self._fds)[self.budget:]:
            self.forget(kept)
        return self._open(path, OPEN_FLAGS)

    def _read_once(self, path: str, fd: int) -> bytes:
        """A read that does not fit the budget: the file is closed again at once."""
        self.reads += 1
        self.transient_reads += 1
        try:
            return self._pread(fd, READ_SIZE, 0)
        finally:
            with contextlib.suppress(OSError):
                os.close(fd)

    def set_budget(self, budget: Optional[int]) -> None:
        """Keep at most ``budget`` files open from now on (None: all); closes the excess."""
        self.budget = budget
        if budget is not None:
            for kept in list(self._fds)[budget:]:
                self.forget(kept)

    def __contains__(self, path: str) -> bool:
        return path in self._fds

    def retain(self, paths: Iterable[str]) -> None:
        """Close every cached file that is not in ``paths`` (the new discovery's plan)."""
        keep = set(paths)
        self.forget_all([p for p in self._fds if p not in keep])

    def forget_all(self, paths: Iterable[str]) -> None:
        """Close these files (a reader's own it reads no more; the others' stay open)."""
        for path in paths:
            self.forget(path)

    def forget(self, path: str) -> None:
        fd = self._fds.pop(path, None)
        if fd is not None:
            with contextlib.suppress(OSError):
                os.close(fd)

    def close(self) -> None:
        for path in list(self._fds):
            self.forget(path)

    @property
    def open_files(self) -> int:
        return len(self._fds)
