"""Evaluation returns the next state and memory and changes none of its
inputs, so a poll whose commit failed leaves no trace and the next poll sees what it saw."""

from __future__ import annotations

import copy
import random

from nichealthd.core.checks.link_counters import LINK_COUNTERS
from nichealthd.core.model import HostSnapshot

from .builders import Runner, counters_port, device, host


def snapshot(when: float, **values: object) -> HostSnapshot:
    return host(device(ports=(counters_port(dict(values)),)), when=when)


def recoveries(result) -> list[str]:  # type: ignore[no-untyped-def]
    return [e.error_code[0] for e in result.events if e.is_healthy and e.entities]


def test_a_reset_seen_by_a_poll_whose_commit_failed_still_recovers() -> None:
    """link_downed latched; the counter is reset while commits fail; then commits work."""
    runner = Runner()
    runner.poll(snapshot(0, link_downed=0))
    breach = runner.poll(snapshot(1, link_downed=1))
    assert [(e.error_code[0], e.is_fatal) for e in breach.events] == [("link_downed", True)]
    for when in (2, 3):  # the commit of each of these polls fails: nothing is adopted
        assert recoveries(runner.evaluate(snapshot(when, link_downed=0))) == ["link_downed"]
    committed = runner.poll(snapshot(4, link_downed=0))
    assert recoveries(committed) == ["link_downed"]
    assert "mlx5_0:1:link_downed" not in runner.state.section(LINK_COUNTERS).breach_flags


def test_a_breach_seen_by_a_poll_whose_commit_failed_is_reported_by_the_next() -> None:
    runner = Runner()
    runner.poll(snapshot(0, link_downed=0))
    assert runner.evaluate(snapshot(1, link_downed=2)).events
    again = runner.poll(snapshot(2, link_downed=2))
    assert [(e.error_code[0], e.is_fatal) for e in again.events] == [("link_downed", True)]


def test_evaluation_changes_none_of_its_inputs() -> None:
    """A randomised run: before each poll the state and the memory are deep-copied, and after
    the evaluation they are compared with what they were (resets, breaches, windows)."""
    rng = random.Random(20)
    runner = Runner()
    values = {"link_downed": 0, "symbol_error": 0, "symbol_error_fatal": 0,
              "port_rcv_errors": 0, "link_error_recovery": 0}
    for when in range(200):
        name = rng.choice(sorted(values))
        values[name] = 0 if rng.random() < 0.1 else values[name] + rng.choice((0, 0, 1, 50))
        values["symbol_error_fatal"] = values["symbol_error"]
        state, memory = copy.deepcopy(runner.state), copy.deepcopy(runner.memory)
        result = runner.evaluate(snapshot(when * 5.0, **values))
        assert runner.state == state
        assert runner.memory == memory
        if rng.random() < 0.8:  # the other polls' commits fail
            runner.adopt(result)
