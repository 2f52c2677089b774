"""The pure rules of Slurm draining: which events drain, which resume, the reason text."""

from __future__ import annotations

from datetime import datetime, timezone

from nichealthd.core.events import HealthEvent, device_entities, make_event, port_entities
from nichealthd.surfaces.slurm.decide import (
    DRAIN,
    REASON_MAX,
    RESUME,
    Condition,
    DrainRecord,
    clears,
    current_reason,
    decide,
    reason_for,
)

T0 = datetime(2026, 11, 27, tzinfo=timezone.utc)
STATE = "InfiniBandStateCheck"
DEGRADATION = "InfiniBandDegradationCheck"


def event(check: str = STATE, *, fatal: bool = False, healthy: bool = False,
          device: str = "mlx5_0", port: int = 1, code: str = "port_state",
          message: str = "") -> HealthEvent:
    text = message or f"Port {device} port {port}: state DOWN, phys_state Polling - no connectivity"
    return make_event(check, fatal=fatal, healthy=healthy, message=text, error_code=code,
                      entities=port_entities(device, port), at=T0)


def down(device: str = "mlx5_0", port: int = 1) -> HealthEvent:
    return event(fatal=True, device=device, port=port)


def up(device: str = "mlx5_0", port: int = 1) -> HealthEvent:
    return event(healthy=True, device=device, port=port,
                 message=f"Port {device} port {port}: healthy (ACTIVE, LinkUp)")


def drained_by_us(*events: HealthEvent) -> DrainRecord:
    record = DrainRecord("node-a")
    for e in events:
        decision = decide(record, e, resume=True)
        record = decision.record
    return DrainRecord("node-a", reason_for(events[0]), record.conditions)


def test_a_fatal_event_drains_with_its_reason() -> None:
    decision = decide(DrainRecord("node-a"), down(), resume=True)
    assert decision.action == DRAIN
    assert decision.reason == ("nichealthd: mlx5_0 1: state DOWN, phys_state Polling - "
                               "no connectivity")
    assert [c.label() for c in decision.record.conditions] == \
        ["InfiniBandStateCheck mlx5_0/1 port_state"]


def test_degraded_events_never_drain() -> None:
    record = DrainRecord("node-a")
    degraded = event(DEGRADATION, code="symbol_error", message="Port mlx5_0 port 1: symbol_error")
    assert decide(record, degraded, resume=True) == decide(record, degraded, resume=False)
    assert decide(record, degraded, resume=True).action == ""
    assert decide(record, degraded, resume=True).record == record


def test_the_same_condition_twice_is_held_once() -> None:
    record = decide(DrainRecord("node-a"), down(), resume=True).record
    again = decide(record, down(), resume=True)
    assert again.action == DRAIN  # the executor finds the drain held and runs nothing
    assert len(again.record.conditions) == 1


def test_resume_only_once_every_condition_recovered() -> None:
    record = drained_by_us(down("mlx5_0"), down("mlx5_3"))
    first = decide(record, up("mlx5_0"), resume=True)
    assert first.action == "" and len(first.record.conditions) == 1
    last = decide(first.record, up("mlx5_3"), resume=True)
    assert (last.action, last.reason) == (RESUME, record.reason)
    assert last.record == DrainRecord("node-a")


def test_no_resume_when_off_or_when_no_drain_is_held() -> None:
    record = drained_by_us(down())
    off = decide(record, up(), resume=False)
    assert off.action == "" and not off.record.conditions and off.record.reason == record.reason
    not_ours = decide(DrainRecord("node-a", "", record.conditions), up(), resume=True)
    assert not_ours.action == "" and not not_ours.record.conditions


def test_a_healthy_event_of_another_identity_clears_nothing() -> None:
    record = drained_by_us(down())
    for other in (up("mlx5_1"), up(port=2), event(DEGRADATION, healthy=True, code="port_state"),
                  event(healthy=True, code="link_downed")):
        decision = decide(record, other, resume=True)
        assert decision.action == "" and decision.record == record, other


def test_the_platforms_matching_rule() -> None:
    condition = Condition(STATE, port_entities("mlx5_0", 1), ("port_state",), "r")
    clear_all = HealthEvent(STATE, False, True, "clear", "NONE", (), (), T0)
    assert clears(clear_all, condition)  # no entities: every condition of the check
    device_only = make_event(STATE, fatal=False, healthy=True, message="m",
                             error_code="port_state", entities=device_entities("mlx5_0"), at=T0)
    assert clears(device_only, condition)  # the condition carries all of its entities
    assert not clears(up("mlx5_0", 2), condition)


def test_reason_text_is_one_short_line_without_double_quotes() -> None:
    long = event(fatal=True, message="Port mlx5_0 port 1: " + 'a "quoted"\nline; ' * 40)
    reason = reason_for(long)
    assert len(reason) == REASON_MAX and reason.endswith("...")
    assert reason.startswith("nichealthd: mlx5_0 1: a 'quoted' line, a ")
    assert "\n" not in reason and '"' not in reason
    device = make_event(STATE, fatal=True, healthy=False, message="mlx5_2: device disappeared",
                        error_code="device_missing", entities=device_entities("mlx5_2"), at=T0)
    assert reason_for(device) == "nichealthd: mlx5_2: device disappeared"
    host = HealthEvent(STATE, True, False, "all ports of a card down", "REPLACE_VM", (), (), T0)
    assert reason_for(host) == "nichealthd: all ports of a card down"


def test_current_reason_from_sinfo_and_scontrol() -> None:
    assert current_reason("none\n") is None
    assert current_reason("") is None
    assert current_reason("nichealthd: mlx5_0 1: x; y\n") == "nichealthd: mlx5_0 1: x; y"
    shown = ("NodeName=n1 Arch=x86_64\n   State=IDLE+DRAIN ThreadsPerCore=1\n"
             "   Reason=admin work [root@2026-11-27T01:19:25]\n")
    assert current_reason(shown) == "admin work"
    assert current_reason("NodeName=n1 Arch=x86_64\n   State=IDLE\n") is None
