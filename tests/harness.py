"""Running daemons in tests: start nichealthd on a sim tree, wait with a deadline, stop it.

Waiting (CONTRIBUTING.md): a loaded 2-core machine makes every fixed sleep either too short (a
flake) or too long (a slow suite). Tests wait for what they need instead: a poll count (the
daemon logs one line per poll started at ``--log-level debug``), a log line, an event, an HTTP
answer. The deadline is generous because it is only reached when something is wrong.

The environment: whatever starts the suite (systemd, a container, a desktop session) may
set variables the daemon acts on: ``NOTIFY_SOCKET`` (it would notify the container's
manager), ``LISTEN_FDS``, ``WATCHDOG_USEC``, ``DBUS_*``. :func:`clean_environment` removes
them from this process once, at the start of the session (``tests/conftest.py``), so that
every daemon and client a test starts, by whatever helper, sees only what the test sets.

Starting and stopping: :class:`SimDaemon` is ``python -m nichealthd.runtime.daemon`` on a
``nichealthd-sim`` tree from :func:`world_readable_sim` (its directory is world-readable so
that a client run as :data:`NOBODY` reaches the daemon's sockets); the D-Bus and varlink
tests' daemons build on it. :func:`stop_process` is the one way a test stops a process.
"""

from __future__ import annotations

import asyncio
import contextlib
import functools
import os
import shutil
import signal
import socket
import subprocess
import sys
import threading
import time
from pathlib import Path
from typing import (
    IO,
    Any,
    Awaitable,
    Callable,
    Mapping,
    MutableMapping,
    Optional,
    Sequence,
    Union,
)

from . import simtrees

REPO = Path(__file__).resolve().parents[1]
DEADLINE = 30.0  # seconds; reached only when the awaited thing never comes
CHECK_EVERY = 0.02  # between two checks of the condition (not a synchronisation)
POLL_STARTED = "poll started at monotonic"  # one debug line per poll (nichealthd.runtime.service)
STOP_WAIT = 15.0  # seconds a daemon gets to exit after SIGTERM before it is killed
NOBODY = ["setpriv", "--reuid=65534", "--regid=65534", "--clear-groups"]  # argv prefix: as nobody


# Variables of the environment the suite runs in that the daemon or nichealthctl act on.
INHERITED = ("NOTIFY_SOCKET", "MAINPID", "INVOCATION_ID", "JOURNAL_STREAM", "NODE_NAME")
INHERITED_PREFIXES = ("LISTEN_", "WATCHDOG_", "DBUS_", "NICHEALTHCTL_")


def clean_environment(environ: MutableMapping[str, str] = os.environ) -> list[str]:
    """Remove the :data:`INHERITED` variables from ``environ``; the names removed."""
    removed = [name for name in environ
               if name in INHERITED or name.startswith(INHERITED_PREFIXES)]
    for name in removed:
        del environ[name]
    return removed


@functools.cache
def nobody_can_run(executable: str = sys.executable) -> bool:
    """Whether ``executable`` starts as nobody: a pyenv interpreter under /root (CI's Python
    3.9 stage) cannot load its own libpython there."""
    return subprocess.run([*NOBODY, executable, "-c", "pass"], capture_output=True,
                          timeout=60).returncode == 0


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


def ctl(socket: Union[str, Path], *args: str, env: Optional[Mapping[str, str]] = None,
        cwd: Path = REPO) -> subprocess.CompletedProcess[str]:
    """``nichealthctl --varlink=SOCKET ARGS`` as a user runs it: a process of its own (its
    exit status and streams are part of what the tests check), run from ``cwd``'s package."""
    return subprocess.run([sys.executable, "-m", "nichealthd.cli.ctl", f"--varlink={socket}",
                           *args], cwd=cwd, env=env, capture_output=True, text=True,
                          timeout=60)


def ctl_output(socket: Union[str, Path], *args: str, env: Optional[Mapping[str, str]] = None,
               cwd: Path = REPO) -> str:
    """What :func:`ctl` prints, asserting that it succeeded."""
    shown = ctl(socket, *args, env=env, cwd=cwd)
    assert shown.returncode == 0, shown.stderr
    return shown.stdout


def run_tests_in_a_copy(top: Path, ship: Callable[[Path], None],
                    tests: Sequence[str]) -> subprocess.CompletedProcess[str]:
    """Run ``tests`` (pytest node ids, verbose) in a copy of the repository at ``top`` after
    ``ship(top)`` changed it: how a worked example of ARCHITECTURE.md shows that, added as it
    says, it breaks none of the tests that hold the docs and the layers."""
    for name in ("nichealthd", "tests", "man", "etc", "completions", "systemd", "packaging",
                 "bench"):  # bench/: what the docs cite (tests/test_layout.py holds them)
        shutil.copytree(REPO / name, top / name,
                        ignore=shutil.ignore_patterns("__pycache__", ".pytest_cache"))
    for name in ("pyproject.toml", "README.md", "ARCHITECTURE.md", "CONTRIBUTING.md"):
        shutil.copy(REPO / name, top / name)
    ship(top)
    return subprocess.run(
        [sys.executable, "-m", "pytest", "-v", "-p", "no:cacheprovider", "-p", "no:xdist",
         "-p", "no:randomly", *tests], cwd=top, capture_output=True, text=True,
        timeout=900, env=dict(os.environ, PYTHONPATH=str(top)))


def stop_process(proc: subprocess.Popen[Any], timeout: float = STOP_WAIT,
                 sig: int = signal.SIGTERM) -> int:
    """Send ``sig`` if ``proc`` still runs, kill it if it has not exited ``timeout`` seconds
    later; returns its exit status."""
    if proc.poll() is None:
        proc.send_signal(sig)
    try:
        proc.wait(timeout)
    except subprocess.TimeoutExpired:
        proc.kill()
        proc.wait()
    return int(proc.returncode)


def world_readable_sim(profile: str = "dgx-h100", **kw: Any) -> Path:
    """A ``nichealthd-sim`` tree as ``tree.create(ROOT, profile, **kw)`` builds it, the test's
    until it ends (:func:`tests.simtrees.take`); returns ROOT, ``DIR/host`` in a DIR of mode
    0755, where the daemon's sockets and log go so that a client running as nobody reaches
    them."""
    return simtrees.take(profile, **kw)


class SimDaemon:
    """``python -m nichealthd.runtime.daemon --config ROOT/nichealthd.toml ARGS`` run from the
    checkout on a sim tree, with ``env`` added to this environment; what it writes (stdout and
    stderr) goes to a log file beside the tree, read with :meth:`log`."""

    def __init__(self, root: Path, args: Sequence[str],
                 env: Optional[Mapping[str, str]] = None,
                 preexec_fn: Optional[Callable[[], None]] = None) -> None:
        self.root = root
        self.log_path = root.parent / f"daemon-{time.monotonic_ns()}.log"
        path = os.pathsep.join(p for p in (str(REPO), os.environ.get("PYTHONPATH")) if p)
        full_env = dict(os.environ, PYTHONPATH=path)
        full_env.update(env or {})
        self.log_file = open(self.log_path, "wb")  # noqa: SIM115 - closed in stop()
        self.proc = subprocess.Popen(
            [sys.executable, "-m", "nichealthd.runtime.daemon", "--config",
             str(root / "nichealthd.toml"), *args],
            cwd=REPO, env=full_env, stdout=self.log_file, stderr=subprocess.STDOUT,
            preexec_fn=preexec_fn)

    def log(self) -> str:
        return self.log_path.read_text(errors="replace")

    def wait_until(self, predicate: Callable[[], bool], what: str,
                   timeout: float = DEADLINE) -> None:
        """:func:`wait_until` that fails at once if the daemon exits, showing its log."""
        wait_until(predicate, what, timeout, self.proc, self.log)

    def wait_log(self, needle: str, count: int = 1, timeout: float = DEADLINE) -> str:
        """Until the daemon logged ``needle`` ``count`` times; returns the log then."""
        self.wait_until(lambda: self.log().count(needle) >= count,
                        f"{needle!r} x{count} in the log", timeout)
        return self.log()

    def stop(self) -> int:
        """SIGTERM, a kill after STOP_WAIT seconds; returns the exit status."""
        returncode = stop_process(self.proc)
        self.log_file.close()
        return returncode

    def cleanup(self) -> None:
        """Remove the tree's directory, unless it is a :mod:`tests.simtrees` tree (restored
        for the next test instead)."""
        if not simtrees.pooled(self.root):
            shutil.rmtree(self.root.parent, ignore_errors=True)
