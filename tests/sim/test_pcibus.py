"""One card's PCI transitions (sim/pcibus.py) and the staggered unload: what the daemon sees."""

from __future__ import annotations

import filecmp
import os
from pathlib import Path
from typing import Callable

import pytest

from nichealthd.sim import SimError, mutate, pcibus, tree

CLASS = "sys/class/infiniband"
BUS = "sys/bus/pci/devices"


@pytest.fixture
def root(build: Callable[..., Path]) -> Path:
    return build("dgx-h100")


def registered(root: Path) -> set[str]:
    return set(os.listdir(root / CLASS))


def test_a_firmware_reset_keeps_the_function_and_zeroes_the_counters(root: Path) -> None:
    mutate.counter(root, "mlx5_3", 1, "symbol_error", add=9)
    record = tree.device(tree.load(root), "mlx5_3")
    seen: list[set[str]] = []

    def during(seconds: float) -> None:
        assert seconds == 30
        seen.append(registered(root))
        assert (root / BUS / record["pci"] / "vendor").read_text() == "0x15b3\n"

    names = pcibus.firmware_reset(root, "mlx5_3", sleep=during)
    assert names[0] == "mlx5_3" and all(  # then its VFs
        tree.device(tree.load(root), n)["physfn"] == "mlx5_3" for n in names[1:])
    assert seen and not set(names) & seen[0]
    assert set(names) <= registered(root)
    port = root / CLASS / "mlx5_3/ports/1"
    assert (port / "counters/symbol_error").read_text() == "0\n"
    assert os.path.realpath(root / CLASS / "mlx5_3/device").endswith(record["pci"])
    with pytest.raises(SimError, match=">= 0"):
        pcibus.firmware_reset(root, "mlx5_3", down=-1)


def test_a_card_off_the_bus_takes_functions_netdevs_and_devices(root: Path) -> None:
    before = tree.show(root)
    record = tree.device(tree.load(root), "mlx5_5")
    netdev = record["ports"]["1"]["netdev"]
    names = pcibus.pci_remove(root, "mlx5_5")
    assert names[0] == "mlx5_5"
    assert not set(names) & registered(root)
    assert not os.path.lexists(root / BUS / record["pci"])
    assert not os.path.lexists(root / "sys/class/net" / netdev)
    assert not os.path.lexists(root / record["pci_path"])
    with pytest.raises(SimError, match="off the bus already"):
        pcibus.pci_remove(root, "mlx5_5")
    mutate.counter(root, "mlx5_0", 1, "symbol_error", add=1)  # the rest of the host lives on
    assert pcibus.pci_rescan(root, "mlx5_5") == names
    assert set(names) <= registered(root)
    assert (root / BUS / record["pci"] / "vendor").read_text() == "0x15b3\n"
    assert os.path.isdir(root / "sys/class/net" / netdev)
    assert tree.show(root) == before
    with pytest.raises(SimError, match="not off the bus"):
        pcibus.pci_rescan(root, "mlx5_5")


def test_a_dual_function_card_leaves_whole(build: Callable[..., Path]) -> None:
    root = build("dgx-h100")
    manifest = tree.load(root)
    cards: dict[str, list[str]] = {}
    for device in manifest["devices"]:
        if device["kind"] == "pf":
            cards.setdefault(device["card"], []).append(device["name"])
    pair = next(names for names in cards.values() if len(names) == 2)
    taken = pcibus.pci_remove(root, pair[0])
    assert set(pair) <= set(taken)
    pcibus.pci_rescan(root, pair[1])  # either function names the card
    assert set(pair) <= registered(root)


def test_a_staggered_unload_removes_a_third_at_a_time(root: Path) -> None:
    total = len(registered(root))
    left: list[int] = []
    gone = mutate.unload_driver(root, stagger=1.1,
                                sleep=lambda s: left.append(len(registered(root))))
    assert len(gone) == total and registered(root) == set()
    third = -(-total // 3)
    assert left == [total - third, total - 2 * third]
    assert mutate.load_driver(root) == {n: n for n in gone}
    assert len(registered(root)) == total
    with pytest.raises(SimError, match=">= 0"):
        mutate.unload_driver(root, stagger=-1)


def test_remove_device_leaves_the_function_on_the_bus(root: Path) -> None:
    record = tree.device(tree.load(root), "mlx5_3")
    mutate.remove_device(root, "mlx5_3")
    assert "mlx5_3" not in registered(root)
    assert filecmp.cmp(root / BUS / record["pci"] / "vendor",
                       root / record["pci_path"] / "vendor", shallow=False)
