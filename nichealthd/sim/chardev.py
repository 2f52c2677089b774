"""The character devices of a simulated host as it is made: ``uverbsN``, ``umadN``, ``issmN``.

One ``uverbsN`` per RDMA device under ``<function>/infiniband_verbs/`` and one ``umadN`` and
``issmN`` per port under ``<function>/infiniband_mad/``, each with ``ibdev`` (and ``port``),
linked from ``sys/class/infiniband_verbs`` and ``sys/class/infiniband_mad`` with their
``abi_version`` files, as drivers/infiniband/core/uverbs_main.c and user_mad.c lay them out.
Its own module, below both the builder (sim/tree.py) and the mutations that take and give
back these entries (sim/adapter.py), which read the manifest through the builder.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any, Dict, List, Optional

from .fsio import symlink, write_new

CLASS_VERBS = "sys/class/infiniband_verbs"
CLASS_MAD = "sys/class/infiniband_mad"


def build(root: Path, devices: List[Dict[str, Any]]) -> None:
    """The class directories and one entry per device / port of the manifest's devices."""
    if not devices:
        return  # no RDMA hardware: ib_uverbs / ib_umad never load
    verbs, mad = root / CLASS_VERBS, root / CLASS_MAD
    write_new(verbs / "abi_version", "6\n")
    write_new(mad / "abi_version", "5\n")
    umad = 0
    for index, dev in enumerate(devices):
        pdir = root / dev["pci_path"]
        entries = {"uverbs": f"uverbs{index}"}
        _entry(root, pdir / "infiniband_verbs" / entries["uverbs"], verbs, dev["name"], None,
               231, 192 + index)
        for port in sorted(dev["ports"], key=int):
            _entry(root, pdir / "infiniband_mad" / f"umad{umad}", mad, dev["name"], int(port),
                   231, umad)
            _entry(root, pdir / "infiniband_mad" / f"issm{umad}", mad, dev["name"], int(port),
                   231, 64 + umad)
            entries[f"umad:{port}"] = f"umad{umad}"
            entries[f"issm:{port}"] = f"issm{umad}"
            umad += 1
        dev["chardevs"] = entries


def _entry(root: Path, edir: Path, class_dir: Path, ibdev: str, port: Optional[int],
           major: int, minor: int) -> None:
    write_new(edir / "ibdev", ibdev + "\n")
    if port is not None:
        write_new(edir / "port", f"{port}\n")
    write_new(edir / "dev", f"{major}:{minor}\n")
    symlink(class_dir / edir.name, edir)
