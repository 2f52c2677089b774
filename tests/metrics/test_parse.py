"""Parsing of listen addresses."""

from __future__ import annotations

import pytest

from nichealthd.surfaces.metrics_http import parse_listen


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
