"""Firmware drift and ACTIVE ports with their netdev down, pure-core."""

from __future__ import annotations

from dataclasses import replace
from typing import Any, Optional

from nichealthd.core.checks.firmware import FIRMWARE, majority
from nichealthd.core.evaluate import CycleResult
from nichealthd.core.model import DeviceSnapshot, HostSnapshot
from nichealthd.sources.adapter_facts import AdapterFacts, NetdevLink

from .builders import DOWN, POLLING, Runner, at, device, port

OLD, NEW = "28.39.1002", "28.40.1000"


def eight(versions: list[str]) -> list[DeviceSnapshot]:
    return [device(f"mlx5_{i}", f"0000:{0x40 + i:02x}:00.0", board_id="MT_0000000838",
                   fw_ver=versions[i]) for i in range(8)]


def snap(when: float, devices: list[DeviceSnapshot], firmware: Optional[dict[str, str]] = None,
         netdevs: Optional[dict[str, NetdevLink]] = None) -> HostSnapshot:
    return HostSnapshot(
        taken_at=at(when), boot_id="boot-1",
        devices=tuple(devices),
        adapter=AdapterFacts(firmware=firmware or {d.name: d.fw_ver or "" for d in devices},
                             netdevs=netdevs or {}))


def coded(result: CycleResult, code: str) -> list[Any]:
    return [e for e in result.events if e.error_code == (code,)]


def test_majority_needs_more_than_half() -> None:
    assert majority([OLD] * 7 + [NEW]) == OLD
    assert majority([OLD] * 4 + [NEW] * 4) is None
    assert majority([OLD] * 8) is None


def test_one_card_of_eight_on_another_firmware_is_one_event_naming_both() -> None:
    runner = Runner()
    got = coded(runner.poll(snap(0, eight([OLD] * 7 + [NEW]))), "firmware_drift")
    assert len(got) == 1
    event = got[0]
    assert not event.is_fatal and not event.is_healthy
    assert event.check_name == "InfiniBandDegradationCheck"
    assert event.entities == (("NIC", "mlx5_7"),)
    assert OLD in event.message and NEW in event.message
    for n in range(1, 4):  # latched: said once
        assert not coded(runner.poll(snap(n, eight([OLD] * 7 + [NEW]))), "firmware_drift")


def test_all_eight_equal_is_no_event() -> None:
    runner = Runner()
    for n in range(4):
        assert not coded(runner.poll(snap(n, eight([OLD] * 8))), "firmware_drift")


def test_a_flash_at_runtime_is_logged_and_judged_again() -> None:
    runner = Runner()
    devices = eight([OLD] * 7 + [NEW])
    runner.poll(snap(0, devices))
    flashed = {d.name: OLD for d in devices}  # mlx5_7 flashed back to the group's version
    result = runner.poll(snap(1, devices, firmware=flashed))
    assert any("mlx5_7: firmware changed 28.40.1000 -> 28.39.1002" in n for n in result.notes)
    back = coded(result, "firmware_drift")
    assert len(back) == 1 and back[0].is_healthy and back[0].entities == (("NIC", "mlx5_7"),)
    assert runner.state.section(FIRMWARE).versions["mlx5_7"] == OLD
    again = {**flashed, "mlx5_2": NEW}  # another card flashed ahead
    got = coded(runner.poll(snap(2, devices, firmware=again)), "firmware_drift")
    assert [e.entities for e in got] == [(("NIC", "mlx5_2"),)]


def test_different_boards_are_different_groups() -> None:
    devices = eight([OLD] * 7 + [NEW])
    devices[7] = replace(devices[7], board_id="MT_0000000970")
    runner = Runner()
    assert not coded(runner.poll(snap(0, devices)), "firmware_drift")


# ------------------------------------------------------------------ netdev down

def link(operstate: str, admin_up: Optional[bool] = True) -> dict[str, NetdevLink]:
    return {"mlx5_0_1": NetdevLink("ib0", operstate, admin_up)}


def one(state: str = "4: ACTIVE", phys: str = "5: LinkUp") -> list[DeviceSnapshot]:
    return [device("mlx5_0", ports=(port("mlx5_0", state=state, phys=phys),))]


def test_active_port_with_its_netdev_down_twice_is_one_degradation_then_recovery() -> None:
    runner = Runner()
    assert not coded(runner.poll(snap(0, one(), netdevs=link("down"))), "netdev_down")
    got = coded(runner.poll(snap(1, one(), netdevs=link("down"))), "netdev_down")
    assert len(got) == 1 and not got[0].is_fatal and not got[0].is_healthy
    assert got[0].entities == (("NIC", "mlx5_0"), ("NICPort", "1"))
    assert "ib0" in got[0].message
    assert not coded(runner.poll(snap(2, one(), netdevs=link("down"))), "netdev_down")
    back = coded(runner.poll(snap(3, one(), netdevs=link("up"))), "netdev_down")
    assert len(back) == 1 and back[0].is_healthy


def test_administratively_down_or_port_not_active_is_not_reported() -> None:
    runner = Runner()
    for n in range(4):
        assert not coded(runner.poll(snap(n, one(), netdevs=link("down", False))),
                         "netdev_down")
    runner = Runner()
    for n in range(4):
        assert not coded(runner.poll(snap(n, one(DOWN, POLLING), netdevs=link("down"))),
                         "netdev_down")


def test_netdev_up_or_unknown_flags_only_when_down() -> None:
    runner = Runner()
    for n in range(4):
        assert not coded(runner.poll(snap(n, one(), netdevs=link("up", None))), "netdev_down")
    runner = Runner()
    got = [e for n in range(3) for e in coded(
        runner.poll(snap(n, one(), netdevs=link("lowerlayerdown", None))), "netdev_down")]
    assert len(got) == 1
