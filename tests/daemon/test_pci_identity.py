"""The real daemon tells a driver event from a NIC gone by the PCI bus (core/checks/driver.py).

Each drill is the ``nichealthd-sim`` command an operator would run: a staggered driver unload,
one card's firmware reset, a function unbound for good, a card off the PCI bus. Polls every
200 ms, so three polls (the spec's rule for a device gone) are 0.6 s.
"""

from __future__ import annotations

import subprocess
import sys
from contextlib import contextmanager
from typing import Any, Callable, Iterator

from ..harness import DEADLINE, NotifySocket
from .conftest import REPO, SimHost
from .test_driver_reload import GONE, configure, fatal, sim, state
from .test_service import Daemon, events, notify  # noqa: F401 (fixture)


def replace_vm(run_events: list[dict[str, Any]]) -> list[dict[str, Any]]:
    return [e for e in run_events if e["recommendedAction"] == "REPLACE_VM"]


@contextmanager
def running(host: SimHost, notify: NotifySocket) -> Iterator[Daemon]:  # noqa: F811
    """The daemon on ``host``, ready; stopped cleanly (exit 0, no traceback) afterwards."""
    daemon = Daemon(host, notify)
    try:
        notify.wait_for("READY=1")
        yield daemon
    finally:
        code, err = daemon.stop()
    assert code == 0, err
    assert "Traceback" not in err


def test_an_unload_that_takes_more_than_two_seconds_gives_no_replace_vm(
        sim_host: Callable[..., SimHost], notify: NotifySocket) -> None:  # noqa: F811
    """A third of the 13 devices at a time, 1.1 s apart (11 polls between them), back 3 s
    later: before the devices were judged by PCI function, the first third was REPLACE_VM."""
    host = sim_host()
    with running(host, notify) as daemon:
        daemon.wait_polls(2)
        before = len(events(host))
        sim(host, "driver-unload", "--stagger", "1.1")
        daemon.wait_polls(15)  # 3 s with every device gone
        held = state(host)["driver_event"]
        assert held is not None and len(held["devices"]) == len(state(host)["known_devices"])
        sim(host, "driver-load")
        daemon.lines.wait_for("RDMA devices are back", proc=daemon.proc)
        daemon.wait_polls(5)
        after = events(host)[before:]
        assert replace_vm(after) == [] and fatal(after) == []
        assert state(host)["driver_event"] is None and not state(host)["missing_devices"]


def test_a_firmware_reset_of_one_card_gives_no_event(
        sim_host: Callable[..., SimHost], notify: NotifySocket) -> None:  # noqa: F811
    host = sim_host()
    with running(host, notify) as daemon:
        daemon.wait_polls(2)
        before = len(events(host))
        reset = subprocess.Popen(
            [sys.executable, "-m", "nichealthd.sim", "fw-reset", str(host.root), "mlx5_3",
             "--down", "5"], cwd=REPO, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
            text=True)
        daemon.lines.wait_for("mlx5_3 gone with the PCI function on the bus",
                              proc=daemon.proc)
        out, err = reset.communicate(timeout=60)
        assert reset.returncode == 0, err
        assert out.split()[0] == "mlx5_3"  # then its VFs, which go with it
        daemon.lines.wait_for("RDMA devices are back", proc=daemon.proc)
        daemon.wait_polls(5)
        assert events(host)[before:] == []  # within the grace: not even the driver event
        assert state(host)["driver_event"] is None


def test_a_function_unbound_for_good_is_replace_vm_after_the_timeout(
        sim_host: Callable[..., SimHost], notify: NotifySocket) -> None:  # noqa: F811
    host = configure(sim_host(), driverReloadGrace="1s", driverReloadTimeout="3s")
    with running(host, notify) as daemon:
        before = len(events(host))
        sim(host, "unbind", "mlx5_2")
        daemon.wait_until(lambda: bool(fatal(events(host)[before:])), "the verdict",
                          DEADLINE + 3)
        after = events(host)[before:]
        assert [(e["errorCode"][0], e["isFatal"], e["isHealthy"]) for e in after] == [
            ("driver_event", False, False), ("driver_event", False, True),
            (GONE, True, False)]
        assert after[0]["message"].startswith("1 of 12 RDMA devices gone while their PCI "
                                              "functions stay on the bus")
        assert replace_vm(after) == [after[2]]
        assert after[2]["entitiesImpacted"][0]["entityValue"] == "mlx5_2"


def test_a_card_off_the_pci_bus_is_replace_vm_at_the_third_poll(
        sim_host: Callable[..., SimHost], notify: NotifySocket) -> None:  # noqa: F811
    host = sim_host()
    with running(host, notify) as daemon:
        before = len(events(host))
        assert sim(host, "pci-remove", "mlx5_5").split() == ["mlx5_5"]
        daemon.wait_until(lambda: bool(fatal(events(host)[before:])), "the verdict")
        gone = events(host)[before:]
        assert [(e["errorCode"][0], e["recommendedAction"]) for e in gone] == [
            (GONE, "REPLACE_VM")]
        assert list(state(host)["missing_devices"]) == ["mlx5_5"]
        assert state(host)["driver_event"] is None
        sim(host, "pci-rescan", "mlx5_5")
        daemon.wait_until(lambda: len(events(host)) > before + 1, "the recovery")
        back = events(host)[before + 1:]
        assert [(e["errorCode"][0], e["isHealthy"]) for e in back] == [(GONE, True)]
