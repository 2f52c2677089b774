"""Helpers of the D-Bus tests: the daemon subprocess, nichealthctl/busctl runners, a client."""

from __future__ import annotations

import asyncio
import os
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path
from typing import Any, Callable, Optional

import pytest
from testbus import REPO

from nichealthd.surfaces.dbus_common import (
    BUS_NAME,
    INTERFACE,
    OBJECT_PATH,
    Message,
    MessageBus,
    from_variants,
)
from tests.harness import DEADLINE, SimDaemon, wait_until_async, world_readable_sim

POLL = 0.2


def make_sim(profile: str = "dgx-h100", **kw: Any) -> Path:
    return world_readable_sim(profile, **kw)


ASK_TIMEOUT = 5.0  # one GetStatus while waiting for the daemon; unanswered = ask again


async def _has_polled(address: str) -> bool:
    """One question, bounded: a call that is never answered (seen once on a loaded machine
    while the daemon was starting) must not hang the wait; the next check asks again."""
    try:
        bus = await asyncio.wait_for(MessageBus(bus_address=address).connect(), ASK_TIMEOUT)
    except Exception:
        return False
    try:
        reply = await asyncio.wait_for(bus.call(Message(
            destination=BUS_NAME, path=OBJECT_PATH, interface=INTERFACE, member="GetStatus")),
            ASK_TIMEOUT)
        return bool(reply.message_type.name == "METHOD_RETURN"
                    and reply.body[0]["poll_count"].value > 0)
    except asyncio.TimeoutError:
        return False
    finally:
        bus.disconnect()


RUNNING: list[DaemonProcess] = []  # the daemons started, newest last


class DaemonProcess(SimDaemon):
    """nichealthd running on a sim tree; ``log()`` is what it wrote so far. It serves its
    varlink API too, on ``varlink_socket`` (nichealthctl's tests run over both)."""

    def __init__(self, root: Path, bus_address: str, interval: str = "200ms",
                 extra: Optional[list[str]] = None) -> None:
        self.address = bus_address
        self.varlink_socket = str(root.parent / "io.nichealthd.Monitor")
        RUNNING.append(self)
        super().__init__(root, ["--dbus", "system", "--polling-interval", interval,
                                "--varlink-socket", self.varlink_socket, *(extra or [])],
                         env={"DBUS_SYSTEM_BUS_ADDRESS": bus_address})

    def wait_for_name(self, timeout: float = DEADLINE) -> None:
        """Until the daemon owns the name and has polled (asked with dbus-fast, not busctl)."""
        self.wait_until(lambda: asyncio.run(_has_polled(self.address)),
                        "nichealthd on the bus after a poll", timeout)


_READABLE: list[Path] = []


def source_for(user: Optional[list[str]]) -> Path:
    """Where a (possibly unprivileged) user imports the package from.

    The clone may sit below a directory only root can enter (``mktemp -d`` is 0700), so for
    another user the package is copied once to a world-readable directory.
    """
    if not user:
        return REPO
    if not _READABLE:
        target = Path(tempfile.mkdtemp(prefix="nichealthd-src-"))
        shutil.copytree(REPO / "nichealthd", target / "nichealthd",
                        ignore=shutil.ignore_patterns("__pycache__"))
        for path in [target, *target.rglob("*")]:
            path.chmod(0o755 if path.is_dir() else 0o644)
        _READABLE.append(target)
    return _READABLE[0]


def remove_readable_copies() -> None:
    """Remove what source_for copied (called once at the end of the session)."""
    while _READABLE:
        shutil.rmtree(_READABLE.pop(), ignore_errors=True)


def ctl(*args: str, env: Optional[dict[str, str]] = None, user: Optional[list[str]] = None,
        timeout: float = 30) -> subprocess.CompletedProcess[str]:
    """Run ``nichealthctl`` (as ``python -m nichealthd.cli.ctl``, the console script's target)."""
    source = source_for(user)
    full_env = dict(os.environ, PYTHONPATH=str(source))
    full_env.pop("NO_COLOR", None)
    if env:
        full_env.update(env)
    return subprocess.run([*(user or []), sys.executable, "-m", "nichealthd.cli.ctl", *args],
                          cwd=source, env=full_env, capture_output=True, text=True,
                          timeout=timeout)


def busctl(*args: str, user: Optional[list[str]] = None) -> subprocess.CompletedProcess[str]:
    if shutil.which("busctl") is None:
        pytest.skip("busctl (systemd) is not installed")
    return subprocess.run([*(user or []), "busctl",
                           f"--address={os.environ['DBUS_SYSTEM_BUS_ADDRESS']}", *args],
                          capture_output=True, text=True, timeout=30)


class BusClient:
    """A dbus-fast client for the tests (plain method calls and collected signals)."""

    def __init__(self) -> None:
        self.bus: Any = None
        self.signals: list[Any] = []

    async def __aenter__(self) -> BusClient:
        from nichealthd.surfaces.dbus_common import BusType
        self.bus = await MessageBus(bus_type=BusType.SYSTEM).connect()
        self.bus.add_message_handler(self._on_message)
        return self

    async def __aexit__(self, *exc: object) -> None:
        self.bus.disconnect()

    def _on_message(self, message: Any) -> None:
        from nichealthd.surfaces.dbus_common import MessageType
        if message.message_type == MessageType.SIGNAL:
            self.signals.append(message)

    async def call(self, member: str, signature: str = "", body: Optional[list[Any]] = None,
                   interface: str = INTERFACE, destination: str = BUS_NAME,
                   path: str = OBJECT_PATH) -> Any:
        return await self.bus.call(Message(destination=destination, path=path,
                                           interface=interface, member=member,
                                           signature=signature, body=body or []))

    async def subscribe(self, rule: str) -> None:
        reply = await self.call("AddMatch", "s", [rule], interface="org.freedesktop.DBus",
                                destination="org.freedesktop.DBus", path="/org/freedesktop/DBus")
        assert reply.message_type.name == "METHOD_RETURN", reply.body

    async def wait_signal(self, predicate: Callable[[Any], bool],
                          timeout: float = DEADLINE) -> Any:
        found: list[Any] = []

        async def seen() -> bool:
            found.extend(m for m in self.signals if predicate(m))
            return bool(found)

        await wait_until_async(seen, "matching signal", timeout, lambda: str(
            [(m.interface, m.member) for m in self.signals][-10:]))
        return found[0]


def run(coro: Any) -> Any:
    return asyncio.run(coro)


async def poll_count(client: BusClient) -> int:
    """The daemon's completed polls (GetStatus ``poll_count``)."""
    reply = await client.call("GetStatus")
    return int(from_variants(reply.body[0])["poll_count"])


def wait_polls(more: int, timeout: float = DEADLINE) -> int:
    """Until ``more`` polls completed after this call (so a change has been seen); returns
    the poll count reached. Waits on the daemon's own count, not on a guessed time."""

    async def go() -> int:
        async with BusClient() as client:
            target = await poll_count(client) + more
            reached = [0]

            async def done() -> bool:
                reached[0] = await poll_count(client)
                return reached[0] >= target

            await wait_until_async(done, f"{more} more polls", timeout,
                                   lambda: f"at {reached[0]} of {target}")
            return reached[0]

    return int(run(go()))


def wait_log(daemon: DaemonProcess, needle: str, count: int = 1,
             timeout: float = DEADLINE) -> str:
    """Until the daemon logged ``needle`` ``count`` times; returns the log then."""
    return daemon.wait_log(needle, count, timeout)
