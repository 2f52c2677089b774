"""The PCIe AER family: the AER totals of each NIC function, the port above it and
its root port.

The ``TOTAL_ERR_*`` line of ``aer_dev_fatal``, ``aer_dev_nonfatal`` and
``aer_dev_correctable`` go through the counter engine of
:mod:`nichealthd.core.checks.counters` (delta and velocity thresholds, latching, resets), not a
copy of it, so under the layer's degradation check, fatal or not (``CheckNames.for_counter``).
Defaults: any fatal AER -> fatal event (``REPLACE_VM``), any non-fatal AER -> non-fatal
event, correctable errors above ``pcieAerCorrectablePerMinute`` (8 per minute, DCGM's limit
for PCIe replays) -> non-fatal event; a latch clears when the counter resets (device reset) or
at a reboot. The engine's records live in this family's own
section keys (``aer_*``) and its memory keys are ``<PCI address>:0:<file>``: a PCI address is
never a device name, so neither collides with the port counters, and a rename of the device
changes nothing (the address stays). Events name the NIC and the PCI address of the function.

Root ports (``pcieAerRootPort``, on by default). The ``aer_rootport_total_err_cor`` /
``_fatal`` / ``_nonfatal`` of the root port at the top of a NIC's path count the ERR_*
messages of everything below it: the NIC, the switch ports, and any GPU on the same switch.
They go through the same engine with the same thresholds, once per root port however many
monitored NICs sit below it: one event per root port, under the link layer's check of the
first of those NICs (by name), its entities every NIC below and the root port's address
(``PCI``), attributed to that first NIC. A NIC's own error reaches both its ``aer_dev_*``
table and the root port's total; so a root port's breach is not told (and not latched) while
a NIC table below it (the function's or its upstream port's) holds a breach of the same
severity: one report per fault. A root port's count that no NIC table explains (a GPU's error,
a switch port's) is reported on its own. ``pcieAerRootPort = false`` closes what the root
ports hold open with a healthy event and judges only the NICs' own tables.
"""

from __future__ import annotations

import functools
from dataclasses import dataclass, replace
from datetime import datetime
from typing import Any, Iterable, Mapping, Optional

from ...sources.pci_facts import ROOTPORT_FILES, AerTable
from ...sources.pcie import AER
from ..codec import Layout
from ..config import Config, CounterSpec
from ..events import ENTITY_NIC, ENTITY_PCI, HealthEvent, make_event
from ..family import HOST, CheckFamily, Condition, Cycle, Series, Verdict
from ..jsontypes import Json
from ..model import PortSnapshot
from ..observed import CounterObservation
from ..settings import Duration, Integer, Settings, boolean, setting
from ..state import DEGRADED, FATAL
from .counter_section import CounterSection
from .counters import (
    CheckNames,
    CounterPoll,
    CounterTables,
    Observations,
    evaluate_port_counters,
)
from .link_section import LinkStateSection
from .link_state import LINK_STATE
from .pci_open import layer_checks, pci_entities

PREFIX = "aer_"
SEVERITY_OF = dict(ROOTPORT_FILES)  # root port file -> the function file of its severity


@functools.lru_cache(maxsize=8)
def aer_specs(correctable_per_minute: int) -> tuple[CounterSpec, ...]:
    """The counter entries of the AER totals (one tuple per threshold: the engine caches
    a port's entries while ``specs`` is the same object)."""
    return (
        CounterSpec("aer_dev_fatal", "aer_dev_fatal", True, True, "delta", 0, "",
                    "uncorrectable fatal PCIe error (AER)"),
        CounterSpec("aer_dev_nonfatal", "aer_dev_nonfatal", True, False, "delta", 0, "",
                    "uncorrectable non-fatal PCIe error (AER)"),
        CounterSpec("aer_dev_correctable", "aer_dev_correctable", True, False, "velocity",
                    float(correctable_per_minute), "minute",
                    "correctable PCIe errors (AER) above the accepted rate"),
    )


@functools.lru_cache(maxsize=8)
def rootport_specs(correctable_per_minute: int) -> tuple[CounterSpec, ...]:
    """The entries of a root port's totals: the same severities and thresholds."""
    return (
        CounterSpec("aer_rootport_total_err_fatal", "aer_rootport_total_err_fatal", True,
                    True, "delta", 0, "",
                    "uncorrectable fatal PCIe error (ERR_FATAL) below the root port (AER)"),
        CounterSpec("aer_rootport_total_err_nonfatal", "aer_rootport_total_err_nonfatal",
                    True, False, "delta", 0, "",
                    "uncorrectable non-fatal PCIe error (ERR_NONFATAL) below the root port "
                    "(AER)"),
        CounterSpec("aer_rootport_total_err_cor", "aer_rootport_total_err_cor", True, False,
                    "velocity", float(correctable_per_minute), "minute",
                    "correctable PCIe errors (ERR_COR) below the root port above the accepted "
                    "rate (AER)"),
    )


def is_rootport_key(key: str) -> bool:
    """``0000:15:01.0:0:aer_rootport_total_err_fatal``."""
    return key.rpartition(":0:")[2] in SEVERITY_OF


@dataclass
class AerSection(CounterSection):
    """The counter engine's records of the AER totals, under ``aer_*`` keys of the state."""

    LAYOUT = Layout(prefix=PREFIX)


KEYS = AerSection.keys()


@dataclass
class _RootPort:
    """A root port of this poll: its totals, the monitored NICs below it (by name) with the
    check names of the first, and the addresses of those NICs' own tables."""

    table: AerTable
    devices: list[str]
    checks: CheckNames
    own: set[str]


@dataclass(frozen=True)
class PcieAerSettings(Settings):
    """nichealthd.toml(5): pcieAerInterval (0 switches the family off),
    pcieAerCorrectablePerMinute, pcieAerRootPort."""

    # Three small files per function, no firmware command: 10 s.
    pcie_aer_interval: float = setting(
        "pcieAerInterval", 10.0, Duration(0.0, 86400.0),
        "How often the AER totals (the TOTAL_ERR_* line of aer_dev_fatal, aer_dev_nonfatal, "
        "aer_dev_correctable) of each monitored NIC function and of the port above it are "
        "read and judged")
    # DCGM's limit for PCIe replays (DCGM_LIMIT_MAX_PCIREPLAY_RATE, "8 replays per minute is
    # the maximum recommended by RM"): correctable AER errors count replays among others.
    pcie_aer_correctable_per_minute: int = setting(
        "pcieAerCorrectablePerMinute", 8, Integer(0, 1_000_000),
        "Correctable AER errors per minute above which a NIC function is degraded")
    # Root ports' aer_rootport_total_err_* (every device below them, GPUs on the same switch
    # too) judged against the NICs below; false leaves only the NICs' own tables.
    pcie_aer_root_port: bool = setting(
        "pcieAerRootPort", True, boolean,
        "Judge the aer_rootport_total_err_fatal, _nonfatal and _cor of the root port at the "
        "top of each monitored NIC's path")


# Its picture: the AER tables as last read and what the poll computed of each total.
AerPicture = tuple[Mapping[str, tuple[AerTable, ...]], Observations]


class PcieAer(CheckFamily[AerSection, AerPicture, CounterTables]):
    """AER totals through the counter engine."""

    id = "pcie_aer"
    order = 51
    keys = KEYS
    section_type = AerSection
    reads = frozenset({AER})
    device_field_types = {
        "aer_dev_fatal": "?int", "aer_dev_nonfatal": "?int", "aer_dev_correctable": "?int",
        "aer_root_port": "?string", "aer_rootport_total_err_fatal": "?int",
        "aer_rootport_total_err_nonfatal": "?int", "aer_rootport_total_err_cor": "?int",
    }
    cadence = 10.0
    settings = PcieAerSettings

    def interval(self, config: Config) -> float:
        return config.settings(PcieAerSettings).pcie_aer_interval

    def enabled(self, config: Config) -> bool:
        return config.settings(PcieAerSettings).pcie_aer_interval > 0

    def evaluate(self, previous: AerSection, cycle: Cycle, volatile: Optional[CounterTables]
                 ) -> Verdict[AerSection, AerPicture, CounterTables]:
        facts = cycle.snapshot.fact(AER)
        if facts is None:
            return Verdict(previous)
        state, memory = previous.copy(), CounterTables.next_of(volatile)
        links = cycle.previous.section(LINK_STATE)
        aer = cycle.config.settings(PcieAerSettings)
        specs = aer_specs(aer.pcie_aer_correctable_per_minute)
        events: list[tuple[str, HealthEvent]] = []
        notes: list[str] = []
        observations: dict[str, CounterObservation] = {}
        # No memo of what is steady (CounterPoll): root port records are dropped outside
        # the engine (_close_roots), and the family runs every pcieAerInterval only.
        poll = CounterPoll(previous, state, memory, observations, cycle.now, False,
                           remember=False)
        roots = _root_ports(facts, cycle, links)
        for device in cycle.monitored:
            checks = layer_checks(device, links)
            if checks is None or device.is_vf:
                continue
            for table in facts.get(device.name, ()):
                if table.rootport:
                    continue
                port = PortSnapshot(table.address, 0, None, None, None,
                                    counters=dict(table.totals))
                found = evaluate_port_counters(port, specs, checks, cycle.enabled, poll)
                events.extend((device.name, _ours(e, device.name, table)) for e in found)
        if aer.pcie_aer_root_port:
            rspecs = rootport_specs(aer.pcie_aer_correctable_per_minute)
            for address in sorted(roots):
                events.extend(_judge_root(roots[address], rspecs, cycle, poll, notes))
        else:
            events.extend(_close_roots(state, roots, cycle.now))
        return Verdict(state, tuple(events), (facts, observations), notes=tuple(notes),
                       volatile=memory)

    def forget(self, volatile: CounterTables, names: frozenset[str]) -> CounterTables:
        """Its tables are keyed by PCI address, which a rename keeps."""
        return volatile

    def conditions(self, section: AerSection, picture: Optional[AerPicture]) -> Iterable[Condition]:
        if not section.breach_flags:
            return  # nothing open (as on most polls): no NICs below a root port to name
        below = _below(picture[0] if picture else {})
        for key, flag in sorted(section.breach_flags.items()):
            address, _, name = key.rpartition(":0:")
            where = address
            if name in SEVERITY_OF:
                where = f"root port {address}" + (
                    f" (above {', '.join(below[address])})" if below.get(address) else "")
            yield Condition(FATAL if flag.is_fatal else DEGRADED, f"PCIe AER {name} on {where}")

    def device_fields(self, section: AerSection, picture: Optional[AerPicture], device: str,
                      present: bool
                      ) -> Mapping[str, Json]:
        """The NIC function's AER totals (``aer_dev_fatal`` ...) and the root port above it
        (``aer_root_port`` and its ``aer_rootport_total_err_*``), as of its last run."""
        if not present:
            return {}
        out: dict[str, Any] = {}
        tables: tuple[AerTable, ...] = (picture[0] if picture else {}).get(device, ())
        for table in tables:
            if table.rootport:  # the root port above it: its address and totals of all below
                out["aer_root_port"] = table.address
                out.update(table.totals)
            elif not table.upstream:
                out.update(table.totals)
        return out

    def series(self, section: AerSection, picture: Optional[AerPicture]) -> Iterable[Series]:
        facts: Mapping[str, tuple[AerTable, ...]] = picture[0] if picture else {}
        totals, breached = [], []
        roots: dict[str, AerTable] = {}
        for device, tables in sorted(facts.items()):
            for table in tables:
                if table.rootport:
                    roots[table.address] = table
                    continue
                for name, value in sorted(table.totals.items()):
                    labels = (device, table.address, name)
                    totals.append((labels, float(value)))
                    if section.breach_flags.get(f"{table.address}:0:{name}"):
                        breached.append((labels, 1.0))
        names = ("device", "pci_address", "file")
        yield Series("pcie_aer_errors_total", "AER error total (TOTAL_ERR_*) of a NIC's PCI "
                     "function or the port above it", "counter", names, tuple(totals))
        yield Series("pcie_aer_breached", "1 while an AER threshold breach is latched (no "
                     "series otherwise)", "gauge", names, tuple(breached))
        below = _below(facts)
        root_totals, root_breached = [], []
        for address, table in sorted(roots.items()):
            for name, value in sorted(table.totals.items()):
                labels = (address, name, ",".join(below.get(address, ())))
                root_totals.append((labels, float(value)))
                if section.breach_flags.get(f"{address}:0:{name}"):
                    root_breached.append((labels, 1.0))
        names = ("pci_address", "file", "devices")
        yield Series("pcie_aer_rootport_errors_total", "ERR_* messages a root port above "
                     "monitored NICs received from the hierarchy below it "
                     "(aer_rootport_total_err_*)", "counter", names, tuple(root_totals))
        yield Series("pcie_aer_rootport_breached", "1 while an AER threshold breach of a root "
                     "port's totals is latched (no series otherwise)", "gauge", names,
                     tuple(root_breached))


def _below(facts: Mapping[str, tuple[AerTable, ...]]) -> dict[str, list[str]]:
    """Root port address -> the NICs below it (by name), from a poll's AER facts."""
    out: dict[str, list[str]] = {}
    for device, tables in sorted(facts.items()):
        for table in tables:
            if table.rootport:
                out.setdefault(table.address, []).append(device)
    return out


def _root_ports(facts: Mapping[str, tuple[AerTable, ...]], cycle: Cycle,
                links: LinkStateSection) -> dict[str, _RootPort]:
    """Each root port above the monitored NICs (not VFs, layer known), with the NICs below
    it in name order and their own tables' addresses."""
    roots: dict[str, _RootPort] = {}
    for device in sorted(cycle.monitored, key=lambda d: d.name):
        checks = layer_checks(device, links)
        if checks is None or device.is_vf:
            continue
        tables = facts.get(device.name, ())
        for table in tables:
            if table.rootport:
                root = roots.setdefault(table.address, _RootPort(table, [], checks, set()))
                root.devices.append(device.name)
                root.own.update(t.address for t in tables if not t.rootport)
    return roots


def _judge_root(root: _RootPort, specs: tuple[CounterSpec, ...], cycle: Cycle,
                poll: CounterPoll, notes: list[str]) -> list[tuple[str, HealthEvent]]:
    """One root port through the engine; a breach a NIC table below it already holds for
    the same severity is not told (module doc). The breach flags are the next section's, as
    the poll holds them."""
    flags = poll.flags
    address = root.table.address
    port = PortSnapshot(address, 0, None, None, None, counters=dict(root.table.totals))
    found = evaluate_port_counters(port, specs, root.checks, cycle.enabled, poll)
    out = []
    for event in found:
        name = event.error_code[0] if event.error_code else ""
        if not event.is_healthy and name in SEVERITY_OF:
            told = sorted(a for a in root.own
                          if f"{a}:0:{SEVERITY_OF[name]}" in flags)
            if told:
                flags.pop(f"{address}:0:{name}", None)
                notes.append(f"{name} of root port {address} rose with "
                             f"{SEVERITY_OF[name]} of {', '.join(told)} (below it), which "
                             f"holds the report")
                continue
        out.append((root.devices[0], _root_event(event, address, root.devices)))
    return out


def _close_roots(state: AerSection, roots: Mapping[str, _RootPort], now: datetime
                 ) -> list[tuple[str, HealthEvent]]:
    """``pcieAerRootPort = false``: every root port record goes; what was reported is closed
    (a later switch back on starts from a fresh snapshot)."""
    out = []
    for key in sorted(k for k in state.counter_snapshots if is_rootport_key(k)):
        del state.counter_snapshots[key]
    for key in sorted(k for k in state.breach_flags if is_rootport_key(k)):
        flag = state.breach_flags.pop(key)
        address, _, name = key.rpartition(":0:")
        devices = roots[address].devices if address in roots else []
        event = make_event(
            flag.check_name, fatal=False, healthy=True, error_code=name,
            entities=_root_entities(address, devices), at=now,
            message=f"PCIe AER {name} on root port {address} is no longer judged "
                    f"(pcieAerRootPort = false)")
        out.append((devices[0] if devices else HOST, event))
    return out


def _root_entities(address: str, devices: Iterable[str]) -> tuple[tuple[str, str], ...]:
    return (*((ENTITY_NIC, d) for d in devices), (ENTITY_PCI, address))


def _root_event(event: HealthEvent, address: str, devices: list[str]) -> HealthEvent:
    """The engine's event about ``<root port> port 0`` told as the root port's above NICs."""
    where = f"root port {address} above {', '.join(devices)}"
    message = (event.message
               .replace(f"Port {address} port 0:", f"PCIe AER on {where}:")
               .replace(f"port {address} port 0", where))
    return replace(event, message=message, entities=_root_entities(address, devices))


def _ours(event: HealthEvent, device: str, table: AerTable) -> HealthEvent:
    """The engine's event about ``<address> port 0`` told as the PCI function's."""
    where = ("the port above " if table.upstream else "") + f"{table.address} of {device}"
    message = (event.message
               .replace(f"Port {table.address} port 0:", f"PCIe AER on {where}:")
               .replace(f"port {table.address} port 0", f"PCI function {where}"))
    return replace(event, message=message, entities=pci_entities(device, table.address))


FAMILY = PCIE_AER = PcieAer()
