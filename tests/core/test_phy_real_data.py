"""The phy source and the link-BER family on real data of public projects (tests/data/phy/,
origins and licences in its README): captures of ``ethtool -S`` and ``mlxlink``, and the names
mlx5 prints."""

from __future__ import annotations

import json
from dataclasses import replace
from pathlib import Path
from typing import Any

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


def _mlxlink_ber_info() -> dict[str, Any]:
    """The "Physical Counters and BER Info" of a real ``mlxlink -m -c --json`` of a
    ConnectX-7 400G port (tests/data/phy/README.md: origin and licence)."""
    capture = json.loads((DATA / "mlxlink_exporter-mft-4.34.1-400g-dr4.json").read_text())
    output = capture["result"]["output"]
    assert capture["status"] == {"code": 0, "message": "success"}
    assert (output["Operational Info"]["Speed"], output["Operational Info"]["Width"],
            output["Operational Info"]["FEC"]) == ("400G", "4x", "Standard_RS-FEC - (544,514)")
    info: dict[str, Any] = output["Physical Counters and BER Info"]
    return info


def test_mlxlink_raw_ber_is_its_lanes_raw_errors_over_the_line_bits() -> None:
    """mlxlink prints the firmware's raw BER as ``coef E-magnitude`` beside the raw errors of
    each lane since the last clear (PPCNT ``phy_raw_errors_laneN``: mlx5's
    ``rx_err_lane_N_phy``). A person's check: the lanes' sum over the bits a 400GBASE-R link
    carries in that time (4 lanes × 106.25 Gb/s, the PAM4 lane rate of RS(544,514)) gives the
    raw BER the capture states, to its one digit."""
    info = _mlxlink_ber_info()
    lanes = [int(v) for v in info["Raw Physical Errors Per Lane"]["values"]]
    assert lanes == [3_017_647, 15_132_549, 7_368_641, 9_233_545]
    seconds = float(info["Time Since Last Clear [Min]"]) * 60
    assert seconds == 163_086.0
    ber = sum(lanes) / (4 * 106.25e9 * seconds)
    assert f"{ber:.3e}" == "5.014e-10"
    coef, magnitude = info["Raw Physical BER"].split("E-")
    assert int(coef) == int(ber * 10 ** int(magnitude))  # "5E-10": the coefficient truncated
    # After FEC nothing was lost: no symbol error, and the effective BER mlxlink prints for
    # none is 15E-255 (a coefficient and a magnitude, not a measure).
    assert (info["Effective Physical Errors"], info["Effective Physical BER"]) == ("0", "15E-255")
    assert (info["Link Down Counter"], info["Link Error Recovery Counter"]) == ("0", "0")


def test_mlxlink_capture_through_the_phy_source_and_the_family(tmp_path: Path) -> None:
    """The capture's counters, under the names mlx5 prints for the same PPCNT registers, read
    through the ``phy`` source at the last clear (all 0) and ``Time Since Last Clear`` later:
    every lane read as written, and the family's BER is Δcorrected ÷ (400e9 × the window), as a
    person computes it. mlxlink prints no corrected-bits total, so the lanes' sum stands for
    it (each lane's raw errors are bits FEC corrected: no symbol error got through). The
    family divides by the data rate, not the line rate: 425/400 of mlxlink's figure, the same
    first digit; 5.3e-10 on a KP4 link is healthy."""
    info = _mlxlink_ber_info()
    lanes = [int(v) for v in info["Raw Physical Errors Per Lane"]["values"]]
    seconds = float(info["Time Since Last Clear [Min]"]) * 60
    last: dict[str, int] = {f"rx_err_lane_{n}_phy": v for n, v in enumerate(lanes)}
    last.update({CORRECTED_BITS: sum(lanes), SYMBOL_ERRORS: int(info["Effective Physical Errors"]),
                 LINK_DOWN_EVENTS: int(info["Link Down Counter"])})
    (tmp_path / "eth0").mkdir()
    source = Phy(config(ethtoolPath=str(tmp_path)))
    runner = Runner(config(linkBerInterval="60s"))
    try:
        for at, values in ((0.0, dict.fromkeys(last, 0)), (seconds, last)):
            lines = ["NIC statistics:"] + [f"     {name}: {n}" for name, n in values.items()]
            (tmp_path / "eth0" / "stats").write_text("\n".join(lines) + "\n")
            snap = _roce(at)
            facts = source.read(snap, ["mlx5_0"])
            assert dict(facts["mlx5_0_1"].counters) == values
            result = runner.poll(replace(snap, facts={FACT: facts}))
    finally:
        source.close()
    picture = result.pictures[LINK_BER.id]
    assert isinstance(picture, BerPicture)
    ber = picture.ports["mlx5_0_1"].ber
    assert ber is not None
    assert f"{ber:.4g}" == f"{sum(lanes) / (400e9 * seconds):.4g}" == "5.327e-10"
    assert f"{ber:.0e}"[0] == info["Raw Physical BER"][0] == "5"
    assert [e for e in result.events if "LinkBer" in e.message] == []
