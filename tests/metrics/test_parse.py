"""Parsing of sysfs rates and listen addresses."""

from __future__ import annotations

import pytest

from nichealthd.surfaces.metrics import parse_listen, parse_rate


@pytest.mark.parametrize(("text", "expected"), [
    ("400 Gb/sec (4X NDR)", 50e9),
    ("200 Gb/sec (2X NDR)\n", 25e9),
    ("100 Gb/sec (4X EDR)", 12.5e9),
    ("25 Gb/sec (1X EDR)", 3.125e9),
    ("2.5 Gb/sec (1X SDR)", 312.5e6),
    ("10 Mb/sec", 1.25e6),
    ("", None),
    (None, None),
    ("unknown", None),
])
def test_parse_rate(text: str, expected: object) -> None:
    assert parse_rate(text) == expected


@pytest.mark.parametrize(("text", "expected"), [
    (":2112", ("", 2112)),
    ("127.0.0.1:9000", ("127.0.0.1", 9000)),
    ("[::1]:2112", ("::1", 2112)),
    ("localhost:1", ("localhost", 1)),
    ("", None),
    ("  ", None),
])
def test_parse_listen(text: str, expected: object) -> None:
    assert parse_listen(text) == expected
