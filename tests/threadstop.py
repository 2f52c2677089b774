"""Stopping one thread of a running daemon, as a read stuck in the kernel would.

Sysfs files are opened with O_NONBLOCK, so a FIFO no longer hangs a poll; tests that need a
hung poller (watchdog, /healthz) stop the poll thread with ptrace while it waits for work.
"""

from __future__ import annotations

import ctypes
import os
import time

import pytest


class ThreadStopper:
    """Stops the daemon's poll thread (and only it) with ptrace while it is idle."""

    SEIZE, INTERRUPT, DETACH = 0x4206, 0x4207, 17
    FUTEX = 202  # x86_64

    def __init__(self, pid: int) -> None:
        if os.uname().machine != "x86_64":
            pytest.skip("the idle check reads x86_64 syscall numbers")
        self.libc = ctypes.CDLL(None, use_errno=True)
        self.libc.ptrace.argtypes = [ctypes.c_long, ctypes.c_long, ctypes.c_void_p,
                                     ctypes.c_void_p]
        self.tid = self._busiest_thread(pid)
        deadline = time.monotonic() + 5
        # Wait until it sleeps in futex (waiting for the next poll, the GIL not held).
        while time.monotonic() < deadline:
            if self._syscall() == self.FUTEX:
                break
            time.sleep(0.001)
        if self.libc.ptrace(self.SEIZE, self.tid, None, None) != 0:
            pytest.skip(f"ptrace not permitted here (errno {ctypes.get_errno()})")
        assert self.libc.ptrace(self.INTERRUPT, self.tid, None, None) == 0

    @staticmethod
    def _busiest_thread(pid: int) -> int:
        """The poll thread: the non-main thread that ran most over one second."""
        def runtimes() -> dict[int, int]:
            out = {}
            for tid in os.listdir(f"/proc/{pid}/task"):
                with open(f"/proc/{pid}/task/{tid}/schedstat") as handle:
                    out[int(tid)] = int(handle.read().split()[0])
            return out
        before = runtimes()
        time.sleep(1.0)
        after = runtimes()
        return max((t for t in after if t != pid), key=lambda t: after[t] - before.get(t, 0))

    def _syscall(self) -> int:
        with open(f"/proc/{self.tid}/syscall") as handle:
            field = handle.read().split()[0]
        return int(field) if field.lstrip("-").isdigit() else -1

    def resume(self) -> None:
        self.libc.ptrace(self.DETACH, self.tid, None, None)
