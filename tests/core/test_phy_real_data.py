"""The phy source and the link-BER family on real data of public projects (tests/data/phy/,
origins and licences in its README): captures of ``ethtool -S`` and ``mlxlink``, and the names
mlx5 prints."""

from __future__ import annotations

import json
from dataclasses import replace
from pathlib import Path
from typing import Any, Optional, Sequence

import pytest

from nichealthd.core.checks.link_ber import LINK_BER, BerPicture
from nichealthd.core.model import HostSnapshot
from nichealthd.sources.phy import (
    CORRECTED_BITS,
    LINK_DOWN_EVENTS,
    PHY,
    RX_BITS,
    SYMBOL_ERRORS,
    Phy,
    read_stats,
    wanted,
)

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


def _through_the_family(tmp_path: Path, reads: Sequence[tuple[float, dict[str, int]]]
                        ) -> tuple[Optional[float], list[str]]:
    """Each read printed as ``ethtool -S`` prints it (its names in order) at its time, read
    by the ``phy`` source (every counter as printed) and polled by the link-BER family: the
    BER of the last window and the family's events."""
    (tmp_path / "eth0").mkdir()
    source = Phy(config(ethtoolPath=str(tmp_path)))
    runner = Runner(config(linkBerInterval="60s"))
    try:
        for at, values in reads:
            lines = ["NIC statistics:"] + [f"     {key}: {n}" for key, n in values.items()]
            (tmp_path / "eth0" / "stats").write_text("\n".join(lines) + "\n")
            snap = _roce(at)
            facts = source.read(snap, ["mlx5_0"])
            assert dict(facts["mlx5_0_1"].counters) == values
            result = runner.poll(replace(snap, facts={PHY: facts}))
    finally:
        source.close()
    picture = result.pictures[LINK_BER.id]
    assert isinstance(picture, BerPicture)
    ber = picture.ports["mlx5_0_1"].ber
    assert ber is None or isinstance(ber, float)
    return ber, [e.message for e in result.events if "LinkBer" in e.message]


def test_ber_arithmetic_through_the_driver_format(tmp_path: Path) -> None:
    """Two reads of mlx5's physical-layer group, printed as ``ethtool -S`` prints it (its
    names and order), a minute apart on a 400G port without ``rx_bits_phy``: the BER is
    Δ``rx_corrected_bits_phy`` ÷ (400e9 × 60 s), as a person computes it."""
    names = (DATA / "mlx5-phy-statistics.names").read_text().split()
    reads = [{"rx_corrected_bits_phy": 17_750_739, "rx_pcs_symbol_err_phy": 386},
             {"rx_corrected_bits_phy": 17_750_739 + 2_880_000, "rx_pcs_symbol_err_phy": 386}]
    ber, events = _through_the_family(
        tmp_path, [(n * 60.0, {name: values.get(name, 0) for name in names})
                   for n, values in enumerate(reads)])
    assert ber is not None and f"{ber:.4g}" == f"{2_880_000 / (400e9 * 60):.4g}" == "1.2e-07"
    assert events == []  # 1.2e-7 is healthy


# Two reads of one ConnectX-7 400G port by ``mlxlink --json`` (tests/data/phy/README.md: origin
# and licence), 2718.1 and 4876.6 minutes after the counters were cleared.
MLXLINK = ("mlxlink_exporter-mft-4.34.1-400g-dr4.json",
           "mlxlink_exporter-mft-4.34.1-400g-fec-serdes.json")
LANE_GBPS = 106.25  # a 400GBASE-R PAM4 lane with RS(544,514): 4 of them make its 425 Gb/s


def _mlxlink(name: str) -> dict[str, Any]:
    """The output of a real ``mlxlink --json``, after the facts every test here relies on."""
    capture = json.loads((DATA / name).read_text())
    output: dict[str, Any] = capture["result"]["output"]
    assert capture["status"] == {"code": 0, "message": "success"}
    assert (output["Operational Info"]["Speed"], output["Operational Info"]["Width"],
            output["Operational Info"]["FEC"]) == ("400G", "4x", "Standard_RS-FEC - (544,514)")
    return output


def _lanes_and_seconds(info: dict[str, Any]) -> tuple[list[int], float]:
    """Its raw errors per lane and the seconds since the last clear."""
    lanes = [int(v) for v in info["Raw Physical Errors Per Lane"]["values"]]
    return lanes, float(info["Time Since Last Clear [Min]"]) * 60


@pytest.mark.parametrize(("name", "lanes", "seconds", "ber"), [
    (MLXLINK[0], [3_017_647, 15_132_549, 7_368_641, 9_233_545], 163_086.0, "5.014e-10"),
    (MLXLINK[1], [5_550_000, 28_835_305, 14_640_119, 16_746_846], 292_596.0, "5.289e-10"),
])
def test_mlxlink_raw_ber_is_its_lanes_raw_errors_over_the_line_bits(
        name: str, lanes: list[int], seconds: float, ber: str) -> None:
    """mlxlink prints the firmware's raw BER as ``coef E-magnitude`` beside the raw errors of
    each lane since the last clear (PPCNT ``phy_raw_errors_laneN``: mlx5's
    ``rx_err_lane_N_phy``). A person's check: the lanes' sum over the bits a 400GBASE-R link
    carries in that time (4 lanes × 106.25 Gb/s) gives the raw BER the capture states, to its
    one digit (the coefficient truncated)."""
    info = _mlxlink(name)["Physical Counters and BER Info"]
    assert _lanes_and_seconds(info) == (lanes, seconds)
    computed = sum(lanes) / (4 * LANE_GBPS * 1e9 * seconds)
    assert f"{computed:.4g}" == ber
    coef, magnitude = info["Raw Physical BER"].split("E-")
    assert (int(coef), int(magnitude)) == (5, 10) == (int(computed * 1e10), 10)
    # After FEC nothing was lost: no symbol error, and the effective BER mlxlink prints for
    # none is 15E-255 (a coefficient and a magnitude, not a measure).
    assert (info["Effective Physical Errors"], info["Effective Physical BER"]) == ("0", "15E-255")
    assert (info["Link Down Counter"], info["Link Error Recovery Counter"]) == ("0", "0")


def test_mlxlink_fec_histogram_fills_the_line_and_counts_the_lanes_errors() -> None:
    """The second read also carries the FEC histogram (codewords by the number of RS symbols
    corrected in each). A person's check of the BER's denominator and numerator: its codewords
    × 5440 bits (RS(544,514): 544 ten-bit symbols) are the bits 425 Gb/s carries since the
    clear, and Σ k × codewords with k errors is the lanes' raw errors, to 6 digits (the two
    registers are read a moment apart): either way the raw BER is 5.289e-10."""
    output = _mlxlink(MLXLINK[1])
    histogram = {int(entry["values"][0].strip("[]")): int(entry["values"][1])
                 for key, entry in output["Histogram of FEC Errors"].items() if key != "Header"}
    assert sorted(histogram) == list(range(16))  # RS(544,514) corrects up to 15 symbols
    assert histogram[0] == 22_858_119_037_881 and histogram[1] == 65_755_507
    lanes, seconds = _lanes_and_seconds(output["Physical Counters and BER Info"])
    line_bits = sum(histogram.values()) * 5440
    assert abs(line_bits / (4 * LANE_GBPS * 1e9 * seconds) - 1) < 1e-4  # 0.1 min printed
    corrected = sum(k * n for k, n in histogram.items())
    assert (corrected, sum(lanes)) == (65_772_281, 65_772_270)
    assert f"{corrected:.6g}" == f"{sum(lanes):.6g}"
    assert f"{corrected / line_bits:.4g}" == "5.289e-10"


@pytest.mark.parametrize(("name", "ber"), [(MLXLINK[0], "5.327e-10"), (MLXLINK[1], "5.62e-10")])
def test_mlxlink_capture_through_the_phy_source_and_the_family(
        tmp_path: Path, name: str, ber: str) -> None:
    """The capture's counters, under the names mlx5 prints for the same PPCNT registers, read
    through the ``phy`` source at the last clear (all 0) and ``Time Since Last Clear`` later:
    every counter read as written, and the family's BER is Δcorrected ÷ (400e9 × the window),
    as a person computes it. mlxlink prints no corrected-bits total, so the lanes' sum stands
    for it (each lane's raw errors are errors FEC corrected: no symbol error got through).
    The family divides by the data rate, not the line rate: 425/400 of mlxlink's figure, the
    same first digit; 5e-10 on a KP4 link is healthy."""
    info = _mlxlink(name)["Physical Counters and BER Info"]
    lanes, seconds = _lanes_and_seconds(info)
    last: dict[str, int] = {f"rx_err_lane_{n}_phy": v for n, v in enumerate(lanes)}
    last.update({CORRECTED_BITS: sum(lanes), SYMBOL_ERRORS: int(info["Effective Physical Errors"]),
                 LINK_DOWN_EVENTS: int(info["Link Down Counter"])})
    computed, events = _through_the_family(
        tmp_path, [(0.0, dict.fromkeys(last, 0)), (seconds, last)])
    assert computed is not None
    assert f"{computed:.4g}" == f"{sum(lanes) / (400e9 * seconds):.4g}" == ber
    # its coefficient, truncated as mlxlink prints it, is the capture's
    assert int(computed * 1e10) == int(info["Raw Physical BER"].split("E-")[0]) == 5
    assert events == []
