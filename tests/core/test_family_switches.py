"""Every PCI-side and adapter family can be switched off, by `checks` or by its own key.

Each case is a fault its family reports with the default config (checked first, so that no
case passes for want of a fault), then the same polls under each way of switching it off:
no event of the family, and the family's section stays as it was.
"""

from __future__ import annotations

from dataclasses import replace
from typing import Any, Callable

import pytest

from nichealthd.core.checks import families
from nichealthd.core.config import ALL_CHECKS, CHAR_DEVICE_CHECK
from nichealthd.core.model import HostSnapshot
from nichealthd.core.state import MonitorState
from nichealthd.sources.adapter_facts import AdapterFacts, CharDevices, NetdevLink, PciNic
from nichealthd.sources.pci_facts import AerTable, LinkEnd, PcieHop, Sensor

from .builders import Runner, config, device, host

NIC, PORT_ABOVE, ROOT = "0000:19:00.0", "0000:17:01.0", "0000:15:01.0"


def without(*names: str) -> str:
    return ",".join(c for c in ALL_CHECKS if c not in names)


def plain(when: float, **facts: Any) -> HostSnapshot:
    return replace(host(device("mlx5_0", pci=NIC), when=when), **facts)


def pcie_link(when: float) -> HostSnapshot:
    hop = PcieHop(LinkEnd(PORT_ABOVE, max_speed=32.0, max_width=16),
                  LinkEnd(NIC, 32.0, 8, 32.0, 16))
    return plain(when, pcie={"mlx5_0": (hop,)})


def pcie_aer(when: float) -> HostSnapshot:
    fatal = 1 if when else 0
    return plain(when, aer={"mlx5_0": (
        AerTable(NIC, {"aer_dev_fatal": fatal}),
        AerTable(ROOT, {"aer_rootport_total_err_nonfatal": fatal}, rootport=True))})


def temperature(when: float) -> HostSnapshot:
    return plain(when, hwmon={"mlx5_0": (Sensor("hwmon0/temp1", "asic", 106000, 105000),)})


def char_devices(when: float) -> HostSnapshot:
    return plain(when, adapter=AdapterFacts(chardevs=CharDevices(
        frozenset(), frozenset(), frozenset())))


def lost_nic(when: float) -> HostSnapshot:
    """An unbound function beside mlx5_0's, which has its device (the RDMA driver is up)."""
    lost = PciNic("0000:48:00.0", "0x020700", False, None, (), 0)
    return plain(when, adapter=AdapterFacts(pci_nics=(PciNic(NIC, "0x020700", True), lost)))


def firmware(when: float) -> HostSnapshot:
    cards = [device(f"mlx5_{i}", f"0000:{0x40 + i:02x}:00.0", board_id="MT_0000000838",
                    fw_ver="28.41.1000" if i else "28.39.1000") for i in range(8)]
    return HostSnapshot(host(when=when).taken_at, "boot-1", tuple(cards),
                        adapter=AdapterFacts(firmware={d.name: d.fw_ver or "" for d in cards}))


def netdev(when: float) -> HostSnapshot:
    return plain(when, adapter=AdapterFacts(
        netdevs={"mlx5_0_1": NetdevLink("ib0", "down", True)}))


# family id, the polls' snapshots, the error codes it reports, the ways to switch it off
CASES: dict[str, tuple[Callable[[float], HostSnapshot], set[str], list[dict[str, Any]]]] = {
    "pcie_link": (pcie_link, {"pcie_link"}, [
        {"pcieLinkInterval": 0}, {"checks": without("InfiniBandDegradationCheck")}]),
    "pcie_aer": (pcie_aer, {"aer_dev_fatal", "aer_rootport_total_err_nonfatal"}, [
        {"pcieAerInterval": 0},
        {"checks": without("InfiniBandStateCheck", "InfiniBandDegradationCheck")}]),
    "nic_temperature": (temperature, {"temperature"}, [
        {"nicTemperatureInterval": 0}, {"checks": without("InfiniBandStateCheck")}]),
    "char_devices": (char_devices, {"uverbs", "umad"}, [{"checks": without(CHAR_DEVICE_CHECK)}]),
    "lost_nics": (lost_nic, {"nic_unregistered"}, [{"checks": without("InfiniBandStateCheck")}]),
    "firmware": (firmware, {"firmware_drift"}, [
        {"checks": without("InfiniBandDegradationCheck")}]),
    "netdev_link": (netdev, {"netdev_down"}, [
        {"checks": without("InfiniBandDegradationCheck")}]),
}


def run(family: str, **cfg: Any) -> tuple[list[Any], Runner]:
    build, codes, _ = CASES[family]
    fast = {"pcieLinkInterval": "1s", "pcieAerInterval": "1s", "nicTemperatureInterval": "1s",
            "driverReloadGrace": "0s"}  # a lost NIC at its third read
    runner = Runner(cfg=config(**{**fast, **cfg}),
                    state=MonitorState(boot_id="boot-1"), baseline=False)
    events = [e for n in range(5) for e in runner.poll(build(float(n))).events
              if e.error_code and e.error_code[0] in codes]
    return events, runner


def test_every_pci_side_and_adapter_family_is_covered() -> None:
    assert set(CASES) <= {f.id for f in families()}
    assert len(CASES) == 7  # the PCI-side and adapter families


@pytest.mark.parametrize("family", sorted(CASES))
def test_each_family_reports_its_fault_when_on_and_nothing_when_switched_off(
        family: str) -> None:
    events, on = run(family)
    codes = CASES[family][1]
    assert {e.error_code[0] for e in events} == codes, events  # the fault is seen
    target = next(f for f in families() if f.id == family)
    for switch in CASES[family][2]:
        events, off = run(family, **switch)
        assert events == [], (switch, events)
        # Nothing held open (no condition for the health model) or counted either.
        section = off.state.section(target)
        assert list(target.conditions(section, None)) == [], switch
        assert not getattr(section, "misses", None), switch


def test_the_character_device_check_is_a_check_name_of_its_own() -> None:
    assert CHAR_DEVICE_CHECK in config().checks  # on by default
    off = config(checks=without(CHAR_DEVICE_CHECK))
    chardev = next(f for f in families() if f.id == "char_devices")
    assert chardev.enabled(config()) and not chardev.enabled(off)
    # Off at a fresh start: not even its scoped clear is sent.
    runner = Runner(cfg=off)
    first = runner.poll(char_devices(0))
    assert not [e for e in first.events if e.check_name == CHAR_DEVICE_CHECK]
    # On: exactly one scoped clear at a fresh start, from the family (not a second one with
    # the other checks' clears of a baseline).
    on = Runner().poll(char_devices(0))
    assert len([e for e in on.events if e.check_name == CHAR_DEVICE_CHECK]) == 1
    with pytest.raises(Exception, match="unknown check"):
        config(checks="InfiniBandCharDevCheck")
