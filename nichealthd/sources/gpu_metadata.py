"""Reading NVSentinel's GPU metadata file (link-state-detection §12.2) into a :class:`GpuTopology`.

The file is read like every file of unknown provenance (:mod:`.safefile`): a FIFO, a device,
a huge or deeply nested file is a :class:`MetadataError` naming the file, never a hang.

Its matrix is keyed by RDMA device name; :func:`resolve_names` turns each name into the PCI
function it names (:func:`nichealthd.sources.pci.current_functions`), so that classification
follows the function when a reload permutes the names (:meth:`GpuTopology.levels_of`).
Which resolution to keep while the content is unchanged is
:mod:`nichealthd.storage.metadata_names`' job.
"""

from __future__ import annotations

import json
from typing import Iterable, Mapping, Optional

from ..core.topology import GpuTopology, MetadataError
from .safefile import UnusableFile, read_small_file

MAX_METADATA_BYTES = 16 * 1024 * 1024  # a 72-GPU host's file is a few hundred KiB


def load_gpu_topology(path: str) -> GpuTopology:
    """Read the metadata file; raise :class:`MetadataError` naming the file and what is missing."""
    return read_gpu_metadata(path)[0]


def read_gpu_metadata(path: str) -> tuple[GpuTopology, str]:
    """:func:`load_gpu_topology`, and the SHA-256 of the content it was made of (what says
    whether a later read is of the same file)."""
    hint = ("it is written by the NVSentinel metadata collector; start the collector, or set "
            "nicInclusionRegexOverride to pin the devices to monitor by hand")
    try:
        raw = read_small_file(path, MAX_METADATA_BYTES)
    except UnusableFile as exc:
        raise MetadataError(f"GPU metadata file {path} {exc}") from None
    if raw is None:
        raise MetadataError(f"GPU metadata file {path} does not exist ({hint})")
    try:
        data = json.loads(raw.decode("utf-8"))
    except (ValueError, RecursionError) as exc:  # UnicodeDecodeError is a ValueError
        reason = "nested too deeply" if isinstance(exc, RecursionError) else str(exc)
        raise MetadataError(f"GPU metadata file {path} is not valid JSON: {reason}") from None
    if not isinstance(data, dict):
        raise MetadataError(f"GPU metadata file {path}: top level is not an object")
    numa, addresses = _gpus(path, data.get("gpus"), hint)
    matrix = _nic_topology(path, data.get("nic_topology"), hint)
    import hashlib  # only where a metadata file is read (0.6 MiB of the daemon's memory)

    # Every GPU at numa_node -1 (a VM): the NUMA gate is skipped (README), not a refusal.
    return (GpuTopology(frozenset(numa), tuple(addresses), matrix, source="metadata",
                        numa_gate=bool(numa)), hashlib.sha256(raw).hexdigest())


def _gpus(path: str, gpus: object, hint: str) -> tuple[set[int], list[str]]:
    """The GPUs' NUMA nodes (-1, a VM's, left out) and PCI addresses; refused when the list
    is missing or empty or a GPU has no NUMA node."""
    if not isinstance(gpus, list) or not gpus:
        raise MetadataError(f"GPU metadata file {path}: 'gpus' is missing or empty ({hint})")
    numa: set[int] = set()
    addresses: list[str] = []
    for index, gpu in enumerate(gpus):
        if not isinstance(gpu, dict) or not isinstance(gpu.get("numa_node"), int):
            raise MetadataError(f"GPU metadata file {path}: gpus[{index}].numa_node is missing")
        if gpu["numa_node"] >= 0:
            numa.add(gpu["numa_node"])
        addresses.append(str(gpu.get("pci_address", "")))
    return numa, addresses


def _nic_topology(path: str, topology: object, hint: str) -> dict[str, tuple[str, ...]]:
    """NIC -> its topology level to each GPU; refused when missing, empty or not lists of
    levels."""
    if not isinstance(topology, dict) or not topology:
        raise MetadataError(f"GPU metadata file {path}: 'nic_topology' is missing or empty "
                            f"({hint})")
    matrix = {}
    for nic, levels in topology.items():
        if not isinstance(levels, list) or not all(isinstance(v, str) for v in levels):
            raise MetadataError(f"GPU metadata file {path}: nic_topology[{nic!r}] is not a list "
                                f"of topology levels")
        matrix[str(nic)] = tuple(levels)
    return matrix


def resolve_names(names: Iterable[str], current: Mapping[str, str],
                  kept: Optional[Mapping[str, str]]) -> dict[str, str]:
    """The function each metadata name names: as ``kept`` (the resolution made when this
    content was first read) where it has the name, else as the name is now (``current``),
    unless that function is kept under another name already (the name then named another
    function when the file was written, or the file lists one function twice): unresolved,
    so that no row is given to the wrong device."""
    resolved = dict(kept or {})
    claimed = set(resolved.values())
    for name in names:
        address = current.get(name)
        if name not in resolved and address is not None and address not in claimed:
            resolved[name] = address
            claimed.add(address)
    return resolved
