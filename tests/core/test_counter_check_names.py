"""Fatal counters under the degradation check's name: what NVSentinel's fault-quarantine sees.

Beyond the spec (link-counter-detection §11.1 files fatal counters under the state check):
NVSentinel's own monitor keeps fatal counter conditions under the degradation check since
NVSentinel #1492, because a port recovery (ACTIVE/LinkUp) under the state check's name releases
a counter's quarantine while the counter's breach is still latched.
``counters.CheckNames.for_counter`` is the rule; a breach latched under the old name (a state
file of an older nichealthd) keeps its name, so its recovery is sent under the name it was
raised with. :mod:`tests.core.nvsentinel` is the model of the platform.
"""

from __future__ import annotations

from nichealthd.core.checks.counter_section import BreachFlag, CounterSnap
from nichealthd.core.checks.link_counters import LINK_COUNTERS
from nichealthd.core.state import MonitorState

from .builders import DOWN, POLLING, Runner, at, counters_port, device, host, non_baseline
from .equivalence import main_naming
from .nvsentinel import FaultQuarantine

KEY = "mlx5_0:1:link_downed"


def poll(runner: Runner, when: float, link_downed: int, up: bool = True):
    state = {} if up else {"state": DOWN, "phys": POLLING}
    return runner.poll(host(device(ports=(counters_port({"link_downed": link_downed},
                                                         **state),)), when=when))


def drill(runner: Runner, platform: FaultQuarantine) -> list[tuple[str, str, bool, bool]]:
    """A cable pull and its return: link_downed latches, then the port is ACTIVE again.
    Returns the events (check, errorCode, fatal, healthy) of the down and up polls."""
    seen = []
    for when, value, up in ((1, 1, False), (2, 1, True)):
        result = poll(runner, when, value, up)
        platform.apply(result.events)
        seen += [(e.check_name, e.error_code[0], e.is_fatal, e.is_healthy)
                 for e in non_baseline(result)]
    return seen


def test_a_port_recovery_leaves_a_latched_link_downed_breach_quarantined() -> None:
    runner, platform = Runner(), FaultQuarantine()
    platform.apply(poll(runner, 0, 0).events)
    assert drill(runner, platform) == [
        ("InfiniBandStateCheck", "port_state", True, False),
        ("InfiniBandDegradationCheck", "link_downed", True, False),
        ("InfiniBandStateCheck", "port_state", False, True)]
    assert KEY in runner.state.section(LINK_COUNTERS).breach_flags
    assert platform.held == {"InfiniBandDegradationCheck": {
        frozenset({("NIC", "mlx5_0"), ("NICPort", "1")})}}
    # Only the counter's reset (an admin clear) releases it, under the breach's name.
    reset = poll(runner, 3, 0)
    assert [(e.check_name, e.error_code[0], e.is_healthy) for e in reset.events] == [
        ("InfiniBandDegradationCheck", "link_downed", True)]
    platform.apply(reset.events)
    assert not platform.quarantined


def test_under_the_spec_names_the_same_drill_loses_the_quarantine() -> None:
    """Why: with the fatal counter under the state check (main's rule, the spec's), the
    port's recovery releases the node while link_downed is still latched."""
    with main_naming():
        runner, platform = Runner(), FaultQuarantine()
        platform.apply(poll(runner, 0, 0).events)
        assert [c for c, *_ in drill(runner, platform)] == ["InfiniBandStateCheck"] * 3
        # still latched: nothing more is said
        assert KEY in runner.state.section(LINK_COUNTERS).breach_flags
        assert not platform.quarantined


def test_a_breach_persisted_under_the_state_check_recovers_under_that_name() -> None:
    """A state file written by an older nichealthd: the latch keeps its name, so its
    recovery clears the condition the platform holds; a new breach takes the new name."""
    state = MonitorState(boot_id="boot-1")
    state.section(LINK_COUNTERS).counter_snapshots[KEY] = CounterSnap(1, at(0))
    state.section(LINK_COUNTERS).breach_flags[KEY] = BreachFlag("InfiniBandStateCheck", True,
                                                                at(0), last_value=1)
    platform = FaultQuarantine()
    platform.held = {"InfiniBandStateCheck": {frozenset({("NIC", "mlx5_0"),
                                                         ("NICPort", "1")})}}
    runner = Runner(state=MonitorState.from_json(state.to_json()), baseline=False)
    assert poll(runner, 1, 1).events == ()  # latched: nothing new
    assert (runner.state.section(LINK_COUNTERS).breach_flags[KEY].check_name
            == "InfiniBandStateCheck")
    reset = poll(runner, 2, 0)
    assert [(e.check_name, e.is_healthy) for e in reset.events] == [
        ("InfiniBandStateCheck", True)]
    platform.apply(reset.events)
    assert not platform.quarantined
    again = poll(runner, 3, 1)
    assert [(e.check_name, e.is_fatal) for e in again.events] == [
        ("InfiniBandDegradationCheck", True)]
    assert (runner.state.section(LINK_COUNTERS).breach_flags[KEY].check_name
            == "InfiniBandDegradationCheck")
