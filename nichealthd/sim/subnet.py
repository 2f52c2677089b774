"""The InfiniBand subnet managers of the fake host's fabrics: stop, start, sweep, subnets.

With the SM gone, a port that retrains stays in INIT with its link up (phys_state LinkUp)
and without the LID and SM LID the SM would give it; nichealthd must call that one fabric
event, not a broken NIC per card (``nichealthd/core/checks/fabric.py``). ``stop`` takes every
ACTIVE InfiniBand port there (the worst case: the whole fabric retrained), or those of one
SM (``sm_lid``); ``start`` brings the ports it took back to ACTIVE with their LIDs.

A reboot meets every port in INIT, and the SM activates them sweep after sweep: ``hold``
(``reboot --sm-pending``) leaves every ACTIVE port waiting as ``stop`` does, ``activate``
brings one back (a slow sweep: one port, then the next a while later). ``move`` puts a port
on another subnet (another SM LID, another GID prefix): a fabric of its own, as a storage
fabric or one subnet per rail is.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any, Callable, List, Optional, Tuple

from . import kernel, tree
from .fsio import PathLike, PortId, SimError, write_in_place
from .mutate import reboot
from .tree import save_manifest

STOPPED = "subnet_manager_stopped"  # manifest key: [device, port, lid, sm_lid] it holds

Taken = List[Any]  # [device, port, lid, sm_lid]


def stop(root: PathLike, sm_lid: Optional[str] = None) -> List[Tuple[str, str]]:
    """Every ACTIVE InfiniBand port (of the SM at ``sm_lid``, e.g. ``0x2``, when given) goes
    to INIT / LinkUp, LID and SM LID 0. Returns the (device, port) pairs."""
    top = Path(root)
    manifest = tree.load(top)
    if manifest.get(STOPPED) and sm_lid is None:
        raise SimError("the subnet manager is stopped already; run sm start first")
    wanted = _lid(sm_lid) if sm_lid is not None else None
    taken = _take(top, manifest, lambda pdir: wanted is None or _read_lid(
        (pdir / "sm_lid").read_text()) == wanted)
    if not taken:
        raise SimError("no ACTIVE InfiniBand port: nothing for the subnet manager to lose"
                       if sm_lid is None else f"no ACTIVE InfiniBand port of SM LID {sm_lid}")
    manifest[STOPPED] = [*manifest.get(STOPPED, []), *taken]
    save_manifest(top, manifest)
    return [(name, number) for name, number, _, _ in taken]


def start(root: PathLike, sm_lid: Optional[str] = None) -> List[Tuple[str, str]]:
    """The SM (at ``sm_lid`` when given) configures and activates the ports :func:`stop`
    took: ACTIVE / LinkUp, their LID and SM LID back (a port still present and still waiting
    in INIT or ARMED)."""
    wanted = _lid(sm_lid) if sm_lid is not None else None
    return _give_back(root, lambda entry: wanted is None or _read_lid(entry[3]) == wanted,
                      "the subnet manager is not stopped; run sm stop first")


def activate(root: PathLike, dev: str, port: Optional[PortId] = None
             ) -> List[Tuple[str, str]]:
    """One sweep of the SM reaches ``dev``'s port (``port``, else its first it holds): ACTIVE
    with its LIDs, the other ports it holds still waiting."""
    chosen: List[Taken] = []

    def one(entry: Taken) -> bool:
        if chosen or entry[0] != dev or (port is not None and str(entry[1]) != str(port)):
            return False
        chosen.append(entry)
        return True

    return _give_back(root, one, f"the subnet manager holds no port of {dev}"
                      + (f" {port}" if port is not None else ""))


def hold(root: PathLike) -> Tuple[str, List[Tuple[str, str]]]:
    """A reboot whose ports wait for the SM: new boot ID, counters zeroed, ports back to the
    profile's state (:func:`nichealthd.sim.mutate.reboot`), then every ACTIVE InfiniBand port
    in INIT / LinkUp without its LIDs until :func:`start` or :func:`activate`. Returns the
    boot ID and the ports."""
    top = Path(root)
    held = tree.load(top).get(STOPPED)
    if held:
        _give_back(top, lambda entry: True, "")  # the LIDs of the last outage, restored
    boot_id = reboot(top)
    manifest = tree.load(top)
    taken = _take(top, manifest, lambda pdir: True)
    manifest[STOPPED] = taken
    save_manifest(top, manifest)
    return boot_id, [(name, number) for name, number, _, _ in taken]


def move(root: PathLike, dev: str, port: PortId, sm_lid: str,
         prefix: Optional[str] = None) -> str:
    """``dev``'s port joins the subnet of the SM at ``sm_lid`` (and, given, GID ``prefix``
    ``fe80:0000:0000:0001``): a fabric of its own. Returns ``<prefix>/<sm_lid>``."""
    top = Path(root)
    manifest = tree.load(top)
    record = tree.device(manifest, dev)
    if record["link_layer"] != "InfiniBand":
        raise SimError(f"{dev} is not an InfiniBand device: it has no subnet manager")
    pdir = tree.port_dir(top, record, port)
    gid = (pdir / "gids" / "0").read_text().strip().split(":")
    if prefix is not None:
        groups = prefix.split(":")
        if len(groups) != 4 or not all(_hex16(g) for g in groups):
            raise SimError(f"GID prefix {prefix!r}: four groups of hex digits, e.g. "
                           f"fe80:0000:0000:0001")
        gid[:4] = [f"{int(g, 16):04x}" for g in groups]
        write_in_place(pdir / "gids" / "0", ":".join(gid) + "\n")
    lid = _lid(sm_lid)
    if (pdir / "state").read_text().startswith("4:"):
        write_in_place(pdir / "sm_lid", f"0x{lid:x}\n")
    taken = manifest.get(STOPPED) or []
    for entry in taken:  # a port the SM holds gets the new SM LID when activated
        if entry[0] == dev and str(entry[1]) == str(port):
            entry[3] = f"0x{lid:x}"
    save_manifest(top, manifest)
    return f"{':'.join(gid[:4])}/0x{lid:x}"


def _take(top: Path, manifest: Any, which: Callable[[Path], bool]) -> List[Taken]:
    """Every ACTIVE InfiniBand port ``which`` accepts to INIT / LinkUp, LIDs 0."""
    taken = []
    for device in manifest["devices"]:
        if device["link_layer"] != "InfiniBand" or not (top / device["ib_path"]).is_dir():
            continue
        for number in device["ports"]:
            pdir = tree.port_dir(top, device, number)
            if not (pdir / "state").read_text().startswith("4:") or not which(pdir):
                continue
            lid, sm_lid = (pdir / "lid").read_text().strip(), (pdir / "sm_lid").read_text().strip()
            write_in_place(pdir / "state", kernel.port_state_line("INIT"))
            write_in_place(pdir / "phys_state", kernel.phys_state_line("LinkUp"))
            write_in_place(pdir / "lid", "0x0\n")
            write_in_place(pdir / "sm_lid", "0x0\n")
            taken.append([device["name"], number, lid, sm_lid])
    return taken


def _give_back(root: PathLike, which: Callable[[Taken], bool], none: str
               ) -> List[Tuple[str, str]]:
    """The held ports ``which`` accepts ACTIVE again with their LIDs (those still present
    and waiting); SimError ``none`` when it accepts none."""
    top = Path(root)
    manifest = tree.load(top)
    taken: List[Taken] = manifest.get(STOPPED) or []
    chosen = [entry for entry in taken if which(entry)]
    if not chosen:
        raise SimError(none)
    kept = [entry for entry in taken if entry not in chosen]
    if kept:
        manifest[STOPPED] = kept
    else:
        manifest.pop(STOPPED, None)
    back = []
    for name, number, lid, sm_lid in chosen:
        device = tree.device(manifest, name)
        pdir = top / device["ib_path"] / "ports" / str(number)
        if not (pdir / "state").is_file():
            continue
        if (pdir / "state").read_text().split(":")[0] not in ("2", "3"):
            continue
        write_in_place(pdir / "lid", lid + "\n")
        write_in_place(pdir / "sm_lid", sm_lid + "\n")
        write_in_place(pdir / "state", kernel.port_state_line("ACTIVE"))
        back.append((name, number))
    save_manifest(top, manifest)
    return back


def _lid(text: str) -> int:
    """``0x2`` or ``2`` -> 2; SimError for anything else."""
    raw = text.strip().lower()
    try:
        value = int(raw, 16) if raw.startswith("0x") else int(raw)
    except ValueError:
        raise SimError(f"SM LID {text!r}: a number such as 0x2") from None
    if not 0 < value < 0xC000:
        raise SimError(f"SM LID {text!r}: a unicast LID, 0x1 to 0xbfff")
    return value


def _read_lid(text: str) -> Optional[int]:
    """A LID as sysfs prints it (``0x1``); None when it is not one."""
    try:
        return int(text.strip(), 16)
    except ValueError:
        return None


def _hex16(group: str) -> bool:
    return 0 < len(group) <= 4 and all(c in "0123456789abcdefABCDEF" for c in group)
