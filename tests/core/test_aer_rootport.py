"""A root port's ``aer_rootport_total_err_*`` judged once for the NICs below it."""

from __future__ import annotations

from dataclasses import replace
from typing import Any, Optional

from nichealthd.core.checks.pcie_aer import PCIE_AER
from nichealthd.core.events import HealthEvent
from nichealthd.core.model import HostSnapshot
from nichealthd.core.numbers import AER_TOTAL, value
from nichealthd.core.state import MonitorState
from nichealthd.sim import pcifiles
from nichealthd.sources.pci_facts import AerTable
from nichealthd.sources.pcie import AER as READS_AER
from nichealthd.sources.pcie import PciFactsReader

from .. import simtrees
from .builders import Runner, config, device, host

ROOT = "0000:15:01.0"
NIC0, NIC1 = "0000:19:00.0", "0000:19:00.1"
ZERO = {"aer_dev_fatal": 0, "aer_dev_nonfatal": 0, "aer_dev_correctable": 0}


def rootport(fatal: int = 0, nonfatal: int = 0, cor: int = 0) -> AerTable:
    return AerTable(ROOT, {"aer_rootport_total_err_fatal": fatal,
                           "aer_rootport_total_err_nonfatal": nonfatal,
                           "aer_rootport_total_err_cor": cor}, rootport=True)


def facts(root: AerTable, nic0: Optional[dict[str, int]] = None
          ) -> dict[str, tuple[AerTable, ...]]:
    """Two NICs (two functions of one card) below one root port, as the reader gives them."""
    return {"mlx5_0": (AerTable(NIC0, {**ZERO, **(nic0 or {})}), root),
            "mlx5_1": (AerTable(NIC1, dict(ZERO)), root)}


def snap(when: float, aer: Any) -> HostSnapshot:
    return replace(host(device("mlx5_0", pci=NIC0), device("mlx5_1", pci=NIC1), when=when),
                   aer=aer)


def runner(**cfg: Any) -> Runner:
    return Runner(cfg=config(pcieAerInterval="10s", **cfg),
                  state=MonitorState(boot_id="boot-1"), baseline=False)


def aer_events(events: tuple[HealthEvent, ...]) -> list[HealthEvent]:
    return [e for e in events if e.error_code and e.error_code[0].startswith("aer_")]


def test_the_kernel_format_is_one_decimal() -> None:
    assert value("3\n", AER_TOTAL) == 3
    assert value("18446744073709551615\n", AER_TOTAL) == 2**64 - 1
    for bad in ("", "\n", "-1\n", "x\n", "3 4\n", "TOTAL_ERR_COR 3\n", f"{2**64}\n"):
        assert value(bad, AER_TOTAL) is None, bad


def test_an_error_below_the_root_port_only_is_one_event_for_every_nic_below() -> None:
    r = runner()
    assert not aer_events(r.poll(snap(0, facts(rootport()))).events)
    # A GPU on the same switch reports an uncorrectable fatal error: the NICs' tables stay.
    result = r.poll(snap(10, facts(rootport(fatal=1))))
    got = aer_events(result.events)
    assert len(got) == 1, got
    event = got[0]
    assert event.error_code == ("aer_rootport_total_err_fatal",)
    # A latched counter breach: fatal under the degradation check (counters.CheckNames)
    assert event.check_name == "InfiniBandDegradationCheck" and event.is_fatal
    assert event.recommended_action == "REPLACE_VM"
    assert event.entities == (("NIC", "mlx5_0"), ("NIC", "mlx5_1"), ("PCI", ROOT))
    assert event.message.startswith(f"PCIe AER on root port {ROOT} above mlx5_0, mlx5_1: "
                                    f"aer_rootport_total_err_fatal")
    assert not aer_events(r.poll(snap(20, facts(rootport(fatal=3)))).events)  # latched
    reasons = [c.reason for c in PCIE_AER.conditions(r.state.section(PCIE_AER),
                                                     result.pictures[PCIE_AER.id])]
    assert reasons == [f"PCIe AER aer_rootport_total_err_fatal on root port {ROOT} "
                       f"(above mlx5_0, mlx5_1)"]
    back = aer_events(r.poll(snap(30, facts(rootport()))).events)  # counters reset
    assert [(e.is_healthy, e.check_name, e.entities) for e in back] == [
        (True, "InfiniBandDegradationCheck", event.entities)]
    assert f"recovered on root port {ROOT} above mlx5_0, mlx5_1" in back[0].message


def test_a_nic_error_counted_by_both_tables_is_one_event_not_two() -> None:
    r = runner()
    r.poll(snap(0, facts(rootport())))
    both = aer_events(r.poll(snap(10, facts(rootport(fatal=1),
                                            nic0={"aer_dev_fatal": 1}))).events)
    assert [(e.error_code, e.entities) for e in both] == [
        (("aer_dev_fatal",), (("NIC", "mlx5_0"), ("PCI", NIC0)))]
    assert set(r.state.section(PCIE_AER).breach_flags) == {f"{NIC0}:0:aer_dev_fatal"}
    # While the NIC holds the fatal report, more fatal messages at the root port add nothing.
    assert not aer_events(r.poll(snap(20, facts(rootport(fatal=2),
                                                nic0={"aer_dev_fatal": 1}))).events)
    # Another severity is another report.
    nonfatal = aer_events(r.poll(snap(30, facts(rootport(fatal=2, nonfatal=1),
                                                nic0={"aer_dev_fatal": 1}))).events)
    assert [(e.error_code, e.is_fatal) for e in nonfatal] == [
        (("aer_rootport_total_err_nonfatal",), False)]


def test_correctable_messages_above_the_rate_are_one_degradation_below_it_none() -> None:
    r = runner()
    r.poll(snap(0, facts(rootport())))
    quiet = [e for step in range(1, 7)  # 6 a minute: below the default 8
             for e in aer_events(r.poll(snap(10 * step, facts(rootport(cor=step)))).events)]
    assert quiet == []
    loud = [e for step in range(7, 13)  # 60 more in the next minute
            for e in aer_events(r.poll(snap(10 * step, facts(rootport(cor=6 + 10 * (step - 6)))
                                            )).events)]
    assert [(e.check_name, e.error_code, e.is_fatal) for e in loud] == [
        ("InfiniBandDegradationCheck", ("aer_rootport_total_err_cor",), False)]


def test_switched_off_by_its_key_closes_what_it_held_and_restarts_fresh() -> None:
    r = runner()
    r.poll(snap(0, facts(rootport())))
    opened = aer_events(r.poll(snap(10, facts(rootport(nonfatal=1)))).events)
    assert len(opened) == 1
    r.config = config(pcieAerInterval="10s", pcieAerRootPort=False)
    closed = aer_events(r.poll(snap(20, facts(rootport(nonfatal=5)))).events)
    assert [(e.is_healthy, e.check_name, e.entities) for e in closed] == [
        (True, "InfiniBandDegradationCheck", opened[0].entities)]
    assert "pcieAerRootPort = false" in closed[0].message
    assert not [k for k in r.state.section(PCIE_AER).counter_snapshots if ROOT in k]
    assert not aer_events(r.poll(snap(30, facts(rootport(fatal=1)))).events)
    # Back on: the counts of the time it was off are the new baseline, not an event.
    r.config = config(pcieAerInterval="10s")
    assert not aer_events(r.poll(snap(40, facts(rootport(fatal=1, nonfatal=5)))).events)
    assert len(aer_events(r.poll(snap(50, facts(rootport(fatal=2, nonfatal=5)))).events)) == 1


def test_switched_off_by_checks_like_the_nic_tables() -> None:
    """AER totals are counters: the degradation check's, fatal ones too."""
    r = runner(checks="InfiniBandStateCheck")
    r.poll(snap(0, facts(rootport())))
    assert not aer_events(r.poll(snap(10, facts(rootport(fatal=1)))).events)
    assert not aer_events(r.poll(snap(20, facts(rootport(fatal=1, nonfatal=1)))).events)
    r = runner(checks="InfiniBandDegradationCheck")
    r.poll(snap(0, facts(rootport())))
    assert [e.is_fatal for e in aer_events(r.poll(snap(10, facts(rootport(fatal=1)))).events)
            ] == [True]
    assert len(aer_events(r.poll(snap(20, facts(rootport(fatal=1, nonfatal=1)))).events)) == 1


def test_the_latch_survives_a_restart_and_the_series_name_the_root_port_once() -> None:
    r = runner()
    r.poll(snap(0, facts(rootport())))
    r.poll(snap(10, facts(rootport(fatal=1))))
    r.restart()
    assert not aer_events(r.poll(snap(20, facts(rootport(fatal=1)))).events)
    result = r.poll(snap(30, facts(rootport(fatal=1))))
    series = {s.name: s for s in PCIE_AER.series(r.state.section(PCIE_AER),
                                                 result.pictures.get(PCIE_AER.id))}
    totals = series["pcie_aer_rootport_errors_total"]
    assert totals.kind == "counter"
    assert totals.labels == ("pci_address", "file", "devices")
    assert ((ROOT, "aer_rootport_total_err_fatal", "mlx5_0,mlx5_1"), 1.0) in totals.samples
    assert len(totals.samples) == 3  # once, not once per NIC
    assert ((ROOT, "aer_rootport_total_err_fatal", "mlx5_0,mlx5_1"), 1.0) in \
        series["pcie_aer_rootport_breached"].samples
    assert not [s for s in series["pcie_aer_errors_total"].samples if s[0][1] == ROOT]


def test_the_reader_finds_the_root_port_at_the_top_of_each_path_and_reads_it_once() -> None:
    root = simtrees.take("dgx-h100")
    sysfs = root / "sys"
    pair = [d for d in simtrees.manifest_of(root)["devices"] if d["name"] in ("mlx5_1", "mlx5_2")]
    functions = [pcifiles.device_function(root, d) for d in pair]
    top = pcifiles.chain(functions[0])[0]
    assert top == pcifiles.chain(functions[1])[0]  # one card, one root port
    pcifiles.rootport_aer(functions[0], "correctable", 4)
    (top / "aer_rootport_total_err_nonfatal").write_text("garbage\n")
    (top / "aer_rootport_total_err_fatal").unlink()
    reader = PciFactsReader(str(sysfs), str(sysfs / "class/infiniband"))
    try:
        snapshot = host(*(device(d["name"], pci=d["pci"]) for d in pair))
        got = reader.read(snapshot, frozenset({READS_AER}), ("mlx5_1", "mlx5_2")).aer
        assert got is not None
        roots = [t for d in ("mlx5_1", "mlx5_2") for t in got[d] if t.rootport]
        assert roots[0] is roots[1]  # read once for both
        assert roots[0] == AerTable(top.name, {"aer_rootport_total_err_cor": 4},
                                    ("aer_rootport_total_err_nonfatal",), rootport=True)
        assert reader.reads == 2 * 6 + 3  # each NIC's own two tables, the root port once
    finally:
        reader.close()
    vm_root = simtrees.take("cloud-vm-ib")
    vm = simtrees.manifest_of(vm_root)
    vsys = vm_root / "sys"
    reader = PciFactsReader(str(vsys), str(vsys / "class/infiniband"))
    try:
        dev = vm["devices"][0]
        got = reader.read(host(device(dev["name"], pci=dev["pci"])), frozenset({READS_AER}),
                          (dev["name"],)).aer
        assert got is not None and not [t for t in got[dev["name"]] if t.rootport]
    finally:
        reader.close()
