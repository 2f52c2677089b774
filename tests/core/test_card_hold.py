"""Card homogeneity at runtime waits for a stuck port; a short card is
short only of the ports its peers have active, and its release clears what it raised."""

from __future__ import annotations

from typing import Callable, Optional

import pytest

from nichealthd.core.checks.cards import card_counts
from nichealthd.core.checks.link_section import LinkStateSection, PortRecord
from nichealthd.core.checks.link_settings import LinkStateSettings
from nichealthd.core.checks.link_state import LINK_STATE
from nichealthd.core.model import DeviceSnapshot
from nichealthd.core.state import MonitorState
from nichealthd.core.topology import Role

from .builders import (
    ACTIVE,
    DISABLED,
    DOWN,
    LINKUP,
    POLLING,
    Runner,
    at,
    config,
    device,
    host,
    port,
)

HOLD = 240  # the default cardVerdictHoldTime (gpud's 4-minute drop rule)

# Every non-fatal, non-active reading: (state, phys_state).
TRANSIENTS = {
    "INIT": ("2: INIT", LINKUP),
    "ARMED": ("3: ARMED", LINKUP),
    "INIT/Polling": ("2: INIT", POLLING),
    "LinkErrorRecovery": (ACTIVE, "6: LinkErrorRecovery"),
    "ACTIVE_DEFER": ("5: ACTIVE_DEFER", LINKUP),
    "Training": ("2: INIT", "4: PortConfigurationTraining"),
}
GARBAGE = {
    "garbage state": ("\x00\x13zz", LINKUP),
    "garbage phys_state": (ACTIVE, "LinkUp?"),
    "state without number": ("ACTIVE", LINKUP),
}


def single_port(override: Optional[tuple[str, str]] = None) -> list:
    """Eight single-port cards; card 0 (mlx5_0) optionally in ``override``."""
    devices = []
    for index in range(8):
        name = f"mlx5_{index}"
        state, phys = override if (override and index == 0) else (ACTIVE, LINKUP)
        devices.append(device(name, pci=f"0000:{0x10 + index:02x}:00.0", numa=index % 2,
                              ports=(port(name, 1, state, phys),)))
    return devices


def dual_port(override: Optional[tuple[str, str]] = None) -> list:
    """Four dual-port cards (two PCI functions each), all cabled; mlx5_0 optionally changed."""
    devices = []
    for card in range(4):
        for fn in range(2):
            name = f"mlx5_{card * 2 + fn}"
            state, phys = override if (override and card == 0 and fn == 0) else (ACTIVE, LINKUP)
            devices.append(device(name, pci=f"0000:{0x20 + card:02x}:00.{fn}",
                                  ports=(port(name, 1, state, phys),)))
    return devices


LAYOUTS = {"single-port": (single_port, 1), "dual-port": (dual_port, 2)}


def fatal(result) -> list:
    return [e for e in result.events if e.is_fatal]


def card_events(result) -> list:
    return [e for e in result.events if e.error_code == ("card_active_ports",)]


Build = Callable[..., list[DeviceSnapshot]]


def live(layout: str, **cfg: object) -> tuple[Runner, Build]:
    build, _ = LAYOUTS[layout]
    runner = Runner(config(**cfg) if cfg else None)
    runner.poll(host(*build(), when=0))
    return runner, build


class Conditions:
    """What the platform holds open: fatal events keyed like NVSentinel's connector does."""

    def __init__(self) -> None:
        self.open: set[tuple] = set()

    def apply(self, result) -> None:
        for event in result.events:
            key = (event.check_name, event.error_code, event.entities)
            if event.is_fatal:
                self.open.add(key)
            elif event.is_healthy and not event.entities:
                self.open = {k for k in self.open if k[0] != event.check_name}
            elif event.is_healthy:
                self.open.discard(key)


@pytest.mark.parametrize("layout", sorted(LAYOUTS))
@pytest.mark.parametrize("name", sorted(TRANSIENTS))
def test_transient_for_one_poll_gives_its_port_event_and_no_fatal(layout: str,
                                                                   name: str) -> None:
    runner, build = live(layout)
    blip = runner.poll(host(*build(TRANSIENTS[name]), when=1))
    assert fatal(blip) == []
    assert [(e.is_healthy, e.entities) for e in blip.events] == [
        (False, (("NIC", "mlx5_0"), ("NICPort", "1")))]
    back = runner.poll(host(*build(), when=1.5))
    assert [(e.is_healthy, e.error_code) for e in back.events] == [(True, ("port_state",))]
    assert runner.state.section(LINK_STATE).card_pending == {}


@pytest.mark.parametrize("layout", sorted(LAYOUTS))
@pytest.mark.parametrize("name", sorted(TRANSIENTS))
def test_transient_stuck_past_the_hold_time_is_one_fatal_card_event(layout: str,
                                                                    name: str) -> None:
    runner, build = live(layout)
    _, mode = LAYOUTS[layout]
    stuck = build(TRANSIENTS[name])
    runner.poll(host(*stuck, when=1))
    for second in (2, 31, 120, HOLD):  # 30 s in INIT (the spec's "stuck" hint) is not enough
        assert fatal(runner.poll(host(*stuck, when=second))) == []
    verdict = runner.poll(host(*stuck, when=1 + HOLD))
    card = "0000:10:00" if layout == "single-port" else "0000:20:00"
    assert [e.message for e in fatal(verdict)] == [
        f"Card {card} (compute) has {mode - 1} active ports, expected {mode}"]
    assert fatal(runner.poll(host(*stuck, when=2 + HOLD))) == []
    healed = runner.poll(host(*build(), when=3 + HOLD))
    assert sorted(e.error_code[0] for e in healed.events if e.is_healthy) == [
        "card_active_ports", "port_state"]
    assert (runner.state.section(LINK_STATE).card_anomalies == {}
            and runner.state.section(LINK_STATE).card_pending == {})


@pytest.mark.parametrize("layout", sorted(LAYOUTS))
@pytest.mark.parametrize("name", sorted(GARBAGE))
def test_unparseable_state_is_unknown_never_card_evidence(layout: str, name: str) -> None:
    runner, build = live(layout)
    garbage = build(GARBAGE[name])
    for second in (1, 2, 1 + HOLD, 10 * HOLD):
        assert fatal(runner.poll(host(*garbage, when=second))) == []
    assert runner.state.section(LINK_STATE).card_anomalies == {}


@pytest.mark.parametrize("layout", sorted(LAYOUTS))
@pytest.mark.parametrize("name", sorted(GARBAGE))
def test_unparseable_state_at_the_baseline_is_no_evidence(layout: str, name: str) -> None:
    build, _ = LAYOUTS[layout]
    result = Runner().poll(host(*build(GARBAGE[name]), when=0))
    assert fatal(result) == []


WAITING = ("INIT", "ARMED")  # the link up, waiting for the subnet manager


@pytest.mark.parametrize("layout", sorted(LAYOUTS))
@pytest.mark.parametrize("name", sorted(set(TRANSIENTS) - set(WAITING)))
def test_baseline_verdict_is_immediate_as_spec_7_2(layout: str, name: str) -> None:
    build, mode = LAYOUTS[layout]
    result = Runner().poll(host(*build(TRANSIENTS[name]), when=0))
    assert [e.error_code for e in fatal(result)] == [("card_active_ports",)]
    assert fatal(result)[0].message.endswith(f"{mode - 1} active ports, expected {mode}")
    port_events = [e for e in result.events if e.error_code == ("port_state",)
                   and not e.is_healthy]
    # non-fatal, as link-state-detection §3.2
    assert [e.entities[0][1] for e in port_events] == ["mlx5_0"]


@pytest.mark.parametrize("layout", sorted(LAYOUTS))
@pytest.mark.parametrize("name", WAITING)
def test_a_port_waiting_for_the_sm_at_the_baseline_is_held_from_the_first_poll(
        layout: str, name: str) -> None:
    """A reboot meets the ports in INIT/ARMED: a card short only of such a port is held
    ``cardVerdictHoldTime`` from the first poll, then fatal if still short."""
    build, mode = LAYOUTS[layout]
    runner = Runner()
    stuck = build(TRANSIENTS[name])
    first = runner.poll(host(*stuck, when=0))
    assert fatal(first) == []
    assert [e.entities[0][1] for e in first.events if e.error_code == ("port_state",)
            and not e.is_healthy] == ["mlx5_0"]  # non-fatal, as link-state-detection §3.2
    assert all(fatal(runner.poll(host(*stuck, when=s))) == [] for s in (1, 120, HOLD - 1))
    verdict = runner.poll(host(*stuck, when=HOLD))
    assert [e.message for e in fatal(verdict)] == [
        f"Card {'0000:10:00' if mode == 1 else '0000:20:00'} (compute) has {mode - 1} active "
        f"ports, expected {mode}"]


@pytest.mark.parametrize("layout", sorted(LAYOUTS))
def test_runtime_down_keeps_todays_behaviour(layout: str) -> None:
    runner, build = live(layout)
    result = runner.poll(host(*build((DOWN, DISABLED)), when=1))
    assert [e.message for e in fatal(result)] == [
        "Port mlx5_0 port 1: state DOWN, phys_state Disabled - no connectivity"]
    assert runner.state.section(LINK_STATE).card_pending == {}


def test_hold_time_is_configurable() -> None:
    runner, build = live("single-port", cardVerdictHoldTime="30s")
    stuck = build(TRANSIENTS["INIT"])
    runner.poll(host(*stuck, when=1))
    assert fatal(runner.poll(host(*stuck, when=30))) == []
    assert len(card_events(runner.poll(host(*stuck, when=31)))) == 1


def test_default_hold_time_is_four_minutes() -> None:
    assert config().settings(LinkStateSettings).card_verdict_hold_time == 240.0


def test_restart_neither_restarts_the_clock_nor_invents_a_verdict() -> None:
    runner, build = live("single-port")
    stuck = build(TRANSIENTS["ARMED"])
    runner.poll(host(*stuck, when=1))
    runner.restart()
    assert "0000:10:00" in runner.state.section(LINK_STATE).card_pending
    assert fatal(runner.poll(host(*stuck, when=100))) == []  # not a baseline: no verdict
    runner.restart()
    assert len(card_events(runner.poll(host(*stuck, when=1 + HOLD)))) == 1


def test_leaving_for_down_during_the_hold_is_the_port_fatal_only() -> None:
    runner, build = live("single-port")
    runner.poll(host(*build(TRANSIENTS["INIT"]), when=1))
    down = runner.poll(host(*build((DOWN, POLLING)), when=2))
    assert [e.error_code for e in fatal(down)] == [("port_state",)]
    assert fatal(runner.poll(host(*build((DOWN, POLLING)), when=2 + HOLD))) == []


def test_state_without_the_new_keys_loads() -> None:
    runner, build = live("single-port")
    runner.poll(host(*build(TRANSIENTS["INIT"]), when=1))
    data = runner.state.to_json()
    data.pop("card_pending")
    for anomaly in data["card_anomalies"].values():
        anomaly.pop("ports", None)
    loaded = MonitorState.from_json(data)
    assert loaded.section(LINK_STATE).card_pending == {}


# ------------------------------------------------------------------ short cards

def half_cabled(port1_of_card0: tuple[str, str] = (ACTIVE, LINKUP)) -> list:
    """Dual-function cards, function 1 uncabled on every card."""
    devices = []
    for card in range(4):
        for fn in range(2):
            name = f"mlx5_{card * 2 + fn}"
            state = (ACTIVE, LINKUP) if fn == 0 else (DOWN, POLLING)
            if card == 0 and fn == 0:
                state = port1_of_card0
            devices.append(device(name, pci=f"0000:{0x20 + card:02x}:00.{fn}",
                                  ports=(port(name, 1, *state),)))
    return devices


def two_port_devices(port1_of_card0: tuple[str, str] = (ACTIVE, LINKUP),
                     port2_of_card0: tuple[str, str] = (DOWN, DISABLED)) -> list:
    """One device per card with two ports, port 2 uncabled on every card."""
    devices = []
    for card in range(4):
        name = f"mlx5_{card}"
        first = port1_of_card0 if card == 0 else (ACTIVE, LINKUP)
        second = port2_of_card0 if card == 0 else (DOWN, DISABLED)
        devices.append(device(name, pci=f"0000:{0x30 + card:02x}:00.0",
                              ports=(port(name, 1, *first), port(name, 2, *second))))
    return devices


@pytest.mark.parametrize("build,uncabled", [(half_cabled, "mlx5_1_1"),
                                            (two_port_devices, "mlx5_0_2")])
def test_short_card_reports_only_what_it_is_short_of_and_clears(build, uncabled) -> None:
    conditions = Conditions()
    runner = Runner()
    first = runner.poll(host(*build((DOWN, DISABLED)), when=0))
    conditions.apply(first)
    messages = sorted(e.message for e in fatal(first))
    assert len(messages) == 2
    assert messages[0].endswith("has 0 active ports, expected 1")
    assert messages[1] == "Port mlx5_0 port 1: state DOWN, phys_state Disabled - no connectivity"
    assert runner.state.section(LINK_STATE).port_states[uncabled].health == "suppressed"
    repaired = runner.poll(host(*build(), when=10))
    conditions.apply(repaired)
    assert fatal(repaired) == []
    assert sorted(e.error_code[0] for e in repaired.events) == [
        "card_active_ports", "port_state"]
    assert conditions.open == set()
    assert runner.state.section(LINK_STATE).card_anomalies == {}


def test_release_clears_a_port_raised_on_the_verdict_that_is_still_down() -> None:
    """Port 1 down, then port 2 cabled instead: the card is back at the mode (1 active)."""
    conditions = Conditions()
    runner = Runner()
    conditions.apply(runner.poll(host(*two_port_devices((DOWN, DISABLED)), when=0)))
    assert runner.state.section(LINK_STATE).card_anomalies["0000:30:00"].ports == ("mlx5_0_1",)
    swapped = runner.poll(host(*two_port_devices((DOWN, DISABLED), (ACTIVE, LINKUP)), when=5))
    conditions.apply(swapped)
    assert fatal(swapped) == []
    assert conditions.open == set()
    assert runner.state.section(LINK_STATE).port_states["mlx5_0_1"].health == "suppressed"
    # Port 1 cabled again later: healthy, nothing else.
    both = runner.poll(host(*two_port_devices((ACTIVE, LINKUP), (ACTIVE, LINKUP)), when=6))
    assert fatal(both) == []


def test_short_card_latch_survives_a_restart_with_its_ports() -> None:
    runner = Runner()
    runner.poll(host(*two_port_devices((DOWN, DISABLED)), when=0))
    runner.restart()
    assert runner.state.section(LINK_STATE).card_anomalies["0000:30:00"].ports == ("mlx5_0_1",)
    swapped = runner.poll(host(*two_port_devices((DOWN, DISABLED), (ACTIVE, LINKUP)), when=5))
    assert sorted((e.is_healthy, e.error_code[0]) for e in swapped.events) == [
        (True, "card_active_ports"), (True, "port_state"), (True, "port_state")]


def test_fully_cabled_dual_port_card_down_at_baseline_reports_the_down_port() -> None:
    runner = Runner()
    devices = dual_port((DOWN, DISABLED))
    result = runner.poll(host(*devices, when=0))
    assert sorted(e.error_code[0] for e in fatal(result)) == ["card_active_ports", "port_state"]


def test_dual_port_card_with_one_port_down_and_one_in_init_holds_the_init_part() -> None:
    """The DOWN port is told by its own fatal; the INIT one waits like any transient."""
    runner = Runner()
    devices = [device(f"mlx5_{c}", pci=f"0000:{0x40 + c:02x}:00.0",
                      ports=(port(f"mlx5_{c}", 1), port(f"mlx5_{c}", 2))) for c in range(4)]
    runner.poll(host(*devices, when=0))
    mixed = list(devices)
    mixed[0] = device("mlx5_0", pci="0000:40:00.0",
                      ports=(port("mlx5_0", 1, "2: INIT", LINKUP),
                             port("mlx5_0", 2, DOWN, DISABLED)))
    first = runner.poll(host(*mixed, when=1))
    assert [e.error_code for e in fatal(first)] == [("port_state",)]
    assert fatal(runner.poll(host(*mixed, when=HOLD))) == []
    stuck = runner.poll(host(*mixed, when=1 + HOLD))
    assert [e.message for e in fatal(stuck)] == [
        "Card 0000:40:00 (compute) has 0 active ports, expected 2"]


def test_garbage_state_is_named_unknown_in_the_port_event() -> None:
    runner, build = live("single-port")
    result = runner.poll(host(*build(GARBAGE["garbage state"]), when=1))
    assert [e.message for e in result.events] == [
        "Port mlx5_0 port 1: state unknown, phys_state LinkUp"]


def test_port_positions_follow_the_pci_function_not_the_device_name() -> None:
    """mlx5_9/mlx5_10 share a card: name order would put function 1 first."""
    names = [("mlx5_0", "mlx5_1"), ("mlx5_2", "mlx5_3"), ("mlx5_9", "mlx5_10"),
             ("mlx5_4", "mlx5_5")]
    devices = []
    for card, (fn0, fn1) in enumerate(names):
        first = (DOWN, DISABLED) if card == 2 else (ACTIVE, LINKUP)
        devices.append(device(fn0, pci=f"0000:{0x50 + card:02x}:00.0",
                              ports=(port(fn0, 1, *first),)))
        devices.append(device(fn1, pci=f"0000:{0x50 + card:02x}:00.1",
                              ports=(port(fn1, 1, DOWN, POLLING),)))
    runner = Runner()
    result = runner.poll(host(*devices, when=0))
    ports = [e.entities[0][1] for e in fatal(result) if e.error_code == ("port_state",)]
    assert ports == ["mlx5_9"]
    assert runner.state.section(LINK_STATE).port_states["mlx5_10_1"].health == "suppressed"


def test_card_counts_follow_the_held_record_of_an_unreadable_port() -> None:
    """card_counts keeps its last answer only while every port was read and known: with an
    unreadable port the count rests on the held record, which may change between polls."""
    devices = (device("mlx5_0", ports=(port("mlx5_0", 1, state=None),)),)
    roles = {"mlx5_0": Role("compute", "test")}

    def held(state: str, phys: str) -> LinkStateSection:
        record = PortRecord("mlx5_0", 1, state, phys, "InfiniBand", "healthy", at(0))
        return LinkStateSection(port_states={"mlx5_0_1": record})

    card = devices[0].card or ""
    assert card_counts(devices, roles, held(ACTIVE, LINKUP))[card].active == 1
    assert card_counts(devices, roles, held(DOWN, DISABLED))[card].active == 0
    readable = (device("mlx5_0", ports=(port("mlx5_0", 1),)),)
    first = card_counts(readable, roles, held(DOWN, DISABLED))
    assert first[card].active == 1
    assert card_counts(readable, roles, LinkStateSection()) == first
    assert card_counts(readable, {"mlx5_0": Role("management", "test")},
                       LinkStateSection())[card].role == "management"
