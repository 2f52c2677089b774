"""The lost-NIC family: a Mellanox PF on the PCI bus without an RDMA device.

A physical function (vendor 0x15b3, network or InfiniBand class, no ``physfn``) whose
``infiniband/`` lists no device is hardware the host paid for and no job can use: the driver
is not bound, or its probe failed (firmware not responding, a PCI error at probe). No device
name ever existed, so the spec's device-missing rule cannot see it; this family reports it by
its PCI address: fatal (REPLACE_VM) under the state check of its class (InfiniBand for
0x0207, Ethernet otherwise), errorCode ``nic_unregistered``, latched until an RDMA device
registers on it.

A function without a device is also what every function looks like at boot until the RDMA
driver (mlx5_ib) has loaded and probed it, so the verdict waits for proof that the driver is
up and has left this one function out:

- **The driver is up**: another Mellanox function has its RDMA device. While none has one
  (mlx5_ib not loaded yet, or unloaded) nothing is judged and every pending clock restarts:
  an RDMA driver that registered nothing cannot be told from one that has not loaded. (A
  host whose every function fails its probe is therefore not reported here.)
- **The driver grace has passed**: the function has been without its device, with the driver
  up, for ``driverReloadGrace`` (3 min by default: mlx5_ib probes the functions one after
  the other, and a firmware that is still initialising may take the mlx5 driver's own 180 s).
  The clock starts at the first adapter read that saw it so (``lost_nic_since`` in the state
  file, so a restart neither restarts the clock nor reports early; a wall clock that went
  back restarts it). The three consecutive reads of the device-missing rule stay a floor: a
  ``driverReloadGrace`` shorter than two ``adapterCheckInterval`` (``0s`` included) still
  needs three reads, so one read racing a probe is never a verdict.

Not judged at all: a function whose address is a known device's (the link-state family
reports that device missing, once); anything while the enumeration is uncertain or a driver
reload is in progress (every function is unbound for a while); a function bound to a
driver other than the Mellanox core drivers (``vfio-pci`` for passthrough to a guest, or any
other owner: no RDMA device is expected of it), while an unbound function (no driver at all)
is judged; and a function that the roles do not monitor. The roles apply as to a device
(link-state-detection §4.2): ``nicInclusionRegexOverride`` and ``nicExclusionRegex`` are matched
against what the function has for names (its PCI address and its netdevs, if the Ethernet driver
created any), a function one of whose netdevs carries a default route (the route's interface
followed down through bonds and VLANs, :attr:`Topology.default_route_netdevs`) is the management
NIC, and the NUMA classification applies as to any NIC.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any, Iterable, Mapping, Optional

from ...sources.adapter import ADAPTER
from ...sources.adapter_facts import PciNic
from ..codec import Layout
from ..config import ETH_STATE_CHECK, IB_STATE_CHECK, Config
from ..duration import format_duration
from ..events import HealthEvent, format_timestamp, make_event
from ..family import (
    HOST,
    READS_DEVICES,
    CheckFamily,
    Condition,
    Cycle,
    Series,
    Verdict,
)
from ..jsontypes import JsonObject
from ..model import DeviceSnapshot, PortSnapshot
from ..state import FATAL, MonitorState
from ..topology import COMPUTE, EXCLUDED, MANAGEMENT, STORAGE, Role, Topology, classify
from .adapter_section import ENTITY_PCI, Latched, LatchSection, held
from .link_settings import LinkStateSettings
from .link_state import LINK_STATE

CODE_UNREGISTERED = "nic_unregistered"
MISSING_READS = 3  # the floor: consecutive adapter reads without a device, as a missing device
# The Mellanox core drivers whose RDMA half (mlx5_ib, mlx4_ib) registers the device of a
# function they hold; a function bound to any other driver is not expected to have one.
RDMA_CORE_DRIVERS = frozenset({"mlx5_core", "mlx4_core"})


Nics = tuple[PciNic, ...]  # its picture: the Mellanox PFs on the bus as last read


@dataclass
class LostNicSection(LatchSection):
    """The common latch tables, and since when each pending function has been without its
    device while the driver was up (``lost_nic_since``: the grace clock)."""

    LAYOUT = Layout(prefix="lost_nic_")

    since: dict[str, datetime] = field(default_factory=dict)


@dataclass(frozen=True)
class LastRead:
    """What the family keeps between adapter reads (volatile): the functions of the last
    read (shown by the views) and whether functions waited for the RDMA driver at it."""

    nics: tuple[PciNic, ...]
    waiting: bool


def role_of(nic: PciNic, topology: Topology, exclusion: tuple[str, ...],
            inclusion: tuple[str, ...]) -> Role:
    """The role the function would have as a device (link-state-detection §4.2), from its
    address, netdevs and NUMA node (it has no RDMA name, link layer or GPU distance). The default
    route is compared by netdev: the function has no RDMA device for the route's device set to
    name."""
    names = (nic.address, *nic.netdevs)
    if inclusion:
        if not any(re.search(p, n) for p in inclusion for n in names):
            return Role(EXCLUDED, "not matched by nicInclusionRegexOverride")
        return Role(COMPUTE if nic.is_infiniband else STORAGE,
                    "pinned by nicInclusionRegexOverride")
    if exclusion and any(re.search(p, n) for p in exclusion for n in names):
        return Role(EXCLUDED, "matched by nicExclusionRegex")
    if set(nic.netdevs) & topology.default_route_netdevs:
        return Role(MANAGEMENT, "its netdev carries the host's default route")
    probe = DeviceSnapshot(name=nic.address, pci_address=nic.address,
                           numa_node=nic.numa_node, vendor="0x15b3", netdevs=nic.netdevs)
    return classify(probe, topology.gpus, frozenset())


def foreign_driver(nic: PciNic) -> bool:
    """Bound to a driver that registers no RDMA device (vfio-pci, say); unbound is not."""
    return nic.driver is not None and nic.driver not in RDMA_CORE_DRIVERS


def _check(nic: PciNic) -> str:
    return IB_STATE_CHECK if nic.is_infiniband else ETH_STATE_CHECK


def _why(nic: PciNic) -> str:
    if nic.driver is None:
        return "no driver is bound to it"
    return (f"driver {nic.driver} is bound but registered no RDMA device while other "
            f"functions have theirs (probe failed)")


def lost_event(nic: PciNic, now: datetime, elapsed: float) -> HealthEvent:
    kind = "InfiniBand" if nic.is_infiniband else "Ethernet"
    netdevs = f" (netdev {', '.join(nic.netdevs)})" if nic.netdevs else ""
    return make_event(
        _check(nic), fatal=True, healthy=False, error_code=CODE_UNREGISTERED,
        entities=((ENTITY_PCI, nic.address),), at=now,
        message=(f"Mellanox {kind} PCI function {nic.address}{netdevs} is on the bus without "
                 f"an RDMA device (no infiniband/ entry) for {format_duration(round(elapsed))}: "
                 f"{_why(nic)}"))


class LostNics(CheckFamily[LostNicSection, Nics, LastRead]):
    """Mellanox physical functions without an ``infiniband/`` registration."""

    id = "lost_nics"
    order = 45
    keys = LostNicSection.keys()
    section_type = LostNicSection
    reads = frozenset({READS_DEVICES, ADAPTER})
    device_field_types = {
        "lost": "?bool", "lost_reason": "?string", "lost_since": "?string",
    }

    def evaluate(self, previous: LostNicSection, cycle: Cycle, last: Optional[LastRead]
                 ) -> Verdict[LostNicSection, Nics, LastRead]:
        facts = cycle.snapshot.fact(ADAPTER)
        if facts is None or facts.pci_nics is None:  # not read, or the bus not listed:
            return Verdict(previous)  # the views keep the picture of the last read
        now, config = cycle.now, cycle.config
        state = previous.copy()
        events: list[HealthEvent] = []
        notes: list[str] = []
        known = _known_addresses(cycle)
        hold = held(cycle)
        with_device = sum(1 for nic in facts.pci_nics if nic.registered)
        waiting: list[str] = []  # judged once the driver is up
        seen = set()
        for nic in facts.pci_nics:
            key = nic.address
            if nic.registered:
                event = self._registered(state, nic, now)
            elif key in known or not self._judged_now(nic, state, hold, cycle):
                continue
            elif not with_device:
                waiting.append(key)
                continue
            else:
                seen.add(key)
                event = self._miss(state, nic, cycle, with_device, notes)
            if event is not None:
                events.append(event)
        _restart_clocks(state, seen, hold, with_device)
        notes.extend(_driver_notes(last, len(waiting), with_device, config))
        return Verdict(state, tuple((HOST, e) for e in events), facts.pci_nics,
                       notes=tuple(notes), volatile=LastRead(facts.pci_nics, bool(waiting)))

    @staticmethod
    def _registered(state: LostNicSection, nic: PciNic, now: datetime
                    ) -> Optional[HealthEvent]:
        """A function with its RDMA device: its clock restarts, a latched one recovers."""
        key = nic.address
        state.misses.pop(key, None)
        state.since.pop(key, None)
        if key not in state.latched:
            return None
        del state.latched[key]
        return make_event(
            _check(nic), fatal=False, healthy=True, error_code=CODE_UNREGISTERED,
            entities=((ENTITY_PCI, key),), at=now,
            message=f"Mellanox PCI function {key} has an RDMA device again")

    @classmethod
    def _judged_now(cls, nic: PciNic, state: LostNicSection, hold: bool, cycle: Cycle
                    ) -> bool:
        """Whether a function without its device (not a known device's) is judged at this
        read: not while latched already, nor on a held read."""
        return nic.address not in state.latched and not hold and cls._judged(nic, cycle)

    @staticmethod
    def _judged(nic: PciNic, cycle: Cycle) -> bool:
        """Whether the function is judged at all: its check enabled, a Mellanox core driver
        or none bound, and a monitored role."""
        if _check(nic) not in cycle.enabled or foreign_driver(nic):
            return False
        config = cycle.config
        return role_of(nic, cycle.topology, config.nic_exclusion_regex,
                       config.nic_inclusion_regex_override).monitored

    @staticmethod
    def _miss(state: LostNicSection, nic: PciNic, cycle: Cycle, with_device: int,
              notes: list[str]) -> Optional[HealthEvent]:
        """One more read without its device while the driver is up: the fatal event once both
        the grace and the floor of reads have passed, else None."""
        key, now, config = nic.address, cycle.now, cycle.config
        since = state.since.get(key)
        if since is None or now < since:  # first seen so, or the wall clock went back
            since = state.since[key] = now
        misses = state.misses.get(key, 0) + 1
        elapsed = (now - since).total_seconds()
        grace = config.settings(LinkStateSettings).driver_reload_grace
        if misses < MISSING_READS or elapsed < grace:
            state.misses[key] = min(misses, MISSING_READS)  # stable while the grace runs
            if misses == 1:
                notes.append(
                    f"Mellanox PCI function {key} has no RDMA device ({_why(nic)}) while "
                    f"{with_device} other function(s) have theirs; reported if still so after "
                    f"{format_duration(grace)} (driverReloadGrace) and "
                    f"{MISSING_READS} adapter reads")
            return None
        state.misses.pop(key, None)
        state.since.pop(key, None)
        state.latched[key] = Latched(now, _why(nic))
        return lost_event(nic, now, elapsed)

    def judges(self, device: DeviceSnapshot, port: PortSnapshot) -> bool:
        """No port: what it judges has no RDMA device (the host is degraded while it fails)."""
        return False

    def conditions(self, section: LostNicSection, picture: Optional[Nics]) -> Iterable[Condition]:
        for key in sorted(section.latched):
            yield Condition(FATAL, f"PCI function {key} has no RDMA device")

    def device_rows(self, section: LostNicSection, picture: Optional[Nics], present: frozenset[str]
                    ) -> Iterable[JsonObject]:
        return _lost_rows(section, picture)

    def series(self, section: LostNicSection, picture: Optional[Nics]) -> Iterable[Series]:
        yield Series("pci_function_unregistered", "Mellanox physical functions on the PCI bus "
                     "reported without an RDMA device: 1 while latched", "gauge",
                     ("pci",), tuple(((k,), 1.0) for k in sorted(section.latched)))


def _driver_notes(last: Optional[LastRead], waiting: int, with_device: int, config: Config
                  ) -> list[str]:
    """One log line when functions start waiting for the RDMA driver, one when it is up."""
    if waiting and (last is None or not last.waiting):
        return [f"no Mellanox PCI function has an RDMA device (the RDMA driver, mlx5_ib, is "
                f"not loaded yet?): {waiting} function(s) without one are not judged until it "
                f"registers a device on another"]
    if not waiting and last is not None and last.waiting and with_device:
        return [f"the RDMA driver is up ({with_device} Mellanox PCI function(s) have their "
                f"RDMA device): any function still without one is reported after "
                f"{format_duration(config.settings(LinkStateSettings).driver_reload_grace)} "
                f"(driverReloadGrace)"]
    return []


def lost_nic_records(state: MonitorState, pictures: Mapping[str, Any]) -> list[dict[str, Any]]:
    """One row per lost NIC the daemon reported: a Mellanox physical function on the
    bus without an RDMA device. It has no kernel name, so ``device`` is its PCI address; the
    row carries every field of a device record (``present`` False, as a device that never
    registered) and ``lost`` True, ``lost_reason`` (why: no driver bound, or bound without
    registering) and ``lost_since``. Its netdevs, driver and NUMA node are those of the last
    adapter read that saw it."""
    section = state.section(LOST_NICS)
    return list(_lost_rows(section, pictures.get(LOST_NICS.id)))


def _lost_rows(section: LostNicSection, picture: Optional[Nics]) -> Iterable[dict[str, Any]]:
    seen: Mapping[str, PciNic] = {n.address: n for n in picture or ()}
    for address, latched in sorted(section.latched.items()):
        nic: Optional[PciNic] = seen.get(address)
        layer = "" if nic is None else ("InfiniBand" if nic.is_infiniband else "Ethernet")
        numa = nic.numa_node if nic is not None and nic.numa_node is not None else -1
        yield {
            "device": address, "hca_type": "", "fw_ver": "", "board_id": "", "node_guid": "",
            "pci_address": address, "card": address.rpartition(".")[0] or address,
            "numa_node": numa, "driver": (nic.driver or "") if nic else "",
            "netdevs": list(nic.netdevs) if nic else [], "is_vf": False, "role": "",
            "role_reason": "", "monitored": True, "link_layer": layer, "ports": 0,
            "present": False, "driver_event": False, "adapter": "mlx5",
            "renamed_from": "", "renamed_at": "",
            "lost": True, "lost_reason": latched.detail,
            "lost_since": format_timestamp(latched.since),
        }


def _known_addresses(cycle: Cycle) -> set[str]:
    """The PCI addresses of the devices of the poll and of every device ever identified:
    a function there is a known device's (its absence is the link-state family's)."""
    links = cycle.previous.section(LINK_STATE)
    known = {d.pci_address for d in cycle.snapshot.devices if d.pci_address}
    known |= {i.pci_address for i in links.identities.values()}
    return known


def _restart_clocks(state: LostNicSection, seen: set[str], hold: bool, with_device: int
                    ) -> None:
    """A function judged no more (registered, excluded) restarts its clock, and no device
    anywhere (the driver down, held as a reload or not) restarts every clock; a read held
    while the driver is up neither counts nor restarts. ``seen``: judged missing now."""
    if hold and with_device:
        return
    for table in (state.misses, state.since):
        for key in [k for k in table if k not in seen]:
            del table[key]


FAMILY = LOST_NICS = LostNics()
