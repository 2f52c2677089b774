"""stateHoldDown holds a healthy->unhealthy port edge; a blip publishes nothing."""

from __future__ import annotations

from typing import Any

from nichealthd.core.checks.link_state import LINK_STATE
from nichealthd.core.views import port_records

from .builders import ACTIVE, DISABLED, DOWN, LINKUP, POLLING, Runner, config, device, host, port


def nic(state: str = ACTIVE, phys: str = LINKUP, layer: str = "InfiniBand") -> Any:
    return device("mlx5_0", ports=(port("mlx5_0", state=state, phys=phys, layer=layer,
                                        operstate="up" if layer == "Ethernet" else None),))


def port_events(result: Any) -> list[tuple[str, str]]:
    return [(e.severity, e.message) for e in result.events
            if e.error_code == ("port_state",) and e.entities]


def blips(runner: Runner) -> dict[str, int]:
    return runner.state.section(LINK_STATE).port_blips


def held_runner(seconds: str = "10s") -> Runner:
    runner = Runner(cfg=config(stateHoldDown=seconds))
    runner.poll(host(nic(), when=0))
    return runner


def test_a_blip_inside_the_hold_down_publishes_nothing_and_is_counted() -> None:
    runner = held_runner()
    assert port_events(runner.poll(host(nic(DOWN, DISABLED), when=10))) == []
    assert "mlx5_0_1" in runner.state.section(LINK_STATE).port_holds
    assert port_events(runner.poll(host(nic(), when=12))) == []
    assert blips(runner) == {"mlx5_0_1": 1}
    assert runner.state.section(LINK_STATE).port_holds == {}
    assert runner.last is not None
    record = port_records(host(nic(), when=12), runner.last, runner.state)[0]
    assert (record["blips"], record["held"], record["health"]) == (1, False, "healthy")


def test_an_outage_longer_than_the_hold_down_is_reported_when_it_expires() -> None:
    runner = held_runner()
    assert port_events(runner.poll(host(nic(DOWN, POLLING), when=10))) == []
    assert port_events(runner.poll(host(nic(DOWN, POLLING), when=15))) == []
    # escalation inside the hold is still held; the report says what the port is now
    assert port_events(runner.poll(host(nic(DOWN, DISABLED), when=19.9))) == []
    got = port_events(runner.poll(host(nic(DOWN, DISABLED), when=20)))
    assert got == [("fatal", "Port mlx5_0 port 1: state DOWN, phys_state Disabled - "
                             "no connectivity")]
    # recovery is never held
    assert port_events(runner.poll(host(nic(), when=21))) == [
        ("healthy", "Port mlx5_0 port 1: healthy (ACTIVE, LinkUp)")]
    assert blips(runner) == {}


def test_escalation_and_first_sight_are_not_held() -> None:
    runner = held_runner()
    runner.poll(host(nic(ACTIVE, "6: LinkErrorRecovery"), when=1))
    got = port_events(runner.poll(host(nic(ACTIVE, "6: LinkErrorRecovery"), when=12)))
    assert [s for s, _ in got] == ["degraded"]
    assert [s for s, _ in port_events(runner.poll(host(nic(DOWN, DISABLED), when=13)))] == [
        "fatal"]
    # a port unhealthy at first sight with evidence (its card short of its peers) at once
    peers = [device(f"mlx5_{i}", pci=f"0000:{0x20 + i:02x}:00.0", numa=i % 2,
                    ports=(port(f"mlx5_{i}"),)) for i in range(1, 4)]
    fresh = Runner(cfg=config(stateHoldDown="10s"))
    first = fresh.poll(host(nic(DOWN, DISABLED), *peers, when=0))
    assert ("fatal", "Port mlx5_0 port 1: state DOWN, phys_state Disabled - no connectivity") \
        in port_events(first)


def test_a_restart_during_a_hold_still_reports_the_outage() -> None:
    runner = held_runner()
    runner.poll(host(nic(DOWN, DISABLED), when=10))
    runner.restart()
    got = port_events(runner.poll(host(nic(DOWN, DISABLED), when=25)))
    assert [s for s, _ in got] == ["fatal"]
    # the daemon away for longer than the hold, the port back: the outage and its recovery
    runner = held_runner()
    runner.poll(host(nic(DOWN, DISABLED), when=10))
    runner.restart()
    result = runner.poll(host(nic(), when=40))
    assert [s for s, _ in port_events(result)] == ["fatal", "healthy"]
    fatal, healthy = [e for e in result.events if e.entities]
    assert fatal.generated_at < healthy.generated_at  # dated when the outage began
    assert blips(runner) == {}


def test_roce_init_on_the_way_back_is_not_unhealthy() -> None:
    runner = Runner(cfg=config(stateHoldDown="10s"))
    runner.poll(host(nic(layer="Ethernet"), when=0))
    runner.poll(host(nic(DOWN, POLLING, layer="Ethernet"), when=1))
    runner.poll(host(nic("2: INIT", LINKUP, layer="Ethernet"), when=5))
    runner.poll(host(nic("2: INIT", LINKUP, layer="Ethernet"), when=20))
    assert port_events(runner.poll(host(nic(layer="Ethernet"), when=21))) == []
    assert blips(runner) == {"mlx5_0_1": 1}


def test_the_default_is_today_behaviour() -> None:
    runner = Runner()
    runner.poll(host(nic(), when=0))
    assert [s for s, _ in port_events(runner.poll(host(nic(DOWN, DISABLED), when=1)))] == [
        "fatal"]
    assert [s for s, _ in port_events(runner.poll(host(nic(), when=2)))] == ["healthy"]
    assert blips(runner) == {}


def compute_host(state: str = ACTIVE, phys: str = LINKUP, when: float = 0) -> Any:
    """mlx5_0 and three peers, single-port cards: a down mlx5_0 makes its card short."""
    peers = [device(f"mlx5_{i}", pci=f"0000:{0x20 + i:02x}:00.0", numa=i % 2,
                    ports=(port(f"mlx5_{i}"),)) for i in range(1, 4)]
    return host(nic(state, phys), *peers, when=when)


def test_a_blip_does_not_make_its_card_short_either() -> None:
    runner = Runner(cfg=config(stateHoldDown="10s"))
    runner.poll(compute_host())
    for when in (1, 3, 5):
        result = runner.poll(compute_host(DOWN, DISABLED, when))
        assert [e for e in result.events if e.entities] == [], when
    assert [e for e in runner.poll(compute_host(when=6)).events if e.entities] == []
    assert blips(runner) == {"mlx5_0_1": 1}
    # held past the hold-down: the port's own fatal event, and no card event beside it
    runner.poll(compute_host(DOWN, DISABLED, 10))
    runner.poll(compute_host(DOWN, DISABLED, 15))
    reported = runner.poll(compute_host(DOWN, DISABLED, 20))
    assert [(e.error_code, e.severity) for e in reported.events] == [(("port_state",), "fatal")]
    assert [e.error_code for e in runner.poll(compute_host(DOWN, DISABLED, 21)).events] == []


def counted(state: str = ACTIVE, phys: str = LINKUP, downed: int = 0) -> Any:
    return device("mlx5_0", ports=(port("mlx5_0", state=state, phys=phys,
                                        counters={"link_downed": downed}),))


def test_the_link_downed_rise_of_a_blip_is_held_and_absorbed_with_it() -> None:
    """The blip's own link_downed count is the same outage: no fatal counter breach either."""
    runner = Runner(cfg=config(stateHoldDown="10s"))
    runner.poll(host(counted(), when=0))
    for when in (1, 2):
        assert runner.poll(host(counted(DOWN, POLLING, 1), when=when)).events == ()
    assert runner.poll(host(counted(downed=1), when=3)).events == ()
    assert blips(runner) == {"mlx5_0_1": 1}
    # a later rise without a state edge is a breach as ever
    later = runner.poll(host(counted(downed=2), when=4))
    assert [(e.error_code, e.is_fatal) for e in later.events] == [(("link_downed",), True)]


def test_an_outage_past_the_hold_down_reports_the_state_and_the_counter() -> None:
    runner = Runner(cfg=config(stateHoldDown="10s"))
    runner.poll(host(counted(), when=0))
    assert runner.poll(host(counted(DOWN, POLLING, 1), when=1)).events == ()
    reported = runner.poll(host(counted(DOWN, POLLING, 1), when=11))
    assert sorted((e.error_code[0], e.is_fatal) for e in reported.events) == [
        ("link_downed", True), ("port_state", True)]
