"""The optics family: each pluggable module against its own thresholds and its own baseline.

Fact ``optics`` (:mod:`nichealthd.sources.optics`): per port with a netdev, the module's
temperature, supply voltage and per-lane Rx power, Tx power and Tx bias, with the high/low
alarm and warning thresholds the module publishes (SFF-8636 upper page 03h, CMIS page 02h).
Per port and monitor (lanes together: the worst lane decides, the message names the lanes):

- beyond a warning threshold: a non-fatal event under the layer's degradation check;
- beyond an alarm threshold: a non-fatal event under the degradation check too, except Rx
  power below its low alarm, which is fatal under the layer's state check: the low-alarm
  threshold is the module's own floor of usable receive power (the alarm levels of SFF-8636
  upper page 03h and CMIS page 02h are the limits of operation the vendor sets; a receiver
  that far below its sensitivity declares loss of signal, the Rx LOS flag of SFF-8636 byte 3
  / CMIS page 11h byte 147), so the link cannot carry traffic. A high temperature, voltage,
  bias or Tx power alarm says the module runs outside its rating and will fail or shut
  itself down, but the link still carries traffic until it does: a degradation, to be
  replaced at the next window;
- Rx power ``opticsRxPowerDrop`` dB (default 3: half the light) or more below the lane's
  own baseline (the best it has read since the state began) is a non-fatal event (a dirty
  or bent fibre, a failing far-end laser), well before any threshold; while Rx power is
  beyond one of the module's thresholds, that report says it and the drop is not judged
  (what was said of it is held).

``errorCode`` is ``optics_<monitor>`` (``optics_rx_power``, ``optics_rx_power_drop``, ...); a
port's monitor moves between levels with one healthy event closing the level it leaves and
one event opening the level it enters, and one recovery when it is back within its limits
(the identity of the event it closes). A port without a module, without diagnostics or
without thresholds for a monitor stays quiet (what was said is held). Rx power is not judged
on a port the link-state family treats as uncabled (no light is expected there). Slow
cadence (``opticsInterval``, default 60 s): each page read is an I2C transfer to the module.
"""

from __future__ import annotations

from dataclasses import dataclass, field, replace
from datetime import datetime
from typing import Iterable, Mapping, NamedTuple, Optional, Sequence

from ..codec import Section, stored
from ..config import Config
from ..events import HealthEvent, make_event, port_entities
from ..family import CheckFamily, Condition, Cycle, PortId, Series, Verdict
from ..jsontypes import Json
from ..model import DeviceSnapshot, PortSnapshot
from ..modulefacts import (
    LANE_MONITORS,
    MODULE_MONITORS,
    RX_POWER,
    TEMPERATURE,
    TX_BIAS,
    TX_POWER,
    VOLTAGE,
    ModuleDiagnostics,
    PortOptics,
    Thresholds,
    dbm,
)
from ..settings import Duration, Integer, Settings, setting
from ..state import DEGRADED, FATAL, SUPPRESSED
from .counters import CheckNames
from .link_state import LINK_STATE
from .pci_open import LAYER_CHECKS
from .ports import port_label

FACT = "optics"  # what the optics source provides
RX_DROP = "rx_power_drop"
MONITORS = (*MODULE_MONITORS, *LANE_MONITORS, RX_DROP)
TITLES = {TEMPERATURE: "temperature", VOLTAGE: "supply voltage", RX_POWER: "Rx power",
          TX_POWER: "Tx power", TX_BIAS: "Tx bias", RX_DROP: "Rx power"}
HIGH_ALARM, LOW_ALARM = "high alarm", "low alarm"
HIGH_WARNING, LOW_WARNING = "high warning", "low warning"
DROP = "drop"
OK = "ok"
_RANK = {OK: 0, LOW_WARNING: 1, HIGH_WARNING: 1, DROP: 1, LOW_ALARM: 2, HIGH_ALARM: 2}


def code_of(monitor: str) -> str:
    return f"optics_{monitor}"


def shown(monitor: str, value: float) -> str:
    """A reading in its unit (power in dBm)."""
    if monitor in (RX_POWER, TX_POWER, RX_DROP):
        return f"{dbm(value):.2f} dBm"
    if monitor == TEMPERATURE:
        return f"{value:.1f} °C"
    if monitor == VOLTAGE:
        return f"{value:.3f} V"
    return f"{value:.2f} mA"


def level(value: float, limits: Thresholds) -> str:
    """Where a reading stands against the module's limits (beyond a limit: strictly, as the
    modules raise their flags)."""
    if value > limits.high_alarm:
        return HIGH_ALARM
    if value < limits.low_alarm:
        return LOW_ALARM
    if value > limits.high_warning:
        return HIGH_WARNING
    if value < limits.low_warning:
        return LOW_WARNING
    return OK


class Finding(NamedTuple):
    """One monitor's verdict on a port: its level, whether it is fatal, what to say."""

    level: str
    fatal: bool
    detail: str


def judge(diagnostics: ModuleDiagnostics, baseline: Mapping[int, float], drop_db: int,
          rx_judged: bool = True) -> dict[str, Finding]:
    """Every monitor of a module that can be judged (a reading and the module's limits for
    it; the drop: a reading and a baseline), by monitor; pure. ``baseline`` maps a lane
    (0-based) to its best Rx power in dBm."""
    out: dict[str, Finding] = {}
    for monitor in MODULE_MONITORS:
        value = diagnostics.module_value(monitor)
        limits = diagnostics.thresholds.get(monitor)
        if value is not None and limits is not None:
            found = level(value, limits)
            out[monitor] = Finding(found, False, _detail(monitor, found, value, limits, ()))
    for monitor in LANE_MONITORS:
        limits = diagnostics.thresholds.get(monitor)
        if limits is not None and (monitor != RX_POWER or rx_judged):
            finding = _worst_lanes(monitor, diagnostics.lanes.get(monitor, ()), limits)
            if finding is not None:
                out[monitor] = finding
    rx_level = out[RX_POWER].level if RX_POWER in out else OK
    if drop_db > 0 and rx_judged and rx_level == OK:  # beyond a threshold: that says it
        drop = _rx_drop(diagnostics.lanes.get(RX_POWER, ()), baseline, drop_db)
        if drop is not None:
            out[RX_DROP] = drop
    return out


def _worst_lanes(monitor: str, readings: Sequence[Optional[float]], limits: Thresholds
                 ) -> Optional[Finding]:
    """The lanes at the worst level of one lane monitor, named together (None: no reading);
    Rx power below its low alarm is the module's loss of signal: fatal."""
    judged = [(index, v, level(v, limits)) for index, v in enumerate(readings)
              if v is not None]
    if not judged:
        return None
    worst = max(_RANK[found] for _, _, found in judged)
    hit = [(i, v, found) for i, v, found in judged if _RANK[found] == worst]
    found, value = hit[0][2], hit[0][1]
    lanes = tuple(i for i, _, f in hit if f == found)
    fatal = monitor == RX_POWER and found == LOW_ALARM
    return Finding(found, fatal, _detail(monitor, found, value, limits, lanes))


def _rx_drop(readings: Sequence[Optional[float]], baseline: Mapping[int, float],
             drop_db: int) -> Optional[Finding]:
    """Rx power against each lane's own baseline (None: no lane has both)."""
    drops = [(index, baseline[index] - dbm(v), v) for index, v in enumerate(readings)
             if v is not None and index in baseline]
    if not drops:
        return None
    fallen = [d for d in drops if d[1] >= drop_db]
    if not fallen:
        return Finding(OK, False,
                       f"Rx power is back within {drop_db} dB of its baseline on every lane")
    index, fall, value = max(fallen, key=lambda d: d[1])
    which = ", ".join(str(d[0] + 1) for d in fallen)
    return Finding(DROP, False, (
        f"Rx power fell {fall:.1f} dB below its baseline on lane {which}: "
        f"{shown(RX_POWER, value)} (baseline {baseline[index]:.2f} dBm, "
        f"opticsRxPowerDrop {drop_db} dB)"))


def _detail(monitor: str, found: str, value: float, limits: Thresholds,
            lanes: tuple[int, ...]) -> str:
    title = TITLES[monitor]
    where = f" on lane {', '.join(str(i + 1) for i in lanes)}" if lanes else ""
    if found == OK:
        return f"{title} {shown(monitor, value)} is back within its thresholds{where}"
    limit = {HIGH_ALARM: limits.high_alarm, LOW_ALARM: limits.low_alarm,
             HIGH_WARNING: limits.high_warning, LOW_WARNING: limits.low_warning}[found]
    side = "above" if found.startswith("high") else "below"
    return (f"{title} {shown(monitor, value)}{where} is {side} the module's {found} "
            f"threshold ({shown(monitor, limit)})")


def rebased(baseline: Mapping[int, float], diagnostics: ModuleDiagnostics
            ) -> dict[int, float]:
    """Each lane's baseline raised to its reading when the reading is better (the best Rx
    power the lane has had: a cleaned fibre raises it, a falling one never lowers it)."""
    out = dict(baseline)
    for index, value in enumerate(diagnostics.lanes.get(RX_POWER, ())):
        if value is not None and value > 0:
            out[index] = max(out.get(index, dbm(value)), round(dbm(value), 2))
    return out


@dataclass(frozen=True)
class OpticsSettings(Settings):
    """nichealthd.toml(5): opticsInterval (0 switches the family off), opticsRxPowerDrop."""

    optics_interval: float = setting(
        "opticsInterval", 60.0, Duration(0.0, 86400.0),
        "How often the pluggable modules (QSFP, QSFP-DD, OSFP) of each monitored port with "
        "a netdev")
    optics_rx_power_drop: int = setting(
        "opticsRxPowerDrop", 3, Integer(0, 30),
        "Decibels an Rx lane may fall below its own baseline (the best Rx power it has read) "
        "before it")


@dataclass(frozen=True)
class OpticsRecord:
    """An open report on one monitor of a port, with the identity it was sent with."""

    device: str
    port: int = field(metadata=stored(high=2**16))
    check: str = field(metadata=stored(key="check_name"))
    fatal: bool = field(metadata=stored(key="is_fatal"))
    level: str
    detail: str
    since: datetime


@dataclass
class OpticsSection(Section):
    """The open reports (``<port key>/<monitor>`` -> record) and each Rx lane's baseline
    (``<port key>/<lane>`` -> dBm)."""

    records: dict[str, OpticsRecord] = field(default_factory=dict,
                                             metadata=stored(key="optics_open"))
    baselines: dict[str, float] = field(default_factory=dict,
                                        metadata=stored(key="optics_rx_baselines"))


def _split(key: str) -> tuple[str, str]:
    port_key, _, rest = key.rpartition("/")
    return port_key, rest


# Its picture: each port's module readings as last read, by port key.
Modules = Mapping[str, PortOptics]


class Optics(CheckFamily[OpticsSection, Modules, None]):
    """Module diagnostics against the module's own thresholds and the lanes' baselines."""

    id = "optics"
    order = 54
    keys = OpticsSection.keys()
    section_type = OpticsSection
    reads = frozenset({FACT})
    cadence = 60.0
    settings = OpticsSettings

    def interval(self, config: Config) -> float:
        return config.settings(OpticsSettings).optics_interval

    def enabled(self, config: Config) -> bool:
        return config.settings(OpticsSettings).optics_interval > 0

    def evaluate(self, previous: OpticsSection, cycle: Cycle, volatile: None
                 ) -> Verdict[OpticsSection, Modules, None]:
        facts: Optional[Modules] = cycle.snapshot.facts.get(FACT)
        if facts is None:
            return Verdict(previous)
        drop_db = cycle.config.settings(OpticsSettings).optics_rx_power_drop
        links = cycle.previous.section(LINK_STATE)
        section = OpticsSection(dict(previous.records), dict(previous.baselines))
        baselines: dict[str, dict[int, float]] = {}  # port key -> lane -> dBm
        for key, value in previous.baselines.items():
            port_key, index = _split(key)
            baselines.setdefault(port_key, {})[int(index)] = value
        events: list[tuple[str, HealthEvent]] = []
        for device in cycle.monitored:
            if device.is_vf:
                continue
            for port in device.ports:
                fact = facts.get(port.key)
                checks = LAYER_CHECKS.get(port.link_layer or "")
                if fact is None or fact.diagnostics is None or checks is None:
                    continue
                told = links.port_states.get(port.key)
                rx_judged = told is None or told.health != SUPPRESSED
                baseline = baselines.get(port.key, {})
                findings = judge(fact.diagnostics, baseline, drop_db, rx_judged)
                if rx_judged:
                    for lane, value in rebased(baseline, fact.diagnostics).items():
                        section.baselines[f"{port.key}/{lane}"] = value
                label = f"{port_label(device.name, port.port, port.link_layer or '')} " \
                        f"({fact.netdev})"
                for monitor, finding in findings.items():
                    events.extend(self._step(section, cycle, device.name, port.port, label,
                                             monitor, finding, checks))
        return Verdict(section, tuple(events), facts)

    @staticmethod
    def _step(section: OpticsSection, cycle: Cycle, device: str, port: int, label: str,
              monitor: str, finding: Finding, checks: CheckNames
              ) -> list[tuple[str, HealthEvent]]:
        """The events of one monitor moving to ``finding``'s level: the old level's recovery
        and the new level's event."""
        key = f"{device}_{port}/{monitor}"
        record = section.records.get(key)
        was = record.level if record else OK
        if finding.level == was:
            return []
        out: list[tuple[str, HealthEvent]] = []
        now = cycle.now
        entities = port_entities(device, port)
        if record is not None:
            del section.records[key]
            text = finding.detail if finding.level == OK else \
                f"{TITLES[monitor]} is no longer at its {was} level"
            out.append((device, make_event(record.check, fatal=False, healthy=True,
                                           message=f"{label}: module {text}",
                                           error_code=code_of(monitor), entities=entities,
                                           at=now)))
        if finding.level == OK:
            return out
        check = checks.state if finding.fatal else checks.degradation
        if check not in cycle.enabled:
            return out
        section.records[key] = OpticsRecord(device, port, check, finding.fatal, finding.level,
                                            finding.detail, now)
        out.append((device, make_event(check, fatal=finding.fatal, healthy=False,
                                       message=f"{label}: module {finding.detail}",
                                       error_code=code_of(monitor), entities=entities,
                                       at=now)))
        return out

    def rename(self, section: OpticsSection, renames: Mapping[str, str], now: datetime
               ) -> OpticsSection:
        """Its records and baselines of a renamed device under the new name."""
        def moved(key: str) -> str:
            port_key, rest = _split(key)
            device, _, number = port_key.rpartition("_")
            return f"{renames[device]}_{number}/{rest}" if device in renames else key

        records = {moved(k): replace(r, device=renames.get(r.device, r.device))
                   for k, r in section.records.items()}
        return OpticsSection(records, {moved(k): v for k, v in section.baselines.items()})

    def judges(self, device: DeviceSnapshot, port: PortSnapshot) -> bool:
        """The InfiniBand and RoCE ports with a netdev (their modules are read by it)."""
        return bool(port.netdev) and (port.link_layer or "") in LAYER_CHECKS

    def conditions(self, section: OpticsSection, picture: Optional[Modules]) -> Iterable[Condition]:
        for key, record in sorted(section.records.items()):
            reason = f"module {record.detail}"
            yield Condition(FATAL if record.fatal else DEGRADED, reason,
                            (record.device, record.port), alone=f"{_split(key)[0]} {reason}")

    def port_fields(self, section: OpticsSection, picture: Optional[Modules], port: PortId
                    ) -> Mapping[str, Json]:
        """The module's readings (``module_*``, ``module_lanes``) and its open reports
        (``optics_alerts``)."""
        key = f"{port[0]}_{port[1]}"
        fact: Optional[PortOptics] = (picture or {}).get(key)
        if fact is None:
            return {}
        out: dict[str, Json] = {"module_netdev": fact.netdev}
        diag = fact.diagnostics
        if diag is None:
            out["module_status"] = fact.reason
            return out
        out["module_status"] = "ok"
        out["module_spec"] = diag.spec
        out["module_temperature_c"] = _rounded(diag.temperature, 2)
        out["module_voltage_v"] = _rounded(diag.voltage, 4)
        out["module_lanes"] = lane_records(diag)
        out["optics_alerts"] = [f"{_split(k)[1]}: {r.level}"
                                for k, r in sorted(section.records.items())
                                if _split(k)[0] == key]
        return out

    def series(self, section: OpticsSection, picture: Optional[Modules]) -> Iterable[Series]:
        facts: Mapping[str, PortOptics] = picture or {}
        temp: list[tuple[tuple[str, ...], float]] = []
        volt: list[tuple[tuple[str, ...], float]] = []
        bias: list[tuple[tuple[str, ...], float]] = []
        rx: list[tuple[tuple[str, ...], float]] = []
        tx: list[tuple[tuple[str, ...], float]] = []
        for key, fact in sorted(facts.items()):
            diag = fact.diagnostics
            if diag is None:
                continue
            device, _, number = key.rpartition("_")
            labels = (device, number, fact.netdev)
            if diag.temperature is not None:
                temp.append((labels, diag.temperature))
            if diag.voltage is not None:
                volt.append((labels, diag.voltage))
            for monitor, into, convert in ((RX_POWER, rx, True), (TX_POWER, tx, True),
                                           (TX_BIAS, bias, False)):
                for lane, value in enumerate(diag.lanes.get(monitor, ())):
                    if value is not None:  # bias in amperes: Prometheus' base unit
                        into.append(((*labels, str(lane + 1)),
                                     dbm(value) if convert else value / 1000))
        names = ("device", "port", "netdev")
        lanes = (*names, "lane")
        yield Series("module_temperature_celsius", "Pluggable module temperature", "gauge",
                     names, tuple(temp))
        yield Series("module_voltage_volts", "Pluggable module supply voltage", "gauge",
                     names, tuple(volt))
        yield Series("module_rx_power_dbm", "Pluggable module Rx power per lane", "gauge",
                     lanes, tuple(rx))
        yield Series("module_tx_power_dbm", "Pluggable module Tx power per lane", "gauge",
                     lanes, tuple(tx))
        yield Series("module_tx_bias_amperes", "Pluggable module Tx bias per lane",
                     "gauge", lanes, tuple(bias))
        alerts = []
        for key, fact in sorted(facts.items()):
            if fact.diagnostics is None:
                continue
            device, _, number = key.rpartition("_")
            for monitor in MONITORS:
                record = section.records.get(f"{key}/{monitor}")
                alerts.append(((device, number, monitor), 1.0 if record else 0.0))
        yield Series("module_alert", "1 while a module monitor is reported beyond its "
                     "thresholds or its baseline", "gauge", ("device", "port", "monitor"),
                     tuple(alerts))


def lane_records(diagnostics: ModuleDiagnostics) -> list[Json]:
    """``module_lanes`` of a port record: per lane its Rx and Tx power (dBm) and bias (mA),
    as text like every nested record (``pcie_hops``: D-Bus ``aa{ss}``), so that D-Bus and
    varlink say the same; a reading the module does not give is left out (no nulls: D-Bus
    has none)."""
    count = max((len(v) for v in diagnostics.lanes.values()), default=0)
    out: list[Json] = []
    for index in range(count):
        lane: dict[str, Json] = {"lane": str(index + 1)}
        for monitor, name in ((RX_POWER, "rx_power_dbm"), (TX_POWER, "tx_power_dbm"),
                              (TX_BIAS, "tx_bias_ma")):
            values = diagnostics.lanes.get(monitor, ())
            value = values[index] if index < len(values) else None
            if value is not None:
                lane[name] = str(round(dbm(value) if monitor != TX_BIAS else value, 2))
        out.append(lane)
    return out


def _rounded(value: Optional[float], digits: int) -> Optional[float]:
    return None if value is None else round(value, digits)


FAMILY = OPTICS = Optics()
