"""The persisted monitor state (spec §6.6 schema plus nichealthd's own keys) and its JSON form.

Everything a restart must not forget lives here: counter snapshots (value + wall-clock
timestamp, authoritative across processes), latched breaches, the last reported health of
each port, the devices we know, and the journal position of the last committed event.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from datetime import datetime
from typing import Any, Optional

from .events import format_timestamp, parse_timestamp

STATE_VERSION = 1

HEALTHY = "healthy"
DEGRADED = "degraded"
FATAL = "fatal"
SUPPRESSED = "suppressed"  # unhealthy at the first poll with no evidence: not reported


class StateCorrupt(ValueError):
    """The state file exists but cannot be trusted; the daemon starts fresh."""


@dataclass(frozen=True)
class CounterSnap:
    """A counter value and when it was read (the start of the current window)."""

    value: int
    timestamp: datetime


@dataclass(frozen=True)
class BreachFlag:
    """A latched threshold breach; cleared only by a counter reset or a reboot.

    ``last_value`` is the last value seen while latched (None in state files written before
    it existed). A latched counter keeps moving; after a restart a decrease must be judged
    against where it was last seen, not against the snapshot of the breach: 2 at the breach,
    2^32-1 before the restart and 1 after it is a wrap, not a reset.
    """

    check_name: str
    is_fatal: bool
    since: datetime
    breached: bool = True
    last_value: Optional[int] = None


@dataclass(frozen=True)
class PortRecord:
    """Last known state of a port and the health the platform was last told about."""

    device: str
    port: int
    state: str
    physical_state: str
    link_layer: str
    health: str
    since: datetime
    misses: int = 0


@dataclass(frozen=True)
class MissingDevice:
    """A device reported as gone (fatal sent); its return sends the recovery."""

    link_layer: str
    since: datetime


@dataclass(frozen=True)
class CardAnomaly:
    """A latched homogeneity verdict: the card had fewer active ports than its group's mode."""

    role: str
    active: int
    expected: int
    check_name: str
    since: datetime
    ports: tuple[str, ...] = ()  # port keys whose fatal event rested on this verdict


@dataclass
class MonitorState:
    """The whole persisted state. Treated as a value: the evaluator returns a new one."""

    boot_id: str = ""
    counter_snapshots: dict[str, CounterSnap] = field(default_factory=dict)
    breach_flags: dict[str, BreachFlag] = field(default_factory=dict)
    port_states: dict[str, PortRecord] = field(default_factory=dict)
    known_devices: list[str] = field(default_factory=list)
    device_misses: dict[str, int] = field(default_factory=dict)
    missing_devices: dict[str, MissingDevice] = field(default_factory=dict)
    card_anomalies: dict[str, CardAnomaly] = field(default_factory=dict)
    # Counter files stuck at their saturation value, keyed by ``<device>:<port>:<file name>``:
    # those reported with an event (error counters) and those only shown (traffic counters).
    saturated: dict[str, datetime] = field(default_factory=dict)
    saturated_quiet: dict[str, datetime] = field(default_factory=dict)
    group_modes: dict[str, int] = field(default_factory=dict)
    # card -> since when its shortfall rests only on non-fatal ports (verdict held, #21)
    card_pending: dict[str, datetime] = field(default_factory=dict)
    event_seq: int = 0
    version: int = STATE_VERSION

    def copy(self) -> MonitorState:
        """A shallow copy whose containers can be changed without touching this one."""
        return MonitorState(
            boot_id=self.boot_id,
            counter_snapshots=dict(self.counter_snapshots),
            breach_flags=dict(self.breach_flags),
            port_states=dict(self.port_states),
            known_devices=list(self.known_devices),
            device_misses=dict(self.device_misses),
            missing_devices=dict(self.missing_devices),
            card_anomalies=dict(self.card_anomalies),
            saturated=dict(self.saturated),
            saturated_quiet=dict(self.saturated_quiet),
            group_modes=dict(self.group_modes),
            card_pending=dict(self.card_pending),
            event_seq=self.event_seq,
            version=self.version,
        )

    def to_json(self) -> dict[str, Any]:
        ts = format_timestamp
        return {
            "version": self.version,
            "boot_id": self.boot_id,
            "counter_snapshots": {
                k: {"value": s.value, "timestamp": ts(s.timestamp)}
                for k, s in sorted(self.counter_snapshots.items())},
            "breach_flags": {
                k: {"breached": b.breached, "check_name": b.check_name, "is_fatal": b.is_fatal,
                    "since": ts(b.since),
                    **({} if b.last_value is None else {"last_value": b.last_value})}
                for k, b in sorted(self.breach_flags.items())},
            "port_states": {
                k: {"state": p.state, "physical_state": p.physical_state, "device": p.device,
                    "port": p.port, "link_layer": p.link_layer, "health": p.health,
                    "since": ts(p.since), "misses": p.misses}
                for k, p in sorted(self.port_states.items())},
            "known_devices": sorted(self.known_devices),
            "device_misses": dict(sorted(self.device_misses.items())),
            "missing_devices": {
                k: {"link_layer": m.link_layer, "since": ts(m.since)}
                for k, m in sorted(self.missing_devices.items())},
            "card_anomalies": {
                k: {"role": a.role, "active": a.active, "expected": a.expected,
                    "check_name": a.check_name, "since": ts(a.since), "ports": list(a.ports)}
                for k, a in sorted(self.card_anomalies.items())},
            "saturated_counters": {k: ts(v) for k, v in sorted(self.saturated.items())},
            "saturated_quiet_counters": {
                k: ts(v) for k, v in sorted(self.saturated_quiet.items())},
            "group_modes": dict(sorted(self.group_modes.items())),
            "card_pending": {k: ts(v) for k, v in sorted(self.card_pending.items())},
            "event_seq": self.event_seq,
        }

    @classmethod
    def from_json(cls, data: Any) -> MonitorState:
        """Parse and type-check; any structural problem raises :class:`StateCorrupt`."""
        try:
            return _parse_state(data)
        except StateCorrupt:
            raise
        except (KeyError, TypeError, ValueError, AttributeError, OverflowError) as exc:
            raise StateCorrupt(f"unexpected content ({type(exc).__name__}: {exc})") from None


# Plausible bounds: a value outside them is a corrupt state file, never a reason to drop
# journal entries or to write back what the next start rejects (issue 12, classes 2 and 9).
MAX_INT = 2**64  # counters are at most 64-bit; sequence numbers and counts far less
MAX_SEQ = 2**63
MIN_YEAR, MAX_YEAR = 1970, 9999


def _int(value: Any, high: int = MAX_INT) -> int:
    """A non-negative integer below ``high``; nothing in the state is negative."""
    if isinstance(value, bool) or not isinstance(value, int):
        raise TypeError(f"expected an integer, got {_short(value)}")
    if not 0 <= value < high:
        raise ValueError(f"implausible number {_short(value)}")
    return value


def _bool(value: Any) -> bool:
    if not isinstance(value, bool):
        raise TypeError(f"expected true or false, got {_short(value)}")
    return value


def _when(value: Any) -> datetime:
    """A timestamp the writer can write back as it was read (years 1970-9999, UTC)."""
    moment = parse_timestamp(_str(value))
    if not MIN_YEAR <= moment.year <= MAX_YEAR:
        raise ValueError(f"implausible timestamp {_short(value)}")
    return moment


def _short(value: Any) -> str:
    text = repr(value)
    return text if len(text) <= 40 else text[:37] + "..."


def _str(value: Any) -> str:
    if not isinstance(value, str):
        raise TypeError(f"expected a string, got {_short(value)}")
    return value


def _list(value: Any, key: str) -> list[Any]:
    if not isinstance(value, list):
        raise TypeError(f"{key} must be a list")
    return value


def _table(data: Any, key: str) -> dict[str, Any]:
    value = data.get(key, {})
    if not isinstance(value, dict):
        raise TypeError(f"{key} must be an object")
    return value


def _parse_state(data: Any) -> MonitorState:
    if not isinstance(data, dict):
        raise StateCorrupt("top level is not a JSON object")
    version = _int(data.get("version", STATE_VERSION))
    if version != STATE_VERSION:
        raise StateCorrupt(f"unsupported state version {version}")
    when = _when
    known = data.get("known_devices", [])
    if not isinstance(known, list):
        raise TypeError("known_devices must be a list")
    return MonitorState(
        boot_id=_str(data.get("boot_id", "")),
        counter_snapshots={
            _str(k): CounterSnap(_nonnegative(v["value"]), when(v["timestamp"]))
            for k, v in _table(data, "counter_snapshots").items()},
        breach_flags={
            _str(k): BreachFlag(_str(v["check_name"]), _bool(v["is_fatal"]), when(v["since"]),
                                _bool(v.get("breached", True)),
                                _nonnegative(v["last_value"]) if "last_value" in v else None)
            for k, v in _table(data, "breach_flags").items() if _bool(v.get("breached", True))},
        port_states={
            _str(k): PortRecord(_str(v["device"]), _int(v["port"], 2**16), _str(v["state"]),
                                _str(v["physical_state"]), _str(v.get("link_layer", "")),
                                _str(v.get("health", HEALTHY)),
                                when(v["since"]) if "since" in v else _epoch(),
                                _int(v.get("misses", 0)))
            for k, v in _table(data, "port_states").items()},
        known_devices=[_str(d) for d in known],
        device_misses={_str(k): _int(v) for k, v in _table(data, "device_misses").items()},
        missing_devices={
            _str(k): MissingDevice(_str(v["link_layer"]), when(v["since"]))
            for k, v in _table(data, "missing_devices").items()},
        card_anomalies={
            _str(k): CardAnomaly(_str(v["role"]), _int(v["active"]), _int(v["expected"]),
                                 _str(v["check_name"]), when(v["since"]),
                                 tuple(_str(p) for p in _list(v.get("ports", []), "ports")))
            for k, v in _table(data, "card_anomalies").items()},
        saturated={_str(k): when(v) for k, v in _table(data, "saturated_counters").items()},
        saturated_quiet={_str(k): when(v)
                         for k, v in _table(data, "saturated_quiet_counters").items()},
        group_modes={_str(k): _int(v) for k, v in _table(data, "group_modes").items()},
        card_pending={_str(k): when(v) for k, v in _table(data, "card_pending").items()},
        event_seq=_int(data.get("event_seq", 0), MAX_SEQ),
        version=version,
    )


def _nonnegative(value: Any) -> int:
    if isinstance(value, int) and not isinstance(value, bool) and value < 0:
        raise ValueError(f"negative counter snapshot {value}")
    return _int(value)


def _epoch() -> datetime:
    return parse_timestamp("1970-01-01T00:00:00Z")


def counter_key(device: str, port: int, name: str) -> str:
    """``<device>:<port>:<counter name>`` (DESIGN §2.5)."""
    return f"{device}:{port}:{name}"
