"""The optics family: each pluggable module against its own thresholds and its own baseline.

Fact ``optics`` (:mod:`nichealthd.sources.optics`): per port with a netdev, the module's
temperature, supply voltage and per-lane Rx power, Tx power and Tx bias, with the high/low
alarm and warning thresholds the module publishes (SFF-8636 upper page 03h, CMIS page 02h).
Per port and monitor (lanes together: the worst lane decides, the message names the lanes):

- beyond a warning or an alarm threshold: a non-fatal event under the layer's degradation
  check. Optics predict, they never give REPLACE_VM: a link that has failed is the
  port-state rule's verdict (DOWN, core/checks/ports.py) or the counters' (link_downed), so
  Rx power below its low alarm on an ACTIVE port is a degradation (the link still carries
  traffic: the module sees light, only less than its vendor wants), and on a port that is
  not ACTIVE the optics add nothing to the port-state event (a fibre cut is one REPLACE_VM,
  not two): nothing is judged there, what was said is held;
- only what the module says it has is judged: a copper cable's optical monitors, a flat
  module's, a monitor the module does not implement are not available
  (sources/module_pages.py), so they are neither judged nor shown; a reading of exactly 0
  the module does not flag itself (its Rx loss-of-signal flag, or its alarm and warning
  flags of that monitor and lane, readable and clear) is a monitor that does not measure (a
  laser switched off, a lane outside the link), not darkness (:func:`measured`); where the
  module's own latched flag agrees with a threshold, the message says so;
- a twin-port module (2x400G) serves two host ports: each port judges only the lanes of its
  data path (:func:`~nichealthd.sources.optics_facts.share`), so every live lane is judged once;
- Rx power ``opticsRxPowerDrop`` dB (default 3: half the light) or more below the lane's
  own baseline (the best it has read since the module was plugged in) is a non-fatal event
  (a dirty or bent fibre, a failing far-end laser), well before any threshold; while Rx
  power is beyond one of the module's thresholds, that report says it and the drop is not
  judged (what was said of it is held). The baseline follows the module: a module of
  another vendor, part or serial number starts a new one (and closes a drop report of the
  old module).

``errorCode`` is ``optics_<monitor>`` (``optics_rx_power``, ``optics_rx_power_drop``, ...); a
port's monitor moves between levels with one healthy event closing the level it leaves and
one event opening the level it enters, and one recovery when it is back within its limits
(the identity of the event it closes). A port without a module, without diagnostics or
without thresholds for a monitor stays quiet (what was said is held). Slow
cadence (``opticsInterval``, default 60 s): each page read is an I2C transfer to the module.
"""

from __future__ import annotations

from dataclasses import dataclass, field, replace
from datetime import datetime
from typing import Iterable, Mapping, NamedTuple, Optional, Sequence

from ...sources.optics import PORT_OPTICS
from ...sources.optics_facts import (
    HIGH_ALARM,
    HIGH_WARNING,
    LANE_MONITORS,
    LOW_ALARM,
    LOW_WARNING,
    MODULE_MONITORS,
    OK,
    RANK,
    RX_POWER,
    TEMPERATURE,
    TX_BIAS,
    TX_POWER,
    VOLTAGE,
    ModuleDiagnostics,
    PortOptics,
    Thresholds,
    dbm,
    share,
)
from ..codec import Section, stored
from ..config import Config
from ..events import HealthEvent, make_event, port_entities
from ..family import CheckFamily, Condition, Cycle, PortId, Series, Verdict
from ..jsontypes import Json
from ..model import DeviceSnapshot, PortSnapshot
from ..settings import Duration, Integer, Settings, setting
from ..state import DEGRADED, FATAL
from .counters import CheckNames
from .pci_open import LAYER_CHECKS
from .ports import is_active, port_label

RX_DROP = "rx_power_drop"
MONITORS = (*MODULE_MONITORS, *LANE_MONITORS, RX_DROP)
TITLES = {TEMPERATURE: "temperature", VOLTAGE: "supply voltage", RX_POWER: "Rx power",
          TX_POWER: "Tx power", TX_BIAS: "Tx bias", RX_DROP: "Rx power"}
DROP = "drop"
_RANK = {**RANK, DROP: 1}


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
          lanes: Optional[Sequence[int]] = None) -> dict[str, Finding]:
    """Every monitor of a module that can be judged (a reading and the module's limits for
    it; the drop: a reading and a baseline), by monitor; pure. ``lanes``: the lanes
    (0-based) this port judges (default: every lane read); ``baseline`` maps a lane to its
    best Rx power in dBm. Nothing is ever fatal (the module docstring)."""
    out: dict[str, Finding] = {}
    for monitor in MODULE_MONITORS:
        value = diagnostics.module_value(monitor)
        limits = diagnostics.thresholds.get(monitor)
        if value is not None and limits is not None:
            found = level(value, limits)
            flagged = diagnostics.flags.get(monitor, ())
            out[monitor] = Finding(found, False, _detail(monitor, found, value, limits, (),
                                                         found in flagged))
    judged = set(lanes) if lanes is not None else None
    for monitor in LANE_MONITORS:
        limits = diagnostics.thresholds.get(monitor)
        if limits is not None:
            readings = measured(diagnostics, monitor, judged)
            finding = _worst_lanes(monitor, readings, limits, diagnostics.flags.get(monitor, ()))
            if finding is not None:
                out[monitor] = finding
    rx_level = out[RX_POWER].level if RX_POWER in out else OK
    if drop_db > 0 and rx_level == OK:  # beyond a threshold: that says it
        drop = _rx_drop(measured(diagnostics, RX_POWER, judged), baseline, drop_db)
        if drop is not None:
            out[RX_DROP] = drop
    return out


def measured(diagnostics: ModuleDiagnostics, monitor: str, lanes: Optional[set[int]]
             ) -> tuple[Optional[float], ...]:
    """One lane monitor's readings, ``None`` on a lane not judged here: another port's, or a
    reading of exactly 0 that the module itself does not flag: Rx power while its Rx LOS
    flag for the lane is clear, any monitor while its own alarm and warning flags for the
    lane are readable and clear. That is a monitor that does not measure the lane (a laser
    switched off, a lane outside the link), not darkness: the flags are latched and a
    condition that lasts sets them again as soon as they are read, so a real loss shows
    in them."""
    los = diagnostics.rx_los
    flags = diagnostics.flags.get(monitor, ())
    out: list[Optional[float]] = []
    for index, value in enumerate(diagnostics.lanes.get(monitor, ())):
        elsewhere = lanes is not None and index not in lanes
        unflagged = (monitor == RX_POWER and index < len(los) and los[index] is False) \
            or (index < len(flags) and flags[index] == OK)
        out.append(None if elsewhere or (value == 0.0 and unflagged) else value)
    return tuple(out)


def _worst_lanes(monitor: str, readings: Sequence[Optional[float]], limits: Thresholds,
                 flags: Sequence[str] = ()) -> Optional[Finding]:
    """The lanes at the worst level of one lane monitor, named together (None: no reading);
    never fatal."""
    judged = [(index, v, level(v, limits)) for index, v in enumerate(readings)
              if v is not None]
    if not judged:
        return None
    worst = max(_RANK[found] for _, _, found in judged)
    hit = [(i, v, found) for i, v, found in judged if _RANK[found] == worst]
    found, value = hit[0][2], hit[0][1]
    lanes = tuple(i for i, _, f in hit if f == found)
    agreed = found != OK and all(i < len(flags) and flags[i] == found for i in lanes)
    return Finding(found, False, _detail(monitor, found, value, limits, lanes, agreed))


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
            lanes: tuple[int, ...], flagged: bool = False) -> str:
    title = TITLES[monitor]
    where = f" on lane {', '.join(str(i + 1) for i in lanes)}" if lanes else ""
    if found == OK:
        return f"{title} {shown(monitor, value)} is back within its thresholds{where}"
    limit = {HIGH_ALARM: limits.high_alarm, LOW_ALARM: limits.low_alarm,
             HIGH_WARNING: limits.high_warning, LOW_WARNING: limits.low_warning}[found]
    side = "above" if found.startswith("high") else "below"
    agreed = ", the module flags it too" if flagged else ""
    return (f"{title} {shown(monitor, value)}{where} is {side} the module's {found} "
            f"threshold ({shown(monitor, limit)}){agreed}")


def rebased(baseline: Mapping[int, float], readings: Sequence[Optional[float]]
            ) -> dict[int, float]:
    """Each lane's baseline raised to its reading when the reading is better (the best Rx
    power the lane has had: a cleaned fibre raises it, a falling one never lowers it)."""
    out = dict(baseline)
    for index, value in enumerate(readings):
        if value is not None and value > 0:
            out[index] = max(out.get(index, dbm(value)), round(dbm(value), 2))
    return out


class _Module(NamedTuple):
    """The module of one judged port: whose it is, how its events name it (``mlx5_0 port 1
    (eth2)``) and the checks of its layer."""

    device: str
    port: int
    label: str
    checks: CheckNames


@dataclass(frozen=True)
class OpticsSettings(Settings):
    """nichealthd.toml(5): opticsInterval (0 switches the family off), opticsRxPowerDrop."""

    optics_interval: float = setting(
        "opticsInterval", 60.0, Duration(0.0, 86400.0),
        "How often the pluggable modules (QSFP, QSFP-DD, OSFP) of each monitored port with "
        "a netdev")
    optics_rx_power_drop: int = setting(
        "opticsRxPowerDrop", 3, Integer(0, 30),
        "Decibels an Rx lane may fall below its own baseline (the best Rx power it has read; a "
        "module of another vendor, part or serial number starts a new one) before it")


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
    """The open reports (``<port key>/<monitor>`` -> record), each Rx lane's baseline
    (``<port key>/<lane>`` -> dBm) and the module each port's baselines belong to (``<port
    key>`` -> vendor/part/serial: a state file without it is read as no module known)."""

    records: dict[str, OpticsRecord] = field(default_factory=dict,
                                             metadata=stored(key="optics_open"))
    baselines: dict[str, float] = field(default_factory=dict,
                                        metadata=stored(key="optics_rx_baselines"))
    modules: dict[str, str] = field(default_factory=dict,
                                    metadata=stored(key="optics_modules", legacy={}))


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
    reads = frozenset({PORT_OPTICS})
    port_field_types = {
        "module_netdev": "?string", "module_status": "?string", "module_spec": "?string",
        "module_media": "?string", "module_memory": "?string", "module_identity": "?string",
        "module_temperature_c": "?float", "module_voltage_v": "?float",
        "module_lanes": "?[]ModuleLane", "optics_alerts": "?[]string",
    }
    cadence = 60.0
    settings = OpticsSettings

    def interval(self, config: Config) -> float:
        return config.settings(OpticsSettings).optics_interval

    def enabled(self, config: Config) -> bool:
        return config.settings(OpticsSettings).optics_interval > 0

    def evaluate(self, previous: OpticsSection, cycle: Cycle, volatile: None
                 ) -> Verdict[OpticsSection, Modules, None]:
        read = cycle.snapshot.fact(PORT_OPTICS)
        if read is None:
            return Verdict(previous)
        order = [(port.key, (device.pci_address or device.name).rpartition(".")[0])
                 for device in sorted(cycle.monitored,
                                      key=lambda d: (d.pci_address or "", d.name))
                 for port in device.ports]  # PCI function order: a twin's host ports in turn
        facts = share(read, order)
        drop_db = cycle.config.settings(OpticsSettings).optics_rx_power_drop
        section = OpticsSection(dict(previous.records), dict(previous.baselines),
                                dict(previous.modules))
        events: list[tuple[str, HealthEvent]] = []
        for device in cycle.monitored:
            if device.is_vf:
                continue
            for port in device.ports:
                fact = facts.get(port.key)
                checks = LAYER_CHECKS.get(port.link_layer or "")
                if fact is None or fact.diagnostics is None or checks is None \
                        or not is_active(port.state, port.phys_state):
                    continue  # not ACTIVE: the port-state rule says it; what was said is held
                label = f"{port_label(device.name, port.port, port.link_layer or '')} " \
                        f"({fact.netdev})"
                findings = self._judge_port(section, port.key, fact, drop_db)
                module = _Module(device.name, port.port, label, checks)
                for monitor, finding in findings.items():
                    events.extend(self._step(section, cycle, module, monitor, finding))
        return Verdict(section, tuple(events), facts)

    @staticmethod
    def _judge_port(section: OpticsSection, key: str, fact: PortOptics, drop_db: int
                    ) -> dict[str, Finding]:
        """One port's findings against its baseline, which it then advances; a different
        module (vendor, part or serial) first drops the old module's baseline and closes a
        drop report made of it."""
        diag = fact.diagnostics
        assert diag is not None
        lanes = fact.lanes_served()
        module = "/".join(diag.identity)
        changed = bool(diag.identity[2]) and section.modules.get(key, module) != module
        if diag.identity[2]:
            section.modules[key] = module
        if changed:
            for name in [k for k in section.baselines if _split(k)[0] == key]:
                del section.baselines[name]
        baseline = {int(_split(k)[1]): v for k, v in section.baselines.items()
                    if _split(k)[0] == key}
        findings = judge(diag, baseline, drop_db, lanes)
        if changed and f"{key}/{RX_DROP}" in section.records:
            findings[RX_DROP] = Finding(OK, False, (
                f"Rx power baseline starts anew: a different module is plugged in "
                f"({diag.identity[0]} {diag.identity[1]}, serial {diag.identity[2]})"))
        for lane, value in rebased(baseline, measured(diag, RX_POWER, set(lanes))).items():
            section.baselines[f"{key}/{lane}"] = value
        return findings

    @staticmethod
    def _step(section: OpticsSection, cycle: Cycle, module: _Module, monitor: str,
              finding: Finding) -> list[tuple[str, HealthEvent]]:
        """The events of one monitor moving to ``finding``'s level: the old level's recovery
        and the new level's event."""
        device, port, label, checks = module
        key = f"{device}_{port}/{monitor}"
        record = section.records.get(key)
        was = record.level if record else OK
        if finding.level == was and (record is None or not record.fatal):
            return []  # (a fatal record of an older version is closed and said again)
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
        check = checks.degradation
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
        return OpticsSection(records, {moved(k): v for k, v in section.baselines.items()},
                             {moved(f"{k}/m")[:-2]: v for k, v in section.modules.items()})

    def module_facts(self, cycle_picture: Optional[Modules]) -> Optional[Modules]:
        return cycle_picture

    def judges(self, device: DeviceSnapshot, port: PortSnapshot) -> bool:
        """The InfiniBand and RoCE ports with a netdev (their modules are read by it)."""
        return bool(port.netdev) and (port.link_layer or "") in LAYER_CHECKS

    def conditions(self, section: OpticsSection, picture: Optional[Modules]) -> Iterable[Condition]:
        for key, record in sorted(section.records.items()):
            reason = f"module {record.detail}"
            yield Condition(FATAL if record.fatal else DEGRADED, reason,
                            (record.device, record.port), alone=f"{_split(key)[0]} {reason}",
                            code=code_of(_split(key)[1]))

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
        out["module_media"] = diag.media
        if diag.flat:
            out["module_memory"] = "flat"
        for name, value, digits in (("module_temperature_c", diag.temperature, 2),
                                    ("module_voltage_v", diag.voltage, 4)):
            if value is not None:  # not measured: left out, never 0
                out[name] = round(value, digits)
        if any(diag.identity):
            out["module_identity"] = " ".join(part for part in diag.identity if part)
        out["module_lanes"] = lane_records(diag, fact.lanes_served())
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
            served = set(fact.lanes_served())
            for monitor, into, convert in ((RX_POWER, rx, True), (TX_POWER, tx, True),
                                           (TX_BIAS, bias, False)):
                for lane, value in enumerate(measured(diag, monitor, served)):
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
            for monitor in _monitors_of(fact.diagnostics):
                record = section.records.get(f"{key}/{monitor}")
                alerts.append(((device, number, monitor), 1.0 if record else 0.0))
        yield Series("module_alert", "1 while a module monitor is reported beyond its "
                     "thresholds or its baseline", "gauge", ("device", "port", "monitor"),
                     tuple(alerts))


def _monitors_of(diagnostics: ModuleDiagnostics) -> tuple[str, ...]:
    """The monitors a module has (a reading of it): those an alert can be about; a copper
    cable's optical monitors have no alert series, not an alert of 0."""
    has = {m for m in MODULE_MONITORS if diagnostics.module_value(m) is not None}
    has |= {m for m in LANE_MONITORS if diagnostics.lanes.get(m)}
    if RX_POWER in has:
        has.add(RX_DROP)
    return tuple(m for m in MONITORS if m in has)


def lane_records(diagnostics: ModuleDiagnostics, lanes: Optional[Sequence[int]] = None
                 ) -> list[Json]:
    """``module_lanes`` of a port record: per lane this port judges (``lanes``, default
    every lane read; numbered as the module numbers them) its Rx and Tx power (dBm) and bias
    (mA), as text like every nested record (``pcie_hops``: D-Bus ``aa{ss}``), so that D-Bus
    and varlink say the same; a reading the module does not give is left out (no nulls:
    D-Bus has none)."""
    served = set(lanes) if lanes is not None else None
    columns = [(name, measured(diagnostics, monitor, served), monitor != TX_BIAS)
               for monitor, name in ((RX_POWER, "rx_power_dbm"), (TX_POWER, "tx_power_dbm"),
                                     (TX_BIAS, "tx_bias_ma"))]
    count = max((len(v) for v in diagnostics.lanes.values()), default=0)
    out: list[Json] = []
    for index in range(count):
        if served is not None and index not in served:
            continue
        lane: dict[str, Json] = {"lane": str(index + 1)}
        for name, values, power in columns:
            value = values[index] if index < len(values) else None
            if value is not None:
                lane[name] = str(round(dbm(value) if power else value, 2))
        out.append(lane)
    return out


FAMILY = OPTICS = Optics()
