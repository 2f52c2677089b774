"""Durations reject non-finite numbers (issue 12.6): inf/nan must never reach a timer."""

from __future__ import annotations

import pytest

from nichealthd.duration import parse_duration


@pytest.mark.parametrize("value", [float("inf"), float("-inf"), float("nan"), "inf", "nan"])
def test_non_finite_durations_are_rejected(value: object) -> None:
    with pytest.raises(ValueError):
        parse_duration(value)  # type: ignore[arg-type]


def test_finite_durations_still_parse() -> None:
    assert parse_duration("500ms") == 0.5
    assert parse_duration(2) == 2.0
