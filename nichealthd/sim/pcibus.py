"""One card's transitions on the PCI bus: a firmware reset (the function stays) and a card that
falls off the bus (the function goes too).

The two look alike in ``/sys/class/infiniband`` — the card's RDMA devices vanish — and differ
under ``/sys/bus/pci/devices``, which is how nichealthd tells a driver event from a broken NIC
(``nichealthd/core/checks/driver.py``). A card is its physical functions that share PCI
domain:bus:device (a dual-port card has two); its SR-IOV VFs go with them.
"""

from __future__ import annotations

import os
import time
from pathlib import Path
from typing import Any, Callable, Dict, List

from . import tree
from .fsio import PathLike, SimError, stash, unstash
from .mutate import give_back_device, reset_counters, take_device
from .tree import MLX5_DRIVER, save_manifest

OFF_BUS = "off_pci_bus"  # manifest key: card -> what pci-remove took, for pci-rescan
PARKED = ".offbus"  # ROOT/.offbus/<address>: the function directories of a card off the bus


def card_functions(manifest: tree.Manifest, dev: str) -> List[Dict[str, Any]]:
    """The manifest records of DEV's card: its physical functions, then their VFs."""
    card = tree.device(manifest, dev)["card"]
    pfs = [d for d in manifest["devices"] if d["card"] == card and d["kind"] == "pf"]
    names = {d["name"] for d in pfs}
    return pfs + [d for d in manifest["devices"] if d.get("physfn") in names]


def firmware_reset(root: PathLike, dev: str, down: float = 30.0,
                   sleep: Callable[[float], None] = time.sleep) -> List[str]:
    """``mlxfwreset`` of DEV's card: its RDMA devices vanish for ``down`` seconds (blocking)
    while its PCI functions stay on the bus, then return at the same addresses under the
    same names with every counter at zero. Returns the names."""
    if down < 0:
        raise SimError(f"--down must be >= 0 seconds, got {down:g}")
    top = Path(root)
    manifest = tree.load(top)
    names = [d["name"] for d in card_functions(manifest, dev)
             if (top / d["ib_path"]).is_dir()]
    if not names:
        raise SimError(f"{dev}'s card has no RDMA device registered (removed or unbound?)")
    for name in names:
        take_device(top, manifest, name)
    save_manifest(top, manifest)
    if down:
        sleep(down)
    for name in names:
        give_back_device(top, manifest, name)
        reset_counters(top, name)
    save_manifest(top, manifest)
    return names


def pci_remove(root: PathLike, dev: str) -> List[str]:
    """DEV's card falls off the PCI bus (a surprise link-down, a dead card or riser): its
    RDMA devices, netdevs, driver bindings and PCI functions all vanish. Returns the names."""
    top = Path(root)
    manifest = tree.load(top)
    card = tree.device(manifest, dev)["card"]
    if card in (manifest.get(OFF_BUS) or {}):
        raise SimError(f"{dev}'s card {card} is off the bus already; run pci-rescan first")
    taken: List[str] = []
    names = []
    for record in card_functions(manifest, dev):
        if (top / record["ib_path"]).is_dir():
            take_device(top, manifest, record["name"])
            names.append(record["name"])
        for rel in _bus_links(record):
            if os.path.lexists(top / rel):
                stash(top, top / rel)
                taken.append(rel)
        # The function's own directory (its net/ and what take_device left) is parked
        # whole, outside the stash, which holds the device's removed entries below it.
        parked = top / PARKED / record["pci"]
        parked.parent.mkdir(parents=True, exist_ok=True)
        os.rename(top / record["pci_path"], parked)
    manifest.setdefault(OFF_BUS, {})[card] = {"paths": taken, "devices": names}
    save_manifest(top, manifest)
    return names


def pci_rescan(root: PathLike, dev: str) -> List[str]:
    """Undo :func:`pci_remove`: ``echo 1 > /sys/bus/pci/rescan`` finds the card again and the
    driver probes it; its devices return with every counter at zero. Returns the names."""
    top = Path(root)
    manifest = tree.load(top)
    card = tree.device(manifest, dev)["card"]
    record = (manifest.get(OFF_BUS) or {}).pop(card, None)
    if record is None:
        raise SimError(f"{dev}'s card {card} is not off the bus")
    for function in card_functions(manifest, dev):
        os.rename(top / PARKED / function["pci"], top / function["pci_path"])
    for rel in reversed(record["paths"]):
        unstash(top, top / rel)
    for name in record["devices"]:
        give_back_device(top, manifest, name)
        reset_counters(top, name)
    save_manifest(top, manifest)
    return list(record["devices"])


def _bus_links(record: Dict[str, Any]) -> List[str]:
    """The links to a function that leave the bus with it (ROOT-relative): its netdev's
    class link, its driver's link to it and its bus link."""
    port = (record.get("ports") or {}).get("1") or {}
    links = [f"sys/class/net/{port['netdev']}"] if port.get("netdev") else []
    return links + [f"{MLX5_DRIVER}/{record['pci']}", f"sys/bus/pci/devices/{record['pci']}"]
