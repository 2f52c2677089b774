"""The PCI-side families from outside: the real daemon (``--once``) on a simulated DGX tree.

Each ``--once`` run is a new process, so every slow family is due and reads its files; the
state file carries what was reported between the runs.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any, Callable

from nichealthd.sim import pcifiles, tree

from .conftest import SimHost

GEN4 = "16.0 GT/s PCIe"


def function(host: SimHost, dev: str) -> Path:
    return pcifiles.device_function(host.root, tree.device(host.manifest, dev))


def pci_events(events: list[dict[str, Any]], code: str) -> list[dict[str, Any]]:
    return [e for e in events if e["errorCode"] == [code]]


def test_a_hop_trained_to_x8_is_one_event_naming_it_and_retraining_recovers(
        sim_host: Callable[..., SimHost]) -> None:
    host = sim_host("dgx-h100")
    first = host.once()
    assert first.returncode == 0, first.stderr
    assert not pci_events(first.events, "pcie_link")
    nic = function(host, "mlx5_0")
    up, down = pcifiles.hop_ends(nic, 0)
    pcifiles.pcie_degrade(nic, 0, 8, None)
    run = host.once()
    events = pci_events(run.events, "pcie_link")
    assert len(events) == 1, run.events
    event = events[0]
    assert event["checkName"] == "InfiniBandDegradationCheck" and not event["isFatal"]
    assert event["message"] == (f"PCIe link {up.name} → {down.name} of mlx5_0 runs x8 at "
                                f"32.0 GT/s, both ends support x16 at 32.0 GT/s - suspect: "
                                f"nic (pcie_link is the adapter's own condition)")
    assert {"entityType": "PCI", "entityValue": down.name} in event["entitiesImpacted"]
    assert not pci_events(host.once().events, "pcie_link")  # said once
    pcifiles.pcie_degrade(nic, 0, None, None, restore=True)
    back = pci_events(host.once().events, "pcie_link")
    assert [(e["isHealthy"], e["checkName"]) for e in back] == [
        (True, "InfiniBandDegradationCheck")]


def test_a_gen5_nic_behind_a_gen4_root_port_running_at_gen4_is_no_event(
        sim_host: Callable[..., SimHost]) -> None:
    host = sim_host("dgx-h100")
    nic = function(host, "mlx5_0")
    top = len(pcifiles.chain(nic)) // 2 - 1  # the root port's link
    pcifiles.pcie_degrade(nic, top, None, None, upstream_max_speed=GEN4)
    # ... and the NIC's own link runs at Gen4 behind a Gen4 switch port.
    up, down = pcifiles.hop_ends(nic, 0)
    (up / "max_link_speed").write_text(GEN4 + "\n")
    pcifiles.pcie_degrade(nic, 0, None, None, restore=True)
    assert (down / "current_link_speed").read_text().strip() == GEN4
    assert (down / "max_link_speed").read_text().strip() == "32.0 GT/s PCIe"
    run = host.once()
    assert run.returncode == 0, run.stderr
    assert not pci_events(run.events, "pcie_link")


def test_a_fatal_aer_is_one_fatal_event_and_a_correctable_error_none(
        sim_host: Callable[..., SimHost]) -> None:
    host = sim_host("dgx-h100")
    assert host.once().returncode == 0
    nic = function(host, "mlx5_0")
    pcifiles.aer(nic, "correctable", 1, "BadTLP")
    assert not [e for e in host.once().events if e["errorCode"][:1] == ["aer_dev_correctable"]]
    pcifiles.aer(nic, "fatal", 1, "MalfTLP")
    run = host.once()
    fatal = pci_events(run.events, "aer_dev_fatal")
    assert len(fatal) == 1, run.events
    assert fatal[0]["isFatal"] and fatal[0]["recommendedAction"] == "REPLACE_VM"
    assert fatal[0]["checkName"] == "InfiniBandDegradationCheck"  # a latched counter
    assert {"entityType": "PCI", "entityValue": nic.name} in fatal[0]["entitiesImpacted"]
    # The root port above counted the same error (the sim counts it as the kernel does):
    # the NIC's event is the one report.
    top = pcifiles.chain(nic)[0]
    assert (top / "aer_rootport_total_err_fatal").read_text() == "1\n"
    assert not pci_events(run.events, "aer_rootport_total_err_fatal")
    assert not pci_events(host.once().events, "aer_dev_fatal")  # latched, said once


def test_a_fatal_error_below_a_shared_root_port_is_one_event_naming_every_nic_below(
        sim_host: Callable[..., SimHost]) -> None:
    host = sim_host("dgx-h100")
    assert host.once().returncode == 0
    nic = function(host, "mlx5_1")  # one function of the dual-port storage card ...
    top = pcifiles.chain(nic)[0]
    assert pcifiles.chain(function(host, "mlx5_2"))[0] == top  # ... the other below it too
    pcifiles.rootport_aer(nic, "fatal")  # another device below the root port reported it
    run = host.once()
    got = pci_events(run.events, "aer_rootport_total_err_fatal")
    assert len(got) == 1, run.events
    event = got[0]
    assert event["checkName"] == "EthernetDegradationCheck" and event["isFatal"]
    assert event["entitiesImpacted"] == [{"entityType": "NIC", "entityValue": "mlx5_1"},
                                         {"entityType": "NIC", "entityValue": "mlx5_2"},
                                         {"entityType": "PCI", "entityValue": top.name}]
    assert f"root port {top.name} above mlx5_1, mlx5_2" in event["message"]
    assert not [e for e in run.events if e["errorCode"][:1] == ["aer_dev_fatal"]]
    assert not pci_events(host.once().events, "aer_rootport_total_err_fatal")  # latched


def test_temperature_margin_critical_and_recovery(sim_host: Callable[..., SimHost]) -> None:
    host = sim_host("dgx-h100")
    assert host.once().returncode == 0
    nic = function(host, "mlx5_3")
    pcifiles.temperature(nic, 101)  # crit 105, margin 5
    high = pci_events(host.once().events, "temperature")
    assert [(e["isFatal"], e["isHealthy"]) for e in high] == [(False, False)]
    pcifiles.temperature(nic, 105)
    crit = pci_events(host.once().events, "temperature")
    assert [(e["checkName"], e["isFatal"], e["isHealthy"]) for e in crit] == [
        ("InfiniBandDegradationCheck", False, True), ("InfiniBandStateCheck", True, False)]
    pcifiles.temperature(nic, 60)
    back = pci_events(host.once().events, "temperature")
    assert [(e["checkName"], e["isHealthy"]) for e in back] == [("InfiniBandStateCheck", True)]


def test_a_sensor_failing_with_eio_or_einval_is_not_read_again(tmp_path: Path) -> None:
    import errno

    from nichealthd.sources import hwmon
    base = tmp_path / "fn" / "hwmon" / "hwmon0"
    base.mkdir(parents=True)
    for name, text in (("temp1_label", "asic"), ("temp1_input", "45000"),
                       ("temp1_crit", "105000"), ("temp1_highest", "50000"),
                       ("temp2_label", "module0"), ("temp2_input", "40000")):
        (base / name).write_text(text + "\n")
    clock = [0.0]
    asked: list[str] = []

    def read(path: str) -> bytes:  # the firmware refuses temp2 (EIO) and temp1_crit (EINVAL)
        asked.append(path)
        if "temp2_input" in path:
            raise OSError(errno.EIO, "Input/output error")
        if path.endswith("temp1_crit"):
            raise OSError(errno.EINVAL, "Invalid argument")
        return Path(path).read_bytes()

    reader = hwmon.HwmonReader(monotonic=lambda: clock[0], read=read)
    first = reader.sensors(str(tmp_path / "fn"))
    assert [(s.label, s.input, s.crit) for s in first] == [("asic", 45000, None),
                                                            ("module0", None, None)]
    asked.clear()
    clock[0] = 600.0
    reader.sensors(str(tmp_path / "fn"))
    assert not [p for p in asked if "temp2_input" in p or p.endswith("temp1_crit")]
    clock[0] = hwmon.RETRY_SECONDS + 1
    reader.sensors(str(tmp_path / "fn"))
    assert [p for p in asked if "temp2_input" in p]  # tried again after an hour
