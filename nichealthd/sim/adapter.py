"""The adapter side of a simulated host: character devices, unbound PFs, firmware, flags.

Built after the devices: one ``uverbsN`` per RDMA device under
``<function>/infiniband_verbs/`` and one ``umadN`` and ``issmN`` per port under
``<function>/infiniband_mad/``, linked from their class directories
(:mod:`nichealthd.sim.chardev` writes them when the host is made). Mutations:
``chardev-remove`` / ``chardev-restore`` (one entry, or a whole class directory); a
``remove-device`` (hot-unplug) takes the device's entries with it and ``restore-device`` brings
them back (:func:`take_chardevs`, :func:`give_back_chardevs`), and a rename rewrites their
``ibdev`` (:func:`retitle_chardevs`), as the kernel does; ``unbind``
/ ``bind`` (a PF whose driver let go: no ``infiniband/``, no ``net/``, no driver link; ``bind
--driver vfio-pci`` hands the unbound PF to another driver: a driver link and nothing else),
``fw`` (a flash: ``fw_ver`` rewritten in place) and ``link-admin`` (``flags`` IFF_UP).
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any, Dict, List, Optional

from . import tree
from .chardev import CLASS_MAD, CLASS_VERBS
from .fsio import PathLike, SimError, stash, symlink, unstash, write_in_place

CLASSES = {"verbs": CLASS_VERBS, "mad": CLASS_MAD}
KINDS = ("uverbs", "umad", "issm")
UNBOUND = "unbound"  # manifest key: PF name -> what unbind took away (and its other driver)
MLX5_CORE = "mlx5_core"
DRIVERS = "sys/bus/pci/drivers"
TAKEN = "removed_chardevs"  # manifest key: device -> the entries remove-device took away
IFF_UP = 0x1


def _entry_name(dev: Dict[str, Any], kind: str, port: Optional[int]) -> str:
    if kind not in KINDS:
        raise SimError(f"unknown character device kind {kind!r} (one of: {', '.join(KINDS)})")
    entries = dev.get("chardevs") or {}
    key = kind if kind == "uverbs" else f"{kind}:{port or 1}"
    if key not in entries:
        raise SimError(f"{dev['name']} has no {kind} entry"
                       + ("" if kind == "uverbs" else f" for port {port or 1}"))
    return str(entries[key])


def _class_of(kind: str) -> str:
    return CLASS_VERBS if kind == "uverbs" else CLASS_MAD


def remove_chardev(root: PathLike, dev: str, kind: str, port: Optional[int] = None) -> str:
    """One class entry of DEV vanishes (entry dir and class link); returns its name."""
    top = Path(root)
    device = tree.device(tree.load(top), dev)
    name = _entry_name(device, kind, port)
    link = top / _class_of(kind) / name
    if not os.path.lexists(link):
        raise SimError(f"{_class_of(kind)}/{name} is removed already")
    sub = "infiniband_verbs" if kind == "uverbs" else "infiniband_mad"
    stash(top, top / device["pci_path"] / sub / name)
    stash(top, link)
    return name


def restore_chardev(root: PathLike, dev: str, kind: str, port: Optional[int] = None) -> str:
    top = Path(root)
    device = tree.device(tree.load(top), dev)
    name = _entry_name(device, kind, port)
    sub = "infiniband_verbs" if kind == "uverbs" else "infiniband_mad"
    unstash(top, top / device["pci_path"] / sub / name)
    unstash(top, top / _class_of(kind) / name)
    return name


def _entry_paths(dev: Dict[str, Any]) -> List[str]:
    """ROOT-relative paths of every character device entry of DEV: its directory under the
    PCI function and its class link."""
    out = []
    for key, name in sorted((dev.get("chardevs") or {}).items()):
        kind = key.split(":")[0]
        sub = "infiniband_verbs" if kind == "uverbs" else "infiniband_mad"
        out.append(f"{dev['pci_path']}/{sub}/{name}")
        out.append(f"{_class_of(kind)}/{name}")
    return out


def take_chardevs(root: Path, manifest: tree.Manifest, dev: str) -> List[str]:
    """A hot-unplug of DEV: its uverbs / umad / issm entries vanish with it (those present;
    an entry removed before by chardev-remove stays removed). Recorded in ``manifest`` (the
    caller saves it); returns the paths taken."""
    taken = []
    for rel in _entry_paths(tree.device(manifest, dev)):
        if os.path.lexists(root / rel):
            stash(root, root / rel)
            taken.append(rel)
    manifest.setdefault(TAKEN, {})[dev] = taken
    return taken


def check_chardevs(root: Path, manifest: tree.Manifest, dev: str) -> None:
    """Raise before anything moves when :func:`give_back_chardevs` could not put an entry
    back (its directory is gone)."""
    taken = (manifest.get(TAKEN) or {}).get(dev, [])
    blocked = [rel for rel in taken if not (root / rel).parent.is_dir()]
    if blocked:
        raise SimError(f"cannot restore {dev}'s character device {blocked[0]}: its directory "
                       f"is removed (chardev-restore --class, or bind, first)")


def give_back_chardevs(root: Path, manifest: tree.Manifest, dev: str) -> None:
    """Undo :func:`take_chardevs` (the caller saves ``manifest``)."""
    check_chardevs(root, manifest, dev)
    for rel in (manifest.get(TAKEN) or {}).get(dev, []):
        unstash(root, root / rel)
    (manifest.get(TAKEN) or {}).pop(dev, None)


def retitle_chardevs(root: Path, dev: Dict[str, Any]) -> None:
    """The ``ibdev`` of DEV's present entries, after a rename: its new name."""
    for rel in _entry_paths(dev):
        ibdev = root / rel / "ibdev"
        if "/class/" not in f"/{rel}" and ibdev.is_file():
            write_in_place(ibdev, dev["name"] + "\n")


def remove_class(root: PathLike, which: str) -> None:
    """A whole class directory vanishes (``rmmod ib_umad``, ``ib_uverbs``)."""
    if which not in CLASSES:
        raise SimError(f"unknown class {which!r} (verbs or mad)")
    stash(Path(root), Path(root) / CLASSES[which])


def restore_class(root: PathLike, which: str) -> None:
    if which not in CLASSES:
        raise SimError(f"unknown class {which!r} (verbs or mad)")
    unstash(Path(root), Path(root) / CLASSES[which])


def unbind(root: PathLike, dev: str) -> str:
    """The driver lets go of DEV's PCI function (or never probed it): its RDMA device, netdev
    and character devices vanish, the function stays on the bus. Returns its PCI address."""
    top = Path(root)
    manifest = tree.load(top)
    device = tree.device(manifest, dev)
    if device["kind"] != "pf":
        raise SimError(f"{dev} is not a physical function")
    pdir = top / device["pci_path"]
    record = (manifest.get(UNBOUND) or {}).get(dev)
    if record is not None and record.get("driver"):  # bound to another driver: it lets go
        _release(top, device, record.pop("driver"))
        tree.save_manifest(top, manifest)
        return str(device["pci"])
    if not (pdir / "driver").is_symlink():
        raise SimError(f"{dev} ({device['pci']}) is unbound already")
    moved = [rel for rel in ("infiniband", "net", "infiniband_verbs", "infiniband_mad",
                             "driver") if os.path.lexists(pdir / rel)]
    links = _bound_links(dev, device)
    for rel in moved:
        stash(top, pdir / rel)
    for link in links:
        if os.path.lexists(top / link):
            stash(top, top / link)
    manifest.setdefault(UNBOUND, {})[dev] = {"dirs": moved, "links": links}
    tree.save_manifest(top, manifest)
    return str(device["pci"])


def _bound_links(dev: str, device: Dict[str, Any]) -> List[str]:
    """What the bound driver adds outside the function's directory: the class entries of its
    RDMA device, netdev and character devices, and the driver's link to the function."""
    links = [f"{tree.CLASS_IB}/{dev}"]
    port = (device.get("ports") or {}).get("1") or {}
    if port.get("netdev"):
        links.append(f"sys/class/net/{port['netdev']}")
    links.extend(f"{_class_of(kind.split(':')[0])}/{name}"
                 for kind, name in (device.get("chardevs") or {}).items())
    links.append(f"{tree.MLX5_DRIVER}/{device['pci']}")
    return links


def bind(root: PathLike, dev: str, driver: Optional[str] = None) -> str:
    """Undo :func:`unbind`: mlx5_core probes the function again. With another ``driver``
    (``vfio-pci`` for passthrough, say) that driver takes the unbound function instead: its
    driver link, no RDMA device, netdev or character devices; ``unbind`` lets it go again."""
    top = Path(root)
    manifest = tree.load(top)
    record = (manifest.get(UNBOUND) or {}).get(dev)
    if record is None:
        raise SimError(f"{dev} is not unbound")
    device = tree.device(manifest, dev)
    pdir = top / device["pci_path"]
    other = record.get("driver")
    if driver not in (None, MLX5_CORE):
        if not driver or not all(c.isalnum() or c in "_-" for c in driver):
            raise SimError(f"a driver name is letters, digits, '_' and '-', got {driver!r}")
        if other:
            raise SimError(f"{dev} is bound to {other} already; unbind it first")
        drv = top / DRIVERS / driver
        drv.mkdir(parents=True, exist_ok=True)
        symlink(pdir / "driver", drv)
        symlink(drv / device["pci"], pdir)
        record["driver"] = driver
        tree.save_manifest(top, manifest)
        return str(device["pci"])
    if other:
        _release(top, device, other)
    del manifest[UNBOUND][dev]
    for rel in record["dirs"]:
        unstash(top, pdir / rel)
    for link in record["links"]:
        unstash(top, top / link)
    tree.save_manifest(top, manifest)
    return str(device["pci"])


def _release(top: Path, device: Dict[str, Any], driver: str) -> None:
    """The other driver of :func:`bind` lets go: its links go, the function is unbound."""
    os.unlink(top / device["pci_path"] / "driver")
    os.unlink(top / DRIVERS / driver / device["pci"])


def set_firmware(root: PathLike, dev: str, version: str) -> None:
    """A firmware flash seen by the driver: ``fw_ver`` rewritten in place."""
    if not version or not version.isprintable() or " " in version:
        raise SimError(f"a firmware version is one word, got {version!r}")
    top = Path(root)
    device = tree.device(tree.load(top), dev)
    path = top / device["ib_path"] / "fw_ver"
    if not path.is_file():
        raise SimError(f"{dev} has no fw_ver (removed or unbound?)")
    write_in_place(path, version + "\n")


def link_admin(root: PathLike, dev: str, up: bool, port: int = 1) -> None:
    """``ip link set <netdev> up|down``: the IFF_UP bit of ``flags`` and the operstate."""
    top = Path(root)
    device = tree.device(tree.load(top), dev)
    rec = tree.port_record(device, port)
    if not rec["netdev_path"]:
        raise SimError(f"{dev} port {port} has no netdev")
    ndir = top / rec["netdev_path"]
    flags_path = ndir / "flags"
    flags = int(flags_path.read_text().strip(), 16) if flags_path.is_file() else 0x1003
    flags = flags | IFF_UP if up else flags & ~IFF_UP
    write_in_place(flags_path, f"{flags:#x}\n")
    if not up:
        write_in_place(ndir / "operstate", "down\n")
