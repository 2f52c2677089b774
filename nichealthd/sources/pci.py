"""Reading the PCI tree: GPUs and RDMA devices with their resolved paths, for :mod:`..core.pcitopo`.

Run at start, on reload and when a new RDMA device appears (discovery), never per poll: it
lists ``<sysfs>/bus/pci/devices`` (a few hundred functions on a GPU host), reads ``vendor`` of
each and ``class``, ``numa_node`` and the real path of the NVIDIA ones, and resolves
``<sysfs>/class/infiniband/<dev>/device``. Like every source it never raises on bad content:
an unreadable attribute makes that function "not a GPU" or its NUMA node unknown (-1); a
``numa_node`` that is not a NUMA node (:data:`~nichealthd.core.numbers.NUMA_NODE`) is logged
once.
"""

from __future__ import annotations

import logging
import os
from dataclasses import dataclass

from ..core import numbers
from ..core.pcitopo import NVIDIA_VENDOR, NVSWITCH_CLASS, PciFunction, derive, is_gpu
from ..core.topology import GpuTopology
from .attribute import read_text
from .problems import ProblemLog

log = logging.getLogger("nichealthd.pci")
# The walk runs at start, on reload and on discovery: a bad numa_node is said once, not at each.
_problems = ProblemLog(log)


@dataclass(frozen=True)
class PciScan:
    """What one walk found."""

    gpus: tuple[PciFunction, ...]
    nics: dict[str, PciFunction]
    nvswitches: int
    problem: str = ""  # why the walk saw nothing, when it could not list the bus

    def topology(self) -> GpuTopology:
        return derive(self.gpus, self.nics)


def _function(address: str, link: str, devices: str) -> PciFunction:
    """The function behind ``link`` with its path below ``devices`` (empty when outside)."""
    real = os.path.realpath(link)
    relative = os.path.relpath(real, devices)
    parts: tuple[str, ...] = ()
    if relative != "." and not relative.startswith(".."):
        parts = tuple(relative.split(os.sep))
    path = os.path.join(real, "numa_node")
    numa = _problems.number(path, read_text(path), numbers.NUMA_NODE)
    return PciFunction(address or os.path.basename(real), parts,
                       numa if numa is not None else -1)


def scan(sysfs_root: str, class_infiniband: str) -> PciScan:
    """GPUs (sorted by address, the order NVML and the metadata collector use), NVSwitches
    counted, and every RDMA device's PCI function."""
    devices = os.path.realpath(os.path.join(sysfs_root, "devices"))
    bus = os.path.join(sysfs_root, "bus/pci/devices")
    problem = ""
    try:
        addresses = sorted(os.listdir(bus))
    except OSError as exc:
        addresses = []
        problem = f"cannot list {bus}: {exc.strerror or exc}"
    gpus = []
    nvswitches = 0
    for address in addresses:
        link = os.path.join(bus, address)
        vendor = numbers.value(read_text(os.path.join(link, "vendor")), numbers.PCI_VENDOR)
        if vendor != NVIDIA_VENDOR:
            continue
        pci_class = read_text(os.path.join(link, "class"))
        is_vf = os.path.lexists(os.path.join(link, "physfn"))
        if is_gpu("0x10de", pci_class, is_vf):
            gpus.append(_function(address, link, devices))
        elif (numbers.value(pci_class, numbers.PCI_CLASS) or 0) >> 8 == NVSWITCH_CLASS:
            nvswitches += 1
    nics = {}
    try:
        names = sorted(os.listdir(class_infiniband))
    except OSError:
        names = []
    for name in names:
        link = os.path.join(class_infiniband, name, "device")
        if os.path.exists(link):
            nics[name] = _function("", link, devices)
    return PciScan(tuple(gpus), nics, nvswitches, problem)


def current_functions(class_infiniband: str) -> dict[str, str]:
    """The PCI address of every RDMA device now (name -> address, from ``<name>/device``)."""
    try:
        names = sorted(os.listdir(class_infiniband))
    except OSError:
        return {}
    found = {}
    for name in names:
        link = os.path.join(class_infiniband, name, "device")
        if os.path.exists(link):
            found[name] = os.path.basename(os.path.realpath(link))
    return found


def read_pci_topology(sysfs_root: str, class_infiniband: str) -> GpuTopology:
    """The GPU↔NIC matrix of this host, derived from the PCI tree."""
    found = scan(sysfs_root, class_infiniband)
    if found.problem:
        log.warning("%s; no GPU is visible, so roles come from link layer and default route",
                    found.problem)
    return found.topology()
