"""The PCIe hierarchy of a simulated host: where every GPU, NVSwitch and NIC function sits.

A real ``/sys/devices`` has one directory per host bridge (``pci<domain>:<bus>``, one root
complex) and, below it, one directory per bridge on the way to a function: root port, PCIe
switch upstream port, switch downstream port, function. The GPU↔NIC matrix that NVSentinel's
metadata collector publishes (``nvidia-smi topo -m``) is a property of that tree, so the sim
builds the tree the matrix of its profile describes:

- a NIC paired with GPUs (``NicSpec.gpus``) shares a root complex and a first-level switch
  with them; at ``PXB`` the NIC sits behind a second switch level (two bridges to the GPU),
  at ``PIX`` directly on a downstream port of the first switch (one bridge);
- every other NIC, GPU and the NVSwitches get a root complex of their own, so they are
  ``NODE`` to the GPUs of their NUMA node and ``SYS`` to the rest;
- at ``PHB`` the NIC and its GPUs sit on one root bus, no bridge between them (AWS p4d:
  EFA, ENA and two GPUs per root bus);
- an EFA's ENA function (``NicSpec.ena_pci``) on a bus of its own sits beside its EFA (on
  a downstream port of the same switch, or on the same root bus);
- a ``flat`` profile (a cloud VM) puts everything directly on the root bus ``pci0000:00``.

Bus numbers follow the kernel's rule where they can (a bridge's secondary bus is the bus of
the devices below it; bridge buses are taken just below the devices they lead to). The
synthetic benchmark profile spreads NICs over many PCI domains under GPUs of domain 0, which
no real host does; there a second-level switch takes its bus numbers in the NICs' domain.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Dict, List, Set, Tuple

from .fsio import SimError
from .profiles import NicSpec, Profile, card_of, parse_pci, resolved_nics

ROOT_PORT, SWITCH_UP, SWITCH_DOWN = "root port", "switch upstream port", "switch downstream port"


@dataclass(frozen=True)
class Bridge:
    """One PCI-to-PCI bridge function: ``path`` is its directory below ``sys/devices``."""

    bdf: str
    kind: str
    path: str
    numa: int


@dataclass
class Layout:
    """Directories below ``sys/devices``: the bridges, and the parent of each leaf bus."""

    bridges: List[Bridge] = field(default_factory=list)
    host_bridges: List[str] = field(default_factory=list)
    parents: Dict[Tuple[int, int], str] = field(default_factory=dict)  # (domain, bus) -> dir
    nvswitches: List[str] = field(default_factory=list)

    def path_of(self, pci: str) -> str:
        """``pci0000:13/0000:13:01.0/…/<pci>``: where the function's directory goes."""
        dom, bus, _, _ = parse_pci(pci)
        parent = self.parents.get((dom, bus))
        if parent is None:
            raise SimError(f"no PCIe parent planned for {pci}")
        return f"{parent}/{pci}"


def _bdf(dom: int, bus: int, dev: int = 0, fn: int = 0) -> str:
    return f"{dom:04x}:{bus:02x}:{dev:02x}.{fn}"


class _Buses:
    """Free bus numbers per PCI domain."""

    def __init__(self) -> None:
        self.used: Dict[int, Set[int]] = {}

    def reserve(self, dom: int, bus: int) -> None:
        self.used.setdefault(dom, set()).add(bus)

    def take(self, dom: int, below: int) -> int:
        """The nearest free bus below ``below`` (else the nearest above)."""
        used = self.used.setdefault(dom, set())
        candidates: List[int] = [*range(below - 1, -1, -1), *range(below + 1, 256)]
        for bus in candidates:
            if bus not in used:
                used.add(bus)
                return bus
        raise SimError(f"PCI domain {dom:04x} has no free bus number left")


class _Planner:
    def __init__(self, profile: Profile) -> None:
        self.profile = profile
        self.buses = _Buses()
        self.layout = Layout()

    def host_bridge(self, dom: int, bus: int) -> str:
        name = f"pci{dom:04x}:{bus:02x}"
        if name not in self.layout.host_bridges:
            self.layout.host_bridges.append(name)
        return name

    def bridge(self, parent: str, bdf: str, kind: str, numa: int) -> str:
        path = f"{parent}/{bdf}"
        self.layout.bridges.append(Bridge(bdf, kind, path, numa))
        return path

    def lone(self, dom: int, bus: int, numa: int) -> None:
        """A root complex of its own with one root port leading to bus ``bus``."""
        root = self.buses.take(dom, bus)
        rc = self.host_bridge(dom, root)
        self.layout.parents[(dom, bus)] = self.bridge(rc, _bdf(dom, root, 1), ROOT_PORT, numa)

    def rooted(self, dom: int, leaves: List[Tuple[int, int]], numa: int) -> None:
        """One root complex whose root bus is the lowest leaf bus: leaves on that bus sit
        on it directly (PHB), any other leaf bus behind a root port of it."""
        root = min(bus for d, bus in leaves if d == dom)
        rc = self.host_bridge(dom, root)
        slot = 2
        for leaf in sorted(set(leaves)):
            if leaf == (dom, root):
                self.layout.parents[leaf] = rc
            else:
                self.layout.parents[leaf] = self.bridge(rc, _bdf(dom, root, slot), ROOT_PORT,
                                                        numa)
                slot += 1

    def switched(self, dom: int, numa: int, direct: List[Tuple[int, int]],
                 behind: Dict[int, List[int]]) -> None:
        """Root complex -> root port -> switch; ``direct`` (domain, bus) leaves on its
        downstream ports, ``behind`` (domain -> buses) behind a second switch level."""
        subs: List[Tuple[int, int, int]] = []  # (domain, up bus, downs bus)
        for sub_dom, buses in sorted(behind.items()):
            downs = self.buses.take(sub_dom, min(buses))
            up = self.buses.take(sub_dom, downs)
            subs.append((sub_dom, up, downs))
        lows = [bus for d, bus in direct if d == dom] + [up for d, up, _ in subs if d == dom]
        low = min(lows) if lows else 0x100
        sw_downs = self.buses.take(dom, low)
        sw_up = self.buses.take(dom, sw_downs)
        root = self.buses.take(dom, sw_up)
        rc = self.host_bridge(dom, root)
        port = self.bridge(rc, _bdf(dom, root, 1), ROOT_PORT, numa)
        upstream = self.bridge(port, _bdf(dom, sw_up), SWITCH_UP, numa)
        slot = 0
        for leaf in sorted(direct):
            self.layout.parents[leaf] = self.bridge(upstream, _bdf(dom, sw_downs, slot),
                                                    SWITCH_DOWN, numa)
            slot += 1
        for sub_dom, up, downs in subs:
            down = self.bridge(upstream, _bdf(dom, sw_downs, slot), SWITCH_DOWN, numa)
            slot += 1
            sub_up = self.bridge(down, _bdf(sub_dom, up), SWITCH_UP, numa)
            for index, bus in enumerate(sorted(behind[sub_dom])):
                self.layout.parents[(sub_dom, bus)] = self.bridge(
                    sub_up, _bdf(sub_dom, downs, index % 32, index // 32), SWITCH_DOWN, numa)


def _nic_buses(nic: NicSpec) -> List[str]:
    """The functions of a NIC that need a place on the bus: itself, and an EFA's ENA."""
    return [nic.pci, nic.ena_pci] if nic.adapter == "efa" and nic.ena_pci else [nic.pci]


GpuBus = Tuple[Tuple[int, int, int, int], int]  # (parsed PCI address, NUMA node)


def plan(profile: Profile) -> Layout:
    """The PCIe tree of ``profile`` (see the module docstring)."""
    planner = _Planner(profile)
    nics = resolved_nics(profile)
    gpus: List[GpuBus] = [(parse_pci(g.pci), g.numa) for g in profile.gpus]
    if profile.flat:
        _plan_flat(planner, gpus, nics)
        return planner.layout
    _reserve_leaf_buses(planner, gpus, nics)
    placed: Set[Tuple[int, int]] = set()
    for indices, cards in _pairings(gpus, nics):
        _place_pairing(planner, gpus, indices, cards, placed)
    _place_lone(planner, gpus, nics, placed)
    if profile.nvswitches:
        _place_nvswitches(planner, profile)
    return planner.layout


def _plan_flat(planner: _Planner, gpus: List[GpuBus], nics: List[NicSpec]) -> None:
    """A cloud VM: every GPU and NIC bus sits directly on the root bus ``pci0000:00``."""
    rc = planner.host_bridge(0, 0)
    for (dom, bus, _, _), _numa in gpus:
        planner.layout.parents[(dom, bus)] = rc
    for nic in nics:
        dom, bus, _, _ = parse_pci(nic.pci)
        planner.layout.parents[(dom, bus)] = rc


def _reserve_leaf_buses(planner: _Planner, gpus: List[GpuBus], nics: List[NicSpec]) -> None:
    """The buses of the functions themselves are fixed: bridges take the free ones."""
    planner.buses.reserve(0, 0)  # the chipset's root bus (the onboard NIC eno1 lives there)
    for (dom, bus, _, _), _numa in gpus:
        planner.buses.reserve(dom, bus)
    for nic in nics:
        for pci in _nic_buses(nic):
            dom, bus, _, _ = parse_pci(pci)
            planner.buses.reserve(dom, bus)


Cards = Dict[str, Tuple[int, int, str]]  # card -> (domain, bus, pairing level)


def _pairings(gpus: List[GpuBus], nics: List[NicSpec]) -> List[Tuple[List[int], Cards]]:
    """GPUs that share a NIC (a union of the pairings; profiles pair one GPU per NIC), in
    group order, each with the NIC cards paired with them; unpaired groups are left out."""
    group_of = list(range(len(gpus)))

    def find(index: int) -> int:
        while group_of[index] != index:
            index = group_of[index]
        return index

    paired = [n for n in nics if n.topo == "auto" and n.gpus]
    for nic in paired:
        for other in nic.gpus[1:]:
            group_of[find(other)] = find(nic.gpus[0])
    members: Dict[int, List[int]] = {}
    for index in range(len(gpus)):
        members.setdefault(find(index), []).append(index)
    cards_of: Dict[int, Cards] = {}
    for nic in paired:
        for pci in _nic_buses(nic):
            dom, bus, _, _ = parse_pci(pci)
            cards_of.setdefault(find(nic.gpus[0]), {})[card_of(pci)] = (dom, bus,
                                                                        nic.pair_level)
    return [(indices, cards_of[group]) for group, indices in sorted(members.items())
            if cards_of.get(group)]


def _place_pairing(planner: _Planner, gpus: List[GpuBus], indices: List[int], cards: Cards,
                   placed: Set[Tuple[int, int]]) -> None:
    """GPUs and their NICs under one root complex: on its root bus at PHB, else behind one
    switch (PIX) or two (PXB)."""
    (dom, _, _, _), numa = gpus[indices[0]]
    direct = [(gpus[i][0][0], gpus[i][0][1]) for i in indices]
    if any(level == "PHB" for _, _, level in cards.values()):
        leaves = sorted({*direct, *((d, b) for d, b, _ in cards.values())})
        planner.rooted(dom, leaves, numa)
        placed.update(leaves)
        return
    behind: Dict[int, List[int]] = {}
    for card_dom, bus, level in cards.values():
        if level == "PIX":
            direct.append((card_dom, bus))
        else:
            behind.setdefault(card_dom, []).append(bus)
    planner.switched(dom, numa, sorted(set(direct)), behind)
    placed.update(direct)
    placed.update((d, b) for d, buses in behind.items() for b in buses)


def _place_lone(planner: _Planner, gpus: List[GpuBus], nics: List[NicSpec],
                placed: Set[Tuple[int, int]]) -> None:
    """Every bus not paired gets a root complex of its own (NODE/SYS to the GPUs)."""
    for (dom, bus, _, _), numa in gpus:
        if (dom, bus) not in placed:
            planner.lone(dom, bus, numa)
            placed.add((dom, bus))
    for nic in nics:
        for pci in _nic_buses(nic):
            dom, bus, _, _ = parse_pci(pci)
            if (dom, bus) not in placed:
                planner.lone(dom, bus, nic.numa)
                placed.add((dom, bus))


def _place_nvswitches(planner: _Planner, profile: Profile) -> None:
    """The NVSwitches share one switch in domain 0, on the lowest NUMA node of the GPUs."""
    buses = [planner.buses.take(0, 0x100) for _ in range(profile.nvswitches)]
    numa = min((g.numa for g in profile.gpus), default=0)
    planner.switched(0, max(numa, 0), [(0, b) for b in buses], {})
    planner.layout.nvswitches = [_bdf(0, b) for b in buses]

