"""#15.5: down/up cycles of a port in a sliding window (state machine, link_downed and
carrier_changes deltas, saturation), one CONTACT_SUPPORT event, recovery, persistence."""

from __future__ import annotations

from typing import Any

import pytest

from nichealthd.core.checks.link_flaps import LINK_FLAPS
from nichealthd.core.config import ConfigError
from nichealthd.core.evaluate import CycleResult
from nichealthd.core.state import MonitorState

from .builders import DISABLED, DOWN, POLLING, Runner, config, device, host, port

UP = ("4: ACTIVE", "5: LinkUp")
DN = (DOWN, DISABLED)


def nic(state: tuple[str, str] = UP, layer: str = "InfiniBand", **counters: Any) -> Any:
    return device("mlx5_0", ports=(port("mlx5_0", state=state[0], phys=state[1], layer=layer,
                                        counters=counters or None,
                                        operstate="up" if layer == "Ethernet" else None),))


def flaps(result: CycleResult) -> list[Any]:
    return [e for e in result.events if e.error_code == ("link_flap",)]


def count(runner: Runner) -> int:
    return runner.state.section(LINK_FLAPS).link_flaps["mlx5_0_1"].count


def cycle(runner: Runner, start: float, down: float = 40) -> list[Any]:
    """One outage of ``down`` seconds starting at ``start``; the flap events it caused."""
    got = flaps(runner.poll(host(nic(DN), when=start)))
    return got + flaps(runner.poll(host(nic(UP), when=start + down)))


def test_three_cycles_within_the_window_give_one_contact_support_event() -> None:
    runner = Runner()
    runner.poll(host(nic(), when=0))
    assert cycle(runner, 60) == [] and cycle(runner, 600) == []
    third = cycle(runner, 1200)
    assert len(third) == 1
    event = third[0]
    assert (event.check_name, event.is_fatal, event.is_healthy, event.recommended_action) == (
        "InfiniBandDegradationCheck", False, False, "CONTACT_SUPPORT")
    assert event.message == ("Port mlx5_0 port 1: LinkFlap - 3 down/up cycles within 1h "
                             "(threshold 3) - unstable link")
    assert "link_downed" not in event.message  # the analyzer's RepeatedNICLinkFlap counts those
    assert cycle(runner, 1500) == []  # a fourth: still one report
    assert count(runner) == 4
    # the window slides (cycles ended at 100, 640, 1240, 1540): 3 remain until 1h after the
    # second one, then 2 -> one recovery
    assert flaps(runner.poll(host(nic(), when=3600 + 639))) == []
    got = flaps(runner.poll(host(nic(), when=3600 + 640)))
    assert [(e.is_healthy, e.check_name, e.message) for e in got] == [
        (True, "InfiniBandDegradationCheck", "Port mlx5_0 port 1: LinkFlap recovered - "
                                             "2 down/up cycles within 1h (threshold 3)")]
    assert flaps(runner.poll(host(nic(), when=3600 + 1241))) == []


def test_counter_deltas_catch_cycles_shorter_than_a_poll() -> None:
    runner = Runner()
    runner.poll(host(nic(link_downed=0), when=0))
    assert flaps(runner.poll(host(nic(link_downed=2), when=1))) == []
    # closed one poll later: the counter may have moved before the state read DOWN
    assert flaps(runner.poll(host(nic(link_downed=2), when=2))) == [] and count(runner) == 2
    runner.poll(host(nic(link_downed=3), when=3))
    got = flaps(runner.poll(host(nic(link_downed=3), when=4)))
    assert len(got) == 1 and "3 down/up cycles" in got[0].message


@pytest.mark.parametrize("race", [False, True])
def test_one_outage_seen_by_the_state_and_the_counter_is_one_cycle(race: bool) -> None:
    """The counter read in the same poll as DOWN, or (a read race) one poll before it."""
    runner = Runner()
    runner.poll(host(nic(link_downed=0), when=0))
    if race:
        runner.poll(host(nic(link_downed=1), when=1))
    runner.poll(host(nic(DN, link_downed=1), when=2))
    runner.poll(host(nic(DN, link_downed=1), when=3))
    runner.poll(host(nic(link_downed=1), when=4))
    runner.poll(host(nic(link_downed=1), when=5))
    assert count(runner) == 1
    # and the counter seen only after DOWN: still one
    runner.poll(host(nic(DN, link_downed=1), when=6))
    runner.poll(host(nic(DN, link_downed=2), when=7))
    runner.poll(host(nic(link_downed=2), when=8))
    assert count(runner) == 2


def test_several_downs_during_one_outage_are_each_a_cycle() -> None:
    runner = Runner()
    runner.poll(host(nic(link_downed=0), when=0))
    runner.poll(host(nic(DN, link_downed=1), when=1))
    runner.poll(host(nic(DN, link_downed=3), when=2))  # came up and went down twice more
    runner.poll(host(nic(link_downed=3), when=3))
    assert count(runner) == 3


def test_carrier_changes_count_two_per_cycle() -> None:
    runner = Runner()
    runner.poll(host(nic(layer="Ethernet", carrier_changes=10), when=0))
    runner.poll(host(nic(layer="Ethernet", carrier_changes=14), when=1))  # 2 short cycles
    runner.poll(host(nic(layer="Ethernet", carrier_changes=14), when=2))
    assert count(runner) == 2
    runner.poll(host(nic(DN, layer="Ethernet", carrier_changes=15), when=3))  # down
    got = flaps(runner.poll(host(nic(layer="Ethernet", carrier_changes=16), when=4)))
    assert count(runner) == 3
    assert [e.check_name for e in got] == ["EthernetDegradationCheck"]
    assert got[0].message.startswith("RoCE port mlx5_0 port 1: LinkFlap - 3 down/up cycles")


def test_a_saturated_or_reset_counter_gives_no_delta() -> None:
    runner = Runner()
    runner.poll(host(nic(link_downed=250), when=0))
    runner.poll(host(nic(link_downed=255), when=1))  # saturated (8 bit): no information
    runner.poll(host(nic(link_downed=255), when=2))
    runner.poll(host(nic(link_downed=0), when=3))  # cleared: no delta
    runner.poll(host(nic(link_downed=1), when=4))
    runner.poll(host(nic(link_downed=1), when=5))
    assert count(runner) == 1


def test_a_counter_switched_off_is_not_read_for_flaps() -> None:
    runner = Runner(cfg=config(counters=[{"name": "link_downed", "enabled": False}]))
    runner.poll(host(nic(link_downed=0), when=0))
    runner.poll(host(nic(link_downed=5), when=1))
    runner.poll(host(nic(link_downed=5), when=2))
    assert count(runner) == 0


def test_the_window_survives_a_restart_and_a_reboot_clears_it() -> None:
    runner = Runner()
    runner.poll(host(nic(), when=0))
    cycle(runner, 10)
    cycle(runner, 100)
    runner.restart()
    assert len(cycle(runner, 200)) == 1
    rebooted = Runner(state=MonitorState(boot_id="boot-2"))
    rebooted.poll(host(nic(), when=300, boot="boot-2"))
    assert rebooted.state.section(LINK_FLAPS).link_flaps["mlx5_0_1"].count == 0


def test_one_outage_is_never_a_flap_and_the_fatal_count_escalates() -> None:
    runner = Runner(cfg=config(linkFlapFatalCount=4))
    runner.poll(host(nic(), when=0))
    first = runner.poll(host(nic(DN), when=10))
    assert flaps(first) == [] and [e.is_fatal for e in first.events] == [True]  # port_state
    runner.poll(host(nic(), when=20))
    cycle(runner, 30)
    assert [e.is_fatal for e in cycle(runner, 50)] == [False]
    fatal = cycle(runner, 70)
    assert [(e.check_name, e.is_fatal, e.recommended_action) for e in fatal] == [
        ("InfiniBandStateCheck", True, "REPLACE_VM")]
    assert "(fatal at 4)" in fatal[0].message
    assert runner.last is not None
    # both conditions clear when the window empties
    gone = flaps(runner.poll(host(nic(), when=5000)))
    assert sorted((e.check_name, e.is_healthy) for e in gone) == [
        ("InfiniBandDegradationCheck", True), ("InfiniBandStateCheck", True)]


def test_a_fatal_count_that_would_make_one_outage_fatal_is_refused() -> None:
    for bad in (1, 2):
        with pytest.raises(ConfigError, match="linkFlapFatalCount"):
            config(linkFlapFatalCount=bad)
    config(linkFlapFatalCount=0)
    config(linkFlapCount=2, linkFlapFatalCount=2)


def test_flap_detection_can_be_switched_off_and_unknown_readings_are_no_evidence() -> None:
    runner = Runner(cfg=config(linkFlapCount=0))
    runner.poll(host(nic(), when=0))
    for start in (10, 20, 30, 40):
        assert cycle(runner, start, 5) == []
    assert runner.state.section(LINK_FLAPS).link_flaps == {}
    # switched off by a reload while a flap is reported: its recovery, then nothing
    runner = Runner()
    runner.poll(host(nic(), when=0))
    for start in (10, 20, 30):
        cycle(runner, start, 5)
    runner.config = config(linkFlapCount=0)
    off = flaps(runner.poll(host(nic(), when=50)))
    assert [(e.is_healthy, e.message) for e in off] == [
        (True, "Port mlx5_0 port 1: LinkFlap recovered - flap detection switched off")]
    assert runner.state.section(LINK_FLAPS).link_flaps == {}
    assert flaps(runner.poll(host(nic(), when=51))) == []
    runner = Runner()
    runner.poll(host(nic(), when=0))
    for when in range(1, 8):  # garbage and up again: no cycles
        runner.poll(host(nic(("\x00zz", "5: LinkUp") if when % 2 else UP), when=when))
    assert count(runner) == 0
    runner.poll(host(nic((DOWN, POLLING)), when=10))
    runner.poll(host(nic(("\x00zz", "5: LinkUp")), when=11))  # unknown: still down
    runner.poll(host(nic(), when=12))
    assert count(runner) == 1
