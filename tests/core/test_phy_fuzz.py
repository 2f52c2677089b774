"""The parsers of the simulator's text formats on hostile and random input: unreadable, never
an exception (sources/phy.py: the ethtoolPath ``stats`` and ``fec`` files; sources/routes.py:
``proc/net/route``; sources/gpu_metadata.py: the GPU metadata file, whose only answer to a bad
file is MetadataError).

hypothesis is not a dependency: the random inputs come from a seeded ``random.Random``, so a
failure names its seed and round and replays exactly.
"""

from __future__ import annotations

import json
import logging
import random
import time
from dataclasses import replace
from pathlib import Path

import pytest

from nichealthd.core.numbers import PHY_COUNTER
from nichealthd.core.topology import MetadataError
from nichealthd.sources import ethtool_kernel as ek
from nichealthd.sources.gpu_metadata import read_gpu_metadata
from nichealthd.sources.phy import FecStats, Phy, read_fec, read_stats, wanted
from nichealthd.sources.routes import parse_default_routes_v4, parse_default_routes_v6

from .builders import config, device, host, port

SEED = 52053
ROUNDS = 400
NOW = 1_764_200_000.0
U64 = 2**64 - 1

HOSTILE_STATS = [
    "rx_bits_phy: 100 +1e308/s @0",  # overflows a float times a century
    "rx_bits_phy: " + "9" * 5000,  # int() raises past 4300 digits
    "rx_bits_phy: " + "1" * 5000 + " +2/s @0",
    f"rx_corrected_bits_phy: {U64}",  # all ones: a failed read
    f"rx_corrected_bits_phy: {U64 - 5} +1/s @0",  # reaches past 64 bits by now
    "rx_bits_phy: 1 +nan/s @0", "rx_bits_phy: 1 +inf/s @0", "rx_bits_phy: 1 +1e400/s @0",
    "rx_bits_phy: 1 +-5/s @0", "rx_bits_phy: 1 +5/s @-1", "rx_bits_phy: 1 +5/s @1e400",
    "rx_bits_phy: 1 +5/s @nan", "rx_bits_phy: 1 +1.2.3/s @0", "rx_bits_phy: 1 +5/s @1..2",
    "rx_bits_phy: 1 +" + "9" * 5000 + "/s @0",
    "rx_bits_phy: 1 +5/s @" + "1" * 5000, "rx_bits_phy: -1", "rx_bits_phy: 0x10",
    "rx_bits_phy: \u0663\u0664", "rx_bits_phy: 1_000", "rx_bits_phy:", "rx_bits_phy: \x00",
    "rx_err_lane_" + "1" * 5000 + "_phy: 1", "rx_err_lane_\u0663_phy: 1",
    " " * 100_000 + "x", "rx_bits_phy: 1" + " " * 100_000 + "x", "\ufeffrx_bits_phy: 1",
]
HOSTILE_FEC = [
    "[" * 100_000 + "]" * 100_000,  # deeper than json follows: RecursionError
    '{"active": "RS", "corrected_blocks": [' + "9" * 5000 + "]}",  # ValueError past 4300
    '{"active": "RS", "uncorrectable_blocks": [18446744073709551615]}',
    '{"active": "RS", "uncorrectable_blocks": [18446744073709551616]}',
    '{"active": "RS", "uncorrectable_blocks": [-1, 2]}',
    '{"active": "RS", "uncorrectable_blocks": [1.5]}',
    '{"active": "RS", "uncorrectable_blocks": [NaN, Infinity]}',
    '{"active": "RS", "uncorrectable_blocks": [true]}',
    '{"active": "RS", "uncorrectable_blocks": {"total": 1}}',
    '{"active": "RS", "corrected_bits": "123"}',
    '{"active": ["RS"]}', '{"active": 50}', '{"active": "' + "R" * 100_000 + '"}',
    '{"active": "RS\\u0000"}', '{"active": "mode 99999"}', "null", "[]", '"RS"', "1e999",
    "", "\x00", "{", '{"active": "RS", "active": "off"}',
]


def random_stats_line(rng: random.Random) -> str:
    """A line of ``stats``: a plausible name and a value made of the format's own pieces,
    at random lengths."""
    name = rng.choice(["rx_bits_phy", "rx_corrected_bits_phy", "rx_pcs_symbol_err_phy",
                       "link_down_events_phy", f"rx_err_lane_{rng.randrange(0, 1000)}_phy",
                       "rx_packets", "".join(rng.choice("abc_:. ") for _ in range(8))])
    pieces = ["".join(rng.choice("0123456789") for _ in range(rng.choice([1, 5, 19, 20, 21,
                                                                        400, 5000])))]
    if rng.random() < 0.6:
        pieces += [" +", rng.choice(["1e308", "nan", "inf", "-1", "2.5e9", "0", "1e13",
                                     "1e14", "1" * rng.randrange(1, 500), "e", "."]), "/s @",
                   rng.choice(["0", "-1", "1e400", "nan", "1764200000.25", "9" * 300, ""])]
    noise = "".join(rng.choice(" \t:+-@/.eE\u0663\x00") for _ in range(rng.randrange(0, 4)))
    return f"{' ' * rng.randrange(0, 6)}{name}:{' ' * rng.randrange(0, 3)}" \
        + "".join(pieces) + noise


def random_fec(rng: random.Random) -> str:
    def count() -> object:
        return rng.choice([0, 1, U64, U64 + 1, -1, 2**63, 1.5, True, None, "7", [1], {}])

    data: dict[str, object] = {}
    for key in ("active", "corrected_blocks", "uncorrectable_blocks", "corrected_bits"):
        if rng.random() < 0.7:
            data[key] = (rng.choice(["RS", "off", "BASER", "LLRS", "", "rs", 50, None, ["RS"]])
                         if key == "active" else
                         [count() for _ in range(rng.randrange(0, 10))]
                         if rng.random() < 0.8 else count())
    text = json.dumps(data)
    return text[:rng.randrange(len(text) + 1)] if rng.random() < 0.2 else text


def held(values: dict[str, int]) -> None:
    for name, number in values.items():
        assert wanted(name), name
        assert type(number) is int and PHY_COUNTER.holds(number), (name, number)


def held_fec(stats: FecStats | None) -> None:
    if stats is not None:
        for lanes in (stats.corrected_blocks, stats.uncorrectable_blocks,
                      stats.corrected_bits):
            assert all(type(n) is int and PHY_COUNTER.holds(n) for n in lanes), lanes


@pytest.mark.parametrize("line", HOSTILE_STATS, ids=lambda s: repr(s[:30]))
def test_hostile_stats_lines_are_unreadable_not_an_exception(line: str) -> None:
    read = read_stats(line + "\nrx_pcs_symbol_err_phy: 7\n", NOW)
    held(read.values)
    assert read.values["rx_pcs_symbol_err_phy"] == 7  # the good line beside it stays
    assert not {"rx_bits_phy", "rx_corrected_bits_phy"} & set(read.values)


def test_the_two_inputs_that_raised() -> None:
    """``+1e308/s @0`` and a 5000-digit base raised OverflowError and ValueError."""
    read = read_stats("rx_bits_phy: 100 +1e308/s @0\nrx_corrected_bits_phy: "
                      + "7" * 5000 + " +2.5e9/s @1764200000\n", NOW)
    assert read.values == {}
    assert "counter rise per second" in read.unreadable["rx_bits_phy"]
    assert "5000 digits" in read.unreadable["rx_corrected_bits_phy"]
    # a rate below the smallest float is 0 per second, a readable one
    assert read_stats("rx_bits_phy: 1 +1e-400/s @0", NOW).values == {"rx_bits_phy": 1}


@pytest.mark.parametrize("text", HOSTILE_FEC, ids=lambda s: repr(s[:30]))
def test_hostile_fec_files_are_unreadable_not_an_exception(text: str) -> None:
    read = read_fec(text)
    held_fec(read.stats)
    assert read.mode in (None, "RS", "off")


def test_random_stats_and_fec_files_never_raise() -> None:
    rng = random.Random(SEED)
    started = time.monotonic()
    for n in range(ROUNDS):
        text = "\n".join(random_stats_line(rng) for _ in range(rng.randrange(1, 30)))
        try:
            held(read_stats(text, NOW).values)
            fec = random_fec(rng)
            held_fec(read_fec(fec).stats)
        except Exception as exc:  # the assertion names the replay
            raise AssertionError(f"seed {SEED} round {n}: {exc!r}") from exc
    assert time.monotonic() - started < 60  # no line costs more than a linear scan


def test_the_source_reads_hostile_files_and_says_each_once(
        tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    """Through the real source on an ethtoolPath tree: garbage is not available, logged
    once while it lasts and once when it is readable again."""
    (tmp_path / "eth0").mkdir()
    stats, fec = tmp_path / "eth0" / "stats", tmp_path / "eth0" / "fec"
    roce = replace(port("mlx5_0", 1, layer="Ethernet"), netdev="eth0")
    snap = host(device("mlx5_0", ports=(roce,)))
    source = Phy(config(ethtoolPath=str(tmp_path)))
    rng = random.Random(SEED)
    try:
        with caplog.at_level(logging.INFO, logger="nichealthd.sources.phy"):
            stats.write_text(f"rx_bits_phy: 100 +1e308/s @0\nrx_corrected_bits_phy: {U64}\n")
            fec.write_text("[" * 100_000)
            for _ in range(3):
                reading = source.read(snap, ["mlx5_0"]).get("mlx5_0_1")
                assert reading is None or (not reading.counters and reading.fec is None)
            said = [r.getMessage() for r in caplog.records]
            assert len(said) == 3, said  # two values of stats, the fec file: once each
            assert any("+1e+308/s" in m or "counter rise" in m for m in said)
            stats.write_text("rx_bits_phy: 100\nrx_corrected_bits_phy: 5\n")
            fec.write_text('{"active": "RS"}')
            reading = source.read(snap, ["mlx5_0"])["mlx5_0_1"]
            assert reading.counters == {"rx_bits_phy": 100, "rx_corrected_bits_phy": 5}
            assert len(caplog.records) == 6  # each readable again, once
            for _ in range(ROUNDS // 4):  # random bytes, random text: never an exception
                stats.write_bytes(bytes(rng.randrange(256) for _ in range(rng.randrange(200))))
                fec.write_text(random_fec(rng))
                source.read(snap, ["mlx5_0"])
                stats.write_text("\n".join(random_stats_line(rng) for _ in range(5)))
                source.read(snap, ["mlx5_0"])
    finally:
        source.close()


def test_route_and_gpu_metadata_parsers_on_random_text(tmp_path: Path) -> None:
    rng = random.Random(SEED)
    alphabet = "0123456789ABCDEFabcdef \t\n*x-\u0663\x00" + "0" * 20
    path = tmp_path / "gpu_metadata.json"
    for n in range(ROUNDS):
        text = "".join(rng.choice(alphabet) for _ in range(rng.randrange(0, 300)))
        routes = ("Iface\tDestination\tGateway\tFlags\tRefCnt\tUse\tMetric\tMask\n"
                  f"eth0\t00000000\t0100A8C0\t{text[:rng.randrange(0, 30)]}\t0\t0\t0\t00000000\n"
                  + text)
        assert isinstance(parse_default_routes_v4(routes), list), n
        assert isinstance(parse_default_routes_v6(text), list), n
        path.write_text(rng.choice([text, random_fec(rng), "[" * 50_000,
                                    json.dumps({"gpus": [{"numa_node": 10**400}],
                                                "nic_topology": {"mlx5_0": [text]}})]))
        try:
            read_gpu_metadata(str(path))
        except MetadataError:
            pass  # its clear answer to a bad file


def test_the_kernels_fec_reply_parser_on_random_bytes() -> None:
    """Not a simulator format but the kernel's (ETHTOOL_MSG_FEC_GET_REPLY attributes and
    ETHTOOL_GSTRINGS slots): random bytes are never an exception either."""
    rng = random.Random(SEED)
    for n in range(ROUNDS * 5):
        data = bytes(rng.randrange(256) for _ in range(rng.randrange(0, 80)))
        try:
            ek.parse_fec_reply(data)
            ek.parse_strings(data, rng.randrange(0, 5))
        except Exception as exc:  # the assertion names the replay
            raise AssertionError(f"seed {SEED} round {n}: {exc!r}") from exc
