"""The EFA state family (#18.2): an AWS EFA port's health is its netdev's; devices that vanish.

The efa driver hard-codes ``ACTIVE`` / ``LinkUp`` (``efa_query_port`` in
drivers/infiniband/hw/efa/efa_verbs.c), so the port attributes say nothing. The netdev of the
network card does: ``operstate`` other than ``up`` or ``unknown``, or ``carrier`` 0, is DOWN,
fatal (REPLACE_VM) under ``EFAStateCheck``, as a RoCE port that goes DOWN. A ``carrier``
that cannot be read (EINVAL while the interface is administratively down) is no signal; the
``operstate`` then says "down" on its own. An EFA function without a netdev (an "efa-only"
interface) is watched for presence only.

The rules of the other adapters apply: at first sight a port already down is reported only
when its peers prove it anomalous (the EFA ports of its role group are decisively up: spec
§4.3's homogeneity over one-port cards), else it is taken as not connected and stays quiet
until it has been up once; a device is declared gone after three complete enumerations
without it (spec §7), and its return is a recovery; every EFA device gone at once is an efa
driver event, held as :mod:`.driver` holds mlx5's (``driverReloadGrace``,
``driverReloadTimeout``). The link-state family leaves EFA devices
to this one (their link layer, ``Unknown``, is not one it judges).
"""

from __future__ import annotations

from dataclasses import dataclass, field, replace
from datetime import datetime
from typing import Any, Iterable, Mapping, Optional

from ..config import EFA_STATE_CHECK, Config
from ..events import (
    CODE_DEVICE_MISSING,
    CODE_PORT_STATE,
    ENTITY_NIC,
    HealthEvent,
    device_entities,
    format_timestamp,
    make_event,
    port_entities,
)
from ..family import (
    HOST,
    READS_DEVICES,
    READS_PORTS,
    CheckFamily,
    Condition,
    Cycle,
    PortId,
    Verdict,
)
from ..model import PortSnapshot
from ..state import (
    FATAL,
    HEALTHY,
    SUPPRESSED,
    parse_int,
    parse_list,
    parse_str,
    parse_table,
    parse_when,
)
from ..topology import group_mode

KEYS = ("efa_ports", "efa_known_devices", "efa_device_misses", "efa_missing_devices",
        "efa_driver_event")
CODE_DRIVER_EVENT = "driver_event"
MISSES_BEFORE_GONE = 3
UP_OPERSTATES = ("up", "unknown")  # "unknown": drivers that never set it (RFC 2863)


@dataclass(frozen=True)
class EfaPort:
    """The health the platform was last told about an EFA port, and what was read."""

    device: str
    port: int
    netdev: str
    operstate: str
    carrier: Optional[int]
    health: str  # HEALTHY, FATAL or SUPPRESSED (down at first sight, no evidence)
    since: datetime

    def to_json(self) -> dict[str, Any]:
        return {"device": self.device, "port": self.port, "netdev": self.netdev,
                "operstate": self.operstate, "carrier": self.carrier, "health": self.health,
                "since": format_timestamp(self.since)}

    @classmethod
    def from_json(cls, data: Any) -> EfaPort:
        if not isinstance(data, dict):
            raise TypeError("an EFA port record must be an object")
        carrier = data.get("carrier")
        health = parse_str(data["health"])
        if health not in (HEALTHY, FATAL, SUPPRESSED):
            raise ValueError(f"unknown EFA port health {health!r}")
        return cls(parse_str(data["device"]), parse_int(data["port"], 256),
                   parse_str(data["netdev"]), parse_str(data["operstate"]),
                   None if carrier is None else parse_int(carrier, 2), health,
                   parse_when(data["since"]))


@dataclass(frozen=True)
class EfaDriverEvent:
    """Every known EFA device gone at once (an efa driver unload or reload, #19.2's rule)."""

    since: datetime
    devices: tuple[str, ...]
    told: bool = False

    def to_json(self) -> dict[str, Any]:
        return {"since": format_timestamp(self.since), "devices": list(self.devices),
                "told": self.told}

    @classmethod
    def from_json(cls, data: Any) -> Optional[EfaDriverEvent]:
        if not data:
            return None
        if not isinstance(data, dict):
            raise TypeError("efa_driver_event must be an object")
        told = data.get("told", False)
        if not isinstance(told, bool):
            raise TypeError("efa_driver_event.told must be true or false")
        return cls(parse_when(data["since"]),
                   tuple(parse_str(n) for n in parse_list(data["devices"], "devices")), told)


@dataclass
class EfaStateSection:
    """Port records by ``<device>_<port>``, known devices, misses, devices declared gone."""

    ports: dict[str, EfaPort] = field(default_factory=dict)
    known_devices: list[str] = field(default_factory=list)
    device_misses: dict[str, int] = field(default_factory=dict)
    missing_devices: dict[str, datetime] = field(default_factory=dict)
    driver_event: Optional[EfaDriverEvent] = None

    def copy(self) -> EfaStateSection:
        return EfaStateSection(dict(self.ports), list(self.known_devices),
                               dict(self.device_misses), dict(self.missing_devices),
                               self.driver_event)

    def to_json(self) -> dict[str, Any]:
        return {
            "efa_ports": {k: v.to_json() for k, v in sorted(self.ports.items())},
            "efa_known_devices": sorted(self.known_devices),
            "efa_device_misses": dict(sorted(self.device_misses.items())),
            "efa_missing_devices": {k: format_timestamp(v)
                                    for k, v in sorted(self.missing_devices.items())},
            "efa_driver_event": self.driver_event.to_json() if self.driver_event else {},
        }

    @classmethod
    def from_json(cls, data: Mapping[str, Any]) -> EfaStateSection:
        return cls(
            {k: EfaPort.from_json(v) for k, v in parse_table(data, "efa_ports").items()},
            [parse_str(n) for n in parse_list(data.get("efa_known_devices", []),
                                              "efa_known_devices")],
            {k: parse_int(v, 1 << 20)
             for k, v in parse_table(data, "efa_device_misses").items()},
            {k: parse_when(v) for k, v in parse_table(data, "efa_missing_devices").items()},
            EfaDriverEvent.from_json(data.get("efa_driver_event")),
        )


def netdev_down(port: PortSnapshot) -> Optional[bool]:
    """True (DOWN), False (up) or None (nothing known this poll) from the port's netdev."""
    operstate = (port.operstate or "").strip().lower()
    if operstate and operstate not in UP_OPERSTATES:
        return True
    if port.carrier == 0:
        return True
    if not operstate and port.carrier is None:
        return None
    return False


def _describe(port: PortSnapshot) -> str:
    carrier = "unreadable" if port.carrier is None else str(port.carrier)
    return f"netdev {port.netdev} operstate {port.operstate or 'unknown'}, carrier {carrier}"


def _event(port: PortSnapshot, healthy: bool, now: datetime) -> HealthEvent:
    label = f"EFA port {port.device} port {port.port}"
    message = (f"{label}: healthy ({_describe(port)})" if healthy
               else f"{label}: {_describe(port)} - no connectivity")
    return make_event(EFA_STATE_CHECK, fatal=not healthy, healthy=healthy, message=message,
                      error_code=CODE_PORT_STATE, entities=port_entities(port.device, port.port),
                      at=now)


class EfaState(CheckFamily[EfaStateSection]):
    """The netdev state of EFA ports, and EFA device presence."""

    id = "efa_state"
    order = 15  # after link_state, before the counters
    keys = KEYS
    section_type = EfaStateSection
    reads = frozenset({READS_DEVICES, READS_PORTS})

    def enabled(self, config: Config) -> bool:
        return EFA_STATE_CHECK in config.checks

    def dump(self, section: EfaStateSection) -> dict[str, Any]:
        """Its keys, the empty ones left out (a host without EFA writes what it wrote before)."""
        return {key: value for key, value in section.to_json().items() if value}

    def rename(self, section: EfaStateSection, renames: Mapping[str, str], now: datetime
               ) -> EfaStateSection:
        """Records of a renamed device under its new name (EFA names come from the PCI
        address, ``rdmap<bus>s<slot>``, so this is rare: a udev rule changed)."""
        state = section.copy()
        state.ports = {}
        for key, record in section.ports.items():
            new = renames.get(record.device)
            if new is None:
                state.ports[key] = record
            else:
                state.ports[f"{new}_{record.port}"] = replace(record, device=new)
        state.known_devices = sorted({renames.get(n, n) for n in section.known_devices})
        state.device_misses = {renames.get(k, k): v for k, v in section.device_misses.items()}
        state.missing_devices = {renames.get(k, k): v
                                 for k, v in section.missing_devices.items()}
        return state

    def evaluate(self, previous: EfaStateSection, cycle: Cycle, memory: Any
                 ) -> Verdict[EfaStateSection]:
        state = previous.copy()
        now = cycle.now
        events: list[tuple[str, HealthEvent]] = []
        notes: list[str] = []
        efa = [d for d in cycle.monitored if d.is_efa]
        evidence = self._group_up(efa, cycle)
        for device in efa:
            name = device.name
            state.device_misses.pop(name, None)
            if state.missing_devices.pop(name, None) is not None:
                events.append((name, make_event(
                    EFA_STATE_CHECK, fatal=False, healthy=True, error_code=CODE_DEVICE_MISSING,
                    entities=device_entities(name), at=now,
                    message=f"EFA {name} is present again in /sys/class/infiniband/")))
            for port in device.ports:
                if port.netdev is None:
                    continue  # efa-only: presence only
                event = self._port(port, previous.ports.get(port.key), state, now,
                                   cycle.baseline, evidence.get(cycle.roles[name].role), notes)
                if event is not None:
                    events.append((name, event))
        present = {d.name for d in cycle.snapshot.devices}
        efa_names = {d.name for d in efa}
        held = self._driver_event(previous, state, cycle, present, events)
        for name in sorted(set(previous.known_devices) - present):
            if not cycle.snapshot.complete:
                continue
            misses = state.device_misses.get(name, 0) + 1
            state.device_misses[name] = misses
            if (misses >= MISSES_BEFORE_GONE and name not in state.missing_devices
                    and name not in held):
                state.missing_devices[name] = now
                events.append((HOST, make_event(
                    EFA_STATE_CHECK, fatal=True, healthy=False, error_code=CODE_DEVICE_MISSING,
                    entities=device_entities(name), at=now,
                    message=f"EFA {name} disappeared from /sys/class/infiniband/ - hardware "
                            f"failure")))
        monitored = {d.name for d in cycle.monitored}
        state.known_devices = sorted(
            (set(previous.known_devices) - (present - monitored)) | efa_names)
        return Verdict(state, tuple(events), notes=tuple(notes))

    @staticmethod
    def _driver_event(previous: EfaStateSection, state: EfaStateSection, cycle: Cycle,
                      present: set[str], events: list[tuple[str, HealthEvent]]
                      ) -> frozenset[str]:
        """The rule of core/checks/driver.py for the efa driver: every known EFA device
        (two or more) gone in one complete enumeration is held from per-device judgement;
        after ``driverReloadGrace`` one non-fatal host event says so, after
        ``driverReloadTimeout`` they are judged one by one; the first one back ends it (a
        device still absent is then judged by the three-poll rule from that poll on)."""
        now, config = cycle.now, cycle.config
        event = previous.driver_event
        known = set(previous.known_devices)
        if (event is None and cycle.snapshot.complete and len(known) >= 2
                and not known & present):
            event = EfaDriverEvent(now, tuple(sorted(known)))
        if event is None:
            return frozenset()
        entities = tuple((ENTITY_NIC, d) for d in event.devices)
        elapsed = (now - event.since).total_seconds()
        back = [n for n in event.devices if n in present]
        if back or elapsed >= config.driver_reload_timeout:
            if event.told:
                events.append((HOST, make_event(
                    EFA_STATE_CHECK, fatal=False, healthy=True, error_code=CODE_DRIVER_EVENT,
                    entities=entities, at=now,
                    message=(f"EFA driver event over: {len(back)} of {len(event.devices)} "
                             f"EFA devices back") if back else (
                        f"EFA devices still gone after {elapsed:.0f}s: judged one by one"))))
            state.driver_event = None
            if back:
                for name in event.devices:
                    state.device_misses.pop(name, None)
            return frozenset()
        if elapsed >= config.driver_reload_grace and not event.told:
            event = replace(event, told=True)
            events.append((HOST, make_event(
                EFA_STATE_CHECK, fatal=False, healthy=False, error_code=CODE_DRIVER_EVENT,
                entities=entities, at=now,
                message=(f"All {len(event.devices)} EFA devices vanished at once {elapsed:.0f}s "
                         f"ago (efa driver unloaded or reloading): not judged per device "
                         f"before {config.driver_reload_timeout:.0f}s"))))
        state.driver_event = event
        return frozenset(event.devices)

    @staticmethod
    def _group_up(efa: Iterable[Any], cycle: Cycle) -> dict[str, bool]:
        """Per role, whether its EFA ports with a netdev are decisively up (spec §4.3 over
        one-port cards: the mode of 1/0 active ports is 1): the evidence that makes a port
        already down at first sight a failure rather than a card never connected."""
        counts: dict[str, list[int]] = {}
        for device in efa:
            for port in device.ports:
                down = netdev_down(port) if port.netdev else None
                if down is not None:
                    counts.setdefault(cycle.roles[device.name].role, []).append(int(not down))
        return {role: group_mode(values) == 1 for role, values in counts.items()}

    @staticmethod
    def _port(port: PortSnapshot, record: Optional[EfaPort], state: EfaStateSection,
              now: datetime, baseline: bool, evidence: Optional[bool], notes: list[str]
              ) -> Optional[HealthEvent]:
        down = netdev_down(port)
        if down is None:
            return None  # unknown this poll: hold the last state, say nothing
        event = None
        if record is None:
            if not down:
                told = HEALTHY
                if baseline:
                    event = _event(port, True, now)
            elif evidence:
                told = FATAL
                event = _event(port, False, now)
            else:
                told = SUPPRESSED
                notes.append(f"{port.device} port {port.port}: {_describe(port)} at first "
                             f"sight and its peers are not decisively up: treated as not "
                             f"connected, not reported")
        else:
            told = record.health
            if not down and told != HEALTHY:
                told = HEALTHY
                event = _event(port, True, now) if record.health == FATAL else None
            elif down and told == HEALTHY:
                told = FATAL
                event = _event(port, False, now)
        new = EfaPort(port.device, port.port, port.netdev or "", port.operstate or "",
                      port.carrier, told,
                      record.since if record is not None and record.health == told else now)
        if new != record:
            state.ports[port.key] = new
        return event

    def conditions(self, section: EfaStateSection, picture: Any) -> Iterable[Condition]:
        """Each EFA port told DOWN, each EFA device declared gone."""
        for key in sorted(section.ports):
            record = section.ports[key]
            if record.health == FATAL:
                port: PortId = (record.device, record.port)
                yield Condition(FATAL, f"netdev {record.netdev} down", port,
                                alone=f"EFA {record.device} port {record.port} netdev down")
        for name in sorted(section.missing_devices):
            yield Condition(FATAL, f"EFA {name} missing")


FAMILY = EFA_STATE = EfaState()
