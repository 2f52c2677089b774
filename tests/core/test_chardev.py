"""InfiniBandCharDeviceCheck — uverbs per device, umad per IB port, issm opt-in."""

from __future__ import annotations

from dataclasses import replace
from typing import Any, Optional

from nichealthd.core.checks.chardev import CHAR_DEVICE_CHECK, CHAR_DEVICES
from nichealthd.core.checks.link_section import DriverEvent
from nichealthd.core.checks.link_state import LINK_STATE
from nichealthd.core.evaluate import CycleResult
from nichealthd.core.model import HostSnapshot
from nichealthd.core.state import MonitorState
from nichealthd.sources.adapter_facts import AdapterFacts, CharDevices

from .builders import Runner, at, config, device, host, port

DEVICES = ("mlx5_0", "mlx5_1")


def facts(uverbs: Any = DEVICES, umad: Any = DEVICES, issm: Any = ()) -> AdapterFacts:
    def ports(names: Any) -> Optional[frozenset[tuple[str, int]]]:
        return None if names is None else frozenset((n, 1) for n in names)
    return AdapterFacts(chardevs=CharDevices(
        None if uverbs is None else frozenset(uverbs), ports(umad), ports(issm)))


def snap(when: float, adapter: Optional[AdapterFacts], **kw: Any) -> HostSnapshot:
    devices = [device("mlx5_0", "0000:47:00.0"), device("mlx5_1", "0000:48:00.0")]
    return replace(host(*devices, when=when, **kw), adapter=adapter)


def chardev_events(result: CycleResult) -> list[Any]:
    return [e for e in result.events if e.check_name == CHAR_DEVICE_CHECK and e.entities]


def test_all_present_gives_no_event_and_one_scoped_clear_at_a_fresh_start() -> None:
    runner = Runner()
    first = runner.poll(snap(0, facts()))
    clears = [e for e in first.events if e.check_name == CHAR_DEVICE_CHECK]
    assert len(clears) == 1 and clears[0].is_healthy and clears[0].entities == ()
    for n in range(1, 6):
        assert not [e for e in runner.poll(snap(n, facts())).events
                    if e.check_name == CHAR_DEVICE_CHECK]


def test_a_host_where_nichealthd_never_ran_gets_no_check_wide_clear() -> None:
    """Nothing was reported before the first start on a new host: no clear of this check or
    any other (evaluate's ``earlier``), while the ports' own baselines still come."""
    runner = Runner(earlier=False)
    first = runner.poll(snap(0, facts()))
    assert not [e for e in first.events if not e.entities], first.events
    assert [e.message for e in first.events] == [
        f"Port {name} port 1: healthy (ACTIVE, LinkUp)" for name in DEVICES]
    assert runner.state.section(CHAR_DEVICES).cleared  # and none later either
    runner.restart()
    assert not [e for e in runner.poll(snap(1, facts())).events if not e.entities]
    rebooted = Runner(state=MonitorState(boot_id="boot-2"))  # its state lost or a reboot
    assert sorted(e.check_name for e in rebooted.poll(snap(2, facts())).events
                  if not e.entities) == sorted(  # the EFA checks only where EFA is
        set(config().checks) - {"EFAStateCheck", "EFADegradationCheck"})


def test_umad_missing_three_reads_is_one_fatal_event_latched_until_seen_again() -> None:
    runner = Runner()
    runner.poll(snap(0, facts()))
    assert not chardev_events(runner.poll(snap(1, facts(umad=["mlx5_0"]))))
    assert not chardev_events(runner.poll(snap(2, facts(umad=["mlx5_0"]))))
    third = chardev_events(runner.poll(snap(3, facts(umad=["mlx5_0"]))))
    assert len(third) == 1
    event = third[0]
    assert event.is_fatal and event.recommended_action == "REPLACE_VM"
    assert event.error_code == ("umad",)
    assert event.entities == (("NIC", "mlx5_1"), ("NICPort", "1"))
    assert "umad character device missing from /sys/class/infiniband_mad" in event.message
    for n in range(4, 8):  # latched: no repeat
        assert not chardev_events(runner.poll(snap(n, facts(umad=["mlx5_0"]))))
    back = chardev_events(runner.poll(snap(8, facts())))
    assert len(back) == 1 and back[0].is_healthy and back[0].error_code == ("umad",)
    assert back[0].entities == event.entities


def test_polls_without_adapter_facts_neither_count_nor_reset() -> None:
    runner = Runner()
    runner.poll(snap(0, facts()))
    runner.poll(snap(1, facts(uverbs=["mlx5_0"])))
    runner.poll(snap(2, None))
    runner.poll(snap(3, facts(uverbs=["mlx5_0"])))
    third = chardev_events(runner.poll(snap(4, facts(uverbs=["mlx5_0"]))))
    assert [e.error_code for e in third] == [("uverbs",)]
    assert third[0].entities == (("NIC", "mlx5_1"),)


def test_a_present_read_in_between_starts_the_count_again() -> None:
    runner = Runner()
    for n, umad in enumerate([DEVICES, ["mlx5_0"], ["mlx5_0"], DEVICES, ["mlx5_0"],
                              ["mlx5_0"]]):
        assert not chardev_events(runner.poll(snap(n, facts(umad=umad))))


def test_a_class_directory_absent_is_uncertain_no_event() -> None:
    runner = Runner()
    runner.poll(snap(0, facts()))
    for n in range(1, 10):
        result = runner.poll(snap(n, facts(uverbs=None, umad=None, issm=None)))
        assert not chardev_events(result)
    assert not runner.state.section(CHAR_DEVICES).latched


def test_issm_is_not_expected_unless_asked_for() -> None:
    runner = Runner()
    for n in range(5):
        assert not chardev_events(runner.poll(snap(n, facts(issm=()))))
    runner = Runner(cfg=config(charDeviceIssm=True))
    got = [e for n in range(5) for e in chardev_events(runner.poll(snap(n, facts(issm=()))))]
    assert sorted(e.entities[0][1] for e in got) == ["mlx5_0", "mlx5_1"]
    assert {e.error_code for e in got} == {("issm",)}


def test_ethernet_ports_need_no_umad() -> None:
    runner = Runner()
    roce = device("mlx5_0", ports=(port("mlx5_0", layer="Ethernet"),))
    for n in range(5):
        snapshot = replace(host(roce, when=n), adapter=facts(uverbs=["mlx5_0"], umad=()))
        assert not chardev_events(runner.poll(snapshot))


def test_no_verdict_while_a_driver_reload_is_in_progress() -> None:
    state = MonitorState(boot_id="boot-1")
    links = state.section(LINK_STATE).copy()
    links.driver_event = DriverEvent(at(0), ("mlx5_2",))
    state.sections[LINK_STATE.id] = links
    runner = Runner(state=state, baseline=False)
    for n in range(1, 6):
        assert not chardev_events(runner.poll(snap(n, facts(uverbs=(), umad=()))))
    assert not runner.state.section(CHAR_DEVICES).misses


def test_latched_conditions_survive_a_restart_and_follow_a_rename() -> None:
    runner = Runner()
    for n in range(4):
        runner.poll(snap(n, facts(umad=["mlx5_0"])))
    runner.restart()
    assert "mlx5_1:1:umad" in runner.state.section(CHAR_DEVICES).latched
    renamed = CHAR_DEVICES.rename(runner.state.section(CHAR_DEVICES), {"mlx5_1": "mlx5_9"},
                                  at(5))
    assert list(renamed.latched) == ["mlx5_9:1:umad"]
    assert not chardev_events(runner.poll(snap(5, facts(umad=["mlx5_0"]))))
