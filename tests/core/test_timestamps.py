"""RFC 3339 timestamps as the state file, the journal and the connector write them."""

from __future__ import annotations

import random
from datetime import datetime, timedelta, timezone

from nichealthd.core.events import format_timestamp, parse_timestamp


def test_fractions_are_written_with_0_3_or_6_digits_as_protobuf_does() -> None:
    base = datetime(2026, 11, 27, 10, 0, 0, tzinfo=timezone.utc)
    assert format_timestamp(base) == "2026-11-27T10:00:00Z"
    assert format_timestamp(base.replace(microsecond=250000)) == "2026-11-27T10:00:00.250Z"
    assert format_timestamp(base.replace(microsecond=250001)) == "2026-11-27T10:00:00.250001Z"


def test_one_instant_in_any_zone_is_one_text_remembered_or_not() -> None:
    """The formatter remembers what it wrote; a moment given in another zone is the same
    instant (equal datetimes) and must come out as the same UTC text, first call or not."""
    utc = datetime(2026, 11, 27, 10, 0, 0, 123000, tzinfo=timezone.utc)
    east = utc.astimezone(timezone(timedelta(hours=5, minutes=30)))
    assert format_timestamp(east) == format_timestamp(utc) == "2026-11-27T10:00:00.123Z"
    later = utc + timedelta(microseconds=1)
    assert format_timestamp(later) == "2026-11-27T10:00:00.123001Z"
    assert format_timestamp(utc) == "2026-11-27T10:00:00.123Z"


def test_what_is_written_reads_back_as_the_same_instant() -> None:
    moment = datetime(2026, 2, 28, 23, 59, 59, 999999, tzinfo=timezone.utc)
    assert parse_timestamp(format_timestamp(moment)) == moment
    assert parse_timestamp("2026-11-27T15:30:00+05:30") == datetime(
        2026, 11, 27, 10, 0, tzinfo=timezone.utc)


def test_the_text_is_strftimes_for_every_moment_in_any_zone() -> None:
    """Formatted by hand (strftime stats /etc/localtime at each call): the same text as
    ``strftime("%Y-%m-%dT%H:%M:%S")`` of the UTC moment, over years, zones and fractions."""
    rng = random.Random(7)
    for _ in range(2000):
        zone = timezone(timedelta(minutes=rng.randrange(-14 * 60, 14 * 60 + 1, 15)))
        moment = datetime(rng.randint(1970, 9998), rng.randint(1, 12), rng.randint(1, 28),
                          rng.randint(0, 23), rng.randint(0, 59), rng.randint(0, 59),
                          rng.choice((0, 7000, rng.randrange(1_000_000))), tzinfo=zone)
        utc = moment.astimezone(timezone.utc)
        text = format_timestamp(moment)
        assert text.startswith(utc.strftime("%Y-%m-%dT%H:%M:%S")) and text.endswith("Z")
        assert parse_timestamp(text) == moment
