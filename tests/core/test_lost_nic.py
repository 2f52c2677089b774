"""#16.5: a Mellanox PF on the bus without an RDMA device is one fatal event naming it."""

from __future__ import annotations

from dataclasses import replace
from typing import Any

from nichealthd.core.adapter import AdapterFacts, PciNic
from nichealthd.core.checks.link_section import DriverEvent
from nichealthd.core.checks.link_state import LINK_STATE
from nichealthd.core.checks.lost_nic import LOST_NICS
from nichealthd.core.evaluate import CycleResult
from nichealthd.core.model import HostSnapshot
from nichealthd.core.state import MonitorState

from .builders import Runner, at, config, device, host

REGISTERED = PciNic("0000:47:00.0", "0x020700", True, "mlx5_core")
LOST = PciNic("0000:48:00.0", "0x020700", False, None, (), 0)


def snap(when: float, *nics: PciNic, adapter: bool = True) -> HostSnapshot:
    base = host(device("mlx5_0", "0000:47:00.0"), when=when)
    return replace(base, adapter=AdapterFacts(pci_nics=(REGISTERED, *nics))
                   if adapter else None)


def lost(result: CycleResult) -> list[Any]:
    return [e for e in result.events if e.error_code == ("nic_unregistered",)]


def test_an_unbound_pf_is_one_fatal_event_with_its_pci_address_after_three_reads() -> None:
    runner = Runner()
    assert not lost(runner.poll(snap(0, LOST)))
    assert not lost(runner.poll(snap(1, LOST)))
    got = lost(runner.poll(snap(2, LOST)))
    assert len(got) == 1
    event = got[0]
    assert event.is_fatal and event.recommended_action == "REPLACE_VM"
    assert event.check_name == "InfiniBandStateCheck"
    assert event.entities == (("PCI", "0000:48:00.0"),)
    assert "0000:48:00.0" in event.message and "no driver is bound" in event.message
    for n in range(3, 6):
        assert not lost(runner.poll(snap(n, LOST)))
    back = lost(runner.poll(snap(6, replace(LOST, registered=True))))
    assert len(back) == 1 and back[0].is_healthy and back[0].entities == event.entities


def test_every_pf_registered_is_no_event() -> None:
    runner = Runner()
    for n in range(6):
        assert not lost(runner.poll(snap(n)))


def test_a_bound_driver_without_registration_says_so_and_ethernet_goes_to_its_check() -> None:
    runner = Runner()
    eth = PciNic("0000:49:00.0", "0x020000", False, "mlx5_core", ("eth3",), 0)
    got = [e for n in range(3) for e in lost(runner.poll(snap(n, eth)))]
    assert [e.check_name for e in got] == ["EthernetStateCheck"]
    assert "driver mlx5_core is bound" in got[0].message and "eth3" in got[0].message


def test_the_function_of_a_known_device_is_left_to_the_device_missing_rule() -> None:
    runner = Runner()
    runner.poll(snap(0))
    gone = PciNic("0000:47:00.0", "0x020700", False, "mlx5_core", (), 0)
    for n in range(1, 6):
        result = runner.poll(replace(host(when=n), adapter=AdapterFacts(pci_nics=(gone,))))
        assert not lost(result)


def test_exclusion_regex_matches_the_address_or_a_netdev_and_management_is_skipped() -> None:
    by_address = Runner(cfg=config(nicExclusionRegex=["^0000:48"]))
    by_netdev = Runner(cfg=config(nicExclusionRegex=["^eth9$"]))
    remote = Runner()  # NUMA node 3 has no GPU: management, not monitored
    nic9 = replace(LOST, netdevs=("eth9",))
    for n in range(5):
        assert not lost(by_address.poll(snap(n, LOST)))
        assert not lost(by_netdev.poll(snap(n, nic9)))
        assert not lost(remote.poll(snap(n, replace(LOST, numa_node=3))))
    pinned = Runner(cfg=config(nicInclusionRegexOverride=["^0000:48:00.0$"]))
    assert len([e for n in range(3) for e in lost(pinned.poll(snap(n, LOST)))]) == 1


def test_no_verdict_during_a_driver_event_or_without_facts() -> None:
    state = MonitorState(boot_id="boot-1")
    links = state.section(LINK_STATE).copy()
    links.driver_event = DriverEvent(at(0), ("mlx5_5",))
    state.sections[LINK_STATE.id] = links
    runner = Runner(state=state, baseline=False)
    for n in range(1, 6):
        assert not lost(runner.poll(snap(n, LOST)))
    runner = Runner()  # polls without facts neither count nor reset: the third read reports
    fired = [n for n in range(6) if lost(runner.poll(snap(n, LOST, adapter=n % 2 == 0)))]
    assert fired == [4]
    assert "0000:48:00.0" in runner.state.section(LOST_NICS).latched


def test_a_reported_lost_nic_is_a_device_row_between_adapter_reads_too() -> None:
    """#16.5: ``show devices`` (D-Bus, varlink) lists it by its PCI address, with why."""
    from nichealthd.core.adapter_views import lost_nic_records
    from nichealthd.core.views import device_records

    runner = Runner()
    eth = PciNic("0000:49:00.0", "0x020000", False, "mlx5_core", ("eth3",), 1)
    for n in range(2):
        pending = runner.poll(snap(n, LOST, eth))
        assert lost_nic_records(runner.state, pending.pictures) == []  # not reported yet
    result = runner.poll(snap(2, LOST, eth))
    rows = lost_nic_records(runner.state, result.pictures)
    assert [(r["device"], r["pci_address"], r["link_layer"], r["lost_reason"]) for r in rows] == [
        ("0000:48:00.0", "0000:48:00.0", "InfiniBand", "no driver is bound to it"),
        ("0000:49:00.0", "0000:49:00.0", "Ethernet",
         "driver mlx5_core is bound but registered no RDMA device (probe failed, or mlx5_ib "
         "not loaded)")]
    assert rows[1]["netdevs"] == ["eth3"] and rows[1]["numa_node"] == 1
    assert rows[1]["driver"] == "mlx5_core" and rows[1]["card"] == "0000:49:00"
    assert all(r["lost"] and not r["present"] and r["lost_since"] == "2026-01-01T12:00:02Z"
               for r in rows)
    # A poll without an adapter read still shows what the last read saw.
    between = runner.poll(snap(3, adapter=False))
    assert lost_nic_records(runner.state, between.pictures) == rows
    records = device_records(snap(3), between, runner.state)
    assert [r["device"] for r in records if r.get("lost")] == ["0000:48:00.0", "0000:49:00.0"]
    assert {frozenset(r) for r in records if r.get("lost")} == {frozenset(rows[0])}
    # After a restart (no read yet) the row is still there, from the state alone.
    runner.restart()
    bare = lost_nic_records(runner.state, {})
    assert [(r["device"], r["lost_reason"], r["netdevs"]) for r in bare] == [
        (r["device"], r["lost_reason"], []) for r in rows]
    # Registered again: the row goes.
    back = runner.poll(snap(4, replace(LOST, registered=True), replace(eth, registered=True)))
    assert lost_nic_records(runner.state, back.pictures) == []
