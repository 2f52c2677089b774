"""The InfiniBand subnet manager of the fake host's fabric: stop it, start it again.

With the SM gone, a port that retrains stays in INIT with its link up (phys_state LinkUp)
and without the LID and SM LID the SM would give it; nichealthd must call that one fabric
event, not a broken NIC per card (``nichealthd/core/checks/fabric.py``). ``stop`` takes every
ACTIVE InfiniBand port there (the worst case: the whole fabric retrained), ``start`` brings
the ports it took back to ACTIVE with their LIDs.
"""

from __future__ import annotations

from pathlib import Path
from typing import List, Tuple

from . import kernel, tree
from .fsio import PathLike, SimError, write_in_place
from .mutate import save_manifest

STOPPED = "subnet_manager_stopped"  # manifest key: [device, port, lid, sm_lid] it took


def stop(root: PathLike) -> List[Tuple[str, str]]:
    """Every ACTIVE InfiniBand port goes to INIT / LinkUp, LID and SM LID 0. Returns the
    (device, port) pairs."""
    top = Path(root)
    manifest = tree.load(top)
    if manifest.get(STOPPED):
        raise SimError("the subnet manager is stopped already; run sm start first")
    taken = []
    for device in manifest["devices"]:
        if device["link_layer"] != "InfiniBand" or not (top / device["ib_path"]).is_dir():
            continue
        for number in device["ports"]:
            pdir = tree.port_dir(top, device, number)
            if not (pdir / "state").read_text().startswith("4:"):
                continue
            lid, sm_lid = (pdir / "lid").read_text().strip(), (pdir / "sm_lid").read_text().strip()
            write_in_place(pdir / "state", kernel.port_state_line("INIT"))
            write_in_place(pdir / "phys_state", kernel.phys_state_line("LinkUp"))
            write_in_place(pdir / "lid", "0x0\n")
            write_in_place(pdir / "sm_lid", "0x0\n")
            taken.append([device["name"], number, lid, sm_lid])
    if not taken:
        raise SimError("no ACTIVE InfiniBand port: nothing for the subnet manager to lose")
    manifest[STOPPED] = taken
    save_manifest(top, manifest)
    return [(name, number) for name, number, _, _ in taken]


def start(root: PathLike) -> List[Tuple[str, str]]:
    """The SM configures and activates the ports :func:`stop` took: ACTIVE / LinkUp, their
    LID and SM LID back (a port still present and still waiting in INIT or ARMED)."""
    top = Path(root)
    manifest = tree.load(top)
    taken = manifest.pop(STOPPED, None)
    if not taken:
        raise SimError("the subnet manager is not stopped; run sm stop first")
    back = []
    for name, number, lid, sm_lid in taken:
        device = tree.device(manifest, name)
        pdir = Path(top) / device["ib_path"] / "ports" / str(number)
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
