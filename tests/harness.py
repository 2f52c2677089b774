"""Waiting in tests: on a condition with a deadline, never for a guessed time (issue 20.8).

A loaded 2-core machine makes every fixed sleep either too short (a flake) or too long (a
slow suite). Tests wait for what they need instead: a poll count (the daemon logs one line per
poll started at ``--log-level debug``), a log line, an event, an HTTP answer. The deadline is
generous because it is only reached when something is wrong.
"""

from __future__ import annotations

import asyncio
import contextlib
import socket
import subprocess
import threading
import time
from pathlib import Path
from typing import IO, Any, Awaitable, Callable, Optional, Union

DEADLINE = 30.0  # seconds; reached only when the awaited thing never comes
CHECK_EVERY = 0.02  # between two checks of the condition (not a synchronisation)
POLL_STARTED = "poll started at monotonic"  # one debug line per poll (nichealthd.runtime.service)


def wait_until(predicate: Callable[[], bool], what: str, timeout: float = DEADLINE,
               proc: Optional[subprocess.Popen[Any]] = None,
               detail: Callable[[], str] = str) -> None:
    """Return once ``predicate()`` is true; fail naming ``what`` (and ``detail()``) at the
    deadline, or at once if ``proc`` exited. OSError from the predicate counts as false."""
    end = time.monotonic() + timeout
    while True:
        if proc is not None and proc.poll() is not None:
            raise AssertionError(f"exited with {proc.returncode} while waiting for {what}: "
                                 f"{detail()}")
        with contextlib.suppress(OSError):
            if predicate():
                return
        if time.monotonic() >= end:
            raise AssertionError(f"no {what} within {timeout:g} s: {detail()}")
        time.sleep(CHECK_EVERY)


async def wait_until_async(predicate: Callable[[], Awaitable[bool]], what: str,
                           timeout: float = DEADLINE, detail: Callable[[], str] = str) -> None:
    """wait_until for code on an event loop (a D-Bus client's own connection): the loop keeps
    running between two checks, so signals and replies still arrive."""
    end = time.monotonic() + timeout
    while True:
        with contextlib.suppress(OSError):
            if await predicate():
                return
        if time.monotonic() >= end:
            raise AssertionError(f"no {what} within {timeout:g} s: {detail()}")
        await asyncio.sleep(CHECK_EVERY)


class Lines:
    """A process's output, read as it comes by a thread (a full pipe would stall it)."""

    def __init__(self, stream: IO[str]) -> None:
        self.lines: list[str] = []
        self._thread = threading.Thread(target=self._read, args=(stream,), daemon=True)
        self._thread.start()

    def _read(self, stream: IO[str]) -> None:
        for line in stream:
            self.lines.append(line)

    def join(self, timeout: float = DEADLINE) -> str:
        """After the process exited: the whole output."""
        self._thread.join(timeout)
        return "".join(self.lines)

    def count(self, needle: str) -> int:
        return sum(needle in line for line in list(self.lines))

    def tail(self, n: int = 8) -> str:
        return "".join(self.lines[-n:])

    def polls(self) -> int:
        """Polls started so far (the daemon must run with ``--log-level debug``)."""
        return self.count(POLL_STARTED)

    def wait_for(self, needle: str, count: int = 1, timeout: float = DEADLINE,
                 proc: Optional[subprocess.Popen[str]] = None) -> None:
        wait_until(lambda: self.count(needle) >= count, f"{needle!r} x{count}", timeout, proc,
                   self.tail)

    def wait_polls(self, more: int, timeout: float = DEADLINE,
                   proc: Optional[subprocess.Popen[str]] = None) -> None:
        """Until ``more`` polls started after this call (so a change has been seen)."""
        self.wait_for(POLL_STARTED, self.polls() + more, timeout, proc)


class NotifySocket:
    """An AF_UNIX datagram socket standing in for systemd's notify socket.

    A thread drains it continuously, as systemd does: the kernel queues only a few datagrams.
    """

    def __init__(self, path: Union[str, Path]) -> None:
        self.path = Path(path)
        self.sock = socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM)
        self.sock.setsockopt(socket.SOL_SOCKET, socket.SO_PASSCRED, 1)
        self.sock.bind(str(path))
        self.sock.settimeout(0.1)
        self.messages: list[tuple[float, str]] = []
        self._read = 0
        self._closed = False
        self._thread = threading.Thread(target=self._drain, daemon=True)
        self._thread.start()

    def _drain(self) -> None:
        while not self._closed:
            try:
                data = self.sock.recv(65536).decode()
            except (socket.timeout, OSError):
                continue
            self.messages.append((time.monotonic(), data))

    @property
    def statuses(self) -> list[str]:
        """Every ``STATUS=`` text sent so far, oldest first."""
        return [line[len("STATUS="):] for _, message in list(self.messages)
                for line in message.splitlines() if line.startswith("STATUS=")]

    def close(self) -> None:
        self._closed = True
        self._thread.join()
        self.sock.close()

    def collect(self, seconds: float) -> list[str]:
        """Wait ``seconds``; returns the datagrams that arrived since the last call."""
        time.sleep(seconds)
        new = [m for _, m in self.messages[self._read:]]
        self._read += len(new)
        return new

    def wait_for(self, needle: str, seconds: float = DEADLINE) -> str:
        """The next datagram (after the last one read) containing ``needle``."""
        found: list[str] = []

        def arrived() -> bool:
            while not found and self._read < len(self.messages):
                message = self.messages[self._read][1]
                self._read += 1
                if needle in message:
                    found.append(message)
            return bool(found)

        wait_until(arrived, f"{needle!r} datagram", seconds,
                   detail=lambda: str(self.messages[-5:]))
        return found[0]
