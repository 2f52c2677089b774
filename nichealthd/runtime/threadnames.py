"""The daemon's threads under their own names in ps, top and /proc (the kernel's ``comm``).

Python's thread names are Python's own: the kernel shows every thread under the process's
name. Linux lets a process name any of its threads by writing
``/proc/self/task/<tid>/comm`` (15 bytes), so ``top -H -p $(pidof nichealthd)`` tells the
poll from the metrics server or the connector, and ``bench/run.py`` measures each.
"""

from __future__ import annotations

import logging
import threading

log = logging.getLogger("nichealthd")

COMM_BYTES = 15  # TASK_COMM_LEN less its NUL


def name_threads() -> None:
    """Give every running thread but the main one its Python name as ``comm``: called
    once the first poll is committed (every service's thread runs by then) and after a
    reload (a new metrics listener has a new thread). Where /proc refuses, nothing changes."""
    for thread in threading.enumerate():
        tid = thread.native_id
        if tid is None or thread is threading.main_thread():
            continue
        try:
            with open(f"/proc/self/task/{tid}/comm", "w") as comm:
                comm.write(thread.name.encode("ascii", "replace")[:COMM_BYTES].decode())
        except OSError as exc:  # a thread that just ended, a /proc mounted read-only
            log.debug("cannot name thread %s: %s", thread.name, exc)
