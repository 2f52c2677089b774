"""NIC roles (spec §4.1–4.2) and card homogeneity (spec §4.3).

Loading the GPU metadata and the default route are the only I/O here (at the edges, at start
and on reload); classification and the homogeneity verdicts are pure functions of what was
observed, so every platform table of the spec is a plain test.
"""

from __future__ import annotations

import json
import os
import re
from collections import Counter
from dataclasses import dataclass
from typing import Iterable, Mapping, Optional

from .model import DeviceSnapshot
from .safefile import UnusableFile, read_small_file

COMPUTE = "compute"
STORAGE = "storage"
MANAGEMENT = "management"
VF = "vf"
EXCLUDED = "excluded"
UNSUPPORTED = "unsupported"
MONITORED_ROLES = (COMPUTE, STORAGE)

MAX_METADATA_BYTES = 16 * 1024 * 1024  # a 72-GPU host's file is a few hundred KiB
BLUEFIELD_HCA_TYPES = frozenset({"MT41682", "MT41686", "MT41692"})
_PCIE_NEAR = {"PIX", "PXB"}
_HOST_NEAR = {"NODE", "PHB"}


class MetadataError(Exception):
    """The GPU metadata file is missing or lacks what classification needs (exit 1)."""


@dataclass(frozen=True)
class GpuTopology:
    """What the NVSentinel metadata collector published (spec §12.2)."""

    gpu_numa_nodes: frozenset[int]
    gpu_pci_addresses: tuple[str, ...]
    nic_topology: Mapping[str, tuple[str, ...]]

    @classmethod
    def empty(cls) -> GpuTopology:
        return cls(frozenset(), (), {})


@dataclass(frozen=True)
class Role:
    """A device's role and, for everything not monitored, why."""

    role: str
    reason: str

    @property
    def monitored(self) -> bool:
        return self.role in MONITORED_ROLES


def load_gpu_topology(path: str) -> GpuTopology:
    """Read the metadata file; raise :class:`MetadataError` naming the file and what is missing."""
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
    gpus = data.get("gpus")
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
    if not numa:
        raise MetadataError(
            f"GPU metadata file {path}: every GPU has numa_node -1, so management NICs cannot be "
            f"told apart from compute NICs ({hint})")
    topology = data.get("nic_topology")
    if not isinstance(topology, dict) or not topology:
        raise MetadataError(f"GPU metadata file {path}: 'nic_topology' is missing or empty "
                            f"({hint})")
    matrix = {}
    for nic, levels in topology.items():
        if not isinstance(levels, list) or not all(isinstance(v, str) for v in levels):
            raise MetadataError(f"GPU metadata file {path}: nic_topology[{nic!r}] is not a list "
                                f"of topology levels")
        matrix[str(nic)] = tuple(levels)
    return GpuTopology(frozenset(numa), tuple(addresses), matrix)


RTF_REJECT = 0x0200  # an unreachable/prohibit route (IPv6 has one on lo by default)
MAX_NETDEV_DEPTH = 8  # bond over VLAN over bond ... deeper than any real stack


def parse_default_routes_v4(text: str) -> list[str]:
    """Interfaces of every IPv4 default route in ``/proc/net/route`` text (any metric).

    A default route has Destination and Mask ``00000000``; reject routes (interface ``*``,
    RTF_REJECT) carry no traffic.
    """
    interfaces = []
    for line in text.splitlines()[1:]:
        fields = line.split()
        if len(fields) < 8 or fields[1] != "00000000" or fields[7] != "00000000":
            continue
        try:
            flags = int(fields[3], 16)
        except ValueError:
            continue
        if fields[0] != "*" and not flags & RTF_REJECT:
            interfaces.append(fields[0])
    return interfaces


def parse_default_routes_v6(text: str) -> list[str]:
    """Interfaces of every IPv6 default route in ``/proc/net/ipv6_route`` text.

    Columns: destination, prefix length, source, source prefix length, next hop, metric,
    refcount, use, flags, interface. The default route is destination ``0``*32 with prefix
    length ``00``; the reject route the kernel keeps on ``lo`` is not one.
    """
    interfaces = []
    for line in text.splitlines():
        fields = line.split()
        if len(fields) < 10 or fields[0] != "0" * 32 or fields[1] != "00":
            continue
        try:
            flags = int(fields[8], 16)
        except ValueError:
            continue
        if fields[9] != "lo" and not flags & RTF_REJECT:
            interfaces.append(fields[9])
    return interfaces


def lower_netdevs(sys_class_net: str, iface: str) -> list[str]:
    """``iface`` and every netdev below it: bond slaves, VLAN parents, any ``lower_*`` link.

    Recursive to ``MAX_NETDEV_DEPTH`` levels; a loop (which sysfs should never show) ends
    where a name repeats. Unreadable directories simply add nothing.
    """
    seen: list[str] = []
    level = [iface]
    for _ in range(MAX_NETDEV_DEPTH + 1):
        below: list[str] = []
        for name in level:
            if name in seen or not name or "/" in name or name in (".", ".."):
                continue
            seen.append(name)
            below.extend(_lower_of(os.path.join(sys_class_net, name)))
        if not below:
            break
        level = below
    return seen


def _lower_of(netdev_dir: str) -> list[str]:
    names: list[str] = []
    try:
        names.extend(e[len("lower_"):] for e in sorted(os.listdir(netdev_dir))
                     if e.startswith("lower_"))
    except OSError:
        return []
    try:
        with open(os.path.join(netdev_dir, "bonding/slaves"), encoding="ascii") as handle:
            names.extend(handle.read().split())
    except (OSError, UnicodeDecodeError):
        pass
    return names


def read_default_route_interfaces(proc_root: str) -> list[str]:
    """Interfaces of every IPv4 and IPv6 default route; a missing table adds nothing."""
    interfaces: list[str] = []
    for name, parse in (("net/route", parse_default_routes_v4),
                        ("net/ipv6_route", parse_default_routes_v6)):
        try:
            with open(os.path.join(proc_root, name), encoding="ascii") as handle:
                interfaces.extend(parse(handle.read()))
        except (OSError, UnicodeDecodeError):
            continue
    return list(dict.fromkeys(interfaces))


def read_default_route_devices(proc_root: str, sys_class_net: str) -> frozenset[str]:
    """IB devices under the interfaces of every default route; empty when it cannot be told.

    Each default route's interface (IPv4 and IPv6) is followed down through bonds, VLANs and
    other stacked netdevs (:func:`lower_netdevs`); a netdev maps to an IB device through
    ``/sys/class/net/<iface>/device/infiniband/<dev>`` (REFERENCE §3).
    """
    devices: set[str] = set()
    for iface in read_default_route_interfaces(proc_root):
        for netdev in lower_netdevs(sys_class_net, iface):
            try:
                devices.update(os.listdir(os.path.join(sys_class_net, netdev,
                                                       "device/infiniband")))
            except OSError:
                continue
    return frozenset(devices)


def _matches(patterns: Iterable[str], names: Iterable[str]) -> bool:
    compiled = [re.compile(p) for p in patterns]
    return any(rx.search(name) for rx in compiled for name in names)


def classify(device: DeviceSnapshot, topology: GpuTopology, default_route: frozenset[str],
             exclusion: tuple[str, ...] = (), inclusion_override: tuple[str, ...] = ()) -> Role:
    """The role of one device, in the order of spec §4.2 (with VFs and filters first)."""
    if device.is_vf:
        return Role(VF, "SR-IOV virtual function")
    if inclusion_override:
        if not _matches(inclusion_override, [device.name]):
            return Role(EXCLUDED, "not matched by nicInclusionRegexOverride")
        layer_role = COMPUTE if device.link_layer == "InfiniBand" else STORAGE
        return Role(layer_role, "pinned by nicInclusionRegexOverride")
    if not device.is_mellanox:
        return Role(UNSUPPORTED, "not a Mellanox/NVIDIA device")
    if exclusion and _matches(exclusion, (device.name, *device.netdevs)):
        return Role(EXCLUDED, "matched by nicExclusionRegex")
    if device.name in default_route:
        return Role(MANAGEMENT, "carries the host's default route")
    if device.numa_node is None or device.numa_node < 0:
        return Role(MANAGEMENT, "NUMA node unknown (-1)")
    if device.numa_node not in topology.gpu_numa_nodes:
        return Role(MANAGEMENT, f"NUMA node {device.numa_node} has no GPU")
    levels = set(topology.nic_topology.get(device.name, ()))
    if levels & _PCIE_NEAR:
        return Role(COMPUTE, "shares a PCIe switch with a GPU (PIX/PXB)")
    if device.link_layer == "InfiniBand":
        return Role(COMPUTE, "InfiniBand link layer")
    if levels & _HOST_NEAR:
        return Role(STORAGE, "Ethernet, NODE/PHB to a GPU")
    if (device.hca_type or "").upper() in BLUEFIELD_HCA_TYPES:
        return Role(MANAGEMENT, f"BlueField DPU ({device.hca_type})")
    return Role(STORAGE, "Ethernet, no PCIe relationship to a GPU")


# ---------------------------------------------------------------- card homogeneity (spec §4.3)

@dataclass(frozen=True)
class CardCount:
    """Active ports of one physical card; ``known`` is False if any port's state is unknown."""

    card: str
    role: str
    devices: tuple[str, ...]
    active: int
    known: bool
    exempt: bool
    link_layer: str


@dataclass(frozen=True)
class CardVerdict:
    """A card below the mode of its role group."""

    count: CardCount
    expected: int


def group_mode(counts: Iterable[int]) -> Optional[int]:
    """The single most common value; None for fewer than two cards, a tie, or a zero mode."""
    values = list(counts)
    if len(values) < 2:
        return None
    ranked = Counter(values).most_common()
    if len(ranked) > 1 and ranked[0][1] == ranked[1][1]:
        return None
    mode = ranked[0][0]
    return mode if mode > 0 else None


def homogeneity(cards: Iterable[CardCount]) -> dict[str, int]:
    """Mode of active ports per role group, only where the group gives a decisive verdict."""
    by_role: dict[str, list[int]] = {}
    for card in cards:
        if card.known and not card.exempt and card.role in MONITORED_ROLES:
            by_role.setdefault(card.role, []).append(card.active)
    modes = {}
    for role, counts in by_role.items():
        mode = group_mode(counts)
        if mode is not None:
            modes[role] = mode
    return modes


def anomalous_cards(cards: Iterable[CardCount], remembered: Optional[Mapping[str, int]] = None
                    ) -> tuple[dict[str, CardVerdict], dict[str, int]]:
    """Cards below their role group's mode, and the decisive modes of this poll.

    Where the group is not decisive now (for example two cards, one of which just dropped:
    a tie), the last decisive mode of the same boot is the reference (``remembered``); at
    first sight there is none, so a tie is never evidence (REFERENCE §2).
    """
    cards = list(cards)
    modes = homogeneity(cards)
    reference = {**(remembered or {}), **modes}
    verdicts = {}
    for card in cards:
        mode = reference.get(card.role)
        if mode is not None and card.known and not card.exempt and card.active < mode:
            verdicts[card.card] = CardVerdict(card, mode)
    return verdicts, modes
