"""Failed commits through the running daemon: a latched ``link_downed`` is reset while every
commit fails (a full disk: a file-size limit of 0 makes each write fail with EFBIG), then the
disk has room again -> the recovery event arrives."""

from __future__ import annotations

import resource
from typing import Any, Callable, Iterator

import pytest

from nichealthd.sim import mutate

from ..harness import NotifySocket
from .conftest import SimHost
from .test_service import Daemon, events, notify  # noqa: F401 (fixture)


def wait_for_event(daemon: Daemon, host: SimHost, match: Callable[[dict[str, Any]], bool]
                   ) -> dict[str, Any]:
    found: list[dict[str, Any]] = []

    def seen() -> bool:
        found[:] = [e for e in events(host) if match(e)]
        return bool(found)

    daemon.wait_until(seen, "the event")
    return found[-1]


@pytest.fixture
def daemon(sim_host: Callable[..., SimHost], notify: NotifySocket  # noqa: F811
           ) -> Iterator[tuple[SimHost, Daemon]]:
    host = sim_host()
    running = Daemon(host, notify)
    notify.wait_for("READY=1")
    yield host, running
    code, err = running.stop()
    assert code == 0, err[-2000:]


def test_a_reset_while_commits_fail_is_recovered_when_the_disk_has_room(
        daemon: tuple[SimHost, Daemon]) -> None:
    host, running = daemon
    link_downed = ["link_downed"]
    mutate.counter(host.root, "mlx5_0", 1, "link_downed", add=1)
    wait_for_event(running, host, lambda e: e["errorCode"] == link_downed and e["isFatal"])
    _, hard = resource.getrlimit(resource.RLIMIT_FSIZE)
    resource.prlimit(running.proc.pid, resource.RLIMIT_FSIZE, (0, hard))  # the disk is full
    mutate.counter(host.root, "mlx5_0", 1, "link_downed", set_to=0)  # reset while full
    running.lines.wait_for("commit failed", proc=running.proc)  # logged once per cause
    running.wait_polls(3)  # three more polls saw the reset
    assert running.lines.count("commit failed") == 1
    recovered = "Counter link_downed recovered on port mlx5_0 port 1"
    assert not [e for e in events(host) if e["message"] == recovered]
    resource.prlimit(running.proc.pid, resource.RLIMIT_FSIZE, (hard, hard))  # room again
    recovery = wait_for_event(running, host, lambda e: e["message"] == recovered)
    assert recovery["errorCode"] == link_downed and recovery["isHealthy"]
