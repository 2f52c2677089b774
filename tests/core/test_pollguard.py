"""The poll boundary's bookkeeping (runtime/pollguard.py): one line per distinct cause, a reminder
with the count every few minutes, a bounded set of causes, and an end that is logged."""

from __future__ import annotations

import logging
from datetime import datetime, timezone

import pytest

from nichealthd.core.failure import describe_exception
from nichealthd.runtime.pollguard import (
    CAUSES,
    COMMIT,
    EVALUATE,
    READ,
    PollGuard,
)


class Clock:
    def __init__(self) -> None:
        self.now = 0.0

    def __call__(self) -> float:
        return self.now


def messages(caplog: pytest.LogCaptureFixture) -> list[str]:
    return [r.getMessage() for r in caplog.records]


def guard(clock: Clock) -> PollGuard:
    return PollGuard(clock, lambda: datetime(2026, 1, 1, tzinfo=timezone.utc), remind=300)


def test_a_cause_is_logged_once_then_reminded_with_its_count(
        caplog: pytest.LogCaptureFixture) -> None:
    clock = Clock()
    g = guard(clock)
    with caplog.at_level(logging.INFO):
        for _ in range(50):
            g.failed(COMMIT, "cannot write s.json: File too large", "commit failed: %s")
            clock.now += 1
        assert messages(caplog) == ["commit failed: cannot write s.json: File too large"]
        clock.now = 400
        g.failed(COMMIT, "cannot write s.json: File too large", "commit failed: %s")
    assert messages(caplog)[1] == ("still failing, 50 more time(s) in the last 400 s: "
                                   "cannot write s.json: File too large")
    assert g.totals() == {READ: 0, EVALUATE: 0, COMMIT: 51}
    assert g.problems()[0].failures == 51


def test_distinct_causes_are_each_logged_and_reported_reading_first(
        caplog: pytest.LogCaptureFixture) -> None:
    g = guard(Clock())
    with caplog.at_level(logging.INFO):
        g.failed(COMMIT, "disk full", "commit failed: %s")
        g.failed(READ, "ValueError: x", "poll failed to read: %s")
        g.failed(READ, "KeyError: y", "poll failed to read: %s")
    assert len(messages(caplog)) == 3
    reason = g.reason()
    assert reason.startswith("polls failing to read since ")
    assert "(2 in a row): KeyError: y" in reason
    assert "; commits failing since " in reason and "(1 in a row): disk full" in reason
    assert set(g.totals()) == set(CAUSES)


def test_success_ends_only_the_causes_that_worked(caplog: pytest.LogCaptureFixture) -> None:
    g = guard(Clock())
    g.failed(COMMIT, "disk full", "commit failed: %s")
    g.failed(EVALUATE, "ValueError: x", "poll failed to evaluate: %s")
    caplog.clear()
    with caplog.at_level(logging.INFO):
        g.succeeded(READ, EVALUATE)
        assert [p.cause for p in g.problems()] == [COMMIT]
        g.succeeded(COMMIT)
        assert g.reason() == ""
        g.succeeded(COMMIT)  # nothing to end: no line
    assert [m.split(" after")[0] for m in messages(caplog)] == ["evaluate works again",
                                                                "commit works again"]
    with caplog.at_level(logging.INFO):  # a new episode is logged again
        g.failed(COMMIT, "disk full", "commit failed: %s")
    assert messages(caplog)[-1] == "commit failed: disk full"


def test_an_exception_is_described_in_one_line_with_where_it_was_raised() -> None:
    def parse() -> int:
        return int("\N{SUPERSCRIPT TWO}")

    try:
        parse()
    except ValueError as exc:
        text = describe_exception(exc)
    assert text.startswith("ValueError: invalid literal for int()")
    assert "(at test_pollguard.py:" in text and "in parse)" in text and "\n" not in text
