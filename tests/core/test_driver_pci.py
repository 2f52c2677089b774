"""A device gone while its PCI function stays on the bus is a driver event (core/checks/driver.py).

The figures of real reproductions: an unload that empties the class directory a third
at a time, 1.1 s apart; one card's firmware reset (gone 30 s, back at the same address); a
function unbound for good (REPLACE_VM after ``driverReloadTimeout``); a NIC off the bus
(REPLACE_VM at the third poll, as before).
"""

from __future__ import annotations

from dataclasses import replace
from typing import Iterable, Optional

from nichealthd.core.checks.link_state import LINK_STATE
from nichealthd.core.evaluate import CycleResult
from nichealthd.core.model import DeviceSnapshot, HostSnapshot

from .builders import Runner, config, host
from .test_identity import nic

GONE = "disappeared from /sys/class/infiniband/ - hardware failure"


def address(index: int) -> str:
    return f"0000:{0x10 + index:02x}:00.0"


def seen(devices: Iterable[DeviceSnapshot], when: float,
         bus: Optional[Iterable[int]] = None) -> HostSnapshot:
    """A poll of ``devices``; ``bus``: the indexes of the functions listed on the PCI bus
    (None: the bus was not listed)."""
    snapshot = host(*devices, when=when)
    if bus is None:
        return snapshot
    return replace(snapshot, pci_bus=frozenset(address(i) for i in bus))


def fleet(indexes: Iterable[int]) -> list[DeviceSnapshot]:
    return [nic(i) for i in indexes]


def fatal(result: CycleResult) -> list[str]:
    return [e.message for e in result.events if e.is_fatal]


def started(n: int, **cfg: str) -> Runner:
    runner = Runner(cfg=config(**cfg))
    runner.poll(seen(fleet(range(n)), 0))
    return runner


def test_an_unload_that_takes_three_seconds_is_one_driver_event() -> None:
    """12 devices leave four at a time, 1.1 s apart, polled every second: no device is
    judged; one non-fatal event names all twelve after the grace; their return closes it."""
    runner = started(12, driverReloadGrace="10s")
    everything = range(12)
    polls = [runner.poll(seen(fleet(range(8, 12)), 1, bus=everything)),
             runner.poll(seen(fleet(range(8, 12)), 2, bus=everything)),
             runner.poll(seen(fleet(()), 3, bus=everything))]
    polls += [runner.poll(seen(fleet(()), s, bus=everything)) for s in range(4, 11)]
    assert not any(r.events for r in polls)
    event = runner.state.section(LINK_STATE).driver_event
    assert event is not None and len(event.devices) == 12
    told = runner.poll(seen(fleet(()), 11, bus=everything))
    assert [(e.is_fatal, e.is_healthy, e.error_code, len(e.entities)) for e in told.events] == [
        (False, False, ("driver_event",), 12)]
    assert told.events[0].message.startswith(
        "all 12 RDMA devices gone at once: driver unloaded or firmware reset in progress")
    assert not runner.poll(seen(fleet(()), 12, bus=everything)).events  # said once
    back = runner.poll(seen(fleet(everything), 13))
    assert [(e.is_healthy, e.error_code, len(e.entities)) for e in back.events] == [
        (True, ("driver_event",), 12)]
    assert runner.state.section(LINK_STATE).driver_event is None


def test_without_the_bus_the_same_unload_still_judges_the_first_third() -> None:
    """The limit of the whole-driver evidence alone (a host whose bus cannot be listed): the
    devices gone three polls before the class directory empties are judged."""
    runner = started(12)
    polls = [runner.poll(seen(fleet(range(4, 12)), 1)),
             runner.poll(seen(fleet(range(8, 12)), 2)),
             runner.poll(seen(fleet(range(8, 12)), 3))]
    assert [len(fatal(r)) for r in polls] == [0, 0, 4]


def test_a_firmware_reset_of_one_card_is_silent() -> None:
    """One card gone 30 s, its function on the bus, back at the same address: nothing but
    what its counters' reset implies (here nothing)."""
    runner = started(8)
    others = [i for i in range(8) if i != 3]
    gone = [runner.poll(seen(fleet(others), s, bus=range(8))) for s in range(1, 31)]
    assert not any(r.events for r in gone)
    assert runner.state.section(LINK_STATE).driver_event is not None
    back = runner.poll(seen(fleet(range(8)), 31))
    assert not back.events
    links = runner.state.section(LINK_STATE)
    assert links.driver_event is None and not links.device_misses
    assert not links.missing_devices


def test_one_card_held_past_the_grace_is_reported_by_name() -> None:
    runner = started(8, driverReloadGrace="20s")
    others = [i for i in range(8) if i != 5]
    polls = [runner.poll(seen(fleet(others), s, bus=range(8))) for s in range(1, 22)]
    events = [e for r in polls for e in r.events]
    assert [(e.is_fatal, e.error_code, e.entities) for e in events] == [
        (False, ("driver_event",), (("NIC", "mlx5_5"),))]
    assert events[0].message.startswith("1 of 8 RDMA devices gone while their PCI functions "
                                        "stay on the bus")


def test_a_function_unbound_for_good_is_replace_vm_after_the_timeout() -> None:
    runner = started(4, driverReloadGrace="10s", driverReloadTimeout="60s")
    polls = [runner.poll(seen(fleet(range(3)), s, bus=range(4))) for s in range(1, 61)]
    assert not any(fatal(r) for r in polls)
    judged = runner.poll(seen(fleet(range(3)), 61, bus=range(4)))
    assert [(e.is_healthy, e.error_code) for e in judged.events] == [
        (True, ("driver_event",)), (False, ("device_missing",))]
    assert fatal(judged) == [f"NIC mlx5_3 {GONE}"]
    assert judged.events[1].recommended_action == "REPLACE_VM"
    assert not runner.poll(seen(fleet(range(3)), 62, bus=range(4))).events


def test_an_unload_seen_half_way_times_out_in_the_order_the_devices_left() -> None:
    """Each held device has its own timeout from the poll it left in: the two seen gone a
    poll earlier are judged a poll earlier; the event closes when the last one leaves it,
    before that poll's verdicts."""
    runner = started(4, driverReloadGrace="10s", driverReloadTimeout="60s")
    runner.poll(seen(fleet(range(2, 4)), 1, bus=range(4)))
    polls = [runner.poll(seen(fleet(()), s, bus=range(4))) for s in range(2, 61)]
    assert not any(fatal(r) for r in polls)
    first = runner.poll(seen(fleet(()), 61, bus=range(4)))
    assert [(e.is_healthy, e.error_code) for e in first.events] == [
        (False, ("device_missing",))] * 2
    assert fatal(first) == [f"NIC mlx5_{i} {GONE}" for i in (0, 1)]
    last = runner.poll(seen(fleet(()), 62, bus=range(4)))
    assert [(e.is_healthy, e.error_code) for e in last.events] == [
        (True, ("driver_event",)), (False, ("device_missing",)), (False, ("device_missing",))]
    assert fatal(last) == [f"NIC mlx5_{i} {GONE}" for i in (2, 3)]


def test_a_nic_off_the_bus_is_replace_vm_at_the_third_poll() -> None:
    runner = started(4)
    polls = [runner.poll(seen(fleet(range(3)), s, bus=range(3))) for s in (1, 2, 3)]
    assert [fatal(r) for r in polls] == [[], [], [f"NIC mlx5_3 {GONE}"]]
    assert runner.state.section(LINK_STATE).driver_event is None


def test_every_nic_off_the_bus_at_once_is_not_a_driver_event() -> None:
    """A PCIe switch that died takes its NICs off the bus: the bus says so, whatever the
    class directory shows."""
    runner = started(2)
    polls = [runner.poll(seen(fleet(()), s, bus=())) for s in (1, 2, 3)]
    assert sorted(fatal(polls[2])) == [f"NIC mlx5_{i} {GONE}" for i in range(2)]


def test_a_held_device_whose_function_leaves_the_bus_gets_three_polls_from_then() -> None:
    runner = started(4)
    for second in range(1, 20):  # firmware reset in progress, function on the bus
        assert not runner.poll(seen(fleet(range(3)), second, bus=range(4))).events
    polls = [runner.poll(seen(fleet(range(3)), s, bus=range(3))) for s in (20, 21, 22)]
    assert [fatal(r) for r in polls] == [[], [], [f"NIC mlx5_3 {GONE}"]]


def test_devices_leaving_over_several_polls_join_one_event() -> None:
    runner = started(6, driverReloadGrace="30s")
    runner.poll(seen(fleet(range(1, 6)), 1, bus=range(6)))
    runner.poll(seen(fleet(range(2, 6)), 5, bus=range(6)))
    event = runner.state.section(LINK_STATE).driver_event
    assert event is not None and event.devices == ("mlx5_0", "mlx5_1")
    assert event.left_at("mlx5_0") < event.left_at("mlx5_1")
    told = runner.poll(seen(fleet(range(2, 6)), 31, bus=range(6)))
    assert [len(e.entities) for e in told.events] == [2]  # both named in one event
    # A device that leaves after the report is named once its own grace is over.
    runner.poll(seen(fleet(range(3, 6)), 32, bus=range(6)))
    assert not runner.poll(seen(fleet(range(3, 6)), 61, bus=range(6))).events
    late = runner.poll(seen(fleet(range(3, 6)), 62, bus=range(6)))
    assert [e.entities for e in late.events] == [(("NIC", "mlx5_2"),)]
    # One comes back: the others stay held (their functions are on the bus).
    runner.poll(seen(fleet((0, 3, 4, 5)), 63, bus=range(6)))
    event = runner.state.section(LINK_STATE).driver_event
    assert event is not None and event.devices == ("mlx5_1", "mlx5_2")
    closed = runner.poll(seen(fleet(range(6)), 64))
    assert [(e.is_healthy, len(e.entities)) for e in closed.events] == [(True, 3)]


def test_a_restart_keeps_each_devices_own_clock() -> None:
    runner = started(4, driverReloadGrace="10s", driverReloadTimeout="60s")
    runner.poll(seen(fleet(range(1, 4)), 1, bus=range(4)))
    runner.poll(seen(fleet(range(2, 4)), 30, bus=range(4)))
    runner.restart()
    event = runner.state.section(LINK_STATE).driver_event
    assert event is not None and event.left_at("mlx5_1") > event.left_at("mlx5_0")
    first = runner.poll(seen(fleet(range(2, 4)), 61, bus=range(4)))
    assert fatal(first) == [f"NIC mlx5_0 {GONE}"]
    assert not fatal(runner.poll(seen(fleet(range(2, 4)), 89, bus=range(4))))
    second = runner.poll(seen(fleet(range(2, 4)), 90, bus=range(4)))
    assert fatal(second) == [f"NIC mlx5_1 {GONE}"]


def test_a_state_file_of_before_holds_every_device_since_the_start() -> None:
    """``left`` and ``told`` absent (an older nichealthd wrote the file)."""
    runner = started(2, driverReloadGrace="10s")
    for second in range(1, 12):
        runner.poll(seen(fleet(()), second, bus=range(2)))
    data = runner.state.to_json()
    assert data["driver_event"]["told"] == ["mlx5_0", "mlx5_1"]
    del data["driver_event"]["left"], data["driver_event"]["told"]
    runner.state = type(runner.state).from_json(data)
    event = runner.state.section(LINK_STATE).driver_event
    assert event is not None and event.told == ("mlx5_0", "mlx5_1")
    assert not runner.poll(seen(fleet(()), 12, bus=range(2))).events
    back = runner.poll(seen(fleet(range(2)), 13))
    assert [(e.is_healthy, len(e.entities)) for e in back.events] == [(True, 2)]


# ------------------------------------------------- one card gone while its peers stay

CARD_RESET = 150  # the default cardResetTimeout


def test_one_card_unbound_for_good_while_its_peers_stay_is_replace_vm_within_3_minutes() -> None:
    runner = started(8)
    others = [i for i in range(8) if i != 3]
    polls = [runner.poll(seen(fleet(others), s, bus=range(8))) for s in range(1, 1 + CARD_RESET)]
    assert not any(fatal(r) for r in polls)
    judged = runner.poll(seen(fleet(others), 1 + CARD_RESET, bus=range(8)))
    assert fatal(judged) == [f"NIC mlx5_3 {GONE}"]
    assert judged.events[-1].recommended_action == "REPLACE_VM"
    assert runner.state.section(LINK_STATE).driver_event is None


def test_a_90_second_firmware_reset_of_one_card_is_not_fatal() -> None:
    runner = started(8)
    others = [i for i in range(8) if i != 6]
    polls = [runner.poll(seen(fleet(others), s, bus=range(8))) for s in range(1, 91)]
    polls.append(runner.poll(seen(fleet(range(8)), 91)))
    assert not any(r.events for r in polls)
    assert runner.state.section(LINK_STATE).driver_event is None


def test_every_device_gone_together_keeps_the_driver_timeout_however_slow_the_return() -> None:
    """A driver reload whose probes bring one device back every 40 s: the ones still gone
    are the driver's, not single cards, even once peers are back."""
    runner = started(8)
    polls = [runner.poll(seen(fleet(()), s, bus=range(8))) for s in range(1, 60)]
    for second in range(60, 400):
        polls.append(runner.poll(seen(fleet(range(min(8, (second - 60) // 40 + 1))), second,
                                      bus=range(8))))
    assert not any(fatal(r) for r in polls)
    assert runner.state.section(LINK_STATE).driver_event is None


def test_an_unload_that_starts_with_one_card_is_the_drivers() -> None:
    """The first device leaves alone; the rest follow seconds later: the whole driver's,
    and the long timeout for every device, the first one included."""
    runner = started(4)
    runner.poll(seen(fleet(range(1, 4)), 1, bus=range(4)))
    event = runner.state.section(LINK_STATE).driver_event
    assert event is not None and event.alone == ("mlx5_0",)
    runner.poll(seen(fleet(()), 3, bus=range(4)))
    event = runner.state.section(LINK_STATE).driver_event
    assert event is not None and event.alone == ()
    polls = [runner.poll(seen(fleet(()), s, bus=range(4))) for s in range(4, 600)]
    assert not any(fatal(r) for r in polls)
    # Then the others return and mlx5_0 does not: still the driver's timeout (15 min).
    polls = [runner.poll(seen(fleet(range(1, 4)), s, bus=range(4))) for s in range(600, 900)]
    assert not any(fatal(r) for r in polls)
    assert fatal(runner.poll(seen(fleet(range(1, 4)), 901, bus=range(4)))) == [
        f"NIC mlx5_0 {GONE}"]


def test_two_cards_reset_one_after_the_other_each_get_their_own_clock() -> None:
    runner = started(8)
    runner.poll(seen(fleet([i for i in range(8) if i != 1]), 1, bus=range(8)))
    rest = [i for i in range(8) if i not in (1, 2)]
    polls = [runner.poll(seen(fleet(rest), s, bus=range(8))) for s in range(60, 1 + CARD_RESET)]
    assert not any(fatal(r) for r in polls)
    first = runner.poll(seen(fleet(rest), 1 + CARD_RESET, bus=range(8)))
    assert fatal(first) == [f"NIC mlx5_1 {GONE}"]
    assert not any(fatal(runner.poll(seen(fleet(rest), s, bus=range(8))))
                   for s in range(2 + CARD_RESET, 60 + CARD_RESET))
    assert fatal(runner.poll(seen(fleet(rest), 60 + CARD_RESET, bus=range(8)))) == [
        f"NIC mlx5_2 {GONE}"]


def test_the_card_timeout_survives_a_restart_and_is_capped_by_the_driver_timeout() -> None:
    runner = started(4, driverReloadGrace="10s", driverReloadTimeout="60s")
    runner.poll(seen(fleet(range(3)), 1, bus=range(4)))
    runner.restart()
    event = runner.state.section(LINK_STATE).driver_event
    assert event is not None and event.alone == ("mlx5_3",)
    assert not fatal(runner.poll(seen(fleet(range(3)), 60, bus=range(4))))
    assert fatal(runner.poll(seen(fleet(range(3)), 61, bus=range(4)))) == [f"NIC mlx5_3 {GONE}"]
    shorter = started(4, cardResetTimeout="30s")
    assert not any(fatal(shorter.poll(seen(fleet(range(3)), s, bus=range(4))))
                   for s in range(1, 31))
    assert fatal(shorter.poll(seen(fleet(range(3)), 31, bus=range(4)))) == [f"NIC mlx5_3 {GONE}"]
