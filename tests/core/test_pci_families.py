"""The PCI-side families as rules on snapshots (pure core)."""

from __future__ import annotations

from dataclasses import replace
from typing import Any, Optional

from nichealthd.core.checks.nic_temperature import NIC_TEMPERATURE
from nichealthd.core.checks.pcie_aer import PCIE_AER
from nichealthd.core.checks.pcie_link import PCIE_LINK
from nichealthd.core.evaluate import due_reads
from nichealthd.core.events import HealthEvent
from nichealthd.core.model import HostSnapshot, Unreadable
from nichealthd.core.numbers import PCIE_WIDTH, value
from nichealthd.core.state import MonitorState
from nichealthd.sources.adapter import ADAPTER
from nichealthd.sources.pci_facts import (
    AerTable,
    LinkEnd,
    PcieHop,
    Sensor,
    parse_aer_total,
    parse_speed,
)
from nichealthd.sources.pcie import AER as READS_AER
from nichealthd.sources.pcie import HWMON as READS_HWMON
from nichealthd.sources.pcie import PCIE as READS_PCIE

from .builders import Runner, config, device, host

NIC = "0000:19:00.0"
DOWN_PORT = "0000:17:01.0"
UP_PORT = "0000:16:00.0"
ROOT = "0000:15:01.0"
GEN4, GEN5 = 16.0, 32.0


def end(address: str, cur: Optional[tuple[float, int]], mx: tuple[float, int]) -> LinkEnd:
    if cur is None:
        return LinkEnd(address, max_speed=mx[0], max_width=mx[1])
    return LinkEnd(address, cur[0], cur[1], mx[0], mx[1])


def tree(nic_link: tuple[float, int] = (GEN5, 16), root_max: float = GEN5,
         upper: Optional[tuple[float, int]] = None) -> tuple[PcieHop, ...]:
    """A DGX-like path: root port -> switch up -> switch down -> NIC (two links)."""
    up_link = upper or (min(root_max, GEN5), 16)
    return (PcieHop(end(DOWN_PORT, None, (GEN5, 16)), end(NIC, nic_link, (GEN5, 16))),
            PcieHop(end(ROOT, None, (root_max, 16)), end(UP_PORT, up_link, (GEN5, 16))))


def snap(when: float, **facts: Any) -> HostSnapshot:
    return replace(host(device("mlx5_0", pci=NIC), when=when), **facts)


def runner(**cfg: Any) -> Runner:
    return Runner(cfg=config(**cfg), state=MonitorState(boot_id="boot-1"), baseline=False)


def ours(events: tuple[HealthEvent, ...]) -> list[HealthEvent]:
    return [e for e in events if e.error_code[0] in ("pcie_link", "temperature")
            or e.error_code[0].startswith("aer_")]


# ------------------------------------------------------------------------ formats

def test_the_kernel_formats_parse() -> None:
    assert parse_speed("16.0 GT/s PCIe") == 16.0
    assert parse_speed("8 GT/s") == 8.0  # kernels before pci_speed_string
    assert parse_speed("Unknown") is None and parse_speed("") is None
    assert parse_speed("20.0 GT/s PCIe") is None and parse_speed("nan GT/s") is None
    assert parse_speed("1e400 GT/s") is None  # not in the PCIe set, never an exception
    assert value("16", PCIE_WIDTH) == 16 and value("0", PCIE_WIDTH) == 0  # 0: link down
    for bad in ("x", "3", "64", "-16"):  # not PCIe widths
        assert value(bad, PCIE_WIDTH) is None
    table = "Undefined 0\nDLP 0\nSDES 0\nTLP 3\nFCP 0\nTOTAL_ERR_FATAL 3\n"
    assert parse_aer_total(table, "TOTAL_ERR_FATAL") == 3
    assert parse_aer_total("RxErr 1\n", "TOTAL_ERR_COR") == Unreadable("no TOTAL_ERR_COR line")
    huge = table.replace("TOTAL_ERR_FATAL 3", f"TOTAL_ERR_FATAL {'9' * 26}")
    assert isinstance(parse_aer_total(huge, "TOTAL_ERR_FATAL"), Unreadable)


# ------------------------------------------------------------------------ PCIe link

def test_a_hop_trained_to_x8_is_one_event_naming_it_and_retraining_recovers() -> None:
    r = runner(pcieLinkInterval="60s")
    assert not ours(r.poll(snap(0, pcie={"mlx5_0": tree()})).events)
    first = ours(r.poll(snap(60, pcie={"mlx5_0": tree(nic_link=(GEN5, 8))})).events)
    assert len(first) == 1
    event = first[0]
    assert event.check_name == "InfiniBandDegradationCheck" and not event.is_fatal
    assert event.error_code == ("pcie_link",)
    assert event.message == (f"PCIe link {DOWN_PORT} → {NIC} of mlx5_0 runs x8 at 32.0 GT/s, "
                             f"both ends support x16 at 32.0 GT/s")
    assert event.entities == (("NIC", "mlx5_0"), ("PCI", NIC))
    assert not ours(r.poll(snap(120, pcie={"mlx5_0": tree(nic_link=(GEN5, 8))})).events)
    back = ours(r.poll(snap(180, pcie={"mlx5_0": tree()})).events)
    assert [(e.is_healthy, e.check_name, e.entities) for e in back] == [
        (True, "InfiniBandDegradationCheck", event.entities)]


def test_a_gen5_nic_behind_a_gen4_root_port_running_at_gen4_is_healthy() -> None:
    r = runner()
    hops = tree(nic_link=(GEN4, 16), root_max=GEN4, upper=(GEN4, 16))
    # The NIC's own link below the switch is Gen4 too (the switch trains down): what counts
    # is each hop against both of its ends.
    hops = (PcieHop(end(DOWN_PORT, None, (GEN4, 16)), end(NIC, (GEN4, 16), (GEN5, 16))),
            hops[1])
    assert not ours(r.poll(snap(0, pcie={"mlx5_0": hops})).events)
    assert not r.state.section(PCIE_LINK).records


def test_a_hop_that_cannot_be_told_is_not_judged() -> None:
    r = runner()
    unknown = (PcieHop(end(DOWN_PORT, None, (GEN5, 16)), LinkEnd(NIC, None, 8, GEN5, 16)),)
    assert not ours(r.poll(snap(0, pcie={"mlx5_0": unknown})).events)


def pci_reads_due(r: Runner, second: float) -> frozenset[str]:
    """The parts due at ``second`` but the adapter facts: their families judge every poll
    (the source reads at its own cadence), so that fact is always due."""
    due = due_reads(r.config, r.memory, snap(second).taken_at)
    assert ADAPTER in due
    return due - {ADAPTER}


def test_the_link_files_are_asked_for_only_at_the_cadence() -> None:
    r = runner(pcieLinkInterval="60s", pcieAerInterval="10s", nicTemperatureInterval="30s",
               linkBerInterval=0, opticsInterval=0, kernelLog="off")  # the PCI parts alone
    assert pci_reads_due(r, 0) == {READS_PCIE, READS_AER, READS_HWMON}
    r.poll(snap(0, pcie={}, aer={}, hwmon={}))
    assert pci_reads_due(r, 1) == frozenset()
    assert pci_reads_due(r, 10) == {READS_AER}
    assert pci_reads_due(r, 60) == {READS_PCIE, READS_AER, READS_HWMON}
    off = runner(pcieLinkInterval=0, pcieAerInterval=0, nicTemperatureInterval=0,
                 linkBerInterval=0, opticsInterval=0, kernelLog="off")
    assert pci_reads_due(off, 0) == frozenset()


# ------------------------------------------------------------------------ AER

def aer(fatal: int = 0, nonfatal: int = 0, cor: int = 0, up_cor: int = 0
        ) -> dict[str, tuple[AerTable, ...]]:
    return {"mlx5_0": (
        AerTable(NIC, {"aer_dev_fatal": fatal, "aer_dev_nonfatal": nonfatal,
                       "aer_dev_correctable": cor}),
        AerTable(DOWN_PORT, {"aer_dev_fatal": 0, "aer_dev_nonfatal": 0,
                             "aer_dev_correctable": up_cor}, upstream=True))}


def test_a_fatal_aer_is_one_fatal_event_and_low_correctable_rates_none() -> None:
    r = runner(pcieAerInterval="10s")
    assert not ours(r.poll(snap(0, aer=aer())).events)
    for step in range(1, 13):  # 6 correctable errors a minute, below 8
        assert not ours(r.poll(snap(10 * step, aer=aer(cor=step))).events)
    fatal = ours(r.poll(snap(130, aer=aer(fatal=1, cor=12))).events)
    assert len(fatal) == 1
    # A latched counter: fatal, under the degradation check (counters.CheckNames)
    assert fatal[0].check_name == "InfiniBandDegradationCheck" and fatal[0].is_fatal
    assert fatal[0].recommended_action == "REPLACE_VM"
    assert fatal[0].error_code == ("aer_dev_fatal",)
    assert fatal[0].entities == (("NIC", "mlx5_0"), ("PCI", NIC))
    assert fatal[0].message.startswith(f"PCIe AER on {NIC} of mlx5_0: aer_dev_fatal")
    assert not ours(r.poll(snap(140, aer=aer(fatal=2, cor=12))).events)  # latched
    reset = ours(r.poll(snap(150, aer=aer())).events)  # a device reset clears the counts
    assert [(e.is_healthy, e.check_name) for e in reset] == [
        (True, "InfiniBandDegradationCheck")]
    # The AER records are this family's own keys, never the port counters'.
    assert not r.state.section(PCIE_AER).counter_snapshots.keys() & set(
        r.state.to_json()["counter_snapshots"])


def test_correctable_errors_above_the_rate_and_nonfatal_ones_are_degradation() -> None:
    r = runner(pcieAerInterval="10s")
    r.poll(snap(0, aer=aer()))
    events: list[HealthEvent] = []
    for step in range(1, 7):
        events += ours(r.poll(snap(10 * step, aer=aer(up_cor=20 * step))).events)
    assert [(e.check_name, e.error_code, e.entities[1]) for e in events] == [
        ("InfiniBandDegradationCheck", ("aer_dev_correctable",), ("PCI", DOWN_PORT))]
    assert "the port above" in events[0].message
    nonfatal = ours(r.poll(snap(70, aer={"mlx5_0": (AerTable(NIC, {"aer_dev_nonfatal": 1}),)}
                                )).events)
    assert [(e.is_fatal, e.error_code) for e in nonfatal] == [(False, ("aer_dev_nonfatal",))]


# ------------------------------------------------------------------------ temperature

def sensor(celsius: float, crit: float = 105.0) -> dict[str, tuple[Sensor, ...]]:
    return {"mlx5_0": (Sensor("hwmon3/temp1", "asic", int(celsius * 1000), int(crit * 1000),
                              int(celsius * 1000)),)}


def test_temperature_levels_margin_critical_and_recovery() -> None:
    r = runner(nicTemperatureInterval="60s")
    assert not ours(r.poll(snap(0, hwmon=sensor(70))).events)
    high = ours(r.poll(snap(60, hwmon=sensor(101))).events)
    assert [(e.check_name, e.is_fatal, e.is_healthy) for e in high] == [
        ("InfiniBandDegradationCheck", False, False)]
    assert "within 5 °C of its critical threshold" in high[0].message
    crit = ours(r.poll(snap(120, hwmon=sensor(105))).events)
    assert [(e.check_name, e.is_fatal, e.is_healthy) for e in crit] == [
        ("InfiniBandDegradationCheck", False, True), ("InfiniBandStateCheck", True, False)]
    assert crit[1].recommended_action == "REPLACE_VM"
    back = ours(r.poll(snap(180, hwmon=sensor(60))).events)
    assert [(e.check_name, e.is_healthy) for e in back] == [("InfiniBandStateCheck", True)]
    assert not r.state.section(NIC_TEMPERATURE).records
    unknown = {"mlx5_0": (Sensor("hwmon3/temp1", "asic", None, 105000),)}
    assert not ours(r.poll(snap(240, hwmon=unknown)).events)


def test_the_state_round_trips_and_a_rename_keeps_the_records() -> None:
    r = runner()
    r.poll(snap(0, pcie={"mlx5_0": tree(nic_link=(GEN5, 8))}, aer=aer(fatal=0),
                hwmon=sensor(106)))
    r.poll(snap(60, aer=aer(fatal=1)))
    r.restart()
    assert r.state.section(PCIE_LINK).records and r.state.section(NIC_TEMPERATURE).records
    assert r.state.section(PCIE_AER).breach_flags
    # Nothing more is said after a restart while the facts stay the same.
    assert not ours(r.poll(snap(120, pcie={"mlx5_0": tree(nic_link=(GEN5, 8))},
                                aer=aer(fatal=1), hwmon=sensor(106))).events)
