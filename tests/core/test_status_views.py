"""The status keys and the STATUS= summary read the one health model: during a driver reload,
on a host without devices, and when the sysfs root shows nothing at all."""

from __future__ import annotations

import dataclasses

from nichealthd.core.events import format_timestamp
from nichealthd.core.health import assess
from nichealthd.core.model import HostSnapshot
from nichealthd.core.state import DEGRADED
from nichealthd.core.views import NO_DEVICES, assess_host, health_status, status_summary

from .builders import Runner, at, host
from .test_driver_event import empty, fleet, started
from .test_identity import nic


def test_a_driver_reload_keeps_the_held_ports_health_and_is_named() -> None:
    """Every device gone at once: the ports keep the health they had (as ``check`` says: a
    port that was down stays so), the held devices are listed, and the summary never says that no
    devices were found."""
    runner = started(Runner())
    down = host(*fleet(3), nic(3, state="DOWN", phys="Disabled"), when=1)
    before = health_status(down, runner.poll(down), runner.state)
    assert before["health"] != "healthy" and before["problems"] == ["mlx5_3/1 DOWN/Disabled"]
    for second in range(2, 5):
        gone = empty(second, functions=4)
        result = runner.poll(gone)
    status = health_status(gone, result, runner.state)
    assert status["devices_reloading"] == ["mlx5_0", "mlx5_1", "mlx5_2", "mlx5_3"]
    assert status["reloading_since"] == format_timestamp(at(2))
    assert status["devices_found"] is True
    assert status["health"] == before["health"] and status["ports_total"] == 4
    assert status["problems"][0].startswith("mlx5_3/1 DOWN/Disabled")
    line = status_summary(status)
    assert line.startswith(status_summary(before).rsplit(" (", 1)[0] + " (mlx5_3/1 DOWN/Disabled")
    assert "driver event: 4 RDMA devices gone, PCI function on the bus, since " in line
    assert NO_DEVICES not in line


def test_when_they_are_back_nothing_is_held() -> None:
    runner = started(Runner())
    result = runner.poll(empty(1, functions=4))
    result = runner.poll(host(*fleet(), when=2))
    status = health_status(host(*fleet(), when=2), result, runner.state)
    assert status["devices_reloading"] == [] and status["reloading_since"] == ""
    assert "driver reload" not in status_summary(status)


def test_a_host_without_devices_says_so_and_is_healthy() -> None:
    runner = Runner()
    snapshot = HostSnapshot(host(when=0).taken_at, "boot-1", (), complete=False)
    result = runner.poll(snapshot)
    status = health_status(snapshot, result, runner.state)
    assert status["devices_found"] is False and status["health"] == "healthy"
    assert status_summary(status) == NO_DEVICES


def test_a_sysfs_root_that_shows_nothing_is_not_healthy() -> None:
    """No class directory at all under the configured sysfs root (a tree the service's
    sandbox hides): a host-wide degradation with the reader's reason, on every surface that
    reads the model; not "no devices found" and healthy."""
    why = "sysfs root /tmp/x/sys has no class directory: nothing is watched"
    runner = Runner()
    snapshot = HostSnapshot(host(when=0).taken_at, "boot-1", (), complete=False, blind=why)
    result = runner.poll(snapshot)
    assert assess(runner.state, snapshot, result.roles).health == DEGRADED
    status = health_status(snapshot, result, runner.state)
    assert status["health"] == DEGRADED and status["problems"] == [why]
    assert status["devices_found"] is False
    assert status_summary(status) == f"no ports monitored ({why})"


def test_a_steady_host_keeps_its_health_and_status_objects_from_poll_to_poll() -> None:
    """Each poll makes a new snapshot, result and state; while the health they give is the
    last poll's, the model and the status keys are the last poll's objects (the daemon's
    D-Bus signals and STATUS= read them every poll), and a change makes new ones."""
    runner = started(Runner())
    first = host(*fleet(), when=1)
    result = runner.poll(first)
    health = assess_host(first, result, runner.state)
    status = health_status(first, result, runner.state)
    again = host(*fleet(), when=2)
    result = runner.poll(again)
    assert assess_host(again, result, runner.state) is health
    assert health_status(again, result, runner.state) is status
    down = host(*fleet(3), nic(3, state="DOWN", phys="Disabled"), when=3)
    result = runner.poll(down)
    changed = health_status(down, result, runner.state)
    assert assess_host(down, result, runner.state) is not health
    assert changed is not status and changed["problems"] == ["mlx5_3/1 DOWN/Disabled"]


def test_the_status_of_the_same_health_follows_what_else_it_shows() -> None:
    """The same health model with a family that could not judge: new keys that name it."""
    runner = started(Runner())
    snapshot = host(*fleet(), when=1)
    result = runner.poll(snapshot)
    health = assess_host(snapshot, result, runner.state)
    status = health_status(snapshot, result, runner.state, health)
    failing = dataclasses.replace(result, failed={"link_rate": "RuntimeError: boom"})
    named = health_status(snapshot, failing, runner.state, health)
    assert named is not status and named["families_failing"] == ["link_rate: RuntimeError: boom"]
    assert health_status(snapshot, result, runner.state, health)["families_failing"] == []
