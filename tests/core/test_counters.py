"""link-counter-detection §6.3 / §10.4 counter rules on the pure evaluator, with injected clock."""

from __future__ import annotations

import json
import random
from dataclasses import replace
from typing import Any

import pytest

from nichealthd.core.checks import counters
from nichealthd.core.checks.counter_section import BreachFlag, CounterSection, CounterSnap
from nichealthd.core.checks.counters import urgent_counter_change
from nichealthd.core.checks.link_counters import LINK_COUNTERS
from nichealthd.core.config import CHAR_DEVICE_CHECK, EFA_DEGRADATION_CHECK, EFA_STATE_CHECK
from nichealthd.core.evaluate import PollMemory
from nichealthd.core.model import ABSENT, CounterKind, Unreadable
from nichealthd.core.state import MonitorState
from nichealthd.sources.sysfs import PMA_WIDTHS

from .builders import (
    Runner,
    at,
    config,
    counters_port,
    device,
    host,
    non_baseline,
    port,
)


def poll(runner: Runner, when: float, layer: str = "InfiniBand", **values: object):
    """One poll of mlx5_0 port 1; like the reader, both symbol_error entries see one file."""
    if "symbol_error" in values:
        values.setdefault("symbol_error_fatal", values["symbol_error"])
    return runner.poll(host(device(ports=(counters_port(dict(values), layer=layer),)),
                            when=when))


def test_first_poll_after_reboot_sends_clears_then_baselines() -> None:
    runner = Runner()
    result = poll(runner, 0, link_downed=0, symbol_error=5)
    clears = [e for e in result.events if not e.entities]
    # The EFA checks are cleared only on a host with an EFA device; the character
    # device check by its own family, with its first adapter read (none here).
    assert [e.check_name for e in clears] == sorted(
        set(config().checks) - {EFA_STATE_CHECK, EFA_DEGRADATION_CHECK, CHAR_DEVICE_CHECK})
    assert all(e.is_healthy and e.generated_at < at(0) for e in clears)
    assert result.events[: len(clears)] == tuple(clears)  # clears come first
    baselines = [e for e in result.events if "after reboot" in e.message]
    names = sorted(e.error_code[0] for e in baselines)
    assert names == ["link_downed", "symbol_error", "symbol_error_fatal"]
    ld = next(e for e in baselines if e.error_code == ("link_downed",))
    assert ld.message == "Counter link_downed healthy after reboot on port mlx5_0 port 1"
    # Every counter files under the degradation check, a fatal one too (counters.CheckNames)
    assert ld.check_name == "InfiniBandDegradationCheck" and ld.is_healthy and not ld.is_fatal
    se = next(e for e in baselines if e.error_code == ("symbol_error",))
    assert se.check_name == "InfiniBandDegradationCheck"
    assert ld.entities == (("NIC", "mlx5_0"), ("NICPort", "1"))


def test_admin_reset_timeline_of_spec_6_4() -> None:
    runner = Runner()
    poll(runner, 0, link_downed=0)
    breach = poll(runner, 5, link_downed=1)
    assert len(breach.events) == 1
    event = breach.events[0]
    # Fatal (REPLACE_VM) under the degradation check, as NVSentinel's monitor files it: a
    # port-state recovery under the state check must not clear it while it is latched.
    assert (event.check_name, event.is_fatal, event.is_healthy) == (
        "InfiniBandDegradationCheck", True, False)
    assert event.recommended_action == "REPLACE_VM"
    assert event.error_code == ("link_downed",)
    assert event.message == ("Port mlx5_0 port 1: link_downed - Port Training State Machine "
                             "failed - QP disconnect (value=1, delta=1, rate=0.20/sec)")
    assert poll(runner, 10, link_downed=1).events == ()
    recovery = poll(runner, 20, link_downed=0)
    assert len(recovery.events) == 1
    rec = recovery.events[0]
    assert (rec.is_healthy, rec.is_fatal, rec.recommended_action) == (True, False, "NONE")
    assert rec.check_name == "InfiniBandDegradationCheck"  # the breach's own name
    assert rec.message == "Counter link_downed recovered on port mlx5_0 port 1"
    assert poll(runner, 25, link_downed=0).events == ()
    assert "mlx5_0:1:link_downed" not in runner.state.section(LINK_COUNTERS).breach_flags


def test_latched_breach_stays_silent_while_counter_keeps_rising() -> None:
    # Flap detection off: each rise of link_downed is also a down/up cycle shorter than a
    # poll, and 3 within an hour are a flap (tests/core/test_link_flaps.py).
    runner = Runner(config(linkFlapCount=0))
    poll(runner, 0, link_downed=0)
    assert len(poll(runner, 1, link_downed=1).events) == 1
    for second in range(2, 6):
        assert poll(runner, second, link_downed=second).events == ()


def test_restart_between_breach_and_reset_still_recovers() -> None:
    runner = Runner(config(linkFlapCount=0))  # link_downed +3: also 3 short flaps
    poll(runner, 0, link_downed=0)
    poll(runner, 5, link_downed=3)
    runner.restart()  # lastPollValue is gone; the persisted snapshot stands in
    recovery = poll(runner, 20, link_downed=0)
    assert [e.is_healthy for e in recovery.events] == [True]
    assert recovery.events[0].check_name == "InfiniBandDegradationCheck"


def test_reset_without_breach_is_silent_and_rebaselines() -> None:
    runner = Runner()
    poll(runner, 0, symbol_error=1000)
    assert poll(runner, 1, symbol_error=5).events == ()
    assert (runner.state.section(LINK_COUNTERS).counter_snapshots["mlx5_0:1:symbol_error"]
            == CounterSnap(5, at(1)))


def test_delta_threshold_is_strictly_greater() -> None:
    runner = Runner()
    poll(runner, 0, carrier_changes=10)
    assert poll(runner, 1, carrier_changes=12).events == ()  # delta 2 is not > 2
    event = poll(runner, 2, carrier_changes=15).events[0]  # delta 3
    assert event.check_name == "InfiniBandDegradationCheck" and not event.is_fatal
    assert event.recommended_action == "NONE"
    assert "(value=15, delta=3, rate=3.00/sec)" in event.message


def test_velocity_waits_for_the_window_and_never_extrapolates() -> None:
    runner = Runner()
    poll(runner, 0, link_error_recovery=0)
    # 6 retrains in 30 s would extrapolate to 12/min, but the 1-minute window is not full.
    assert poll(runner, 30, link_error_recovery=6).events == ()
    assert (runner.state.section(LINK_COUNTERS).counter_snapshots[
        "mlx5_0:1:link_error_recovery"].value == 0)
    event = poll(runner, 60, link_error_recovery=6).events[0]  # 6 per minute > 5
    assert "rate=6.00/min" in event.message


def test_velocity_rate_is_computed_over_the_real_elapsed_time() -> None:
    runner = Runner()
    poll(runner, 0, link_error_recovery=0)
    # 9 in 120 s = 4.5/min: below 5/min although 9 > 5 in absolute terms.
    assert poll(runner, 120, link_error_recovery=9).events == ()
    event = poll(runner, 180, link_error_recovery=15).events[0]  # 6 in the next minute
    assert "delta=6, rate=6.00/min" in event.message


def test_a_filling_velocity_window_shows_the_last_full_windows_figures() -> None:
    runner = Runner()
    poll(runner, 0, link_error_recovery=0)
    poll(runner, 60, link_error_recovery=3)  # a full minute: 3 per minute
    key = "mlx5_0:1:link_error_recovery"
    assert runner.last is not None and runner.last.observations[key] == (3, 3, 3.0)
    for second in (61, 90):  # the next window fills: the value is current, the rate carried
        poll(runner, second, link_error_recovery=4)
        assert runner.last.observations[key] == (4, 3, 3.0)


def test_two_tier_symbol_error() -> None:
    runner = Runner()
    poll(runner, 0, symbol_error=0)
    fast = poll(runner, 1, symbol_error=50)  # 50/s > 10/s, only 50 in the hour window
    assert [e.error_code for e in fast.events] == [("symbol_error",)]
    assert not fast.events[0].is_fatal
    # An hour after the baseline: 200 in 3600 s > 120/hour -> fatal tier.
    slow = poll(runner, 3600, symbol_error=200)
    codes = [e.error_code for e in slow.events]
    assert ("symbol_error_fatal",) in codes
    fatal = next(e for e in slow.events if e.error_code == ("symbol_error_fatal",))
    assert fatal.is_fatal and fatal.check_name == "InfiniBandDegradationCheck"
    assert "rate=200.00/hour" in fatal.message


def test_hour_old_persisted_snapshot_fires_only_the_fatal_tier() -> None:
    state = MonitorState(boot_id="boot-1")
    state.section(LINK_COUNTERS).counter_snapshots["mlx5_0:1:symbol_error_fatal"] = CounterSnap(
        100, at(0))
    state.section(LINK_COUNTERS).counter_snapshots["mlx5_0:1:symbol_error"] = CounterSnap(
        100, at(0))
    runner = Runner(state=state, baseline=False)
    result = poll(runner, 3600, symbol_error=300)
    assert [e.error_code for e in result.events] == [("symbol_error_fatal",)]


def test_velocity_window_survives_a_restart() -> None:
    runner = Runner()
    poll(runner, 0, symbol_error=0)
    for second in (600, 1800, 3000):
        poll(runner, second, symbol_error=second // 20)
        runner.restart()
    result = poll(runner, 3600, symbol_error=150)
    assert [e.error_code for e in result.events] == [("symbol_error_fatal",)]


def test_hw_counter_wrap_is_not_a_reset() -> None:
    near_top = 2**32 - 10
    runner = Runner()
    poll(runner, 0, rnr_nak_retry_err=near_top - 1, local_ack_timeout_err=near_top)
    poll(runner, 1, rnr_nak_retry_err=near_top, local_ack_timeout_err=near_top)  # rnr breach
    result = poll(runner, 2, rnr_nak_retry_err=3, local_ack_timeout_err=5)
    # Both wrapped: no recovery for the latched rnr breach, and 15 timeouts in 1 s (> 1/s).
    assert [(e.error_code[0], e.is_healthy) for e in result.events] == [
        ("local_ack_timeout_err", False)]
    assert "delta=15" in result.events[0].message
    assert "mlx5_0:1:rnr_nak_retry_err" in runner.state.section(LINK_COUNTERS).breach_flags


def test_decrease_that_is_not_a_wrap_is_a_reset() -> None:
    runner = Runner()
    poll(runner, 0, rnr_nak_retry_err=5)
    poll(runner, 1, rnr_nak_retry_err=6)  # breach
    recovery = poll(runner, 2, rnr_nak_retry_err=0)
    assert [e.is_healthy for e in recovery.events] == [True]


# port_xmit_wait is off by default (core/config.py); these tests switch it on.
XMIT_WAIT_ON = [{"name": "port_xmit_wait", "enabled": True}]


def test_pma_counter_wrap_rule_does_not_apply_to_counters_dir() -> None:
    runner = Runner(config(counters=XMIT_WAIT_ON))
    poll(runner, 0, port_xmit_wait=2**32 - 5)
    # counters/port_xmit_wait saturates instead of wrapping: a drop is a reset.
    assert poll(runner, 1, port_xmit_wait=3).events == ()
    assert (runner.state.section(LINK_COUNTERS).counter_snapshots["mlx5_0:1:port_xmit_wait"].value
            == 3)


def unhealthy(result: Any) -> list[Any]:
    return [e for e in result.events if not e.is_healthy]


def healthy(result: Any) -> list[Any]:
    return [e for e in result.events if e.is_healthy and e.entities]


def test_saturated_error_counter_is_one_report_per_file_closed_when_cleared() -> None:
    """symbol_error and symbol_error_fatal read one file: one report."""
    runner = Runner()
    poll(runner, 0, symbol_error=65000)
    first = poll(runner, 3600, symbol_error=65535)  # 535/hour: the fatal tier breaches too
    saturation = [e for e in first.events if "saturated" in e.message]
    assert len(saturation) == 1
    event = saturation[0]
    assert (event.is_fatal, event.is_healthy, event.check_name, event.error_code) == (
        False, False, "InfiniBandDegradationCheck", ("symbol_error",))
    assert event.message == ("Counter symbol_error on port mlx5_0 port 1 is saturated at 65535 "
                             "- monitoring of this counter is blind until it is cleared")
    assert runner.state.section(LINK_COUNTERS).saturated == {"mlx5_0:1:symbol_error": at(3600)}
    assert [e for e in poll(runner, 7200, symbol_error=65535).events] == []
    cleared = poll(runner, 7201, symbol_error=0)
    closes = [e for e in cleared.events if e.error_code == ("symbol_error",)]
    assert [(e.is_healthy, e.check_name) for e in closes] == [
        (True, "InfiniBandDegradationCheck")]
    assert closes[0].message == ("Counter symbol_error on port mlx5_0 port 1 is no longer "
                                 "saturated (value=0)")
    assert runner.state.section(LINK_COUNTERS).saturated == {}
    again = poll(runner, 7202, symbol_error=65535)
    assert any("saturated" in e.message for e in again.events)


def test_a_jump_to_the_limit_is_one_event_and_clearing_it_one_healthy_event() -> None:
    """A saturated counter: the breach that took it there carries the news."""
    runner = Runner()
    poll(runner, 0, symbol_error=0)
    jump = poll(runner, 1, symbol_error=65535)
    assert len(jump.events) == 1
    event = jump.events[0]
    assert event.error_code == ("symbol_error",) and not event.is_fatal
    assert event.message.startswith("Port mlx5_0 port 1: symbol_error - ")
    assert event.message.endswith("- saturated at 65535 - monitoring of this counter is blind "
                                  "until it is cleared")
    assert "mlx5_0:1:symbol_error" in runner.state.section(LINK_COUNTERS).saturated
    cleared = poll(runner, 2, symbol_error=0)
    assert [(e.is_healthy, e.error_code) for e in cleared.events] == [
        (True, ("symbol_error",))]  # the latched breach's recovery closes both
    assert (runner.state.section(LINK_COUNTERS).saturated == {}
            and runner.state.section(LINK_COUNTERS).breach_flags == {})


def test_saturated_at_the_first_poll_is_reported_once() -> None:
    runner = Runner()
    first = poll(runner, 0, symbol_error=65535, link_downed=255)
    assert sorted(e.error_code[0] for e in unhealthy(first)) == ["link_downed", "symbol_error"]
    assert all(e.check_name == "InfiniBandDegradationCheck" for e in unhealthy(first))
    assert poll(runner, 1, symbol_error=65535, link_downed=255).events == ()
    cleared = poll(runner, 2, symbol_error=65535, link_downed=0)
    assert [(e.is_healthy, e.error_code) for e in cleared.events] == [(True, ("link_downed",))]


def test_a_saturated_traffic_counter_is_a_log_line_and_a_flag_not_an_event() -> None:
    """port_xmit_wait on a healthy busy host reaches 2^32-1 in about ten days."""
    runner = Runner(config(counters=XMIT_WAIT_ON))
    poll(runner, 0, port_xmit_wait=2**32 - 5000)
    full = poll(runner, 1, port_xmit_wait=2**32 - 1)
    assert full.events == ()
    assert runner.state.section(LINK_COUNTERS).saturated == {}
    assert runner.state.section(LINK_COUNTERS).saturated_quiet == {"mlx5_0:1:port_xmit_wait": at(1)}
    assert [n for n in full.notes if "port_xmit_wait" in n] == [
        "port_xmit_wait on port mlx5_0 port 1 is saturated at 4294967295: a traffic counter "
        "(or the degradation check is off), no event"]
    still = poll(runner, 2, port_xmit_wait=2**32 - 1)
    assert still.events == () and not still.notes
    cleared = poll(runner, 3, port_xmit_wait=0)
    assert cleared.events == () and runner.state.section(LINK_COUNTERS).saturated_quiet == {}
    assert any("no longer saturated" in n for n in cleared.notes)


def test_with_the_degradation_check_off_no_counter_is_judged_saturated_or_not() -> None:
    """Every counter is the degradation check's, a fatal one too (counters.CheckNames): with
    only the state check on, a saturated link_downed is neither an event nor a record."""
    runner = Runner(config(checks="InfiniBandStateCheck"))
    poll(runner, 0, link_downed=255)
    assert unhealthy(runner.last) == []
    assert (runner.state.section(LINK_COUNTERS).saturated == {}
            and runner.state.section(LINK_COUNTERS).saturated_quiet == {})


def test_saturation_records_of_an_older_state_file_are_migrated() -> None:
    """Per-entry keys (symbol_error_fatal) and port_xmit_wait as an event, as before."""
    state = MonitorState(boot_id="boot-1")
    for name, value in (("symbol_error", 65535), ("symbol_error_fatal", 65535),
                        ("port_xmit_wait", 2**32 - 1)):
        state.section(LINK_COUNTERS).counter_snapshots[f"mlx5_0:1:{name}"] = CounterSnap(value,
                                                                                         at(0))
        state.section(LINK_COUNTERS).saturated[f"mlx5_0:1:{name}"] = at(0)
    data = state.to_json()
    del data["saturated_quiet_counters"]  # a file written before the key existed
    runner = Runner(config(counters=XMIT_WAIT_ON), state=MonitorState.from_json(data),
                    baseline=False)
    assert poll(runner, 1, symbol_error=65535, port_xmit_wait=2**32 - 1).events == ()
    assert runner.state.section(LINK_COUNTERS).saturated == {"mlx5_0:1:symbol_error": at(0)}
    assert runner.state.section(LINK_COUNTERS).saturated_quiet == {"mlx5_0:1:port_xmit_wait": at(0)}
    cleared = poll(runner, 2, symbol_error=0, port_xmit_wait=0)
    assert [(e.is_healthy, e.error_code) for e in cleared.events] == [(True, ("symbol_error",))]
    # The same records in a state adopted while the port's entries are remembered (a commit
    # that failed at the first poll keeps the old state): still put right.
    runner.state.section(LINK_COUNTERS).saturated.update({"mlx5_0:1:symbol_error_fatal": at(0),
                                   "mlx5_0:1:port_xmit_wait": at(0)})
    moved = poll(runner, 3, symbol_error=0, port_xmit_wait=0)
    assert moved.events == ()  # no close event: port_xmit_wait's record became quiet
    assert any(n.startswith("port_xmit_wait on port mlx5_0 port 1 is no longer saturated")
               for n in moved.notes)
    assert (runner.state.section(LINK_COUNTERS).saturated == {}
            and runner.state.section(LINK_COUNTERS).saturated_quiet == {})


def test_absent_and_unreadable_values_are_skipped_without_events() -> None:
    runner = Runner()
    poll(runner, 0, link_downed=0)
    assert poll(runner, 1, link_downed=Unreadable("garbage")).events == ()
    assert poll(runner, 2, link_downed=ABSENT).events == ()
    assert (runner.state.section(LINK_COUNTERS).counter_snapshots["mlx5_0:1:link_downed"]
            == CounterSnap(0, at(0)))
    assert poll(runner, 3, link_downed=0).events == ()


def test_ethernet_ports_use_the_ethernet_check_names() -> None:
    runner = Runner()
    poll(runner, 0, layer="Ethernet", link_downed=0, roce_slow_restart=0)
    result = poll(runner, 1, layer="Ethernet", link_downed=1, roce_slow_restart=50)
    checks = {e.error_code[0]: e.check_name for e in result.events}
    assert checks == {"link_downed": "EthernetDegradationCheck",
                      "roce_slow_restart": "EthernetDegradationCheck"}
    assert [e.is_fatal for e in result.events if e.error_code == ("link_downed",)] == [True]


def test_disabled_check_evaluates_nothing_of_its_counters() -> None:
    """The counters, fatal ones included, are the degradation check's: the state check alone
    judges none of them, the degradation check alone judges all of them (NVSentinel's
    monitor runs its counter detection as the degradation check too)."""
    runner = Runner(config(checks="InfiniBandStateCheck"))
    poll(runner, 0, link_downed=0, symbol_error=0)
    result = poll(runner, 1, link_downed=1, symbol_error=500)
    assert non_baseline(result) == []
    runner = Runner(config(checks="InfiniBandDegradationCheck"))
    poll(runner, 0, link_downed=0, symbol_error=0)
    result = poll(runner, 1, link_downed=1, symbol_error=500)
    assert sorted((e.error_code[0], e.is_fatal) for e in non_baseline(result)) == [
        ("link_downed", True), ("symbol_error", False)]


def test_config_overrides_apply_to_evaluation() -> None:
    cfg = config(counters=[{"name": "symbol_error", "isFatal": True, "threshold": 100.0},
                           {"name": "link_downed", "enabled": False},
                           {"name": "custom", "path": "hw_counters/vendor_err",
                            "thresholdType": "delta", "threshold": 5}])
    runner = Runner(cfg)
    poll(runner, 0, symbol_error=0, link_downed=0, custom=0)
    result = poll(runner, 1, symbol_error=150, link_downed=9, custom=6)
    codes = {e.error_code[0]: e for e in result.events}
    assert set(codes) == {"symbol_error", "custom"}
    assert codes["symbol_error"].is_fatal
    assert codes["symbol_error"].check_name == "InfiniBandDegradationCheck"


def test_new_counter_after_the_first_poll_gets_no_baseline_event() -> None:
    runner = Runner()
    poll(runner, 0, link_downed=0)
    assert poll(runner, 1, link_downed=0, port_rcv_errors=7).events == ()
    assert "mlx5_0:1:port_rcv_errors" in runner.state.section(LINK_COUNTERS).counter_snapshots


def test_window_tolerates_scheduling_jitter_but_not_half_a_window() -> None:
    runner = Runner()
    poll(runner, 0, symbol_error=0)
    assert len(poll(runner, 0.99, symbol_error=20).events) == 1  # 20 in ~1 s
    runner = Runner()
    poll(runner, 0, symbol_error=0)
    assert poll(runner, 0.5, symbol_error=20).events == ()


def test_messages_never_contain_semicolons() -> None:
    cfg = config(counters=[{"name": "link_downed", "description": "a; b"}])
    runner = Runner(cfg)
    poll(runner, 0, link_downed=0)
    event = poll(runner, 1, link_downed=1).events[0]
    assert ";" not in event.message


def random_trace(seed: int, length: int = 1500) -> tuple[list[Any], set[int], set[int]]:
    """Random polls of one port, with the polls whose commit fails and the restarts.

    Counters mostly sit still (as on a healthy host), sometimes rise, breach, reset (to 0,
    to their saturation limit, to an arbitrary value); the clock steps by fractions of a
    second to minutes and now and then goes backwards.
    """
    rng = random.Random(seed)
    names = [spec.name for spec in config().active_counters if spec.name != "symbol_error_fatal"]
    values = {name: 0 for name in names}
    polls = []
    now = 0.0
    for _ in range(length):
        now += rng.choice((0.3, 1, 1, 1, 1, 2, 5, 30, 61, -40 if rng.random() < 0.05 else 1))
        if rng.random() < 0.3:
            name = rng.choice(names)
            limit = 2**PMA_WIDTHS.get(name, 32) - 1
            draw = rng.random()
            if draw < 0.1:
                values[name] = 0
            elif draw < 0.2:  # a reset (or a rise) that lands on the saturation limit
                values[name] = limit
            elif draw < 0.25:  # a reset to an arbitrary value
                values[name] = rng.randint(0, max(values[name], 1))
            elif name in PMA_WIDTHS:  # a PMA counter sticks at its limit, as the hardware does
                values[name] = min(values[name] + rng.randint(1, 40), limit)
            else:
                values[name] += rng.randint(1, 40)
        readings = {**values, "symbol_error_fatal": values["symbol_error"]}
        polls.append(host(device(ports=(counters_port(readings),)), when=now))
    failed = {index for index in range(length) if rng.random() < 0.05}
    restarts = {index for index in range(length) if rng.random() < 0.02}
    return polls, failed, restarts


@pytest.mark.parametrize("seed", [20261122, 1, 2, 3])
def test_random_polls_failed_commits_leave_no_trace_and_the_limit_is_always_reported(
        seed: int) -> None:
    """One path per rule, explored with resets to 0, to the saturation limit and to
    arbitrary values, clock steps, failed commits and restarts.

    A poll whose commit fails is evaluated and dropped (as the monitor does): the run must be
    the run without that poll. After every committed poll, each saturating error-counter file
    at its limit is reported as saturated (in ``state.saturated``) and no other is, and no
    condition gets a second unhealthy event while it is open (one report per file).
    """
    polls, failed, restarts = random_trace(seed)

    def run(drop_failed: bool) -> list[tuple[object, ...]]:
        runner = Runner()
        results: list[tuple[object, ...]] = []
        open_reports: set[tuple[object, ...]] = set()  # one unhealthy report per identity
        for index, snapshot in enumerate(polls):
            if index in restarts:
                runner.restart()  # memory lost: the persisted state (and latches) stand in
            if index in failed:
                if not drop_failed:
                    runner.evaluate(snapshot)  # its commit fails: nothing adopted
                continue
            result = runner.poll(snapshot)
            results.append((result.events, result.observations, result.state.to_json()))
            for event in result.events:
                identity = (event.check_name, event.error_code, event.entities)
                if not event.is_healthy:
                    assert identity not in open_reports, (index, event.message)
                    open_reports.add(identity)
                else:
                    open_reports.discard(identity)
            values = snapshot.devices[0].ports[0].counters
            at_limit = {f"mlx5_0:1:{name}" for name, width in PMA_WIDTHS.items()
                        if name in values and values[name] == 2**width - 1
                        and name not in counters.TRAFFIC_COUNTERS}
            assert set(runner.state.section(LINK_COUNTERS).saturated) == at_limit, index
        return results

    assert run(drop_failed=False) == run(drop_failed=True)


def test_a_reset_to_the_saturation_limit_reports_saturation() -> None:
    """A counter reset to its limit is reported saturated, latched or not,
    with or without the counter's last value in memory (the one path there is)."""
    for restart in (False, True):
        runner = Runner()
        poll(runner, 0, link_downed=300, symbol_error=70000)  # test values above the limits
        if restart:
            runner.restart()
        reset = poll(runner, 1, link_downed=255, symbol_error=65535)  # decreases: resets
        assert sorted(e.error_code[0] for e in unhealthy(reset)) == [
            "link_downed", "symbol_error"]
        assert all("saturated" in e.message for e in unhealthy(reset))
        assert set(runner.state.section(LINK_COUNTERS).saturated) == {"mlx5_0:1:link_downed",
                                               "mlx5_0:1:symbol_error"}

    runner = Runner()  # latched, then reset to the limit: the recovery and the saturation
    poll(runner, 0, link_downed=300)
    assert unhealthy(poll(runner, 1, link_downed=301))  # the breach latches
    reset = poll(runner, 2, link_downed=255)
    # The fatal breach recovers and the (non-fatal) saturation opens, one identity: a
    # non-fatal event changes no condition of the platform, so their order does not matter.
    assert [(e.is_healthy, e.is_fatal, e.check_name) for e in reset.events] == [
        (True, False, "InfiniBandDegradationCheck"), (False, False, "InfiniBandDegradationCheck")]
    assert "saturated at 255" in reset.events[1].message
    assert runner.state.section(LINK_COUNTERS).breach_flags == {}

    runner = Runner()  # quiet at the limit in a state file that never recorded it
    poll(runner, 0, link_downed=255)
    runner.state.section(LINK_COUNTERS).saturated.clear()
    runner.restart()
    again = poll(runner, 1, link_downed=255)
    assert [e.error_code for e in unhealthy(again)] == [("link_downed",)]


def test_a_reloaded_config_changes_the_counters_a_port_is_evaluated_for() -> None:
    runner = Runner()
    poll(runner, 0, link_downed=0, port_rcv_errors=0)
    assert runner.last is not None and "mlx5_0:1:link_downed" in runner.last.observations
    runner.config = config(counters=[{"name": "link_downed", "enabled": False}])
    poll(runner, 1, link_downed=5, port_rcv_errors=0)
    assert "mlx5_0:1:link_downed" not in runner.last.observations
    assert "mlx5_0:1:port_rcv_errors" in runner.last.observations
    assert runner.last.events == ()  # the disabled counter's rise is not evaluated


def test_latched_hw_counter_that_wraps_across_a_restart_is_not_a_reset() -> None:
    """Latched at 2, seen at 2^32-1, wraps to 1 while the daemon restarts."""
    runner = Runner()
    poll(runner, 0, rnr_nak_retry_err=0)
    breach = poll(runner, 1, rnr_nak_retry_err=2)
    assert [(e.error_code[0], e.is_fatal) for e in breach.events] == [("rnr_nak_retry_err", True)]
    assert poll(runner, 2, rnr_nak_retry_err=2**32 - 1).events == ()
    # A restart: only what the state file holds survives (through its JSON text).
    runner.state = MonitorState.from_json(json.loads(json.dumps(runner.state.to_json())))
    runner.memory = PollMemory()
    key = "mlx5_0:1:rnr_nak_retry_err"
    assert runner.state.section(LINK_COUNTERS).breach_flags[key].last_value == 2**32 - 1
    assert poll(runner, 3, rnr_nak_retry_err=1).events == ()  # a wrap: still latched
    assert key in runner.state.section(LINK_COUNTERS).breach_flags
    runner.restart()
    recovery = poll(runner, 4, rnr_nak_retry_err=0)  # a real admin clear still recovers
    assert [(e.error_code[0], e.is_healthy) for e in recovery.events] == [
        ("rnr_nak_retry_err", True)]


def test_latched_counter_reset_during_a_restart_is_seen_against_the_last_value() -> None:
    """Cleared and climbing again past the breach's value while the daemon was down."""
    runner = Runner(config(linkFlapCount=0))  # link_downed +3: also 3 short flaps
    poll(runner, 0, link_downed=0)
    poll(runner, 1, link_downed=1)  # latched with the snapshot at 1
    poll(runner, 2, link_downed=9)
    runner.restart()
    recovery = poll(runner, 3, link_downed=4)  # 4 < 9: cleared and risen again
    assert [e.is_healthy for e in recovery.events] == [True]


def test_breach_flag_without_last_value_still_loads() -> None:
    data = MonitorState(boot_id="b").to_json()
    data["breach_flags"] = {"mlx5_0:1:link_downed": {
        "breached": True, "check_name": "InfiniBandStateCheck", "is_fatal": True,
        "since": "2026-01-01T12:00:00Z"}}
    state = MonitorState.from_json(data)
    assert state.section(LINK_COUNTERS).breach_flags["mlx5_0:1:link_downed"].last_value is None
    runner = Runner(state=state, baseline=False)
    state.section(LINK_COUNTERS).counter_snapshots["mlx5_0:1:link_downed"] = CounterSnap(1, at(0))
    assert poll(runner, 1, link_downed=3).events == ()  # latched; the last value is recorded
    assert runner.state.section(LINK_COUNTERS).breach_flags["mlx5_0:1:link_downed"].last_value == 3


def kinded_poll(runner: Runner, when: float, kind: CounterKind, value: int, path: str):
    """One poll of a hw-counter entry whose kind contradicts its path: the kind must win."""
    snapshot = port(counters={"rnr_nak_retry_err": value},
                    paths={"rnr_nak_retry_err": path})
    snapshot = replace(snapshot, counter_kinds={"rnr_nak_retry_err": kind})
    return runner.poll(host(device(ports=(snapshot,)), when=when))


def test_the_counter_kind_not_the_path_decides_a_wrap() -> None:
    """The evaluator reads what a counter is from the snapshot, never from its path."""
    wrapping = CounterKind("rnr_nak_retry_err", 32)
    runner = Runner()
    kinded_poll(runner, 0, wrapping, 2**32 - 10, "/elsewhere/rnr_nak_retry_err")
    wrap = kinded_poll(runner, 1, wrapping, 5, "/elsewhere/rnr_nak_retry_err")
    assert [e.error_code for e in wrap.events] == [("rnr_nak_retry_err",)]  # delta 15 > 0
    assert wrap.events[0].is_fatal and not wrap.events[0].is_healthy
    assert wrap.observations["mlx5_0:1:rnr_nak_retry_err"].delta == 15

    plain = CounterKind("rnr_nak_retry_err")  # 64-bit, though the path says hw_counters/
    runner = Runner()
    path = "/sys/class/infiniband/mlx5_0/ports/1/hw_counters/rnr_nak_retry_err"
    kinded_poll(runner, 0, plain, 2**32 - 10, path)
    reset = kinded_poll(runner, 1, plain, 5, path)
    assert reset.events == ()  # a decrease of a 64-bit counter is a reset: no breach
    assert reset.observations["mlx5_0:1:rnr_nak_retry_err"].delta is None


def test_the_counter_kind_not_the_path_decides_saturation() -> None:
    runner = Runner()
    sat = CounterKind("rnr_nak_retry_err", 8, saturating=True)
    kinded_poll(runner, 0, sat, 0, "/elsewhere/rnr_nak_retry_err")
    result = kinded_poll(runner, 1, sat, 0, "/elsewhere/rnr_nak_retry_err")
    assert result.events == ()
    full = kinded_poll(runner, 2, sat, 255, "/elsewhere/rnr_nak_retry_err")
    # The breach and the file's saturation have one identity (the degradation check, the
    # counter, the port): one fatal event says both.
    assert [(e.check_name, e.is_fatal, e.is_healthy) for e in full.events] == [
        ("InfiniBandDegradationCheck", True, False)]
    assert "saturated at 255" in full.events[0].message
    assert "mlx5_0:1:rnr_nak_retry_err" in runner.state.section(LINK_COUNTERS).saturated


def test_saturation_before_the_velocity_window_fills_is_still_one_event() -> None:
    """Found by an outside audit (live, 200 ms polling): the counter reaches its
    limit while symbol_error's 1 s window is still filling, so the saturation report comes
    first and the breach a poll later; the platform must get one unhealthy event, not two."""
    runner = Runner()
    poll(runner, 0, symbol_error=0)
    first = poll(runner, 0.4, symbol_error=65535)
    assert [(e.error_code, e.check_name) for e in unhealthy(first)] == [
        (("symbol_error",), "InfiniBandDegradationCheck")]
    assert "saturated at 65535" in unhealthy(first)[0].message
    full = poll(runner, 1.0, symbol_error=65535)  # the window is full: the breach latches
    assert unhealthy(full) == []
    assert "mlx5_0:1:symbol_error" in runner.state.section(LINK_COUNTERS).breach_flags
    assert poll(runner, 1.4, symbol_error=65535).events == ()
    cleared = poll(runner, 2.0, symbol_error=0)
    assert [(e.is_healthy, e.error_code) for e in cleared.events] == [
        (True, ("symbol_error",))]
    assert (runner.state.section(LINK_COUNTERS).saturated == {}
            and runner.state.section(LINK_COUNTERS).breach_flags == {})


def test_saturation_while_a_breach_of_the_same_check_is_latched_is_no_second_event() -> None:
    runner = Runner()
    poll(runner, 0, symbol_error=0)
    breach = poll(runner, 1, symbol_error=100)
    assert [e.error_code for e in unhealthy(breach)] == [("symbol_error",)]
    full = poll(runner, 2, symbol_error=65535)
    assert unhealthy(full) == []
    assert any("latched breach is the open report" in n for n in full.notes)
    # still shown as saturated
    assert "mlx5_0:1:symbol_error" in runner.state.section(LINK_COUNTERS).saturated
    cleared = poll(runner, 3, symbol_error=0)
    assert [(e.is_healthy, e.error_code) for e in cleared.events] == [
        (True, ("symbol_error",))]
    assert runner.state.section(LINK_COUNTERS).saturated == {}


def test_only_advanced_velocity_windows_can_wait_for_the_flush() -> None:
    """What a commit must write at once (CheckFamily.urgent of both counter families): a
    velocity window that closed can wait for the periodic flush; anything else cannot."""
    specs = config().active_counters
    velocity = next(s.name for s in specs if s.is_velocity)
    delta = next(s.name for s in specs if not s.is_velocity)
    old = CounterSection({f"mlx5_0:1:{velocity}": CounterSnap(5, at(0)),
                          f"mlx5_0:1:{delta}": CounterSnap(1, at(0)),
                          # a name may hold a colon: the name is what follows the port
                          f"mlx5_0:1:x:{velocity}": CounterSnap(1, at(0))})

    def changed(**tables: Any) -> bool:
        return urgent_counter_change(old, replace(old, **tables), specs)

    assert not changed()
    snaps = dict(old.counter_snapshots)
    snaps[f"mlx5_0:1:{velocity}"] = CounterSnap(5, at(1))
    assert not changed(counter_snapshots=snaps)
    snaps[f"mlx5_0:1:{delta}"] = CounterSnap(1, at(0))  # equal, another object
    assert not changed(counter_snapshots=snaps)
    assert changed(counter_snapshots={**snaps, f"mlx5_0:1:{delta}": CounterSnap(2, at(1))})
    assert changed(counter_snapshots={**snaps, f"mlx5_0:1:x:{velocity}": CounterSnap(2, at(1))})
    assert changed(counter_snapshots={**snaps, f"mlx5_0:2:{velocity}": CounterSnap(0, at(1))})
    assert changed(breach_flags={f"mlx5_0:1:{delta}": BreachFlag("c", True, at(1))})
    assert changed(saturated={f"mlx5_0:1:{velocity}": at(1)})
    # The keys to compare are worked out once per keys and specs: other specs, other keys.
    advanced = {**old.counter_snapshots, f"mlx5_0:1:{velocity}": CounterSnap(6, at(1))}
    assert not urgent_counter_change(old, replace(old, counter_snapshots=advanced), specs)
    others = tuple(s for s in specs if s.name != velocity)
    assert urgent_counter_change(old, replace(old, counter_snapshots=advanced), others)
    assert not urgent_counter_change(old, replace(old, counter_snapshots=advanced), specs)
    fewer = dict(old.counter_snapshots)
    del fewer[f"mlx5_0:1:x:{velocity}"]
    fewer_delta = {**fewer, f"mlx5_0:1:{delta}": CounterSnap(3, at(1))}
    assert urgent_counter_change(replace(old, counter_snapshots=fewer),
                                 replace(old, counter_snapshots=fewer_delta), specs)
