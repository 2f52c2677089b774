"""Durations reject non-finite numbers: inf/nan must never reach a timer."""

from __future__ import annotations

import pytest

from nichealthd.core.duration import parse_duration


@pytest.mark.parametrize("value", [float("inf"), float("-inf"), float("nan"), "inf", "nan"])
def test_non_finite_durations_are_rejected(value: object) -> None:
    with pytest.raises(ValueError):
        parse_duration(value)  # type: ignore[arg-type]


def test_finite_durations_still_parse() -> None:
    assert parse_duration("500ms") == 0.5
    assert parse_duration(2) == 2.0


@pytest.mark.parametrize("value", [{"a": 1}, [1], None, True, 10 ** 400, "9" * 400 + "s"])
def test_any_other_value_is_a_value_error(value: object) -> None:
    """A TOML table, an array or a number too large for a float: a message, never a crash."""
    with pytest.raises(ValueError) as raised:
        parse_duration(value)
    assert len(str(raised.value)) < 200


def test_zero_only_where_allowed() -> None:
    with pytest.raises(ValueError, match="positive"):
        parse_duration("0s")
    assert parse_duration("0s", allow_zero=True) == 0.0
    with pytest.raises(ValueError, match=">= 0"):
        parse_duration(-1, allow_zero=True)
