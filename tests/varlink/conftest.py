"""Fixtures: nichealthd serving its varlink API on a sim tree (tests/varlink on sys.path)."""

from __future__ import annotations

from pathlib import Path
from typing import Callable, Iterator, Optional

import pytest
from vlhelpers import VarlinkDaemon, make_sim


@pytest.fixture
def start_daemon() -> Iterator[Callable[..., VarlinkDaemon]]:
    """start_daemon(root=None, interval='200ms', extra=None) -> a running, polled daemon."""
    started: list[VarlinkDaemon] = []

    def _start(root: Optional[Path] = None, interval: str = "200ms",
               extra: Optional[list[str]] = None, wait: bool = True,
               flag: bool = True, preexec_fn: Optional[Callable[[], None]] = None
               ) -> VarlinkDaemon:
        daemon = VarlinkDaemon(root or make_sim(), interval, extra, flag, preexec_fn)
        started.append(daemon)
        if wait:
            daemon.wait_ready()
        return daemon

    yield _start
    for daemon in started:
        daemon.stop()
        daemon.cleanup()


@pytest.fixture
def daemon(start_daemon: Callable[..., VarlinkDaemon]) -> VarlinkDaemon:
    return start_daemon()
