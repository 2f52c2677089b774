"""The PCIe link family: every hop from a monitored NIC up to its root port, per hop.

A hop runs below what *both* of its ends support (the lower of the two ``max_link_*``) ->
one non-fatal event under the layer's degradation check naming the hop, ``errorCode``
``pcie_link``, entities the NIC and the PCI address of the function below the hop; recovery
when it trains back. Comparing hop by hop, never the NIC against its own maximum, is what
keeps a Gen5 NIC behind a Gen4 root port (running at Gen4) healthy. A hop whose speed or width
is unknown (link down, ``Unknown``, files absent in a VM) is not judged. Slow cadence
(``pcieLinkInterval``, default 60 s); the link files are read only in polls that judge them.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from datetime import datetime
from typing import Any, Iterable, Mapping, Optional

from ...sources.pci_facts import PcieHop
from ...sources.pcie import PCIE
from ..codec import stored
from ..config import Config
from ..events import HealthEvent
from ..family import CheckFamily, Condition, Cycle, Series, Verdict
from ..jsontypes import Json
from ..model import DeviceSnapshot
from ..settings import Duration, Settings, setting
from ..state import DEGRADED, FATAL
from .counters import CheckNames
from .link_state import LINK_STATE
from .pci_open import OpenRecord, OpenSection, layer_checks

CODE = "pcie_link"


Hops = Mapping[str, tuple[PcieHop, ...]]  # its picture: each NIC's hops as last read


@dataclass
class PcieLinkSection(OpenSection):
    """Degraded hops, keyed ``<upstream address>><downstream address>``."""

    records: dict[str, OpenRecord] = field(default_factory=dict,
                                           metadata=stored(key="pcie_degraded_links"))


def hop_key(hop: PcieHop) -> str:
    return f"{hop.upstream.address}>{hop.downstream.address}"


@dataclass(frozen=True)
class PcieLinkSettings(Settings):
    """nichealthd.toml(5): pcieLinkInterval (0 switches the family off)."""

    # Link training changes rarely: 60 s.
    pcie_link_interval: float = setting(
        "pcieLinkInterval", 60.0, Duration(0.0, 86400.0),
        "How often the PCIe link of every hop from each monitored NIC up to its root port is "
        "read and judged")


class PcieLink(CheckFamily[PcieLinkSection, Hops, None]):
    """Trained speed and width of every hop against what both of its ends support."""

    id = "pcie_link"
    order = 50
    keys = PcieLinkSection.keys()
    section_type = PcieLinkSection
    reads = frozenset({PCIE})
    device_field_types = {"pcie_link": "?string", "pcie_hops": "?[]PcieHop"}
    cadence = 60.0
    settings = PcieLinkSettings

    def interval(self, config: Config) -> float:
        return config.settings(PcieLinkSettings).pcie_link_interval

    def enabled(self, config: Config) -> bool:
        return config.settings(PcieLinkSettings).pcie_link_interval > 0

    def evaluate(self, previous: PcieLinkSection, cycle: Cycle, volatile: None
                 ) -> Verdict[PcieLinkSection, Hops, None]:
        facts = cycle.snapshot.fact(PCIE)
        if facts is None:  # not read this poll (a host without the facts, a pure test)
            return Verdict(previous)
        section = PcieLinkSection(dict(previous.records))
        links = cycle.previous.section(LINK_STATE)
        events: list[tuple[str, HealthEvent]] = []
        for device in cycle.monitored:
            if device.is_vf or device.name not in facts:
                continue
            hops = facts[device.name]
            events.extend((device.name, e) for e in _judge_hops(
                section, device, hops, layer_checks(device, links), cycle))
        return Verdict(section, tuple(events), facts)

    def conditions(self, section: PcieLinkSection, picture: Optional[Hops]) -> Iterable[Condition]:
        for key, record in sorted(section.records.items()):
            yield Condition(FATAL if record.fatal else DEGRADED,
                            f"{record.device}: PCIe link {key.replace('>', ' → ')} "
                            f"{record.detail}")

    def device_fields(self, section: PcieLinkSection, picture: Optional[Hops], device: str,
                      present: bool) -> Mapping[str, Json]:
        """``pcie_link`` (the NIC's own link) and ``pcie_hops``, as of its last run."""
        hops: Mapping[str, tuple[PcieHop, ...]] = picture or {}
        if not present or not hops.get(device):
            return {}
        out: dict[str, Any] = {}
        own = hops[device][0]
        link = link_text(own.downstream.current_width, own.downstream.current_speed)
        if link:
            out["pcie_link"] = link
        out["pcie_hops"] = [hop_record(h) for h in hops[device]]
        return out

    def series(self, section: PcieLinkSection, picture: Optional[Hops]) -> Iterable[Series]:
        facts: Mapping[str, tuple[PcieHop, ...]] = picture or {}
        speed, width, degraded = [], [], []
        # The speed and width of the NIC's own link (its first hop) only; any hop that
        # trained low is named by its degraded series, which exists only while it is.
        for device, hops in sorted(facts.items()):
            for index, hop in enumerate(hops):
                labels = (device, hop.upstream.address, hop.downstream.address)
                if index == 0 and hop.downstream.current_speed is not None:
                    speed.append((labels, hop.downstream.current_speed))
                if index == 0 and hop.downstream.current_width is not None:
                    width.append((labels, float(hop.downstream.current_width)))
                if hop_key(hop) in section.records:
                    degraded.append((labels, 1.0))
        names = ("device", "upstream", "downstream")
        yield Series("pcie_link_speed_gts", "Trained speed of a NIC's own PCIe link (GT/s)",
                     "gauge", names, tuple(speed))
        yield Series("pcie_link_width", "Trained width of a NIC's own PCIe link (lanes)",
                     "gauge", names, tuple(width))
        yield Series("pcie_link_degraded", "1 while a PCIe hop of a NIC runs below what both "
                     "ends support (reported; no series otherwise)", "gauge", names,
                     tuple(degraded))


def link_text(width: Any, speed: Any) -> str:
    """``x16 at 32.0 GT/s``; "" when either is unknown."""
    if not width or not speed:
        return ""
    return f"x{width} at {speed:.1f} GT/s"


def hop_record(hop: PcieHop) -> dict[str, str]:
    """One hop as strings (D-Bus ``a{ss}``)."""
    return {"upstream": hop.upstream.address, "downstream": hop.downstream.address,
            "link": link_text(hop.downstream.current_width, hop.downstream.current_speed),
            "capable": link_text(hop.capable_width, hop.capable_speed),
            "degraded": {True: "true", False: "false", None: "unknown"}[hop.degraded]}


def _judge_hops(section: PcieLinkSection, device: DeviceSnapshot, hops: tuple[PcieHop, ...],
                checks: Optional[CheckNames], cycle: Cycle) -> list[HealthEvent]:
    """Open a record for each hop of the device's path that trained below what both ends can
    do (under its layer's degradation check, when on), close it when it retrains; a hop
    whose state is unknown keeps what was said."""
    now = cycle.now
    events: list[HealthEvent] = []
    seen = set()
    for hop in hops:
        key = hop_key(hop)
        seen.add(key)
        degraded = hop.degraded
        record = section.records.get(key)
        if degraded is None:
            continue  # unknown: hold what was said
        where = f"PCIe link {hop.name} of {device.name}"
        if degraded and record is None:
            if checks is None or checks.degradation not in cycle.enabled:
                continue
            record = OpenRecord(checks.degradation, False, CODE, device.name,
                                hop.downstream.address, now, hop.describe())
            section.records[key] = record
            events.append(record.event(healthy=False, at=now,
                                       message=f"{where} {hop.describe()}"))
        elif not degraded and record is not None:
            del section.records[key]
            events.append(record.event(
                healthy=True, at=now,
                message=f"{where} retrained: {hop.describe().split(';')[0]}"))
    if hops:
        events.extend(_off_path(section, device.name, seen, now))
    return events


def _off_path(section: PcieLinkSection, device: str, seen: set[str], now: datetime
              ) -> list[HealthEvent]:
    """A hop of this device that is no longer on its path (the card moved): closed."""
    events = []
    for key in [k for k, r in section.records.items() if r.device == device and k not in seen]:
        record = section.records.pop(key)
        events.append(record.event(
            healthy=True, at=now, message=f"PCIe link {key.replace('>', ' → ')} "
                                          f"of {device} is no longer on its path"))
    return events


FAMILY = PCIE_LINK = PcieLink()
