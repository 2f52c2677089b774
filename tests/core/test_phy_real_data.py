"""The phy source and the link-BER family on real data of public projects (tests/data/phy/,
origins and licences in its README): captures of ``ethtool -S`` and the names mlx5 prints."""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path

from nichealthd.core.checks.link_ber import LINK_BER, BerPicture
from nichealthd.core.model import HostSnapshot
from nichealthd.core.phy import (
    CORRECTED_BITS,
    FACT,
    LINK_DOWN_EVENTS,
    RX_BITS,
    SYMBOL_ERRORS,
    wanted,
)
from nichealthd.sources.phy import Phy, read_stats

from .builders import Runner, config, device, host, port

DATA = Path(__file__).resolve().parent.parent / "data" / "phy"
NOW = 1_764_200_000.0


def _roce(when: float = 0.0) -> HostSnapshot:
    eth = replace(port("mlx5_0", 1, layer="Ethernet"), rate="400 Gb/sec (4X NDR)",
                  netdev="eth0")
    return host(device("mlx5_0", ports=(eth,)), when=when)


def test_a_connectx_4_capture_has_no_physical_layer_counters(tmp_path: Path) -> None:
    """An early mlx5 prints no PPCNT statistical group: its ``symbol_err`` is the MAC's, not
    ``rx_pcs_symbol_err_phy``. Nothing is read, nothing judged, nothing raised."""
    text = (DATA / "ethq-mlx5_core.stats").read_text()
    assert text.count("\n") == 309 and "symbol_err: 0" in text
    assert read_stats(text, NOW) == ({}, {})
    (tmp_path / "eth0").mkdir()
    (tmp_path / "eth0" / "stats").write_text(text)
    source = Phy(config(ethtoolPath=str(tmp_path)))
    try:
        assert source.read(_roce(), ["mlx5_0"]) == {}
    finally:
        source.close()


def test_a_name_with_a_space_and_the_header_lines_are_skipped() -> None:
    read = read_stats((DATA / "node_exporter-eth0.stats").read_text(), NOW)
    assert read == ({}, {})  # none of its counters is a physical-layer one, none garbage


def test_the_counters_read_are_the_names_mlx5_prints() -> None:
    names = (DATA / "mlx5-phy-statistics.names").read_text().split()
    assert all(wanted(name) for name in names)
    assert {CORRECTED_BITS, SYMBOL_ERRORS, LINK_DOWN_EVENTS} <= set(names)
    assert RX_BITS not in names  # hence the rate x window denominator on mlx5


def test_ber_arithmetic_through_the_driver_format(tmp_path: Path) -> None:
    """Two reads of mlx5's physical-layer group, printed as ``ethtool -S`` prints it (its
    names and order), a minute apart on a 400G port without ``rx_bits_phy``: the BER is
    Δ``rx_corrected_bits_phy`` ÷ (400e9 × 60 s), as a person computes it."""
    names = (DATA / "mlx5-phy-statistics.names").read_text().split()
    reads = [{"rx_corrected_bits_phy": 17_750_739, "rx_pcs_symbol_err_phy": 386},
             {"rx_corrected_bits_phy": 17_750_739 + 2_880_000, "rx_pcs_symbol_err_phy": 386}]
    (tmp_path / "eth0").mkdir()
    source = Phy(config(ethtoolPath=str(tmp_path)))
    runner = Runner(config(linkBerInterval="60s"))
    try:
        for n, values in enumerate(reads):
            lines = ["NIC statistics:"] + [f"     {name}: {values.get(name, 0)}"
                                           for name in names]
            (tmp_path / "eth0" / "stats").write_text("\n".join(lines) + "\n")
            snap = _roce(n * 60.0)
            facts = source.read(snap, ["mlx5_0"])
            assert facts["mlx5_0_1"].counters[CORRECTED_BITS] == values[CORRECTED_BITS]
            result = runner.poll(replace(snap, facts={FACT: facts}))
    finally:
        source.close()
    picture = result.pictures[LINK_BER.id]
    assert isinstance(picture, BerPicture)
    ber = picture.ports["mlx5_0_1"].ber
    assert ber is not None and f"{ber:.4g}" == f"{2_880_000 / (400e9 * 60):.4g}" == "1.2e-07"
    assert [e for e in result.events if "LinkBer" in e.message] == []  # 1.2e-7 is healthy
