"""The PCIe AER family (#16.2): the AER totals of each NIC function and of the port above it.

The ``TOTAL_ERR_*`` line of ``aer_dev_fatal``, ``aer_dev_nonfatal`` and
``aer_dev_correctable`` go through the counter engine of
:mod:`nichealthd.core.checks.counters` (delta and velocity thresholds, latching, resets), not a
copy of it. Defaults: any fatal AER -> fatal event (the layer's state check, ``REPLACE_VM``),
any non-fatal AER -> non-fatal event, correctable errors above ``pcieAerCorrectablePerMinute``
(8 per minute, DCGM's limit for PCIe replays) -> non-fatal event; a latch clears when the
counter resets (device reset) or at a reboot. The engine's records live in this family's own
section keys (``aer_*``) and its memory keys are ``<PCI address>:0:<file>``: a PCI address is
never a device name, so neither collides with the port counters, and a rename of the device
changes nothing (the address stays). Events name the NIC and the PCI address of the function.
The ``aer_rootport_total_err_*`` files of a root port count errors of every device below it
(GPUs too): they are not judged against a NIC.
"""

from __future__ import annotations

import functools
from dataclasses import dataclass, replace
from typing import Any, Iterable, Mapping

from ..config import Config, CounterSpec
from ..events import HealthEvent
from ..family import READS_AER, CheckFamily, Condition, Cycle, Series, Verdict
from ..model import PortSnapshot
from ..pcifacts import AerTable
from ..state import DEGRADED, FATAL
from .counter_section import CounterSection
from .counters import CounterMemory, CounterObservation, evaluate_port_counters
from .link_state import LINK_STATE
from .pci_open import layer_checks, pci_entities

PREFIX = "aer_"


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


@dataclass
class AerSection(CounterSection):
    """The counter engine's records of the AER totals, under ``aer_*`` keys of the state."""

    def copy(self) -> AerSection:
        return AerSection(dict(self.counter_snapshots), dict(self.breach_flags),
                          dict(self.saturated), dict(self.saturated_quiet))

    def to_json(self) -> dict[str, Any]:
        return {PREFIX + k: v for k, v in super().to_json().items()}

    @classmethod
    def from_json(cls, data: Mapping[str, Any]) -> AerSection:
        plain = CounterSection.from_json(
            {k[len(PREFIX):]: v for k, v in data.items() if k.startswith(PREFIX)})
        return cls(plain.counter_snapshots, plain.breach_flags, plain.saturated,
                   plain.saturated_quiet)


KEYS = tuple(PREFIX + k for k in ("counter_snapshots", "breach_flags", "saturated_counters",
                                  "saturated_quiet_counters"))


class PcieAer(CheckFamily[AerSection]):
    """AER totals through the counter engine."""

    id = "pcie_aer"
    order = 51
    keys = KEYS
    section_type = AerSection
    reads = frozenset({READS_AER})
    cadence = 10.0

    def interval(self, config: Config) -> float:
        return config.pcie_aer_interval

    def enabled(self, config: Config) -> bool:
        return config.pcie_aer_interval > 0

    def evaluate(self, previous: AerSection, cycle: Cycle, memory: CounterMemory
                 ) -> Verdict[AerSection]:
        facts = cycle.snapshot.aer
        if facts is None:
            return Verdict(previous)
        state = previous.copy()
        links = cycle.previous.section(LINK_STATE)
        specs = aer_specs(cycle.config.pcie_aer_correctable_per_minute)
        events: list[tuple[str, HealthEvent]] = []
        observations: dict[str, CounterObservation] = {}
        for device in cycle.monitored:
            checks = layer_checks(device, links)
            if checks is None or device.is_vf:
                continue
            for table in facts.get(device.name, ()):
                port = PortSnapshot(table.address, 0, None, None, None,
                                    counters=dict(table.totals))
                found = evaluate_port_counters(
                    port, specs, checks, cycle.enabled, previous, state, memory,
                    observations, cycle.now, False)
                events.extend((device.name, _ours(e, device.name, table)) for e in found)
        memory.slots[self.id] = picture = (dict(facts), observations)
        return Verdict(state, tuple(events), picture)

    def conditions(self, section: AerSection, picture: Any) -> Iterable[Condition]:
        for key, flag in sorted(section.breach_flags.items()):
            address, _, name = key.rpartition(":0:")
            yield Condition(FATAL if flag.is_fatal else DEGRADED,
                            f"PCIe AER {name} on {address}")

    def series(self, section: AerSection, picture: Any) -> Iterable[Series]:
        facts: Mapping[str, tuple[AerTable, ...]] = picture[0] if picture else {}
        totals, breached = [], []
        for device, tables in sorted(facts.items()):
            for table in tables:
                for name, value in sorted(table.totals.items()):
                    labels = (device, table.address, name)
                    totals.append((labels, float(value)))
                    flag = section.breach_flags.get(f"{table.address}:0:{name}")
                    breached.append((labels, 1.0 if flag else 0.0))
        names = ("device", "pci_address", "file")
        yield Series("pcie_aer_errors_total", "AER error total (TOTAL_ERR_*) of a NIC's PCI "
                     "function or the port above it", "counter", names, tuple(totals))
        yield Series("pcie_aer_breached", "1 while an AER threshold breach is latched",
                     "gauge", names, tuple(breached))


def _ours(event: HealthEvent, device: str, table: AerTable) -> HealthEvent:
    """The engine's event about ``<address> port 0`` told as the PCI function's."""
    where = ("the port above " if table.upstream else "") + f"{table.address} of {device}"
    message = (event.message
               .replace(f"Port {table.address} port 0:", f"PCIe AER on {where}:")
               .replace(f"port {table.address} port 0", f"PCI function {where}"))
    return replace(event, message=message, entities=pci_entities(device, table.address))


FAMILY = PCIE_AER = PcieAer()
