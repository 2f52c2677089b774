"""The lost-NIC family (#16.5): a Mellanox PF on the PCI bus without an RDMA device.

A physical function (vendor 0x15b3, network or InfiniBand class, no ``physfn``) whose
``infiniband/`` lists no device is hardware the host paid for and no job can use: the driver
is not bound, or its probe failed (firmware not responding, a PCI error at probe). No device
name ever existed, so the spec's device-missing rule cannot see it; this family reports it by
its PCI address: fatal (REPLACE_VM) under the state check of its class (InfiniBand for
0x0207, Ethernet otherwise), errorCode ``nic_unregistered``, after 3 consecutive adapter
reads (as a missing device), latched until an RDMA device registers on it.

Not judged: a function whose address is a known device's (the link-state family reports that
device missing, once), anything while the enumeration is uncertain or a driver reload is in
progress (#19.2: every function is unbound for a while), and a function that the roles do
not monitor. The roles apply as to a device (spec §4.2): ``nicInclusionRegexOverride`` and
``nicExclusionRegex`` are matched against what the function has for names — its PCI address
and its netdevs, if the Ethernet driver created any — and the management classification
(default route, NUMA node without a GPU) applies as to any NIC.
"""

from __future__ import annotations

import re
from typing import Any, Iterable

from ..adapter import PciNic
from ..config import ETH_STATE_CHECK, IB_STATE_CHECK
from ..events import HealthEvent, make_event
from ..family import HOST, READS_DEVICES, CheckFamily, Condition, Cycle, Series, Verdict
from ..model import DeviceSnapshot
from ..state import FATAL
from ..topology import COMPUTE, EXCLUDED, MANAGEMENT, STORAGE, Role, Topology, classify
from .adapter_section import ENTITY_PCI, Latched, LatchSection, held
from .link_state import LINK_STATE

CODE_UNREGISTERED = "nic_unregistered"
MISSING_READS = 3


class LostNicSection(LatchSection):
    PREFIX = "lost_nic"


def role_of(nic: PciNic, topology: Topology, exclusion: tuple[str, ...],
            inclusion: tuple[str, ...]) -> Role:
    """The role the function would have as a device (spec §4.2), from its address, netdevs
    and NUMA node (it has no RDMA name, link layer or GPU distance)."""
    names = (nic.address, *nic.netdevs)
    if inclusion:
        if not any(re.search(p, n) for p in inclusion for n in names):
            return Role(EXCLUDED, "not matched by nicInclusionRegexOverride")
        return Role(COMPUTE if nic.is_infiniband else STORAGE,
                    "pinned by nicInclusionRegexOverride")
    if exclusion and any(re.search(p, n) for p in exclusion for n in names):
        return Role(EXCLUDED, "matched by nicExclusionRegex")
    if set(names) & topology.default_route:
        return Role(MANAGEMENT, "carries the host's default route")
    probe = DeviceSnapshot(name=nic.address, pci_address=nic.address,
                           numa_node=nic.numa_node, vendor="0x15b3", netdevs=nic.netdevs)
    return classify(probe, topology.gpus, frozenset())


def _check(nic: PciNic) -> str:
    return IB_STATE_CHECK if nic.is_infiniband else ETH_STATE_CHECK


def _why(nic: PciNic) -> str:
    if nic.driver is None:
        return "no driver is bound to it"
    return (f"driver {nic.driver} is bound but registered no RDMA device (probe failed, or "
            f"mlx5_ib not loaded)")


def lost_event(nic: PciNic, now: Any) -> HealthEvent:
    kind = "InfiniBand" if nic.is_infiniband else "Ethernet"
    netdevs = f" (netdev {', '.join(nic.netdevs)})" if nic.netdevs else ""
    return make_event(
        _check(nic), fatal=True, healthy=False, error_code=CODE_UNREGISTERED,
        entities=((ENTITY_PCI, nic.address),), at=now,
        message=(f"Mellanox {kind} PCI function {nic.address}{netdevs} is on the bus without "
                 f"an RDMA device (no infiniband/ entry): {_why(nic)}"))


class LostNics(CheckFamily[LostNicSection]):
    """Mellanox physical functions without an ``infiniband/`` registration."""

    id = "lost_nics"
    order = 45
    keys = LostNicSection.keys()
    section_type = LostNicSection
    reads = frozenset({READS_DEVICES})

    def evaluate(self, previous: LostNicSection, cycle: Cycle, memory: Any
                 ) -> Verdict[LostNicSection]:
        facts = cycle.snapshot.adapter
        if facts is None or facts.pci_nics is None:  # not read, or the bus not listed:
            return Verdict(previous, picture=memory.slots.get(self.id))  # the last read
        now, config = cycle.now, cycle.config
        state = previous.copy()
        events: list[HealthEvent] = []
        notes: list[str] = []
        links = cycle.previous.section(LINK_STATE)
        known = {d.pci_address for d in cycle.snapshot.devices if d.pci_address}
        known |= {i.pci_address for i in links.identities.values()}
        hold = held(cycle)
        seen = set()
        for nic in facts.pci_nics:
            key = nic.address
            if nic.registered:
                state.misses.pop(key, None)
                if key in state.latched:
                    del state.latched[key]
                    events.append(make_event(
                        _check(nic), fatal=False, healthy=True, error_code=CODE_UNREGISTERED,
                        entities=((ENTITY_PCI, key),), at=now,
                        message=f"Mellanox PCI function {key} has an RDMA device again"))
                continue
            if key in known or key in state.latched or hold:
                continue
            if _check(nic) not in cycle.enabled:
                continue
            role = role_of(nic, cycle.topology, config.nic_exclusion_regex,
                           config.nic_inclusion_regex_override)
            if not role.monitored:
                continue
            seen.add(key)
            misses = state.misses.get(key, 0) + 1
            if misses < MISSING_READS:
                state.misses[key] = misses
                if misses == 1:
                    notes.append(f"Mellanox PCI function {key} has no RDMA device "
                                 f"({_why(nic)}); reported after {MISSING_READS} reads")
                continue
            state.misses.pop(key, None)
            state.latched[key] = Latched(now, _why(nic))
            events.append(lost_event(nic, now))
        if not hold:
            for key in [k for k in state.misses if k not in seen]:
                del state.misses[key]
        memory.slots[self.id] = facts.pci_nics  # the views show it between reads
        return Verdict(state, tuple((HOST, e) for e in events), facts.pci_nics,
                       notes=tuple(notes))

    def conditions(self, section: LostNicSection, picture: Any) -> Iterable[Condition]:
        for key in sorted(section.latched):
            yield Condition(FATAL, f"PCI function {key} has no RDMA device")

    def series(self, section: LostNicSection, picture: Any) -> Iterable[Series]:
        yield Series("pci_function_unregistered", "Mellanox physical functions on the PCI bus "
                     "reported without an RDMA device: 1 while latched", "gauge",
                     ("pci",), tuple(((k,), 1.0) for k in sorted(section.latched)))


FAMILY = LOST_NICS = LostNics()
