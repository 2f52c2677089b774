"""Every RDMA device gone at once is a driver event, not N hardware failures.

Held for ``driverReloadGrace`` (no event), then one non-fatal event per state check, then
after ``driverReloadTimeout`` per-device disappearance as before. Devices back inside the grace
produce no event but the recoveries their counter resets imply; partial disappearance keeps
the spec's three-poll rule.
"""

from __future__ import annotations

from typing import Any, Optional

from nichealthd.core.checks.link_counters import LINK_COUNTERS
from nichealthd.core.checks.link_state import LINK_STATE
from nichealthd.core.evaluate import CycleResult
from nichealthd.core.model import HostSnapshot

from .builders import Runner, at, config, host
from .test_identity import nic

GONE = "disappeared from /sys/class/infiniband/ - hardware failure"


def fleet(n: int = 4, names: Optional[dict[int, str]] = None,
          counters: Optional[dict[str, Any]] = None, layer: str = "InfiniBand") -> list[Any]:
    return [nic(i, (names or {}).get(i), counters=counters, layer=layer) for i in range(n)]


def empty(when: float, functions: Optional[int] = None) -> HostSnapshot:
    snapshot = host(when=when)
    return HostSnapshot(snapshot.taken_at, snapshot.boot_id, (), True, functions)


def fatal(result: CycleResult) -> list[str]:
    return [e.message for e in result.events if e.is_fatal]


def started(runner: Runner, n: int = 4, **kw: Any) -> Runner:
    runner.poll(host(*fleet(n, **kw), when=0))
    return runner


def test_class_dir_empty_for_ten_polls_then_every_device_back_says_nothing() -> None:
    runner = started(Runner())
    for second in range(1, 11):
        result = runner.poll(empty(second, functions=4))
        assert not result.events, second
    assert runner.state.section(LINK_STATE).driver_event is not None
    back = runner.poll(host(*fleet(), when=11))
    assert not back.events
    links = runner.state.section(LINK_STATE)
    assert links.driver_event is None and not links.device_misses
    assert any("4 of 4 RDMA devices are back" in n for n in back.notes)


def test_every_device_gone_in_one_poll_is_held_without_the_pci_evidence() -> None:
    runner = started(Runner())
    for second in range(1, 30):
        assert not runner.poll(empty(second)).events


def test_after_the_grace_one_non_fatal_host_event_per_check_and_its_close() -> None:
    runner = started(Runner(cfg=config(driverReloadGrace="10s")))
    quiet = [runner.poll(empty(s, functions=4)) for s in range(1, 11)]
    assert not any(r.events for r in quiet)
    told = runner.poll(empty(11, functions=4))
    assert [(e.check_name, e.is_fatal, e.is_healthy, e.recommended_action, e.error_code)
            for e in told.events] == [
        ("InfiniBandStateCheck", False, False, "NONE", ("driver_event",))]
    event = told.events[0]
    assert event.message.startswith("all 4 RDMA devices gone at once: driver unloaded or "
                                    "firmware reset in progress")
    assert [v for _, v in event.entities] == ["mlx5_0", "mlx5_1", "mlx5_2", "mlx5_3"]
    assert not runner.poll(empty(12, functions=4)).events  # said once
    back = runner.poll(host(*fleet(), when=13))
    assert [(e.is_healthy, e.error_code) for e in back.events] == [(True, ("driver_event",))]
    assert back.events[0].entities == event.entities


def test_mixed_layers_get_one_event_under_each_state_check() -> None:
    runner = Runner(cfg=config(driverReloadGrace=0))
    runner.poll(host(*fleet(2), nic(2, layer="Ethernet"), when=0))
    told = runner.poll(empty(1, functions=3))
    assert sorted((e.check_name, len(e.entities)) for e in told.events) == [
        ("EthernetStateCheck", 1), ("InfiniBandStateCheck", 2)]


def test_gone_longer_than_the_timeout_is_per_device_fatal_as_today() -> None:
    cfg = config(driverReloadGrace="10s", driverReloadTimeout="60s")
    runner = started(Runner(cfg=cfg))
    results = [runner.poll(empty(s, functions=4)) for s in range(1, 61)]
    assert not any(fatal(r) for r in results)
    timed_out = runner.poll(empty(61, functions=4))
    assert [(e.is_healthy, e.error_code) for e in timed_out.events[:1]] == [
        (True, ("driver_event",))]  # the host event is closed first
    assert fatal(timed_out) == [f"NIC mlx5_{i} {GONE}" for i in range(4)]
    assert all(e.recommended_action == "REPLACE_VM" for e in timed_out.events if e.is_fatal)
    assert not runner.poll(empty(62, functions=4)).events
    back = runner.poll(host(*fleet(), when=63))  # their return is their recovery
    assert sorted(e.message for e in back.events) == [
        f"NIC mlx5_{i} is present again in /sys/class/infiniband/" for i in range(4)]


def test_partial_disappearance_keeps_the_three_poll_rule() -> None:
    runner = started(Runner())
    polls = [runner.poll(host(*fleet(3), when=s)) for s in (1, 2, 3)]
    assert [fatal(r) for r in polls] == [[], [], [f"NIC mlx5_3 {GONE}"]]


def test_a_single_device_vanishing_is_not_a_driver_event_without_pci_evidence() -> None:
    runner = started(Runner(), n=1)
    polls = [runner.poll(empty(s, functions=0)) for s in (1, 2, 3)]
    assert fatal(polls[2]) == [f"NIC mlx5_0 {GONE}"]
    runner = started(Runner(), n=1)
    polls = [runner.poll(empty(s, functions=1)) for s in (1, 2, 3)]
    assert not any(r.events for r in polls)  # the function is on the bus: the driver left


def test_a_staggered_unload_is_one_driver_event() -> None:
    """One poll catches the unload half-way; the next sees the empty class directory with
    the functions still on the bus."""
    runner = started(Runner())
    assert not runner.poll(host(*fleet(2), when=1)).events
    for second in range(2, 20):
        assert not runner.poll(empty(second, functions=4)).events
    event = runner.state.section(LINK_STATE).driver_event
    assert event is not None
    assert set(event.devices) == {"mlx5_0", "mlx5_1", "mlx5_2", "mlx5_3"}


def test_a_device_that_does_not_come_back_with_the_others_is_judged_by_three_polls() -> None:
    runner = started(Runner())
    for second in range(1, 6):
        runner.poll(empty(second, functions=4))
    polls = [runner.poll(host(*fleet(3), when=s)) for s in (6, 7, 8)]
    assert [fatal(r) for r in polls] == [[], [], [f"NIC mlx5_3 {GONE}"]]


def test_devices_back_under_shifted_names_inside_the_grace() -> None:
    runner = started(Runner(), counters={"link_downed": 0})
    runner.poll(host(*fleet(counters={"link_downed": 1}), when=1))  # latched on every port
    for second in range(2, 8):
        runner.poll(empty(second, functions=4))
    back = runner.poll(host(*fleet(names={i: f"mlx5_{i + 4}" for i in range(4)},
                                   counters={"link_downed": 0}), when=8))
    assert not fatal(back)
    assert sorted(v for e in back.events for t, v in e.entities if t == "NIC") == [
        f"mlx5_{i}" for i in range(4, 8)]  # the counter resets recover the latches
    assert all(e.is_healthy and "recovered" in e.message for e in back.events)
    assert not runner.state.section(LINK_COUNTERS).breach_flags


def test_counters_that_rose_while_the_driver_was_away_start_a_fresh_window() -> None:
    """A reload retrains the links (link_downed +1): not a breach of the running link."""
    runner = started(Runner(), counters={"link_downed": 5, "symbol_error": 100})
    for second in range(1, 5):
        runner.poll(empty(second, functions=4))
    back = runner.poll(host(*fleet(counters={"link_downed": 6, "symbol_error": 900}),
                            when=5))
    assert not back.events
    later = runner.poll(host(*fleet(counters={"link_downed": 7, "symbol_error": 900}),
                             when=6))
    assert len(fatal(later)) == 4  # judged again from the first reading after the return


def test_a_restart_in_the_middle_of_a_reload_keeps_the_clock() -> None:
    runner = started(Runner(cfg=config(driverReloadGrace="10s")))
    for second in range(1, 6):
        runner.poll(empty(second, functions=4))
    runner.restart()
    event = runner.state.section(LINK_STATE).driver_event
    assert event is not None and event.since == at(1)
    quiet = [runner.poll(empty(s, functions=4)) for s in range(6, 11)]
    assert not any(r.events for r in quiet)
    told = runner.poll(empty(11, functions=4))
    assert len(told.events) == 1 and not told.events[0].is_fatal


def test_a_daemon_started_while_every_device_is_gone_holds_them() -> None:
    """The devices vanished while the daemon was stopped: the first poll of the new process
    sees every known device gone at once."""
    runner = started(Runner())
    runner.restart()
    for second in range(100, 110):
        assert not runner.poll(empty(second, functions=4)).events


def test_an_incomplete_enumeration_decides_nothing() -> None:
    runner = started(Runner())
    snapshot = host(when=1, complete=False)
    for second in range(1, 10):
        assert not runner.poll(host(when=second, complete=False)).events
    assert runner.state.section(LINK_STATE).driver_event is None
    assert snapshot.pci_functions is None
