"""Reading a small input file (config, GPU metadata) without hanging or reading without bound.

An operator's path may name a FIFO (open and read would block forever), ``/dev/zero`` (a read
never ends), a directory or a socket. :func:`read_small_file` opens without blocking, refuses
anything but a regular file (``/dev/null`` reads as empty, the usual way to say "nothing"),
and stops at a size limit, so every caller can turn the one exception into its own clear
message.
"""

from __future__ import annotations

import os
import stat
from typing import Callable, Optional

_FILE_TYPES = ((stat.S_ISDIR, "a directory"), (stat.S_ISFIFO, "a FIFO"),
               (stat.S_ISCHR, "a character device"), (stat.S_ISBLK, "a block device"),
               (stat.S_ISSOCK, "a socket"))


class UnusableFile(Exception):
    """The path exists but cannot be used; ``str()`` says why (``is a FIFO, not a regular
    file``, ``cannot read: Permission denied``, ``larger than 1024 KiB``)."""


def read_small_file(path: str, limit: int,
                    vet: Callable[[os.stat_result], Optional[str]] = lambda info: None
                    ) -> Optional[bytes]:
    """The file's bytes; None when it does not exist. Raises :class:`UnusableFile`, also
    when ``vet`` finds a problem with the open file's status (what it returns: its owner,
    its mode), checked on the fd that is read, so the file cannot be swapped in between."""
    if "\0" in path:
        raise UnusableFile("the path contains a NUL byte")
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK | os.O_NOCTTY | os.O_CLOEXEC)
    except FileNotFoundError:
        return None
    except OSError as exc:
        raise UnusableFile(f"cannot open: {exc.strerror}") from None
    try:
        info = os.fstat(fd)
        mode = info.st_mode
        if stat.S_ISCHR(mode) and (os.major(info.st_rdev), os.minor(info.st_rdev)) == (1, 3):
            return b""  # /dev/null
        for test, what in _FILE_TYPES:
            if test(mode):
                raise UnusableFile(f"is {what}, not a regular file")
        refused = vet(info)
        if refused:
            raise UnusableFile(refused)
        chunks = []
        size = 0
        while size <= limit:
            chunk = os.read(fd, limit + 1 - size)
            if not chunk:
                break
            chunks.append(chunk)
            size += len(chunk)
    except OSError as exc:
        raise UnusableFile(f"cannot read: {exc.strerror}") from None
    finally:
        os.close(fd)
    if size > limit:
        raise UnusableFile(f"larger than {limit // 1024} KiB")
    return b"".join(chunks)
