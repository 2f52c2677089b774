"""Mutations of a simulated host: port state, counters, reboot, removals, bad files.

Every function takes ROOT first and raises SimError for a bad argument. Values are written in
place (same inode) because the daemon re-reads open files with pread; only the removal
mutations rename, since a vanishing file or directory is exactly what they simulate.
"""

from __future__ import annotations

import os
import re
import shutil
import time
import uuid
from pathlib import Path
from typing import Any, Callable, Dict, Iterator, Optional, Sequence, Tuple

from . import adapter, kernel, phy, tree
from .fsio import (
    STASH,
    PathLike,
    PortId,
    SimError,
    discard,
    inside,
    stash,
    stash_key,
    symlink,
    unstash,
    write_in_place,
)
from .tree import save_manifest

HIDDEN_CLASS = ".hidden/class-infiniband"

Device = Dict[str, Any]


def _device(root: Path, name: str) -> Device:
    return tree.device(tree.load(root), name)


def _netdev_dir(root: Path, dev: Device, port: PortId) -> Optional[Path]:
    rel = tree.port_record(dev, port)["netdev_path"]
    return root / rel if rel else None


def _checked(func: Callable[[str], str], value: str) -> str:
    """Kernel text for a user-given state name; SimError instead of ValueError."""
    try:
        text = func(value)
    except ValueError as exc:
        raise SimError(str(exc)) from None
    return text


def set_port(
    root: PathLike,
    dev: str,
    port: PortId,
    *,
    state: Optional[str] = None,
    phys_state: Optional[str] = None,
    operstate: Optional[str] = None,
) -> None:
    """Write ports/<n>/state, phys_state and/or the port netdev's operstate."""
    top = Path(root)
    device = _device(top, dev)
    pdir = tree.port_dir(top, device, port)
    # Validate everything before writing anything, so a bad flag changes nothing.
    state_text = _checked(kernel.port_state_line, state) if state is not None else None
    phys_text = _checked(kernel.phys_state_line, phys_state) if phys_state is not None else None
    oper_text = _checked(kernel.operstate_line, operstate) if operstate is not None else None
    ndir = _netdev_dir(top, device, port)
    if oper_text is not None and ndir is None:
        raise SimError(f"{dev} port {port} has no netdev to set operstate on")
    if state_text is not None:
        write_in_place(pdir / "state", state_text)
    if phys_text is not None:
        write_in_place(pdir / "phys_state", phys_text)
    if oper_text is not None and ndir is not None:
        write_in_place(ndir / "operstate", oper_text)


def carrier(root: PathLike, dev: str, port: PortId, value: int) -> None:
    """Write the port netdev's ``carrier`` (0: carrier lost, 1: back), operstate untouched
    (the kernel's linkwatch updates operstate up to a second later)."""
    if value not in (0, 1):
        raise SimError(f"carrier is 0 or 1, got {value}")
    top = Path(root)
    ndir = _netdev_dir(top, _device(top, dev), port)
    if ndir is None:
        raise SimError(f"{dev} port {port} has no netdev")
    write_in_place(ndir / "carrier", f"{value}\n")


def uncable(root: PathLike, dev: str, port: PortId) -> None:
    """A pulled cable: DOWN / Polling, netdev operstate down (counters untouched)."""
    _cable(root, dev, port, plugged=False)


def recable(root: PathLike, dev: str, port: PortId) -> None:
    """The cable plugged back (undo :func:`uncable`): ACTIVE / LinkUp, netdev operstate up
    (counters untouched, as there)."""
    _cable(root, dev, port, plugged=True)


def _cable(root: PathLike, dev: str, port: PortId, plugged: bool) -> None:
    top = Path(root)
    device = _device(top, dev)
    oper = "up" if plugged else "down"
    if device.get("adapter") == "efa":
        # The efa driver reports ACTIVE/LinkUp whatever happens: only the
        # interface sees the cable.
        set_port(top, dev, port, operstate=oper)
        carrier(top, dev, port, int(plugged))
        return
    has_netdev = _netdev_dir(top, device, port) is not None
    set_port(top, dev, port, state="ACTIVE" if plugged else "DOWN",
             phys_state="LinkUp" if plugged else "Polling",
             operstate=oper if has_netdev else None)


def counter_path(root: PathLike, dev: str, port: PortId, name: str) -> Path:
    """Where counter NAME lives: counters/, hw_counters/, then the netdev (carrier_changes,
    statistics/<name>)."""
    top = Path(root)
    device = _device(top, dev)
    pdir = tree.port_dir(top, device, port)
    if "/" in name or name in ("", ".", ".."):
        raise SimError(f"counter name must be a file basename, got {name!r}")
    # ... and the device's own hw_counters/ (EFA's device statistics)
    candidates = [pdir / "counters" / name, pdir / "hw_counters" / name,
                  pdir.parent.parent / "hw_counters" / name]
    ndir = _netdev_dir(top, device, port)
    if ndir is not None:
        candidates.append(ndir / name if name == "carrier_changes" else ndir / "statistics" / name)
    for path in candidates:
        if os.path.lexists(path):
            return path
    raise SimError(f"unknown counter {name!r} on {dev} port {port}")


def _width(path: Path) -> Tuple[Optional[int], bool]:
    """(bits, saturates) of a counter file under hardware semantics; None = unbounded."""
    kind = path.parent.name
    if kind == "counters":
        return kernel.PMA_COUNTER_WIDTHS.get(path.name), True
    if kind == "hw_counters":
        return (64 if path.name in kernel.HW_COUNTERS_64 else kernel.HW_COUNTER_WIDTH), False
    return None, False


def counter_width(root: PathLike, dev: str, port: PortId, name: str) -> Optional[int]:
    """Bits of the counter on the hardware (None: a 64-bit or unbounded one): a value beyond
    them is one the hardware cannot show, and nichealthd takes it as unreadable."""
    return _width(counter_path(root, dev, port, name))[0]


def read_value(path: Path) -> int:
    """Integer content of a counter file; SimError when it is not a number."""
    try:
        text = path.read_text()
    except IsADirectoryError:
        raise SimError(f"{path} is unreadable (made a directory); run readable first") from None
    try:
        return int(text.strip())
    except ValueError:
        raise SimError(f"{path} holds {text.strip()!r}, not a number; use --set") from None


def counter(
    root: PathLike,
    dev: str,
    port: PortId,
    name: str,
    *,
    add: Optional[int] = None,
    set_to: Optional[int] = None,
    hardware_semantics: bool = False,
) -> int:
    """Add to or set a counter in place and return the value written.

    With hardware_semantics, --add saturates IB PMA counters at their width and wraps the 32-bit
    hw_counters at 2^32, as the hardware does; otherwise it is plain arithmetic.
    """
    if (add is None) == (set_to is None):
        raise SimError("give exactly one of --add N or --set N")
    path = counter_path(root, dev, port, name)
    if set_to is not None:
        value = set_to
    else:
        assert add is not None
        value = read_value(path) + add
        bits, saturates = _width(path)
        if hardware_semantics and bits is not None:
            top = (1 << bits) - 1
            value = min(value, top) if saturates else value % (1 << bits)
    if value < 0:
        raise SimError(f"counter values are unsigned; {name} would become {value}")
    write_in_place(path, f"{value}\n")
    return value


# Gb/s per lane of each InfiniBand generation (IBTA): what a bare number in set-rate becomes.
LANE_SPEEDS = {2.5: "SDR", 5.0: "DDR", 10.0: "QDR", 14.0: "FDR", 25.0: "EDR", 50.0: "HDR",
               100.0: "NDR", 200.0: "XDR"}
_RATE_TEXT = re.compile(r"[0-9]+(\.[0-9]+)? Gb/sec( \([0-9]+X [A-Za-z0-9]+\))?")
_RATE_NUMBER = re.compile(r"([0-9]+(?:\.[0-9]+)?)(?: ?G(?:b/sec)?)?")


def rate_text(rate: str, current: str) -> str:
    """The kernel's ``rate`` text for RATE: the text itself (``200 Gb/sec (4X HDR)``), or a
    number of Gb/s (``200``, ``200G``) at the port's current lane count, named by the
    generation of that per-lane speed (``400 Gb/sec (4X NDR)`` now, 200 -> 4X HDR)."""
    rate = rate.strip()
    if _RATE_TEXT.fullmatch(rate):
        return rate
    number = _RATE_NUMBER.fullmatch(rate)
    if number is None:
        raise SimError(f"rate must be like '200 Gb/sec (4X HDR)' or a number of Gb/s, "
                       f"got {rate!r}")
    gbps = float(number.group(1))
    if gbps <= 0:
        raise SimError(f"rate must be positive, got {rate!r}")
    shown = f"{gbps:g}"
    lanes = re.search(r"\(([0-9]+)X ", current)
    if lanes is None:
        return f"{shown} Gb/sec"
    width = int(lanes.group(1))
    generation = LANE_SPEEDS.get(gbps / width)
    return f"{shown} Gb/sec ({width}X {generation})" if generation else f"{shown} Gb/sec"


def set_rate(root: PathLike, dev: str, port: PortId, rate: str) -> str:
    """Write ports/<n>/rate (a link that trained at a lower speed or width); returns it."""
    top = Path(root)
    path = tree.port_dir(top, _device(top, dev), port) / "rate"
    try:
        current = path.read_text()
    except OSError:
        current = ""
    text = rate_text(rate, current)
    write_in_place(path, text + "\n")
    return text


def set_ber(root: PathLike, dev: str, port: PortId, ber: float) -> str:
    """The port's pre-FEC bit error ratio from now on (sim/phy.py); returns its netdev."""
    top = Path(root)
    netdev = tree.port_record(_device(top, dev), port).get("netdev")
    if not netdev:
        raise SimError(f"{dev} port {port} has no netdev: no physical-layer counters")
    phy.set_ber(top, str(netdev), ber)
    return str(netdev)


def flap(root: PathLike, dev: str, port: PortId, *, cycles: int, down: float,
         up: Optional[float] = None, sleep: Callable[[float], None] = time.sleep,
         tick: Optional[Callable[[int, str], None]] = None) -> None:
    """Take a port down and up ``cycles`` times, as a flapping link does, in the foreground.

    Each down: DOWN/Polling, operstate down, ``link_downed`` +1 (saturating, as the PMA
    counter) and ``carrier_changes`` +1 where the port has them; ``down`` seconds later
    ACTIVE/LinkUp, operstate up, ``carrier_changes`` +1; then ``up`` seconds (default:
    ``down``) before the next. A running daemon sees it all; the port ends ACTIVE, also when
    interrupted.
    """
    if cycles < 1:
        raise SimError(f"--cycles must be at least 1, got {cycles}")
    if down < 0 or (up is not None and up < 0):
        raise SimError("--down and --up are seconds >= 0")
    top = Path(root)
    device = _device(top, dev)
    tree.port_dir(top, device, port)  # a bad port fails before anything is written
    has_netdev = _netdev_dir(top, device, port) is not None
    names = [n for n in ("link_downed", "carrier_changes") if _has_counter(top, dev, port, n)]
    try:
        for index in range(cycles):
            set_port(top, dev, port, state="DOWN", phys_state="Polling",
                     operstate="down" if has_netdev else None)
            for name in names:
                counter(top, dev, port, name, add=1, hardware_semantics=True)
            if tick:
                tick(index + 1, "down")
            sleep(down)
            _bring_up(top, dev, port, has_netdev, names)
            if tick:
                tick(index + 1, "up")
            if index + 1 < cycles:
                sleep(down if up is None else up)
    except BaseException:
        _bring_up(top, dev, port, has_netdev, [])
        raise


def _bring_up(top: Path, dev: str, port: PortId, has_netdev: bool, names: list[str]) -> None:
    set_port(top, dev, port, state="ACTIVE", phys_state="LinkUp",
             operstate="up" if has_netdev else None)
    if "carrier_changes" in names:
        counter(top, dev, port, "carrier_changes", add=1)


def _has_counter(top: Path, dev: str, port: PortId, name: str) -> bool:
    try:
        return counter_path(top, dev, port, name).is_file()
    except SimError:
        return False


def _counter_files(root: Path, dev: Device) -> Iterator[Path]:
    """Every counter file of a device that is present and a regular file."""
    idir = root / dev["ib_path"]
    for port in dev["ports"]:
        pdir = idir / "ports" / port
        for sub in ("counters", "hw_counters"):
            if (pdir / sub).is_dir():
                yield from sorted(p for p in (pdir / sub).iterdir() if p.is_file())
    if (idir / "hw_counters").is_dir():  # a device's own statistics (EFA)
        yield from sorted(p for p in (idir / "hw_counters").iterdir() if p.is_file())
    for port in dev["ports"]:
        ndir = _netdev_dir(root, dev, port)
        if ndir is not None:
            yield ndir / "carrier_changes"
            if (ndir / "statistics").is_dir():
                yield from sorted(p for p in (ndir / "statistics").iterdir() if p.is_file())


def reset_counters(root: PathLike, dev: Optional[str] = None, port: Optional[PortId] = None) -> int:
    """Zero every counter (counters/, hw_counters/, carrier_changes, statistics/); returns how
    many files were written. Missing or unreadable files are skipped."""
    top = Path(root)
    manifest = tree.load(top)
    if dev is None:
        if port is not None:
            raise SimError("a port needs a device")
        devices = list(manifest["devices"])
    else:
        devices = [tree.device(manifest, dev)]
        if port is not None:
            tree.port_record(devices[0], port)
            devices = [dict(devices[0], ports={str(port): devices[0]["ports"][str(port)]})]
    count = 0
    for device in devices:
        for path in _counter_files(top, device):
            if path.is_file():
                write_in_place(path, "0\n")
                count += 1
    return count


def reboot(root: PathLike) -> str:
    """New boot_id, every counter 0, every port back to its profile's initial state.

    Removed devices/ports/files, a hidden class dir and unreadable files stay as they are: a
    reboot does not repair what the drill broke on purpose.
    """
    top = Path(root)
    manifest = tree.load(top)
    boot_id = str(uuid.uuid4())
    write_in_place(top / tree.BOOT_ID, boot_id + "\n")
    reset_counters(top)
    for dev in manifest["devices"]:
        for port, rec in dev["ports"].items():
            pdir = top / dev["ib_path"] / "ports" / port
            if pdir.is_dir():
                write_in_place(pdir / "state", kernel.port_state_line(rec["state"]))
                write_in_place(pdir / "phys_state", kernel.phys_state_line(rec["phys_state"]))
                if rec.get("rate") and (pdir / "rate").is_file():
                    write_in_place(pdir / "rate", rec["rate"] + "\n")  # renegotiated
            if rec["netdev_path"] and (top / rec["netdev_path"]).is_dir():
                write_in_place(top / rec["netdev_path"] / "operstate", rec["operstate"] + "\n")
                if (top / rec["netdev_path"] / "carrier").is_file():
                    write_in_place(top / rec["netdev_path"] / "carrier", "1\n")
    return boot_id


def _class_link(root: Path, dev: str) -> Path:
    if not (root / tree.CLASS_IB).is_dir():
        raise SimError("sys/class/infiniband is hidden; run unhide-class first")
    return root / tree.CLASS_IB / dev


def remove_device(root: PathLike, dev: str) -> None:
    """The IB device leaves the class directory: its dir and class link, and its character
    devices (uverbs, umad, issm entries and class links), go to ROOT/.removed; the PCI
    function stays on the bus (a driver unbind or a failed probe, as nichealthd sees it;
    :func:`nichealthd.sim.pcibus.pci_remove` takes a card off the bus)."""
    top = Path(root)
    manifest = tree.load(top)
    take_device(top, manifest, dev)
    save_manifest(top, manifest)


def take_device(top: Path, manifest: tree.Manifest, dev: str) -> None:
    """DEV's RDMA device leaves the class directory (dir, class link, character devices);
    the caller saves ``manifest``."""
    device = tree.device(manifest, dev)
    link = _class_link(top, dev)
    stash(top, top / device["ib_path"])
    stash(top, link)
    adapter.take_chardevs(top, manifest, dev)


def restore_device(root: PathLike, dev: str) -> None:
    """Bring a removed IB device back exactly as it was, character devices included."""
    top = Path(root)
    manifest = tree.load(top)
    give_back_device(top, manifest, dev)
    save_manifest(top, manifest)


def give_back_device(top: Path, manifest: tree.Manifest, dev: str, listed: bool = True
                     ) -> None:
    """Undo :func:`take_device` (the caller saves ``manifest``); with ``listed`` False
    its class link is dropped instead (the caller lists the device under a new name)."""
    device = tree.device(manifest, dev)
    link = _class_link(top, dev)
    adapter.check_chardevs(top, manifest, dev)
    unstash(top, top / device["ib_path"])
    if listed:
        unstash(top, link)
    else:
        discard(top, link)
    adapter.give_back_chardevs(top, manifest, dev)


def remove_port(root: PathLike, dev: str, port: PortId) -> None:
    """Make ports/<n> of a device vanish (moved to ROOT/.removed)."""
    top = Path(root)
    device = _device(top, dev)
    stash(top, tree.port_dir(top, device, port))


def restore_port(root: PathLike, dev: str, port: PortId) -> None:
    """Bring a removed port back."""
    top = Path(root)
    device = _device(top, dev)
    tree.port_record(device, port)
    unstash(top, top / device["ib_path"] / "ports" / str(port))


def remove_file(root: PathLike, path: PathLike) -> None:
    """Move ROOT/PATH (any file, dir or link) to ROOT/.removed."""
    top = Path(root)
    stash(top, inside(top, path))


def restore_file(root: PathLike, path: PathLike) -> None:
    """Move a removed ROOT/PATH back."""
    top = Path(root)
    unstash(top, inside(top, path))


def _regular_file(root: Path, path: PathLike) -> Path:
    target = inside(root, path)
    if target.is_dir():
        raise SimError(f"{path} is a directory (unreadable already?)")
    if not target.is_file():
        raise SimError(f"{path} does not exist")
    return target


def garbage(root: PathLike, path: PathLike, text: str = "garbage") -> None:
    """Write non-numeric text into ROOT/PATH in place (newline added unless empty)."""
    target = _regular_file(Path(root), path)
    write_in_place(target, text if not text or text.endswith("\n") else text + "\n")


def unreadable(root: PathLike, path: PathLike) -> None:
    """Make reads of ROOT/PATH fail (EISDIR): the file becomes a directory of the same name.

    chmod does not stop root from reading, so a directory is the portable failure. The file
    itself goes to ROOT/.removed for `readable`. An fd opened before still reads the old file.
    """
    top = Path(root)
    target = _regular_file(top, path)
    stash(top, target)
    target.mkdir()


def readable(root: PathLike, path: PathLike) -> None:
    """Undo `unreadable`: drop the placeholder directory and put the file back."""
    top = Path(root)
    target = inside(top, path)
    if not target.is_dir() or target.is_symlink():
        raise SimError(f"{path} was not made unreadable")
    if not os.path.lexists(top / STASH / stash_key(top, target)):
        raise SimError(f"no saved content for {path}; it was not made unreadable")
    shutil.rmtree(target)
    unstash(top, target)


def hide_class(root: PathLike) -> None:
    """Make sys/class/infiniband briefly absent (renamed to ROOT/.hidden)."""
    top = Path(root)
    src, dest = top / tree.CLASS_IB, top / HIDDEN_CLASS
    if not src.is_dir():
        raise SimError("sys/class/infiniband is already hidden")
    dest.parent.mkdir(parents=True, exist_ok=True)
    os.rename(src, dest)


def unhide_class(root: PathLike) -> None:
    """Bring sys/class/infiniband back."""
    top = Path(root)
    src, dest = top / HIDDEN_CLASS, top / tree.CLASS_IB
    if not src.is_dir():
        raise SimError("sys/class/infiniband is not hidden")
    os.rename(src, dest)


# ------------------------------------------------------------ driver events

UNLOADED = "driver_unloaded"  # manifest key: the devices a driver-unload took away


def _check_name(name: str) -> None:
    if not name or "/" in name or name in (".", "..") or not name.isprintable():
        raise SimError(f"a device name must be a plain file name, got {name!r}")


def _rename_record(manifest: tree.Manifest, old: str, new: str) -> Device:
    """The manifest under the new name: the device, its role and its VFs' physfn."""
    _check_name(new)
    if any(d["name"] == new for d in manifest["devices"]):
        raise SimError(f"{new} exists already")
    dev = tree.device(manifest, old)
    dev["name"] = new
    dev["ib_path"] = str(Path(dev["ib_path"]).parent / new)
    manifest["roles"] = {(new if k == old else k): v for k, v in manifest["roles"].items()}
    for other in manifest["devices"]:
        if other.get("physfn") == old:
            other["physfn"] = new
    return dev


def _move_device(root: Path, old_dir: Path, new: str) -> None:
    """infiniband/<old> -> infiniband/<new> under the same PCI function, class link too."""
    new_dir = old_dir.parent / new
    new_link = root / tree.CLASS_IB / new
    if os.path.lexists(new_dir) or os.path.lexists(new_link):
        raise SimError(f"{new} exists already")
    os.rename(old_dir, new_dir)
    write_in_place(new_dir / "node_desc", f"{new}\n")
    symlink(new_link, new_dir)


def rename_device(root: PathLike, dev: str, new: str) -> None:
    """The kernel registers DEV again as NEW at the same PCI function (what a driver reload
    may do): its dir and class link move in one step; hardware facts and counters stay."""
    top = Path(root)
    manifest = tree.load(top)
    device = tree.device(manifest, dev)
    link = _class_link(top, dev)
    idir = top / device["ib_path"]
    if not idir.is_dir():
        raise SimError(f"{dev} is removed (restore it first)")
    _rename_record(manifest, dev, new)
    if os.path.lexists(idir.parent / new) or os.path.lexists(top / tree.CLASS_IB / new):
        raise SimError(f"{new} exists already")
    # Old link first: a poll in between sees the device briefly absent, never a name whose
    # link leads nowhere (sysfs renames atomically; two renames cannot).
    os.unlink(link)
    _move_device(top, idir, new)
    adapter.retitle_chardevs(top, tree.device(manifest, new))
    save_manifest(top, manifest)


def unload_driver(root: PathLike, stagger: float = 0.0,
                  sleep: Callable[[float], None] = time.sleep) -> list[str]:
    """``rmmod mlx5_ib``: every present IB device vanishes (dirs and class links go to
    ROOT/.removed); the PCI functions stay on the bus, unbound. At once, or with ``stagger``
    a third of them at a time, ``stagger`` seconds apart (blocking), as an unload whose busy
    uverbs users hold some devices back does. Returns the names."""
    if stagger < 0:
        raise SimError(f"--stagger must be >= 0 seconds, got {stagger:g}")
    top = Path(root)
    manifest = tree.load(top)
    if manifest.get(UNLOADED):
        raise SimError("the driver is unloaded already; run driver-load first")
    if not (top / tree.CLASS_IB).is_dir():
        raise SimError("sys/class/infiniband is hidden; run unhide-class first")
    present = [d["name"] for d in manifest["devices"] if (top / d["ib_path"]).is_dir()]
    size = len(present) if not stagger else -(-len(present) // 3)
    groups = [present[i:i + size] for i in range(0, len(present), size or 1)]
    gone: list[str] = []
    for number, group in enumerate(groups):
        if number:
            sleep(stagger)
        for name in group:
            take_device(top, manifest, name)
            gone.append(name)
        manifest[UNLOADED] = gone
        save_manifest(top, manifest)
    return gone


def shifted(name: str, by: int) -> str:
    """``mlx5_3`` shifted by 12 is ``mlx5_15``: the kernel's next free index."""
    stem = name.rstrip("0123456789")
    if stem == name:
        raise SimError(f"cannot shift {name!r}: it does not end in a number")
    return f"{stem}{int(name[len(stem):]) + by}"


def _swapped(names: dict[str, str], swap: Sequence[str]) -> None:
    """Trade the new names of the two devices in ``swap`` (a SimError unless both return)."""
    if not swap:
        return
    first, second = swap
    if first == second or first not in names or second not in names:
        raise SimError(f"--swap needs two different devices that the driver brings back, "
                       f"got {first} and {second}")
    names[first], names[second] = names[second], names[first]


def load_driver(root: PathLike, rename: bool = False, swap: Sequence[str] = ()
                ) -> dict[str, str]:
    """``modprobe``: the devices of the last unload return with every counter at zero (the
    firmware reset or the new driver instance restarts them) and their ports as they were;
    with ``rename`` under shifted names (each index + the number of devices); with ``swap``
    (two names) those two under each other's names, each at its own PCI function (the probe
    order changed). Returns old -> new name of each device that came back."""
    top = Path(root)
    manifest = tree.load(top)
    gone = manifest.get(UNLOADED)
    if not gone:
        raise SimError("the driver is not unloaded; run driver-unload first")
    by = len(manifest["devices"])
    names = {name: shifted(name, by) if rename else name for name in gone}
    _swapped(names, swap)
    staying = {d["name"] for d in manifest["devices"]} - set(gone)
    clash = sorted(set(names.values()) & staying)
    if clash:  # checked before anything moves
        raise SimError(f"cannot rename onto present devices: {', '.join(clash)}")
    moving = [name for name in gone if names[name] != name]
    for name in gone:
        # A device that returns under another name is never listed under its old one (the
        # kernel registers it once, under the new name): its old class link is dropped.
        give_back_device(top, manifest, name, listed=name not in moving)
        reset_counters(top, name)
    if moving:
        dirs = {name: top / tree.device(manifest, name)["ib_path"] for name in moving}
        for name in moving:
            _rename_record(manifest, name, f"{name}.reloading")
        for name in moving:
            record = _rename_record(manifest, f"{name}.reloading", names[name])
            _move_device(top, dirs[name], names[name])
            adapter.retitle_chardevs(top, record)
    manifest.pop(UNLOADED, None)
    save_manifest(top, manifest)
    return names


def driver_reload(root: PathLike, down: float = 0.0, rename: bool = False,
                  sleep: Callable[[float], None] = time.sleep, swap: Sequence[str] = (),
                  stagger: float = 0.0) -> dict[str, str]:
    """Unload (at once, or staggered: :func:`unload_driver`), stay down ``down`` seconds
    (blocking), load again: a driver reload or a firmware reset as a running daemon sees it."""
    if down < 0:
        raise SimError(f"--down must be >= 0 seconds, got {down:g}")
    if swap:  # checked before anything moves
        top = Path(root)
        present = [d["name"] for d in tree.load(top)["devices"] if (top / d["ib_path"]).is_dir()]
        _swapped({name: name for name in present}, swap)
    unload_driver(root, stagger, sleep)
    if down:
        sleep(down)
    return load_driver(root, rename, swap)
