"""The adapter temperature family: the hwmon sensors of each monitored NIC function.

A sensor at or above its ``temp*_crit`` -> fatal event (the layer's state check); within
``nicTemperatureMargin`` (default 5 °C) below it -> non-fatal event (degradation check);
``errorCode`` ``temperature``; entities the NIC and its PCI address. A sensor moves between
the levels ok / high / critical with one healthy event closing the level it leaves and one
event opening the level it enters. A sensor without a readable ``_crit`` or ``_input`` is not
judged (what was said is held). The margin is this daemon's choice, not a vendor figure: the
mlx5 driver publishes only the critical threshold (and the highest value seen), and a card
that comes within a few degrees of it has no headroom left for a fan or inlet change; it is
configurable. Slow cadence (``nicTemperatureInterval``, default 60 s): each read is a
firmware command.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Iterable, Mapping, Optional

from ...sources.pci_facts import Sensor, degrees
from ...sources.pcie import HWMON
from ..codec import stored
from ..config import Config
from ..events import HealthEvent
from ..family import CheckFamily, Condition, Cycle, Series, Verdict
from ..jsontypes import Json
from ..settings import Duration, Integer, Settings, setting
from ..state import DEGRADED, FATAL
from .link_state import LINK_STATE
from .pci_open import OpenRecord, OpenSection, layer_checks

CODE = "temperature"
HIGH, CRITICAL = "high", "critical"


Sensors = Mapping[str, tuple[Sensor, ...]]  # its picture: each NIC's sensors as last read


@dataclass
class TemperatureSection(OpenSection):
    """Hot sensors, keyed ``<PCI address>/<hwmonN/tempI>``."""

    records: dict[str, OpenRecord] = field(default_factory=dict,
                                           metadata=stored(key="nic_temperature_alerts"))


def level(sensor: Sensor, margin_c: int) -> str:
    """``critical``, ``high``, ``ok`` or ``""`` (not judged)."""
    if sensor.input is None or sensor.crit is None or sensor.crit <= 0:
        return ""
    if sensor.input >= sensor.crit:
        return CRITICAL
    if sensor.input >= sensor.crit - margin_c * 1000:
        return HIGH
    return "ok"


@dataclass(frozen=True)
class NicTemperatureSettings(Settings):
    """nichealthd.toml(5): nicTemperatureInterval (0 switches the family off),
    nicTemperatureMargin."""

    # Each hwmon read is a firmware command (MTMP): 60 s.
    nic_temperature_interval: float = setting(
        "nicTemperatureInterval", 60.0, Duration(0.0, 86400.0),
        "How often the hwmon temperature sensors of each monitored NIC function")
    nic_temperature_margin: int = setting(
        "nicTemperatureMargin", 5, Integer(0, 50),
        "Degrees Celsius below a sensor's critical threshold from which it is reported as "
        "degraded")


class NicTemperature(CheckFamily[TemperatureSection, Sensors, None]):
    """Each sensor against its critical threshold and the margin below it."""

    id = "nic_temperature"
    order = 52
    keys = TemperatureSection.keys()
    section_type = TemperatureSection
    reads = frozenset({HWMON})
    device_field_types = {"temperature_c": "?float", "temperature_crit_c": "?float"}
    cadence = 60.0
    settings = NicTemperatureSettings

    def interval(self, config: Config) -> float:
        return config.settings(NicTemperatureSettings).nic_temperature_interval

    def enabled(self, config: Config) -> bool:
        return config.settings(NicTemperatureSettings).nic_temperature_interval > 0

    def evaluate(self, previous: TemperatureSection, cycle: Cycle, volatile: None
                 ) -> Verdict[TemperatureSection, Sensors, None]:
        facts = cycle.snapshot.fact(HWMON)
        if facts is None:
            return Verdict(previous)
        section = TemperatureSection(dict(previous.records))
        links = cycle.previous.section(LINK_STATE)
        margin = cycle.config.settings(NicTemperatureSettings).nic_temperature_margin
        events: list[tuple[str, HealthEvent]] = []
        now = cycle.now
        for device in cycle.monitored:
            address = device.pci_address or ""
            checks = layer_checks(device, links)
            if device.is_vf or checks is None:
                continue
            for sensor in facts.get(device.name, ()):
                judged = level(sensor, margin)
                if not judged:
                    continue
                key = f"{address}/{sensor.name}"
                record = section.records.get(key)
                was = record.detail.split(":", 1)[0] if record else "ok"
                if judged == was:
                    continue
                reading = (f"{degrees(sensor.input)} (critical {degrees(sensor.crit)}, "
                           f"highest {degrees(sensor.highest)})")
                what = f"Temperature of {device.name} ({address}) sensor {sensor.title}"
                if record is not None:
                    del section.records[key]
                    events.append((device.name, record.event(
                        healthy=True, at=now,
                        message=f"{what} is no longer {was}: {reading}")))
                if judged == "ok":
                    continue
                fatal = judged == CRITICAL
                check = checks.state if fatal else checks.degradation
                if check not in cycle.enabled:
                    continue
                record = OpenRecord(check, fatal, CODE, device.name, address, now,
                                    f"{judged}: {sensor.title} {degrees(sensor.input)}")
                section.records[key] = record
                limit = ("at or above its critical threshold" if fatal else
                         f"within {margin} °C of its critical threshold")
                events.append((device.name, record.event(
                    healthy=False, at=now, message=f"{what} is {limit}: {reading}")))
        return Verdict(section, tuple(events), facts)

    def conditions(self, section: TemperatureSection,
                   picture: Optional[Sensors]) -> Iterable[Condition]:
        for _key, record in sorted(section.records.items()):
            yield Condition(FATAL if record.fatal else DEGRADED,
                            f"{record.device}: temperature {record.detail}")

    def device_fields(self, section: TemperatureSection, picture: Optional[Sensors], device: str,
                      present: bool) -> Mapping[str, Json]:
        """``temperature_c`` of its hottest sensor and that sensor's ``temperature_crit_c``."""
        sensors: tuple[Sensor, ...] = (picture or {}).get(device, ()) if present else ()
        known = [s for s in sensors if s.input is not None]
        if not known:
            return {}
        hottest = max(known, key=lambda s: s.input or 0)
        out: dict[str, Any] = {"temperature_c": (hottest.input or 0) / 1000}
        if hottest.crit is not None:
            out["temperature_crit_c"] = hottest.crit / 1000
        return out

    def series(self, section: TemperatureSection, picture: Optional[Sensors]) -> Iterable[Series]:
        facts: Mapping[str, tuple[Sensor, ...]] = picture or {}
        temp, crit, alert = [], [], []
        for device, sensors in sorted(facts.items()):
            for sensor in sensors:
                labels = (device, sensor.name, sensor.label)
                if sensor.input is not None:
                    temp.append((labels, sensor.input / 1000))
                if sensor.crit is not None:
                    crit.append((labels, sensor.crit / 1000))
                hot = any(k.endswith("/" + sensor.name) and r.device == device
                          for k, r in section.records.items())
                if hot:
                    alert.append((labels, 1.0))
        names = ("device", "sensor", "label")
        yield Series("nic_temperature_celsius", "NIC hwmon sensor temperature", "gauge",
                     names, tuple(temp))
        yield Series("nic_temperature_crit_celsius", "NIC hwmon critical threshold", "gauge",
                     names, tuple(crit))
        yield Series("nic_temperature_alert", "1 while a NIC sensor is within the margin of "
                     "or above its critical threshold (reported; no series otherwise)", "gauge",
                     names, tuple(alert))


FAMILY = NIC_TEMPERATURE = NicTemperature()
