"""The lost-NIC rule after boot order, end to end: the real daemon on a sim tree driven by the
``nichealthd-sim`` command line (``driver-unload``/``driver-load``, ``remove-device``,
``unbind``/``bind --driver``), each fault made before the daemon's first start so that no
function is a known device (those are the link-state family's)."""

from __future__ import annotations

import time
from datetime import datetime
from typing import Any, Callable

from ..harness import DEADLINE, NotifySocket
from .conftest import SimHost
from .test_driver_reload import configure, sim, state
from .test_service import Daemon, events, notify  # noqa: F401 (fixture)

LOST = "nic_unregistered"


def replace_vm(found: list[dict[str, Any]]) -> list[dict[str, Any]]:
    return [e for e in found if e["recommendedAction"] == "REPLACE_VM" and not e["isHealthy"]]


def lost(found: list[dict[str, Any]]) -> list[dict[str, Any]]:
    return [e for e in found if e["errorCode"] == [LOST]]


def address(host: SimHost, name: str) -> str:
    return str(next(d["pci"] for d in host.manifest["devices"] if d["name"] == name))


def when(event: dict[str, Any]) -> datetime:
    return datetime.fromisoformat(event["generatedTimestamp"].replace("Z", "+00:00"))


def short(host: SimHost, grace: str) -> SimHost:
    """An adapter read every second and a short driver grace."""
    return configure(host, adapterCheckInterval="1s", driverReloadGrace=grace)


def test_the_daemon_started_before_mlx5_ib_gives_no_replace_vm(
        sim_host: Callable[..., SimHost], notify: NotifySocket) -> None:  # noqa: F811
    """13 Mellanox PFs bound to mlx5_core without an RDMA device (mlx5_ib not loaded) for
    twice the grace, then mlx5_ib loads: no REPLACE_VM (13 before the rule)."""
    host = short(sim_host(), "2s")
    sim(host, "driver-unload")
    daemon = Daemon(host, notify)
    try:
        notify.wait_for("READY=1")
        daemon.lines.wait_for("no Mellanox PCI function has an RDMA device", proc=daemon.proc)
        time.sleep(4.5)  # four adapter reads more, past the grace
        assert replace_vm(events(host)) == []
        assert state(host)["lost_nic_since"] == {}
        sim(host, "driver-load")
        daemon.lines.wait_for("the RDMA driver is up", proc=daemon.proc)
        time.sleep(3.5)
        assert replace_vm(events(host)) == [] and lost(events(host)) == []
        assert state(host)["lost_nic_since"] == {} and state(host)["lost_nic_latched"] == {}
    finally:
        code, err = daemon.stop()
    assert code == 0, err
    # Told once; the management NIC (default route on its netdev) is not among them.
    assert err.count("no Mellanox PCI function has an RDMA device") == 1
    assert "12 function(s) without one are not judged" in err


def test_a_management_nic_without_an_rdma_device_gives_no_replace_vm(
        sim_host: Callable[..., SimHost], notify: NotifySocket) -> None:  # noqa: F811
    """The management NIC (its netdev carries the default route in proc/net/route) without an
    RDMA device is not judged; a storage NIC without one beside it is, after the grace (so
    the run does judge)."""
    host = short(sim_host(), "2s")
    mgmt = next(d for d in host.manifest["devices"] if d["role"] == "management")
    storage = next(d for d in host.manifest["devices"] if d["role"] == "storage")
    sim(host, "remove-device", mgmt["name"])
    sim(host, "remove-device", storage["name"])
    daemon = Daemon(host, notify)
    try:
        notify.wait_for("READY=1")
        daemon.wait_until(lambda: bool(lost(events(host))), "the storage NIC's event",
                          DEADLINE + 5)
        time.sleep(3.5)  # more reads past the grace
        reported = replace_vm(events(host))
        assert [e["entitiesImpacted"] for e in reported] == [
            [{"entityType": "PCI", "entityValue": storage["pci"]}]]
        pending = state(host)
        assert mgmt["pci"] not in pending["lost_nic_since"]
        assert mgmt["pci"] not in pending["lost_nic_misses"]
    finally:
        code, err = daemon.stop()
    assert code == 0, err


def test_a_function_unbound_for_good_is_replace_vm_after_the_grace(
        sim_host: Callable[..., SimHost], notify: NotifySocket) -> None:  # noqa: F811
    host = short(sim_host(), "3s")
    pci = address(host, "mlx5_4")
    assert sim(host, "unbind", "mlx5_4").strip() == pci
    daemon = Daemon(host, notify)
    try:
        notify.wait_for("READY=1")
        daemon.wait_until(lambda: pci in state(host)["lost_nic_since"], "its grace clock")
        since = datetime.fromisoformat(
            state(host)["lost_nic_since"][pci].replace("Z", "+00:00"))
        daemon.wait_until(lambda: bool(lost(events(host))), "the lost NIC's event",
                          DEADLINE + 5)
        time.sleep(2.5)
        reported = replace_vm(events(host))
        assert len(reported) == 1, reported
        assert reported[0]["entitiesImpacted"] == [{"entityType": "PCI", "entityValue": pci}]
        assert "no driver is bound to it" in reported[0]["message"]
        assert (when(reported[0]) - since).total_seconds() >= 3.0
    finally:
        code, err = daemon.stop()
    assert code == 0, err


def test_a_function_bound_to_vfio_pci_is_not_judged_until_vfio_lets_go(
        sim_host: Callable[..., SimHost]) -> None:
    """``--once`` runs, one adapter read each, no grace (the floor of three reads decides)."""
    host = configure(sim_host(), driverReloadGrace="0s")
    pci = address(host, "mlx5_4")
    sim(host, "unbind", "mlx5_4")
    sim(host, "bind", "mlx5_4", "--driver", "vfio-pci")
    for _ in range(5):
        run = host.once()
        assert run.returncode == 0, run.stderr
        assert lost(run.events) == []
    assert pci not in state(host)["lost_nic_misses"]
    sim(host, "unbind", "mlx5_4")  # vfio-pci lets go: an unbound function is judged
    runs = [host.once() for _ in range(3)]
    assert [len(lost(r.events)) for r in runs] == [0, 0, 1]
    assert lost(runs[2].events)[0]["recommendedAction"] == "REPLACE_VM"
