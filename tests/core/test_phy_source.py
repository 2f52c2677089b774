"""The phy source on files (ethtoolPath) and the kernel's FEC reply on bytes."""

from __future__ import annotations

import json
import struct
from dataclasses import replace
from pathlib import Path

from nichealthd.sources import ethtool_kernel as ek
from nichealthd.sources import genetlink as nl
from nichealthd.sources.phy import (
    CORRECTED_BITS,
    RX_BITS,
    FecStats,
    Phy,
    parse_fec,
    parse_stats,
    wanted,
)

from .builders import config, device, host, port


def test_stats_lines_plain_and_advancing() -> None:
    text = ("# a comment\n"
            "NIC statistics:\n"
            "     rx_bits_phy: 1000 +2.5e9/s @100.0\n"
            "     rx_corrected_bits_phy: 7\n"
            "     rx_err_lane_3_phy: 2\n"
            "     rx_packets: 99\n"  # not a physical-layer counter: not kept
            "     link_down_events_phy: 123456789012345678901234567890\n"  # beyond 64 bits
            "     rx_crc_errors_phy: garbage\n")
    assert parse_stats(text, 102.0) == {RX_BITS: 1000 + 5_000_000_000, CORRECTED_BITS: 7,
                                        "rx_err_lane_3_phy": 2}
    assert parse_stats(text, 50.0)[RX_BITS] == 1000  # before its epoch: the base
    assert wanted("rx_err_lane_0_phy") and not wanted("rx_err_lane_x_phy")


def test_fec_json() -> None:
    assert parse_fec(json.dumps({"active": "RS", "corrected_blocks": [9, 4, 5],
                                 "uncorrectable_blocks": [1]})) == (
        "RS", FecStats((9, 4, 5), (1,), ()))
    assert parse_fec('{"active": null}') == (None, None)
    assert parse_fec("not json") == (None, None)
    assert parse_fec('{"active": "RS", "corrected_blocks": [-1]}') == ("RS", FecStats())


def test_source_reads_files_of_ports_with_a_netdev(tmp_path: Path) -> None:
    (tmp_path / "eth0").mkdir()
    (tmp_path / "eth0" / "stats").write_text("rx_bits_phy: 10\nrx_corrected_bits_phy: 1\n")
    (tmp_path / "eth0" / "fec").write_text('{"active": "RS", "uncorrectable_blocks": [0]}')
    (tmp_path / "eth1").mkdir()  # a netdev without files: no reading
    roce = replace(port("mlx5_0", 1, layer="Ethernet"), netdev="eth0")
    other = replace(port("mlx5_1", 1, layer="Ethernet"), netdev="eth1")
    snap = host(device("mlx5_0", ports=(roce,)), device("mlx5_1", "0000:48:00.0",
                                                         ports=(other,)),
                device("mlx5_2", "0000:49:00.0"))  # an IB port: no netdev
    source = Phy(config(ethtoolPath=str(tmp_path)))
    try:
        got = source.read(snap, ["mlx5_0", "mlx5_1", "mlx5_2"])
        assert list(got) == ["mlx5_0_1"]
        reading = got["mlx5_0_1"]
        assert reading.counters == {RX_BITS: 10, CORRECTED_BITS: 1}
        assert reading.fec_mode == "RS" and reading.fec == FecStats((), (0,), ())
        assert source.read(snap, ["mlx5_1"]) == {}  # only the devices asked for
    finally:
        source.close()


def test_another_sysfs_root_without_ethtool_path_asks_no_kernel(tmp_path: Path) -> None:
    roce = replace(port("mlx5_0", 1, layer="Ethernet"), netdev="lo")
    source = Phy(config(sysfsRoot=str(tmp_path)))
    try:
        assert source.read(host(device("mlx5_0", ports=(roce,))), ["mlx5_0"]) == {}
        assert source._kernel is None
    finally:
        source.close()


def test_fec_reply_attributes() -> None:
    stats = nl.nested(ek.ETHTOOL_A_FEC_STATS,
                      nl.attr(1, b"\0" * 4),  # ETHTOOL_A_FEC_STAT_PAD, as nla_put_64bit adds
                      nl.attr(ek.ETHTOOL_A_FEC_STAT_CORRECTED, struct.pack("=3Q", 30, 10, 20)),
                      nl.attr(ek.ETHTOOL_A_FEC_STAT_UNCORR, struct.pack("=Q", 2)))
    reply = nl.attr_u8(3, 1) + nl.attr_u32(ek.ETHTOOL_A_FEC_ACTIVE, 50) + stats
    assert ek.parse_fec_reply(reply) == ("RS", FecStats((30, 10, 20), (2,), ()))
    assert ek.parse_fec_reply(nl.attr_u32(ek.ETHTOOL_A_FEC_ACTIVE, 49)) == ("off", None)
    assert ek.parse_fec_reply(nl.attr_u32(ek.ETHTOOL_A_FEC_ACTIVE, 90))[0] == "mode 90"
    assert ek.parse_fec_reply(b"") == (None, None)
    header, = nl.attrs(ek.fec_request("eth0"))
    inner = nl.attr_map(header[1])
    assert nl.get_str(inner[2]) == "eth0" and nl.get_u32(inner[3]) == 4


def test_gstrings_slots() -> None:
    data = b"rx_bits_phy".ljust(32, b"\0") + b"x" * 32 + b"tx".ljust(32, b"\0")
    assert ek.parse_strings(data, 3) == ["rx_bits_phy", "x" * 32, "tx"]
