"""Fixtures: a real dbus-daemon with the project's policy, and nichealthd on a sim tree.

The daemon is a real subprocess (``python -m nichealthd.runtime.daemon --dbus system``) polling a
``nichealthd-sim`` DGX-H100 tree every 200 ms; clients are dbus-fast, busctl and
``python -m nichealthd.cli.ctl``, all pointed at the private bus by DBUS_SYSTEM_BUS_ADDRESS.
(tests/dbus is on sys.path: pytest's rootdir import mode, no __init__.py.)
"""

from __future__ import annotations

import os
import shutil
from pathlib import Path
from typing import Callable, Iterator, Optional

import pytest
from dbushelpers import DaemonProcess, make_sim, remove_readable_copies
from testbus import TestBus, start_bus

for tool in ("dbus-daemon", "setpriv"):
    if shutil.which(tool) is None:
        pytest.skip(f"{tool} is not installed", allow_module_level=True)


@pytest.fixture(scope="session", autouse=True)
def _readable_copies() -> Iterator[None]:
    """The world-readable copy of the package source_for makes for other users goes at the end
    (it used to stay behind in /tmp)."""
    yield
    remove_readable_copies()


@pytest.fixture(scope="session")
def system_bus() -> Iterator[TestBus]:
    bus = start_bus()
    old = os.environ.get("DBUS_SYSTEM_BUS_ADDRESS")
    os.environ["DBUS_SYSTEM_BUS_ADDRESS"] = bus.address
    try:
        yield bus
    finally:
        if old is None:
            os.environ.pop("DBUS_SYSTEM_BUS_ADDRESS", None)
        else:
            os.environ["DBUS_SYSTEM_BUS_ADDRESS"] = old
        bus.stop()


@pytest.fixture
def start_daemon(system_bus: TestBus) -> Iterator[Callable[..., DaemonProcess]]:
    """start_daemon(root=None, interval='200ms', wait=True) -> a running nichealthd."""
    started: list[DaemonProcess] = []

    def _start(root: Optional[Path] = None, interval: str = "200ms", wait: bool = True,
               address: Optional[str] = None, extra: Optional[list[str]] = None
               ) -> DaemonProcess:
        daemon = DaemonProcess(root or make_sim(), address or system_bus.address, interval,
                               extra)
        started.append(daemon)
        if wait:
            daemon.wait_for_name()
        return daemon

    yield _start
    for daemon in started:
        daemon.stop()
        daemon.cleanup()


@pytest.fixture
def daemon(start_daemon: Callable[..., DaemonProcess]) -> DaemonProcess:
    return start_daemon()


