"""Pure parts: record <-> variant mapping, tables, colour rules, check lines (no bus)."""

from __future__ import annotations

import io
from typing import Any

import pytest

from nichealthd.ctl import CtlError, check_line, check_problems, counter_json, parse_target
from nichealthd.ctl_format import Style, ports_table, render_table
from nichealthd.dbus_common import from_variants, harden_writer, signature_of, to_variants


def test_variant_mapping_round_trips_and_omits_none() -> None:
    record = {"s": "x", "b": True, "i": 3, "f": 0.5, "none": None, "l": ["a"], "empty": [],
              "metadata": {}, "entitiesImpacted": [{"entityType": "NIC", "entityValue": "m"}]}
    variants = to_variants(record)
    assert {k: v.signature for k, v in variants.items()} == {
        "s": "s", "b": "b", "i": "x", "f": "d", "l": "as", "empty": "as", "metadata": "a{ss}",
        "entitiesImpacted": "aa{ss}"}
    back = from_variants(variants)
    assert back == {k: v for k, v in record.items() if v is not None}
    with pytest.raises(TypeError):
        signature_of("x", object())


def test_render_table_fits_the_width_by_shrinking_the_named_columns() -> None:
    rows = [("a", "x" * 70, "end")]
    lines = render_table(("A", "LONG", "Z"), rows, width=40, shrink=(1,))
    assert all(len(line) <= 40 for line in lines)
    assert lines[1].endswith("end") and "…" in lines[1]


def port(device: str, health: str = "healthy", monitored: bool = True) -> dict[str, Any]:
    return {"device": device, "port": 1, "link_layer": "InfiniBand", "role": "compute",
            "state": "ACTIVE", "phys_state": "LinkErrorRecovery", "rate": "400 Gb/sec (4X NDR)",
            "netdev": "enp170s0f1np1-very-long-name", "monitored": monitored, "health": health,
            "excluded": "" if monitored else "carries the host's default route"}


def test_ports_table_natural_order_80_columns_and_colour_only_when_enabled() -> None:
    records = [port("mlx5_10"), port("mlx5_2", "fatal"), port("mlx5_12", monitored=False)]
    plain = ports_table(records, Style(False))
    assert [line.split()[0] for line in plain[1:4]] == ["mlx5_2/1", "mlx5_10/1", "mlx5_12/1"]
    assert all(len(line) <= 80 for line in plain)
    assert "\033[" not in "\n".join(plain)
    coloured = ports_table(records, Style(True))
    assert "\033[1;31m" in "\n".join(coloured)


def test_style_for_stream_respects_tty_and_no_color(monkeypatch: pytest.MonkeyPatch) -> None:
    class Tty(io.StringIO):
        def isatty(self) -> bool:
            return True

    monkeypatch.delenv("NO_COLOR", raising=False)
    monkeypatch.setenv("TERM", "xterm")
    assert Style.for_stream(Tty()).enabled
    assert not Style.for_stream(io.StringIO()).enabled
    monkeypatch.setenv("NO_COLOR", "")
    assert not Style.for_stream(Tty()).enabled


def test_parse_target() -> None:
    assert parse_target(None) == ("", 0)
    assert parse_target("mlx5_0") == ("mlx5_0", 0)
    assert parse_target("mlx5_0/2") == ("mlx5_0", 2)
    for bad in ("/1", "mlx5_0/0", "mlx5_0/x"):
        with pytest.raises(CtlError) as info:
            parse_target(bad)
        assert info.value.code == 2


def test_check_line_and_problems() -> None:
    status = {"ports_total": 8, "ports_healthy": 8, "ports_degraded": 0, "ports_fatal": 0}
    assert check_line(0, status, []).startswith("NICHEALTH OK - 8 ports healthy | healthy=8")
    ports = [dict(port("mlx5_3", "fatal"), state="DOWN", phys_state="Disabled")]
    counters = [{"device": "mlx5_1", "port": 1, "counter": "symbol_error", "breached": True,
                 "fatal": False}]
    devices = [{"device": "mlx5_9", "present": False}]
    problems = check_problems(ports, counters, devices)
    assert problems == ["mlx5_3/1 DOWN/Disabled", "mlx5_9 missing",
                        "mlx5_1/1 symbol_error breached"]
    line = check_line(2, dict(status, ports_healthy=7, ports_fatal=1), problems)
    assert line.startswith("NICHEALTH CRITICAL - 1 fatal, 0 degraded of 8 ports: mlx5_3/1")
    assert counter_json({"counter": "x"})["value"] is None


def test_harden_writer_turns_eagain_into_a_short_write() -> None:
    class Sock:
        def send(self, data: bytes) -> int:
            raise BlockingIOError(11, "Resource temporarily unavailable")

    class Writer:
        sock = Sock()

    class Bus:
        _writer = Writer()

    bus = Bus()
    assert harden_writer(bus)
    assert bus._writer.sock.send(b"abc") == 0
    assert harden_writer(object()) is False
