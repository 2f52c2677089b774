"""``nichealthctl events --since/--device``: the forms --since reads and what each filter keeps
(end to end through the daemon over both transports: tests/dbus/test_ctl.py)."""

from __future__ import annotations

from datetime import datetime, timedelta, timezone

import pytest

from nichealthd.cli.event_filter import EventFilter, parse_since
from nichealthd.core.events import device_entities, make_event, port_entities

NOW = datetime(2026, 5, 1, 12, 0, 0, tzinfo=timezone.utc)
LOCAL = NOW.astimezone().tzinfo


@pytest.mark.parametrize("text,ago", [
    ("30m", timedelta(minutes=30)), ("2h", timedelta(hours=2)), ("1d", timedelta(days=1)),
    ("-2h", timedelta(hours=2)), ("2h ago", timedelta(hours=2)), ("90s", timedelta(seconds=90)),
    ("1.5h", timedelta(minutes=90)), ("10min", timedelta(minutes=10)),
])
def test_how_long_ago(text: str, ago: timedelta) -> None:
    assert parse_since(text, NOW) == NOW - ago


def test_times_and_dates_are_local_unless_they_say_their_zone() -> None:
    today = NOW.astimezone().date()
    assert parse_since("14:05", NOW) == \
        datetime(today.year, today.month, today.day, 14, 5, tzinfo=LOCAL).astimezone(timezone.utc)
    assert parse_since("2026-04-30", NOW) == \
        datetime(2026, 4, 30, tzinfo=LOCAL).astimezone(timezone.utc)
    assert parse_since("2026-04-30 09:15:30", NOW) == \
        datetime(2026, 4, 30, 9, 15, 30, tzinfo=LOCAL).astimezone(timezone.utc)
    assert parse_since("2026-04-30T09:15:00Z", NOW) == \
        datetime(2026, 4, 30, 9, 15, tzinfo=timezone.utc)
    assert parse_since("2026-04-30T09:15:00.123456789+02:00", NOW) == \
        datetime(2026, 4, 30, 7, 15, 0, 123456, tzinfo=timezone.utc)


@pytest.mark.parametrize("text", ["last tuesday", "", "25:00", "2026-13-01", "5 parsecs"])
def test_what_it_cannot_read_says_the_forms(text: str) -> None:
    with pytest.raises(ValueError, match=r"--since .*: (expected 30m, 2h|not a time of day)"):
        parse_since(text, NOW)


def event(entities: tuple[tuple[str, str], ...], at: datetime = NOW) -> dict[str, object]:
    return make_event("InfiniBandStateCheck", fatal=True, healthy=False, message="m",
                      error_code="port_state", entities=entities, at=at).to_json()


def test_device_port_and_pci_address() -> None:
    on_port = event(port_entities("mlx5_3", 1))
    on_card = event(device_entities("mlx5_3"))
    lost = event((("PCI", "0000:17:00.0"),))
    host = event(())
    card = EventFilter(device="mlx5_3")
    assert [card.keeps(e) for e in (on_port, on_card, lost, host)] == [True, True, False, False]
    port1, port2 = EventFilter(device="mlx5_3", port=1), EventFilter(device="mlx5_3", port=2)
    assert [port1.keeps(on_port), port1.keeps(on_card), port2.keeps(on_port)] == \
        [True, False, False]
    assert EventFilter(device="0000:17:00.0").keeps(lost)
    assert not EventFilter(device="mlx5_33").keeps(on_port)


def test_since_keeps_the_moment_itself_and_later() -> None:
    since = EventFilter(since=NOW)
    assert [since.keeps(event((), NOW + timedelta(seconds=s))) for s in (-1, 0, 1)] == \
        [False, True, True]
    assert not since.keeps({"generatedTimestamp": "not a time"})
    assert not EventFilter() and EventFilter(device="x") and EventFilter(since=NOW)
