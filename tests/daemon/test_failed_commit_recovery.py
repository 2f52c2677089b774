"""Issue 20 item 1 through the running daemon: a latched ``link_downed`` is reset while every
commit fails (a full disk: a file-size limit of 0 makes each write fail with EFBIG), then the
disk has room again -> the recovery event arrives."""

from __future__ import annotations

import contextlib
import resource
import threading
import time
from typing import Callable, Iterator

import pytest

from nichealthd.sim import mutate

from .conftest import SimHost
from .test_service import Daemon, NotifySocket, events, notify  # noqa: F401 (fixture)


class Lines:
    """The daemon's stderr, read as it comes (a full pipe would stall the daemon)."""

    def __init__(self, daemon: Daemon) -> None:
        self.lines: list[str] = []
        assert daemon.proc.stderr is not None
        self._stream = daemon.proc.stderr
        self._thread = threading.Thread(target=self._read, daemon=True)
        self._thread.start()

    def _read(self) -> None:
        for line in self._stream:
            self.lines.append(line)

    def wait_until(self, predicate: Callable[[], bool], what: str, seconds: float,
                   daemon: Daemon) -> None:
        """Wait for ``predicate``; fails at once, with the log, if the daemon exits."""
        end = time.monotonic() + seconds
        while True:
            assert daemon.proc.poll() is None, f"exited: {''.join(self.lines[-20:])}"
            with contextlib.suppress(OSError):
                if predicate():
                    return
            assert time.monotonic() < end, f"no {what} in {seconds} s: {self.lines[-5:]}"
            time.sleep(0.05)

    def wait_for(self, needle: str, count: int = 1, seconds: float = 20.0) -> None:
        end = time.monotonic() + seconds
        while sum(needle in line for line in self.lines) < count:
            assert time.monotonic() < end, f"{needle!r} x{count} not logged: {self.lines[-5:]}"
            time.sleep(0.05)


def wait_for_event(host: SimHost, match: Callable[[dict], bool], seconds: float = 20.0
                   ) -> dict:
    end = time.monotonic() + seconds
    while time.monotonic() < end:
        found = [e for e in events(host) if match(e)]
        if found:
            return found[-1]
        time.sleep(0.05)
    raise AssertionError(f"no such event within {seconds} s")


@pytest.fixture
def daemon(sim_host: Callable[..., SimHost], notify: NotifySocket  # noqa: F811
           ) -> Iterator[tuple[SimHost, Daemon, Lines]]:
    host = sim_host()
    running = Daemon(host, notify, "--log-level", "debug")  # one line per poll started
    lines = Lines(running)
    notify.wait_for("READY=1")
    yield host, running, lines
    code = running.stop()[0]
    assert code == 0, "".join(lines.lines[-20:])


def test_a_reset_while_commits_fail_is_recovered_when_the_disk_has_room(
        daemon: tuple[SimHost, Daemon, Lines]) -> None:
    host, running, lines = daemon
    link_downed = ["link_downed"]
    mutate.counter(host.root, "mlx5_0", 1, "link_downed", add=1)
    wait_for_event(host, lambda e: e["errorCode"] == link_downed and e["isFatal"])
    _, hard = resource.getrlimit(resource.RLIMIT_FSIZE)
    resource.prlimit(running.proc.pid, resource.RLIMIT_FSIZE, (0, hard))  # the disk is full
    mutate.counter(host.root, "mlx5_0", 1, "link_downed", set_to=0)  # reset while full
    lines.wait_for("commit failed")  # logged once: repeats of a line are rate-limited
    polls = sum("poll started" in line for line in lines.lines)
    lines.wait_for("poll started", count=polls + 3)  # three more polls saw the reset
    recovered = "Counter link_downed recovered on port mlx5_0 port 1"
    assert not [e for e in events(host) if e["message"] == recovered]
    resource.prlimit(running.proc.pid, resource.RLIMIT_FSIZE, (hard, hard))  # room again
    recovery = wait_for_event(host, lambda e: e["message"] == recovered)
    assert recovery["errorCode"] == link_downed and recovery["isHealthy"]
