"""Down/up cycles of a port in a sliding window (state machine, link_downed and
carrier_changes deltas, saturation), one CONTACT_SUPPORT event, recovery, persistence."""

from __future__ import annotations

from typing import Any

import pytest

from nichealthd.core.checks.link_flaps import LINK_FLAPS
from nichealthd.core.checks.link_state import LINK_STATE
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


# The hold-down escalation: a hold-down never disarms what the default config reports fatal.

IB_STATE, IB_DEGRADED = "InfiniBandStateCheck", "InfiniBandDegradationCheck"
INIT = ("2: INIT", "5: LinkUp")


class Drill:
    """A port polled every second: outages of ``down`` s with ``up`` s between, each
    raising link_downed by one as a real port does (``nichealthd-sim flap``)."""

    def __init__(self, runner: Runner, layer: str = "InfiniBand") -> None:
        self.runner, self.layer, self.downed, self.when = runner, layer, 0, 0
        self.events: list[tuple[int, Any]] = []  # (when, event) of every port event
        self.poll(UP)

    def poll(self, state: tuple[str, str]) -> None:
        snapshot = host(nic(state, self.layer, link_downed=self.downed), when=self.when)
        self.events.extend((self.when, e) for e in self.runner.poll(snapshot).events
                           if e.entities)
        self.when += 1

    def flap(self, cycles: int = 4, down: int = 3, up: int = 3,
             via: tuple[tuple[str, str], ...] = (DN,)) -> None:
        """``cycles`` outages reading ``via`` (each for ``down`` s), then ACTIVE."""
        for _ in range(cycles):
            self.downed += 1
            for step in range(down):
                self.poll(via[min(step, len(via) - 1)])
            for _ in range(up):
                self.poll(UP)

    def wait_until(self, when: int) -> None:
        """Idle (up) until ``when``; the flap family only looks when its window slides."""
        self.when = when
        self.poll(UP)

    def summary(self) -> list[tuple[str, str, str]]:
        return sorted((e.error_code[0], e.severity, e.recommended_action)
                      for _, e in self.events)

    def flap_events(self) -> list[tuple[int, str, str, str]]:
        return [(when, e.check_name, e.severity, e.message) for when, e in self.events
                if e.error_code == ("link_flap",)]


def held(**keys: Any) -> Runner:
    return Runner(cfg=config(stateHoldDown="10s", **keys))


def test_four_flaps_under_a_hold_down_are_one_fatal_flap_event_at_the_third() -> None:
    drill = Drill(held())
    drill.events.clear()
    drill.flap()  # outages at 1-3, 7-9, 13-15, 19-21; back at 4, 10, 16, 22
    assert blips(drill.runner) == 4 and absorbed(drill.runner) == 4
    fatal = ("Port mlx5_0 port 1: LinkFlap - 3 down/up cycles within 1h, 3 absorbed by "
             "stateHoldDown 10s (fatal at 3) - unstable link")
    assert drill.flap_events() == [(16, IB_STATE, "fatal", fatal)]
    assert drill.summary() == [("link_flap", "fatal", "REPLACE_VM")]  # nothing else
    assert "link_downed" not in fatal  # the analyzer's RepeatedNICLinkFlap counts those
    # The window slides: 3 absorbed cycles until an hour after the second (10), then 2.
    drill.wait_until(3609)
    drill.wait_until(3610)
    assert drill.flap_events()[1:] == [(3610, IB_STATE, "healthy", (
        "Port mlx5_0 port 1: LinkFlap recovered - 2 down/up cycles within 1h, 2 absorbed by "
        "stateHoldDown 10s (threshold 3)"))]
    drill.wait_until(3700)  # the window empty: nothing more to say
    assert len(drill.flap_events()) == 2 and count(drill.runner) == 0


def test_the_same_flaps_without_a_hold_down_are_reported_as_before() -> None:
    drill = Drill(Runner())
    drill.events.clear()
    drill.flap()
    # each outage its fatal port event and recovery, the first link_downed rise a (latched)
    # fatal breach, and the flap at the third cycle the non-fatal CONTACT_SUPPORT event
    assert drill.summary() == sorted(
        [("port_state", "fatal", "REPLACE_VM")] * 4 + [("port_state", "healthy", "NONE")] * 4
        + [("link_downed", "fatal", "REPLACE_VM"),
           ("link_flap", "degraded", "CONTACT_SUPPORT")])
    assert [(w, c) for w, c, _, _ in drill.flap_events()] == [(16, IB_DEGRADED)]


def test_one_or_two_reseats_under_a_hold_down_stay_silent() -> None:
    drill = Drill(held())
    drill.events.clear()
    drill.flap(cycles=1, down=5)
    assert drill.events == [] and blips(drill.runner) == 1
    drill.flap(cycles=1, down=8)
    assert drill.events == [] and absorbed(drill.runner) == 2


def test_an_explicit_fatal_count_wins_over_the_escalation() -> None:
    drill = Drill(held(linkFlapFatalCount=5))
    drill.flap(cycles=4)
    assert [(w, c, s) for w, c, s, _ in drill.flap_events()] == [(16, IB_DEGRADED, "degraded")]
    drill.flap(cycles=1)
    assert drill.flap_events()[1:] == [(28, IB_STATE, "fatal", (
        "Port mlx5_0 port 1: LinkFlap - 5 down/up cycles within 1h (fatal at 5) - "
        "unstable link"))]


def test_only_fatal_outages_the_hold_down_absorbed_escalate() -> None:
    """What the port state already reported, and what is never fatal without the
    hold-down (INIT on InfiniBand, a Subnet Manager's doing), is not escalated."""
    sm = Drill(held())
    sm.flap(via=(INIT,))
    assert blips(sm.runner) == 4 and absorbed(sm.runner) == 0
    assert [(c, s) for _, c, s, _ in sm.flap_events()] == [(IB_DEGRADED, "degraded")]
    long = Drill(held())
    long.events.clear()
    long.flap(cycles=3, down=12)  # each past the hold-down: reported fatal on its own
    assert long.summary().count(("port_state", "fatal", "REPLACE_VM")) == 3
    assert [(c, s) for _, c, s, _ in long.flap_events()] == [(IB_DEGRADED, "degraded")]
    # two absorbed among them are not enough; a third is
    mixed = Drill(held())
    mixed.flap(cycles=1)
    mixed.flap(cycles=1, down=12)
    mixed.flap(cycles=1)
    assert absorbed(mixed.runner) == 2
    assert [(c, s) for _, c, s, _ in mixed.flap_events()] == [(IB_DEGRADED, "degraded")]
    mixed.flap(cycles=1)
    assert [(c, s) for _, c, s, _ in mixed.flap_events()][1:] == [(IB_STATE, "fatal")]


def test_roce_down_then_init_on_the_way_back_is_an_absorbed_outage() -> None:
    drill = Drill(held(), layer="Ethernet")
    drill.flap(cycles=3, down=4, via=(DN, DN, INIT))
    assert blips(drill.runner) == 3 and absorbed(drill.runner) == 3
    assert [(c, s) for _, c, s, _ in drill.flap_events()] == [("EthernetStateCheck", "fatal")]
    # down again from INIT and past the hold-down: reported by its port state, not absorbed
    again = Drill(held(), layer="Ethernet")
    again.events.clear()
    again.flap(cycles=1, down=15, via=(DN, INIT, *[DN] * 13))
    assert ("port_state", "fatal", "REPLACE_VM") in again.summary()
    assert (blips(again.runner), count(again.runner), absorbed(again.runner)) == (1, 1, 0)


def test_a_restart_in_an_outage_keeps_what_it_learnt() -> None:
    """The outage read DOWN before the restart only: the state file says it was fatal."""
    drill = Drill(held())
    drill.flap(cycles=2)
    drill.downed += 1
    drill.poll(DN)
    drill.runner.restart()
    drill.poll(UP)
    assert [(c, s) for _, c, s, _ in drill.flap_events()] == [(IB_STATE, "fatal")]


def test_a_reload_without_the_hold_down_recovers_the_escalated_flap() -> None:
    drill = Drill(held())
    drill.flap()
    drill.runner.config = config()  # the flaps stay counted: the non-fatal flap takes over
    drill.poll(UP)
    assert [(c, s) for _, c, s, _ in drill.flap_events()][1:] == [
        (IB_STATE, "healthy"), (IB_DEGRADED, "degraded")]


def test_a_window_written_by_an_older_nichealthd_loads_with_nothing_absorbed() -> None:
    old = {"link_flaps": {"mlx5_0_1": {
        "device": "mlx5_0", "port": 1, "link_layer": "InfiniBand", "up": True,
        "down_seen": False, "open_downs": 0, "cycles": [["2026-01-01T12:00:10Z", 2]],
        "told": []}}}
    record = LINK_FLAPS.load(old, 1).link_flaps["mlx5_0_1"]
    assert (record.count, record.absorbed, record.outage_fatal) == (2, 0, False)
    assert LINK_FLAPS.load(LINK_FLAPS.dump(LINK_FLAPS.load(old, 1)), 1).link_flaps == {
        "mlx5_0_1": record}


def test_a_hold_down_without_flap_detection_is_warned_about_and_escalates_nothing() -> None:
    off = config(stateHoldDown="10s", linkFlapCount=0)
    assert [n for n in off.notices if "linkFlapCount = 0" in n] == [
        "test.toml: stateHoldDown (10s) with linkFlapCount = 0: an outage shorter than the "
        "hold-down is never reported, however often the link flaps (flap detection is off, "
        "so nothing escalates)"]
    assert not config(stateHoldDown="10s").notices and not config(linkFlapCount=0).notices
    drill = Drill(Runner(cfg=off))
    drill.events.clear()
    drill.flap()
    assert drill.events == [] and blips(drill.runner) == 4


def test_a_flap_count_of_one_escalates_at_two_so_one_reseat_is_not_fatal() -> None:
    drill = Drill(held(linkFlapCount=1))
    drill.flap(cycles=2)
    assert [(w, c, s) for w, c, s, _ in drill.flap_events()] == [
        (4, IB_DEGRADED, "degraded"), (10, IB_STATE, "fatal")]


def blips(runner: Runner) -> int:
    return runner.state.section(LINK_STATE).port_blips.get("mlx5_0_1", 0)


def absorbed(runner: Runner) -> int:
    return runner.state.section(LINK_FLAPS).link_flaps["mlx5_0_1"].absorbed


@pytest.mark.parametrize("layer", ["InfiniBand", "Ethernet"])
def test_a_carrier_up_change_read_a_poll_after_the_state_is_the_same_cycle(layer: str) -> None:
    """nichealthd-sim flap (and a real netdev, whose carrier follows the port) writes ACTIVE
    before the carrier's second change: a poll between the two sees the outage closed by the
    state and, one poll later, an odd carrier delta on a port that reads ACTIVE."""
    runner = Runner()
    runner.poll(host(nic(layer=layer, link_downed=0, carrier_changes=10), when=0))
    runner.poll(host(nic(DN, layer=layer, link_downed=1, carrier_changes=11), when=1))
    runner.poll(host(nic(UP, layer=layer, link_downed=1, carrier_changes=11), when=2))
    runner.poll(host(nic(UP, layer=layer, link_downed=1, carrier_changes=12), when=3))
    runner.poll(host(nic(UP, layer=layer, link_downed=1, carrier_changes=12), when=4))
    assert count(runner) == 1


@pytest.mark.parametrize("layer", ["InfiniBand", "Ethernet"])
def test_a_carrier_down_change_read_a_poll_after_the_state_is_the_same_cycle(layer: str) -> None:
    """The other way round: DOWN read before the carrier's down change, the up change read
    with ACTIVE."""
    runner = Runner()
    runner.poll(host(nic(layer=layer, carrier_changes=10), when=0))
    runner.poll(host(nic(DN, layer=layer, carrier_changes=10), when=1))
    runner.poll(host(nic(DN, layer=layer, carrier_changes=11), when=2))
    runner.poll(host(nic(UP, layer=layer, carrier_changes=12), when=3))
    runner.poll(host(nic(UP, layer=layer, carrier_changes=12), when=4))
    assert count(runner) == 1


def test_two_reseats_whose_carrier_lags_are_two_cycles_and_never_a_flap_event() -> None:
    """With ``linkFlapFatalCount = 3`` the lagging carrier's extra cycle per outage made two
    reseats REPLACE_VM; they are two cycles, below the count."""
    runner = Runner(cfg=config(linkFlapFatalCount=3))
    carrier, when, got = 10, 0, []
    runner.poll(host(nic(layer="Ethernet", carrier_changes=carrier), when=when))
    for _ in range(2):
        for state, change in ((DN, 1), (DN, 0), (UP, 0), (UP, 1), (UP, 0)):
            carrier, when = carrier + change, when + 1
            got += flaps(runner.poll(host(nic(state, "Ethernet", carrier_changes=carrier),
                                          when=when)))
    assert count(runner) == 2 and got == []


def test_a_restart_takes_the_carrier_from_the_port_state_again() -> None:
    """The carrier's parity is volatile, like the values it comes from: a process started
    while the carrier lags the state takes it from the state (first poll: no delta)."""
    runner = Runner()
    runner.poll(host(nic(layer="Ethernet", carrier_changes=10), when=0))
    runner.poll(host(nic(DN, layer="Ethernet", carrier_changes=11), when=1))
    runner.poll(host(nic(UP, layer="Ethernet", carrier_changes=11), when=2))
    runner.restart()
    runner.poll(host(nic(UP, layer="Ethernet", carrier_changes=11), when=3))
    runner.poll(host(nic(UP, layer="Ethernet", carrier_changes=13), when=4))  # one short cycle
    runner.poll(host(nic(UP, layer="Ethernet", carrier_changes=13), when=5))
    assert count(runner) == 2
