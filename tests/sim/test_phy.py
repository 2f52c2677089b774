"""``nichealthd-sim set-ber`` and the ethtool files it writes (sim/phy.py), read back by the
daemon's own parser (sources/phy.py)."""

from __future__ import annotations

import time
from pathlib import Path
from typing import Callable

import pytest

from nichealthd.sim import cli as sim_cli
from nichealthd.sources.phy import read_stats
from tests import simtrees


def _netdev(root: Path) -> str:
    return str(simtrees.manifest_of(root)["devices"][0]["ports"]["1"]["netdev"])


def test_set_ber_continues_the_counters_at_the_new_ratio(
        build: Callable[..., Path]) -> None:
    root = build("oci-h100")
    stats = root / "ethtool" / _netdev(root) / "stats"
    before = read_stats(stats.read_text(), time.time()).values
    assert sim_cli.main(["set-ber", str(root), "mlx5_0", "1", "1e-4"]) == 0
    now = time.time()
    after = read_stats(stats.read_text(), now).values
    assert after["rx_bits_phy"] >= before["rx_bits_phy"]  # no counter went backwards
    later = read_stats(stats.read_text(), now + 100).values
    ber = ((later["rx_corrected_bits_phy"] - after["rx_corrected_bits_phy"])
           / (later["rx_bits_phy"] - after["rx_bits_phy"]))
    assert abs(ber - 1e-4) < 1e-6


@pytest.mark.parametrize("line", ["rx_bits_phy: 100 +1e308/s @0",
                                  "rx_bits_phy: " + "9" * 5000,
                                  "rx_bits_phy: 1 +1e999/s @0",
                                  "rx_corrected_bits_phy: 1 +5/s @1e400"])
def test_set_ber_on_a_file_it_did_not_write_is_a_clear_error(
        build: Callable[..., Path], line: str, capsys: pytest.CaptureFixture[str]) -> None:
    root = build("oci-h100")
    stats = root / "ethtool" / _netdev(root) / "stats"
    stats.write_text(stats.read_text() + line + "\n")
    assert sim_cli.main(["set-ber", str(root), "mlx5_0", "1", "1e-4"]) == 2
    err = capsys.readouterr().err
    assert "not 'name: BASE +RATE/s @EPOCH'" in err or "beyond 64 bits" in err, err
    assert "Traceback" not in err
