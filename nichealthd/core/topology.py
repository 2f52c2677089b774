"""NIC roles and card homogeneity (link-state-detection §4.1–4.2 and §4.3).

Classification and the homogeneity verdicts are pure functions of what was observed (the GPU
metadata and the default route are read by :mod:`nichealthd.sources`), so every platform table
of the spec is a plain test.
"""

from __future__ import annotations

import functools
import re
from collections import Counter
from dataclasses import dataclass, field
from typing import Iterable, Mapping, Optional

from .model import DeviceSnapshot, HostSnapshot

COMPUTE = "compute"
STORAGE = "storage"
MANAGEMENT = "management"
VF = "vf"
EXCLUDED = "excluded"
UNSUPPORTED = "unsupported"
MONITORED_ROLES = (COMPUTE, STORAGE)

BLUEFIELD_HCA_TYPES = frozenset({"MT41682", "MT41686", "MT41692"})
_PCIE_NEAR = {"PIX", "PXB"}
_HOST_NEAR = {"NODE", "PHB"}


class MetadataError(Exception):
    """The GPU metadata file is missing or lacks what classification needs (exit 1)."""


@dataclass(frozen=True)
class GpuTopology:
    """The GPUs and the GPU↔NIC matrix of link-state-detection §12.2, from the NVSentinel metadata
    file or derived from the PCI tree (:mod:`.pcitopo`); ``source`` says which (``metadata``,
    ``sysfs``, ``none``).

    ``numa_gate``: whether the NUMA gate of link-state-detection §4.1 applies. It does not when no
    GPU has a known NUMA node (all ``-1``, as on VMs, or no GPU at all): nichealthd skips the gate
    there instead of refusing to start, and management NICs are then the default route's and
    the BlueField DPUs.

    ``nic_addresses``: the PCI function each row's name named when the matrix was made (name
    -> address; a name absent here was not resolved). The matrix is keyed by kernel name,
    which a driver reload may permute; the function is the device's identity (checks/identity.py),
    so a row follows its function: :meth:`levels_of`.
    """

    gpu_numa_nodes: frozenset[int]
    gpu_pci_addresses: tuple[str, ...]
    nic_topology: Mapping[str, tuple[str, ...]]
    source: str = "metadata"
    numa_gate: bool = True
    nic_addresses: Mapping[str, str] = field(default_factory=dict)

    @classmethod
    def empty(cls) -> GpuTopology:
        return cls(frozenset(), (), {}, source="none", numa_gate=False)

    @functools.cached_property
    def _rows_by_address(self) -> dict[str, tuple[str, ...]]:
        return {address: self.nic_topology[name] for name, address in self.nic_addresses.items()
                if name in self.nic_topology}

    def levels_of(self, device: DeviceSnapshot) -> tuple[str, ...]:
        """The device's row: the one of its PCI function; by its name only where the row's
        name was not resolved to a function, or the device's own address is unknown. A name
        resolved to another function gives no row (after a rename that row is another
        device's, e.g. an Ethernet storage function now called mlx5_0 must not get the IB
        compute row the file lists as mlx5_0)."""
        if device.pci_address:
            row = self._rows_by_address.get(device.pci_address)
            if row is not None:
                return row
            if device.name in self.nic_addresses:
                return ()
        return self.nic_topology.get(device.name, ())


@dataclass(frozen=True)
class Topology:
    """Everything classification needs that is read once at start (and on reload).

    ``default_route``: the RDMA devices under the default routes (they classify devices);
    ``default_route_netdevs``: the netdevs that carry them, followed down through bonds and
    VLANs (they recognise a management PCI function that has no RDMA device to name).
    """

    gpus: GpuTopology
    default_route: frozenset[str] = frozenset()
    default_route_netdevs: frozenset[str] = frozenset()


@dataclass(frozen=True)
class Role:
    """A device's role and, for everything not monitored, why."""

    role: str
    reason: str

    @property
    def monitored(self) -> bool:
        return self.role in MONITORED_ROLES


@dataclass(frozen=True)
class NicFilters:
    """The config's filters of RDMA devices, before the topology decides: ``exclusion``
    (``nicExclusionRegex``) and ``inclusion_override`` (``nicInclusionRegexOverride``)."""

    exclusion: tuple[str, ...] = ()
    inclusion_override: tuple[str, ...] = ()


NO_FILTERS = NicFilters()
VF_ROLE = Role(VF, "SR-IOV virtual function")  # link-state-detection §8: never judged


def _matches(patterns: Iterable[str], names: Iterable[str]) -> bool:
    compiled = [re.compile(p) for p in patterns]
    return any(rx.search(name) for rx in compiled for name in names)


def classify_all(devices: Iterable[DeviceSnapshot], topology: Topology,
                 exclusion: tuple[str, ...] = (), inclusion_override: tuple[str, ...] = (),
                 previous: Optional[Mapping[str, Role]] = None) -> dict[str, Role]:
    """Every device's role (:func:`classify`), by name; ``previous``: last poll's.

    Asked every poll. A device the reader gives as the same (immutable) snapshot as last
    poll, under the same topology and filters, keeps its role object: its cards are then
    recognised as unchanged too (:func:`~nichealthd.core.checks.cards.card_counts`).
    """
    last = _LAST_ROLES[0] if _LAST_ROLES else None
    known = (last[3] if last is not None and last[0] is topology
             and last[1] == exclusion and last[2] == inclusion_override else {})
    kept: dict[int, tuple[DeviceSnapshot, Role]] = {}
    roles = {}
    previous = previous or {}
    filters = NicFilters(exclusion, inclusion_override)
    for device in devices:
        seen = known.get(id(device))
        if seen is not None and seen[0] is device:
            role = seen[1]
        else:
            role = classify(device, topology.gpus, topology.default_route, filters,
                            previous.get(device.name))
        kept[id(device)] = (device, role)
        roles[device.name] = role
    _LAST_ROLES[:] = [(topology, exclusion, inclusion_override, kept)]
    return roles


def classify_host(snapshot: HostSnapshot, topology: Topology, exclusion: tuple[str, ...] = (),
                  inclusion_override: tuple[str, ...] = (),
                  previous: Optional[Mapping[str, Role]] = None) -> dict[str, Role]:
    """:func:`classify_all` of the snapshot's devices, looking only at those that are not VFs
    (:class:`~nichealthd.core.model.DeviceIndex`: a VF with its NUMA node read is a VF
    whatever else). While the reader gives the same VFs under the same names as last poll,
    their roles are last poll's table copied, in the same order, with the other devices'
    roles of this poll written over it; and when those are last poll's too, the table is
    last poll's own (the same object: nothing changes a table of roles once made)."""
    parts = snapshot.parts
    if not parts.vfs or len(parts.names) != len(snapshot.devices):
        return classify_all(snapshot.devices, topology, exclusion, inclusion_override, previous)
    judged = classify_all(parts.judged, topology, exclusion, inclusion_override, previous)
    last = _LAST_HOST[0] if _LAST_HOST else None
    if (last is not None and last[0] is parts.vfs
            and (last[1] is parts.names or last[1] == parts.names)):
        if all(last[2].get(name) is role for name, role in judged.items()):
            return last[2]
        roles = dict(last[2])
        roles.update(judged)
    else:
        roles = {d.name: judged.get(d.name, VF_ROLE) for d in snapshot.devices}
    _LAST_HOST[:] = [(parts.vfs, parts.names, roles)]
    return roles


# The last classify_host with VFs: its VFs, every device's name, the roles.
_LAST_HOST: list[tuple[tuple[DeviceSnapshot, ...], frozenset[str], dict[str, Role]]] = []

# The last classification: topology, filters, and id(device) -> (device, role).
_LAST_ROLES: list[tuple[Topology, tuple[str, ...], tuple[str, ...],
                        dict[int, tuple[DeviceSnapshot, Role]]]] = []


def classify(device: DeviceSnapshot, topology: GpuTopology, default_route: frozenset[str],
             filters: NicFilters = NO_FILTERS, previous: Optional[Role] = None) -> Role:
    """The role of one device, in the order of link-state-detection §4.2 (VFs and filters first).

    A device whose ``numa_node`` cannot be read keeps ``previous``, its role last poll. Every
    PCI function has one (on a NUMA kernel; -1 where the node is unknown), so the function
    was not readable: the device is leaving (a driver unload, caught between listing it and
    reading it) or reads fail (out of file descriptors). What such a read gives (no
    ``physfn``, no vendor) is the absence of the files, not facts: a VF would become a
    compute NIC, a compute NIC about to be judged gone a management one.
    """
    if device.numa_node is None and previous is not None:
        return previous
    if device.is_vf:
        return VF_ROLE
    exclusion, inclusion_override = filters.exclusion, filters.inclusion_override
    if inclusion_override:
        return _pinned(device, inclusion_override)
    if not device.adapter:
        return Role(UNSUPPORTED, "not a Mellanox/NVIDIA or AWS EFA device")
    if exclusion and _matches(exclusion, (device.name, *device.netdevs)):
        return Role(EXCLUDED, "matched by nicExclusionRegex")
    if device.name in default_route:
        return Role(MANAGEMENT, "carries the host's default route")
    management = _away_from_gpus(device, topology)
    if management is not None:
        return management
    return _by_pcie_level(device, topology)


def _pinned(device: DeviceSnapshot, inclusion_override: tuple[str, ...]) -> Role:
    """``nicInclusionRegexOverride`` decides alone: a match is compute (InfiniBand, EFA) or
    storage, anything else excluded."""
    if not _matches(inclusion_override, [device.name]):
        return Role(EXCLUDED, "not matched by nicInclusionRegexOverride")
    layer_role = (COMPUTE if device.link_layer == "InfiniBand" or device.is_efa
                  else STORAGE)
    return Role(layer_role, "pinned by nicInclusionRegexOverride")


def _away_from_gpus(device: DeviceSnapshot, topology: GpuTopology) -> Optional[Role]:
    """Management by NUMA node: none known or without a GPU; without a NUMA gate (no GPU
    NUMA node known) only a BlueField DPU. None: the PCIe levels decide. Under the gate, a
    device seen for the first time with its NUMA node unreadable is not monitored until it
    can be read (:func:`classify`: nothing read of it is a fact)."""
    if not topology.numa_gate:
        if (device.hca_type or "").upper() in BLUEFIELD_HCA_TYPES:
            return Role(MANAGEMENT, f"BlueField DPU ({device.hca_type}), no GPU NUMA node known")
    elif device.numa_node is None:
        return Role(MANAGEMENT, "NUMA node unreadable")
    elif device.numa_node < 0:
        return Role(MANAGEMENT, "NUMA node unknown (-1)")
    elif device.numa_node not in topology.gpu_numa_nodes:
        return Role(MANAGEMENT, f"NUMA node {device.numa_node} has no GPU")
    return None


def _by_pcie_level(device: DeviceSnapshot, topology: GpuTopology) -> Role:
    """Compute or storage by the device's PCIe relationship to the GPUs and its layer."""
    levels = set(topology.levels_of(device))
    if levels & _PCIE_NEAR:
        return Role(COMPUTE, "shares a PCIe switch with a GPU (PIX/PXB)")
    if device.link_layer == "InfiniBand":
        return Role(COMPUTE, "InfiniBand link layer")
    if device.is_efa:  # EFA's link layer is "Unknown"; only PCIe places it
        if "PHB" in levels:  # AWS p4d: EFA and GPUs meet at their root complex, no switch
            return Role(COMPUTE, "EFA on a GPU's PCI root complex (PHB)")
        return Role(STORAGE, "EFA, no PCIe switch or root complex shared with a GPU")
    if levels & _HOST_NEAR:
        return Role(STORAGE, "Ethernet, NODE/PHB to a GPU")
    if (device.hca_type or "").upper() in BLUEFIELD_HCA_TYPES:
        return Role(MANAGEMENT, f"BlueField DPU ({device.hca_type})")
    return Role(STORAGE, "Ethernet, no PCIe relationship to a GPU")


# ---------------------------------------------------------------- card homogeneity
# (link-state-detection §4.3)

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
    a tie), the last decisive mode of the same boot is the reference (``remembered``), as
    long as a peer of the group is at that mode now: a card is short only beside one that
    shows what it should have. When every card of the group has fallen (a fabric whose subnet
    manager is gone leaves every port in INIT), no peer shows the NIC at fault. At first
    sight there is no remembered mode, so a tie is never evidence (a disabled front-end port of a
    cloud H100 host).
    """
    cards = list(cards)
    modes = homogeneity(cards)
    reference = dict(modes)
    for role, mode in (remembered or {}).items():
        # A peer with an unknown port counts at what it has: its active ports only grow.
        if role not in reference and any(
                c.role == role and not c.exempt and c.active >= mode for c in cards):
            reference[role] = mode
    verdicts = {}
    for card in cards:
        expected = reference.get(card.role)
        if expected is not None and card.known and not card.exempt and card.active < expected:
            verdicts[card.card] = CardVerdict(card, expected)
    return verdicts, modes
