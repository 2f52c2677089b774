"""The GPU↔NIC topology matrix derived from PCI device paths, as NCCL's ``pciDistance`` does.

Pure: it gets the resolved device paths (``/sys/bus/pci/devices/<bdf>`` ->
``/sys/devices/pci<domain>:<bus>/<root port>/…/<bdf>``, split into components below
``devices/``) and the NUMA nodes; :mod:`nichealthd.sources.pci` walks the tree.

The relation of one NIC to one GPU follows ``pciDistance`` of NCCL 2.4
(``src/include/topo.h`` of NVIDIA/nccl, later ``src/misc/topo.cc``): count the leading path
components the two share, the NIC's path as the first argument.

- nothing shared below ``devices/`` (different host bridges, i.e. root complexes): ``NODE``
  when the NUMA nodes are equal (NCCL compares the two ``numa_node`` values as read, so two
  unknown ``-1`` are equal), else ``SYS``;
- only the host bridge (``pci<domain>:<bus>``) shared: ``PHB``;
- all but the NIC's last two components shared (one bridge, i.e. one PCIe switch level,
  between them): ``PIX``;
- otherwise (several bridges, below one root port): ``PXB``.

One deliberate difference: two devices in different PCI *domains* (segments) are ``SYS``
whatever their NUMA nodes. NCCL 2.4 predates Grace: there every GPU and NIC sits in a segment
of its own and the GPU is attached through NVLink-C2C, which ``nvidia-smi topo -m`` (and so
NVSentinel's metadata, link-state-detection §4.2.4 GB200) reports as ``SYS``; the old rule would say
``NODE`` and turn a BlueField DPU there into a storage NIC. x86 GPU hosts keep their GPUs and NICs
in segment 0000, where the rule is NCCL's unchanged.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Iterable, Mapping, Optional, Sequence

from . import numbers
from .topology import COMPUTE, MANAGEMENT, STORAGE, GpuTopology, Role

NVIDIA_VENDOR = 0x10DE
GPU_CLASSES = (0x0300, 0x0302)  # base class 03 (display): VGA 0x0300xx, 3D controller 0x0302xx
NVSWITCH_CLASS = 0x0680  # bridge, "other": NVSwitch, never a GPU


@dataclass(frozen=True)
class PciFunction:
    """One PCI function: its address, resolved path below ``devices/`` and NUMA node."""

    address: str
    path: tuple[str, ...]
    numa_node: int = -1

    @property
    def host_bridge(self) -> Optional[str]:
        """``pci0000:15``: the first component, when it names a PCI host bridge."""
        return self.path[0] if self.path and self.path[0].startswith("pci") else None

    @property
    def domain(self) -> Optional[str]:
        """``0000``: the PCI segment of the function's address."""
        head = self.address.split(":", 1)[0]
        return head.lower() if len(head) == 4 else None


def is_gpu(vendor: Optional[str], pci_class: Optional[str], is_vf: bool) -> bool:
    """An NVIDIA display/3D function that is not a virtual function (NVSwitches are 0x0680)."""
    if is_vf or numbers.value(vendor, numbers.PCI_VENDOR) != NVIDIA_VENDOR:
        return False
    klass = numbers.value(pci_class, numbers.PCI_CLASS)
    return klass is not None and klass >> 8 in GPU_CLASSES


def relation(nic: PciFunction, gpu: PciFunction) -> str:
    """``PIX`` / ``PXB`` / ``PHB`` / ``NODE`` / ``SYS`` between a NIC and a GPU (see above)."""
    if nic.domain != gpu.domain:
        return "SYS"
    if nic.host_bridge is None or gpu.host_bridge is None:
        return _numa_level(nic, gpu)
    shared = 0
    for mine, theirs in zip(nic.path, gpu.path):
        if mine != theirs:
            break
        shared += 1
    if shared == 0:
        return _numa_level(nic, gpu)
    if shared == 1:
        return "PHB"
    if shared == len(nic.path) - 2:
        return "PIX"
    return "PXB"


def _numa_level(nic: PciFunction, gpu: PciFunction) -> str:
    return "NODE" if nic.numa_node == gpu.numa_node else "SYS"


def derive(gpus: Sequence[PciFunction], nics: Mapping[str, PciFunction]) -> GpuTopology:
    """The matrix of link-state-detection §12.2 (a row per NIC, a cell per GPU in ``gpus`` order).

    The NUMA gate (link-state-detection §4.1) runs only when at least one GPU has a known NUMA node;
    with none (a VM, or no GPU at all) it is skipped (nichealthd(8)). Each row is keyed by the
    NIC's name at the walk and carries its function's address, so a reload that permutes
    the names without a new walk leaves each row with its function
    (:meth:`GpuTopology.levels_of`).
    """
    numa = frozenset(g.numa_node for g in gpus if g.numa_node >= 0)
    ordered = sorted(nics.items())
    matrix = {name: tuple(relation(nic, gpu) for gpu in gpus) for name, nic in ordered}
    return GpuTopology(numa, tuple(g.address for g in gpus), matrix, source="sysfs",
                       numa_gate=bool(numa),
                       nic_addresses={name: nic.address for name, nic in ordered if nic.address})


def role_counts(roles: Iterable[Role]) -> str:
    """``8 compute, 2 storage, 1 management NIC`` (VFs and excluded devices not counted)."""
    counts = {COMPUTE: 0, STORAGE: 0, MANAGEMENT: 0}
    for role in roles:
        if role.role in counts:
            counts[role.role] += 1
    text = ", ".join(f"{n} {name}" for name, n in counts.items())
    return text + (" NIC" if counts[MANAGEMENT] == 1 else " NICs")


def summary(topology: GpuTopology, roles: Optional[Iterable[Role]] = None) -> str:
    """``topology from sysfs: 8 GPUs on 2 NUMA nodes; 8 compute, 2 storage, 1 management NICs``.

    The line of the start-up log, ``nichealthctl status``, D-Bus and the metrics info series.
    """
    gpus = len(topology.gpu_pci_addresses)
    if topology.source == "none":
        text = "topology not used (devices pinned by nicInclusionRegexOverride)"
    elif not gpus:
        text = f"topology from {topology.source}: no GPU found (roles from link layer and " \
               f"default route)"
    else:
        nodes = len(topology.gpu_numa_nodes)
        where = (f"on {nodes} NUMA node{'s' if nodes != 1 else ''}" if nodes
                 else "with unknown NUMA node (NUMA gate skipped)")
        text = f"topology from {topology.source}: {gpus} GPU{'s' if gpus != 1 else ''} {where}"
    if roles is not None:
        roles = list(roles)
        text += "; " + (role_counts(roles) if roles else "no InfiniBand/RoCE devices found")
    return text
