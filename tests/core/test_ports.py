"""Port-state, disappearance and first-poll rules on the pure evaluator.

The rules of link-state-detection §3.4, §7 and §13.1."""

from __future__ import annotations

from dataclasses import replace
from typing import Optional

import pytest

from nichealthd.core.checks.link_state import LINK_STATE
from nichealthd.core.checks.ports import is_active, split_state

from .builders import (
    ACTIVE,
    DISABLED,
    DOWN,
    LINKUP,
    POLLING,
    Runner,
    device,
    host,
    port,
)

INIT, ARMED, LER = "2: INIT", "3: ARMED", "6: LinkErrorRecovery"


def fleet(states: dict[str, tuple[str, str]], layer: str = "InfiniBand",
          operstate: str = "up"):
    """Single-port cards mlx5_0..mlx5_7 on distinct PCI buses, with chosen port states."""
    devices = []
    for index in range(8):
        name = f"mlx5_{index}"
        state, phys = states.get(name, (ACTIVE, LINKUP))
        devices.append(device(name, pci=f"0000:{0x10 + index:02x}:00.0", numa=index % 2,
                              ports=(port(name, 1, state, phys, layer,
                                          operstate=operstate),)))
    return devices


def state_events(result):
    return [e for e in result.events if e.error_code == ("port_state",)]


def started(layer: str = "InfiniBand") -> Runner:
    runner = Runner()
    runner.poll(host(*fleet({}, layer), when=0))
    return runner


def test_first_poll_reports_every_healthy_port() -> None:
    runner = Runner()
    result = runner.poll(host(*fleet({}), when=0))
    healthy = state_events(result)
    assert len(healthy) == 8 and all(e.is_healthy for e in healthy)
    assert healthy[0].message == "Port mlx5_0 port 1: healthy (ACTIVE, LinkUp)"
    assert healthy[0].check_name == "InfiniBandStateCheck"


def test_runtime_down_disabled_is_one_fatal_event_with_the_spec_message() -> None:
    runner = started()
    result = runner.poll(host(*fleet({"mlx5_0": (DOWN, DISABLED)}), when=1))
    events = state_events(result)
    assert len(events) == 1
    event = events[0]
    assert event.message == "Port mlx5_0 port 1: state DOWN, phys_state Disabled - no connectivity"
    assert (event.is_fatal, event.is_healthy, event.recommended_action) == (
        True, False, "REPLACE_VM")
    assert event.check_name == "InfiniBandStateCheck"
    assert event.entities == (("NIC", "mlx5_0"), ("NICPort", "1"))
    # DOWN/Disabled -> DOWN/Polling: still unhealthy, nothing to say.
    assert state_events(runner.poll(host(*fleet({"mlx5_0": (DOWN, POLLING)}), when=2))) == []
    back = state_events(runner.poll(host(*fleet({}), when=3)))
    assert [(e.is_healthy, e.message) for e in back] == [
        (True, "Port mlx5_0 port 1: healthy (ACTIVE, LinkUp)")]


@pytest.mark.parametrize("state,phys,layer,expected", [
    (ACTIVE, POLLING, "InfiniBand", "degraded"),
    (ACTIVE, LER, "InfiniBand", "degraded"),
    (INIT, LINKUP, "InfiniBand", "degraded"),
    (ARMED, LINKUP, "InfiniBand", "degraded"),
    (INIT, LINKUP, "Ethernet", None),
    (ARMED, LINKUP, "Ethernet", None),
    (DOWN, POLLING, "InfiniBand", "fatal"),
    (ACTIVE, DISABLED, "Ethernet", "fatal"),
])
def test_state_classification(state: str, phys: str, layer: str, expected: str) -> None:
    runner = started(layer)
    events = state_events(runner.poll(host(*fleet({"mlx5_0": (state, phys)}, layer), when=1)))
    assert [e.severity for e in events] == ([expected] if expected else [])


def test_non_fatal_then_fatal_escalates_once() -> None:
    runner = started()
    first = state_events(runner.poll(host(*fleet({"mlx5_0": (ACTIVE, LER)}), when=1)))
    assert [e.severity for e in first] == ["degraded"]
    assert first[0].recommended_action == "NONE"
    second = state_events(runner.poll(host(*fleet({"mlx5_0": (DOWN, DISABLED)}), when=2)))
    assert [e.severity for e in second] == ["fatal"]
    third = state_events(runner.poll(host(*fleet({"mlx5_0": (ACTIVE, LER)}), when=3)))
    assert third == []  # fatal -> degraded is not a healthy crossing


def test_roce_messages_include_operstate() -> None:
    runner = started("Ethernet")
    result = runner.poll(host(*fleet({"mlx5_0": (DOWN, DISABLED)}, "Ethernet",
                                     operstate="down"), when=1))
    event = state_events(result)[0]
    assert event.message == ("RoCE port mlx5_0 port 1: state DOWN, phys_state Disabled, "
                             "operstate down - no connectivity")
    assert event.check_name == "EthernetStateCheck"


def test_unreadable_port_holds_its_state() -> None:
    runner = started()
    devices = fleet({})
    devices[0] = replace(devices[0], ports=(port("mlx5_0", 1, ACTIVE, LINKUP, layer=None),))
    assert runner.poll(host(*devices, when=1)).events == ()
    devices[0] = replace(devices[0], ports=(port("mlx5_0", 1, None, None),))
    assert runner.poll(host(*devices, when=2)).events == ()
    assert runner.state.section(LINK_STATE).port_states["mlx5_0_1"].health == "healthy"


def test_first_poll_down_port_without_evidence_is_suppressed() -> None:
    # Dual-port cards with the second function uncabled everywhere: the mode is 1 active.
    devices = []
    for card in range(4):
        for fn in range(2):
            name = f"mlx5_{card * 2 + fn}"
            state = (ACTIVE, LINKUP) if fn == 0 else (DOWN, POLLING)
            devices.append(device(name, pci=f"0000:{0x20 + card:02x}:00.{fn}",
                                  ports=(port(name, 1, *state),)))
    runner = Runner()
    result = runner.poll(host(*devices, when=0))
    assert [e for e in result.events if not e.is_healthy] == []
    assert any("treated as uncabled" in note for note in result.notes)
    assert runner.state.section(LINK_STATE).port_states["mlx5_1_1"].health == "suppressed"
    # Later, one card drops to 0 active: its port event and one fatal card event.
    devices[0] = replace(devices[0], ports=(port("mlx5_0", 1, DOWN, POLLING),))
    later = runner.poll(host(*devices, when=1))
    fatal = [e for e in later.events if e.is_fatal]
    assert sorted(e.error_code[0] for e in fatal) == ["card_active_ports", "port_state"]
    card_event = next(e for e in fatal if e.error_code == ("card_active_ports",))
    assert card_event.message == "Card 0000:20:00 (compute) has 0 active ports, expected 1"
    # Recovery of the card once it is back at the mode.
    devices[0] = replace(devices[0], ports=(port("mlx5_0", 1, ACTIVE, LINKUP),))
    healed = runner.poll(host(*devices, when=2))
    assert sorted(e.error_code[0] for e in healed.events if e.is_healthy) == [
        "card_active_ports", "port_state"]


def test_first_poll_down_port_on_anomalous_card_is_fatal() -> None:
    runner = Runner()
    result = runner.poll(host(*fleet({"mlx5_3": (DOWN, DISABLED)}), when=0))
    fatal = [e for e in result.events if e.is_fatal]
    assert sorted(e.message for e in fatal) == [
        "Card 0000:13:00 (compute) has 0 active ports, expected 1",
        "Port mlx5_3 port 1: state DOWN, phys_state Disabled - no connectivity",
    ]


def test_restart_with_persisted_down_port_recovers_when_fixed_meanwhile() -> None:
    runner = started()
    runner.poll(host(*fleet({"mlx5_0": (DOWN, DISABLED)}), when=1))
    runner.restart()
    result = runner.poll(host(*fleet({}), when=10))
    assert [(e.is_healthy, e.message) for e in state_events(result)] == [
        (True, "Port mlx5_0 port 1: healthy (ACTIVE, LinkUp)")]


def test_device_gone_only_after_three_complete_enumerations() -> None:
    runner = started()
    without = fleet({})[1:]
    for second in (1, 2):
        assert runner.poll(host(*without, when=second)).events == ()
    third = runner.poll(host(*without, when=3)).events
    assert [(e.is_fatal, e.message, e.entities) for e in third] == [
        (True, "NIC mlx5_0 disappeared from /sys/class/infiniband/ - hardware failure",
         (("NIC", "mlx5_0"),))]
    assert runner.poll(host(*without, when=4)).events == ()
    back = runner.poll(host(*fleet({}), when=5)).events
    assert [(e.is_healthy, e.error_code) for e in back] == [(True, ("device_missing",))]


def test_incomplete_enumeration_is_never_a_disappearance() -> None:
    runner = started()
    for second in range(1, 6):
        assert runner.poll(host(when=second, complete=False)).events == ()
    assert runner.state.section(LINK_STATE).device_misses == {}


def test_miss_count_survives_a_restart() -> None:
    runner = started()
    without = fleet({})[1:]
    runner.poll(host(*without, when=1))
    runner.poll(host(*without, when=2))
    runner.restart()
    assert len(runner.poll(host(*without, when=3)).events) == 1


def test_port_vanishing_from_a_present_device() -> None:
    devices = [device("mlx5_0", ports=(port("mlx5_0", 1), port("mlx5_0", 2)))]
    runner = Runner()
    runner.poll(host(*devices, when=0))
    one_port = [device("mlx5_0", ports=(port("mlx5_0", 1),))]
    assert runner.poll(host(*one_port, when=1)).events == ()
    assert runner.poll(host(*one_port, when=2)).events == ()
    gone = runner.poll(host(*one_port, when=3)).events
    assert [e.message for e in gone] == [
        "Port mlx5_0 port 2 disappeared from /sys/class/infiniband/mlx5_0/ports/ - "
        "hardware failure"]
    back = runner.poll(host(*devices, when=4)).events
    assert [(e.is_healthy, e.error_code) for e in back] == [(True, ("port_missing",))]


def test_reboot_baselines_healthy_ports_and_only_proven_anomalies() -> None:
    runner = started()
    runner.poll(host(*fleet({"mlx5_0": (DOWN, DISABLED)}), when=1))
    # Reboot: state cleared, baseline poll.
    fresh = Runner()
    result = fresh.poll(host(*fleet({"mlx5_5": (DOWN, DISABLED)}), boot="boot-2", when=100))
    healthy = [e for e in state_events(result) if e.is_healthy]
    assert len(healthy) == 7
    fatal = [e.message for e in result.events if e.is_fatal]
    assert "Port mlx5_5 port 1: state DOWN, phys_state Disabled - no connectivity" in fatal


def test_management_and_vf_devices_are_not_monitored() -> None:
    devices = fleet({})
    mgmt = device("mlx5_8", pci="0000:90:00.0", numa=3,
                  ports=(port("mlx5_8", 1, DOWN, DISABLED, "Ethernet",
                              counters={"link_downed": 5}),))
    vf = device("mlx5_9", pci="0000:10:00.2", is_vf=True,
                ports=(port("mlx5_9", 1, DOWN, DISABLED),))
    runner = Runner()
    result = runner.poll(host(*devices, mgmt, vf, when=0))
    assert all("mlx5_8" not in e.message and "mlx5_9" not in e.message for e in result.events)
    assert result.roles["mlx5_8"].role == "management"
    assert result.roles["mlx5_9"].role == "vf"
    assert "mlx5_8" not in runner.state.section(LINK_STATE).known_devices
    mgmt2 = replace(mgmt, ports=(port("mlx5_8", 1, DOWN, DISABLED, "Ethernet",
                                      counters={"link_downed": 9}),))
    assert runner.poll(host(*devices, mgmt2, when=1)).events == ()


@pytest.mark.parametrize("raw, expected", [
    ("4: ACTIVE", (4, "ACTIVE")),
    (" 1 : DOWN\n", (1, "DOWN")),
    ("²: ACTIVE", (None, "²: ACTIVE")),  # isdigit() says yes, int() raises
    ("٤: ACTIVE", (None, "٤: ACTIVE")),  # an Arabic-Indic four is no sysfs state number
    ("--1: DOWN", (None, "--1: DOWN")),
    ("", (None, "")),
])
def test_split_state_never_raises_and_takes_only_ascii_numbers(
        raw: str, expected: tuple[Optional[int], str]) -> None:
    assert split_state(raw) == expected
    assert is_active(raw, "5: LinkUp") == (expected[0] == 4)
