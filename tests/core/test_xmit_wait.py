"""port_xmit_wait is off by default, as NVSentinel ships it; a latch on a counter switched off
is released.

The spec's default (a velocity threshold of 10,000 ticks/s) fires on a healthy busy port: a
tick is an implementation's multiple of the symbol time that sysfs does not give (core/config.py
and nichealthd.toml(5) say why it is off rather than a share of time). An operator who wants it
switches it on and gets the spec's rule.
"""

from __future__ import annotations

from nichealthd.core.checks.counter_section import BreachFlag, CounterSnap
from nichealthd.core.checks.link_counters import LINK_COUNTERS
from nichealthd.core.state import MonitorState

from .builders import Runner, at, config, counters_port, device, host, non_baseline

KEY = "mlx5_0:1:port_xmit_wait"
ON = [{"name": "port_xmit_wait", "enabled": True}]
BUSY = 5_000_000  # ticks/s of a busy, healthy port (a few ms of waiting a second)


def poll(runner: Runner, when: float, **values: int):
    return runner.poll(host(device(ports=(counters_port(dict(values)),)), when=when))


def busy_port(runner: Runner) -> list[tuple[str, bool, bool]]:
    """Ten seconds of a busy port: the verdicts (counter, fatal, healthy) it got."""
    seen = []
    for second in range(11):
        result = poll(runner, second, port_xmit_wait=BUSY * second, link_downed=0)
        seen += [(e.error_code[0], e.is_fatal, e.is_healthy) for e in non_baseline(result)
                 if second or not e.is_healthy]  # the first poll's healthy baselines aside
    return seen


def test_a_busy_port_is_no_verdict_by_default_and_the_spec_rule_when_switched_on() -> None:
    default = Runner()
    assert not any(s.name == "port_xmit_wait" for s in default.config.active_counters)
    assert busy_port(default) == []
    assert KEY not in default.state.section(LINK_COUNTERS).counter_snapshots  # not read at all
    spec = Runner(config(counters=ON))
    assert busy_port(spec) == [("port_xmit_wait", False, False)]  # then latched
    assert (spec.state.section(LINK_COUNTERS).breach_flags[KEY].check_name
            == "InfiniBandDegradationCheck")


def _latched() -> MonitorState:
    """A state written while port_xmit_wait was monitored (the old default): latched."""
    state = MonitorState(boot_id="boot-1")
    state.section(LINK_COUNTERS).counter_snapshots[KEY] = CounterSnap(BUSY, at(0))
    state.section(LINK_COUNTERS).breach_flags[KEY] = BreachFlag(
        "InfiniBandDegradationCheck", False, at(0), last_value=BUSY)
    return MonitorState.from_json(state.to_json())


def test_a_latch_on_a_counter_no_longer_configured_is_released_once() -> None:
    """Upgrading from the old default: nothing reads port_xmit_wait any more, so no reset
    could clear its latch, and its port would stay degraded until the next boot."""
    runner = Runner(state=_latched(), baseline=False)
    first = poll(runner, 1, link_downed=0)
    assert [(e.check_name, e.error_code, e.is_healthy, e.entities) for e in first.events] == [
        ("InfiniBandDegradationCheck", ("port_xmit_wait",), True,
         (("NIC", "mlx5_0"), ("NICPort", "1")))]
    assert "no longer monitored" in first.events[0].message
    assert KEY not in runner.state.section(LINK_COUNTERS).breach_flags
    assert poll(runner, 2, link_downed=0).events == ()


def test_a_latch_stays_while_its_counter_is_configured_or_its_check_is_off() -> None:
    kept = Runner(config(counters=ON), state=_latched(), baseline=False)
    assert poll(kept, 1, port_xmit_wait=BUSY + 10, link_downed=0).events == ()
    assert KEY in kept.state.section(LINK_COUNTERS).breach_flags
    off = Runner(config(checks="InfiniBandStateCheck"), state=_latched(), baseline=False)
    assert poll(off, 1, link_downed=0).events == ()  # a check switched off says nothing
    assert KEY in off.state.section(LINK_COUNTERS).breach_flags
    master = Runner(config(counterDetection={"enabled": False}), state=_latched(),
                    baseline=False)
    assert poll(master, 1, link_downed=0).events == ()  # nor does counter detection off
    assert KEY in master.state.section(LINK_COUNTERS).breach_flags
