"""The simulated modules: healthy pages for every RoCE port, set-optics changes one port."""

from __future__ import annotations

from pathlib import Path
from typing import Any, Callable

import pytest

from nichealthd.sim import SimError, tree
from nichealthd.sim import optics as sim_optics
from nichealthd.sources import module_pages
from nichealthd.sources.optics import FilePages, read_port
from nichealthd.sources.optics_facts import dbm


def modules(root: Path) -> set[str]:
    return {p.name for p in (root / "ethtool").iterdir() if (p / "module").is_dir()}


def test_every_roce_port_has_a_module_and_no_ib_port(built: Callable[[str], Path]) -> None:
    root = built("dgx-h100")
    manifest = tree.load(root)
    eth = {d["ports"]["1"]["netdev"] for d in manifest["devices"]
           if d["kind"] == "pf" and d["link_layer"] == "Ethernet"}
    assert eth and modules(root) == eth


def test_set_optics_rewrites_one_port_and_is_read_back(build: Callable[..., Path]) -> None:
    root = build("a100-roce")
    manifest = tree.load(root)
    one, other = tree.device(manifest, "mlx5_1"), tree.device(manifest, "mlx5_2")
    pages = FilePages(str(root / "ethtool"))
    before = read_port(pages, other["ports"]["1"]["netdev"])
    assert sim_optics.set_optics(root, one, 1, rx_power=-11.0, temperature=72.0) == [
        "Rx power -11 dBm", "temperature 72 °C"]
    fact = read_port(pages, one["ports"]["1"]["netdev"])
    assert fact.diagnostics is not None and fact.diagnostics.spec == module_pages.SFF8636
    assert fact.diagnostics.temperature == pytest.approx(72.0)
    rx = fact.diagnostics.lanes["rx_power"]
    assert [round(dbm(v or 0.0), 1) for v in rx] == [-11.0] * 4
    assert fact.diagnostics.lanes["tx_bias"] == pytest.approx((7.5,) * 4)  # kept
    assert read_port(pages, other["ports"]["1"]["netdev"]) == before


@pytest.mark.parametrize("kwargs, message", [
    ({}, "give --rx-power, --tx-bias, --tx-power, --temperature and/or --module"),
    ({"rx_power": -41.0}, "--rx-power must be between -40 and 8 dBm"),
    ({"temperature": 130.0}, "--temperature must be between -40 and 125"),
    ({"module": "fibre"}, "--module must be one of optical, passive-dac"),
    ({"module": "twin-port"}, "--module twin-port needs --twin"),
    ({"rx_power": -3.0, "lanes": "9"}, "--lanes must name lanes 1 to 8"),
    ({"rx_power": -3.0, "lanes": "5-8"}, "the module has 4 lanes"),
    ({"rx_power": -3.0, "lanes": "x"}, "is not like 5-8 or 1,3"),
])
def test_set_optics_refuses_bad_arguments(build: Callable[..., Path],
                                          kwargs: dict[str, Any], message: str) -> None:
    root = build("a100-roce")
    with pytest.raises(SimError, match=message):
        sim_optics.set_optics(root, tree.device(tree.load(root), "mlx5_1"), 1, **kwargs)
