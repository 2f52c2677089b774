"""Configuration: built-in defaults, TOML loading, merging by counter name, and validation.

One validator serves the daemon (start and reload) and ``nichealthctl config check``: every
problem is a :class:`ConfigError` naming the file, the key and what is wrong, so an operator
never has to guess why the daemon refused to start (exit status 2).
"""

from __future__ import annotations

import functools
import math
import os
import re
import socket
import sys
from dataclasses import dataclass, field, replace
from typing import Any, Mapping

from .duration import format_duration, parse_duration

if sys.version_info >= (3, 11):
    import tomllib
else:  # pragma: no cover - exercised on Python < 3.11 only
    import tomli as tomllib

DEFAULT_CONFIG_PATH = "/etc/nichealthd/config.toml"

IB_STATE_CHECK = "InfiniBandStateCheck"
IB_DEGRADATION_CHECK = "InfiniBandDegradationCheck"
ETH_STATE_CHECK = "EthernetStateCheck"
ETH_DEGRADATION_CHECK = "EthernetDegradationCheck"
ALL_CHECKS = (IB_STATE_CHECK, IB_DEGRADATION_CHECK, ETH_STATE_CHECK, ETH_DEGRADATION_CHECK)

PROCESSING_STRATEGIES = ("EXECUTE_REMEDIATION", "STORE_ONLY", "STORE_AND_ANALYSE")
DBUS_MODES = ("system", "session", "none")
LOG_LEVELS = ("debug", "info", "warning", "error")
VELOCITY_UNITS = {"second": 1.0, "minute": 60.0, "hour": 3600.0}
THRESHOLD_TYPES = ("delta", "velocity")
_COUNTER_NAME = re.compile(r"^[A-Za-z0-9_.-]+$")
_SPEC_CARRIER_PATH = "/sys/class/net/{interface}/statistics/carrier_changes"
REAL_CARRIER_PATH = "/sys/class/net/{interface}/carrier_changes"


class ConfigError(Exception):
    """An invalid configuration value; ``str()`` names the file, the key and the problem."""

    def __init__(self, source: str | None, key: str, problem: str) -> None:
        self.source = source or "<command line>"
        self.key = key
        self.problem = problem
        super().__init__(f"{self.source}: {key}: {problem}")


@dataclass(frozen=True)
class CounterSpec:
    """One counter to monitor: where to read it and when it is breached (spec §10.1)."""

    name: str
    path: str
    enabled: bool = True
    is_fatal: bool = False
    threshold_type: str = "delta"
    threshold: float = 0.0
    velocity_unit: str = ""
    description: str = ""

    # Cached (asked for every counter of every port on every poll); a frozen dataclass
    # keeps them valid, and they are not fields, so equality and replace() ignore them.
    @functools.cached_property
    def window_seconds(self) -> float:
        """The velocity window (1 s / 1 min / 1 h); 0 for delta counters."""
        return VELOCITY_UNITS.get(self.velocity_unit, 0.0) if self.is_velocity else 0.0

    @functools.cached_property
    def window_full_after(self) -> float:
        """Seconds after its start at which a velocity window counts as full.

        The window less the scheduling jitter accepted on it, 2 % of it and at most 50 ms: a
        1 s poll wakes a few milliseconds late or early, and without this a 1 s window would
        be evaluated only every other poll. The rate is always computed over the real
        elapsed time.
        """
        window = self.window_seconds
        return window - min(0.02 * window, 0.05)

    @functools.cached_property
    def is_velocity(self) -> bool:
        return self.threshold_type == "velocity"

    @property
    def unit_label(self) -> str:
        """Rate unit used in messages: ``/sec``, ``/min`` or ``/hour``."""
        return {"minute": "/min", "hour": "/hour"}.get(self.velocity_unit, "/sec")


def _velocity(name: str, path: str, threshold: float, unit: str, description: str,
              fatal: bool = False) -> CounterSpec:
    return CounterSpec(name, path, True, fatal, "velocity", threshold, unit, description)


def _delta(name: str, path: str, threshold: float, description: str,
           fatal: bool = False) -> CounterSpec:
    return CounterSpec(name, path, True, fatal, "delta", threshold, "", description)


# Spec §10.2, with carrier_changes at the kernel's real path (REFERENCE §3).
DEFAULT_COUNTERS: tuple[CounterSpec, ...] = (
    _delta("link_downed", "counters/link_downed", 0,
           "Port Training State Machine failed - QP disconnect", fatal=True),
    _delta("excessive_buffer_overrun_errors", "counters/excessive_buffer_overrun_errors", 0,
           "HCA internal buffer overflow - lossless contract violated", fatal=True),
    _delta("local_link_integrity_errors", "counters/local_link_integrity_errors", 0,
           "Physical errors exceed LocalPhyErrors hardware cap", fatal=True),
    _delta("rnr_nak_retry_err", "hw_counters/rnr_nak_retry_err", 0,
           "Receiver Not Ready NAK retry exhausted - connection severed", fatal=True),
    _velocity("symbol_error", "counters/symbol_error", 10.0, "second",
              "PHY bit errors before FEC - physical layer degradation"),
    _velocity("symbol_error_fatal", "counters/symbol_error", 120.0, "hour",
              "Symbol errors exceed IBTA BER threshold (10E-12) - link outside spec", fatal=True),
    _velocity("link_error_recovery", "counters/link_error_recovery", 5.0, "minute",
              "Link retraining events - micro-flapping"),
    _velocity("port_rcv_errors", "counters/port_rcv_errors", 10.0, "second",
              "Malformed packets received"),
    _velocity("out_of_sequence", "hw_counters/out_of_sequence", 100.0, "second",
              "Fabric routing issues - out of sequence packets"),
    _velocity("local_ack_timeout_err", "hw_counters/local_ack_timeout_err", 1.0, "second",
              "ACK timeout - potential fabric black hole"),
    _velocity("port_xmit_discards", "counters/port_xmit_discards", 100.0, "second",
              "TX discards due to congestion"),
    _velocity("port_xmit_wait", "counters/port_xmit_wait", 10000.0, "second",
              "TX wait ticks - congestion backpressure"),
    _velocity("roce_slow_restart", "hw_counters/roce_slow_restart", 10.0, "second",
              "Victim flow oscillation"),
    _delta("carrier_changes", REAL_CARRIER_PATH, 2,
           "Link instability - carrier state changes"),
)


@dataclass(frozen=True)
class Config:
    """The daemon's complete, validated configuration (flags already applied)."""

    source: str | None = None
    sysfs_root: str = "/sys"
    proc_root: str = "/proc"
    boot_id_path_setting: str = ""
    state_file: str = "/var/lib/nichealthd/state.json"
    metadata_path: str = "/var/lib/nvsentinel/gpu_metadata.json"
    node_name: str = ""
    platform_connector_socket: str = "unix:///run/nvsentinel/nvsentinel.sock"
    platform_connector_token_path: str = ""
    processing_strategy: str = "EXECUTE_REMEDIATION"
    polling_interval: float = 1.0
    checks: tuple[str, ...] = ALL_CHECKS
    metrics_listen: str = ":2112"
    dbus: str = "system"
    event_log: str = ""
    log_level: str = "info"
    connector_batch_interval: float = 5.0
    connector_timeout: float = 5.0
    card_verdict_hold_time: float = 240.0  # gpud's 4-minute drop rule (REFERENCE §4)
    outbox_max_events: int = 100_000
    outbox_max_bytes: int = 64 * 1024 * 1024
    event_history_size: int = 1000
    nic_exclusion_regex: tuple[str, ...] = ()
    nic_inclusion_regex_override: tuple[str, ...] = ()
    sys_class_infiniband_setting: str = ""
    sys_class_net_setting: str = ""
    counter_detection_enabled: bool = True
    counters: tuple[CounterSpec, ...] = DEFAULT_COUNTERS
    notices: tuple[str, ...] = field(default=(), compare=False)

    @property
    def boot_id_path(self) -> str:
        return self.boot_id_path_setting or os.path.join(
            self.proc_root, "sys/kernel/random/boot_id")

    @property
    def sys_class_infiniband(self) -> str:
        return self.sys_class_infiniband_setting or os.path.join(
            self.sysfs_root, "class/infiniband")

    @property
    def sys_class_net(self) -> str:
        return self.sys_class_net_setting or os.path.join(self.sysfs_root, "class/net")

    @property
    def state_dir(self) -> str:
        return os.path.dirname(os.path.abspath(self.state_file))

    @functools.cached_property  # asked for per port per poll; the config is frozen
    def active_counters(self) -> tuple[CounterSpec, ...]:
        """Enabled counters, or none when counter detection is switched off."""
        if not self.counter_detection_enabled:
            return ()
        return tuple(c for c in self.counters if c.enabled)


# Config key -> (Config field, converter). Flags use the same keys (see daemon.py).
def _string(value: Any) -> str:
    if not isinstance(value, str):
        raise ValueError(f"expected a string, got {value!r}")
    return value


def _choice(options: tuple[str, ...], lower: bool = False):  # type: ignore[no-untyped-def]
    def convert(value: Any) -> str:
        text = _string(value)
        text = text.lower() if lower else text
        if text not in options:
            raise ValueError(f"expected one of {', '.join(options)}, got {value!r}")
        return text
    return convert


def _positive_int(value: Any) -> int:
    if isinstance(value, bool) or not isinstance(value, int) or value <= 0:
        raise ValueError(f"expected a positive integer, got {value!r}")
    return value


def _duration(value: Any) -> float:
    return parse_duration(value)


def _duration_between(low: float, high: float):  # type: ignore[no-untyped-def]
    """A duration converter with bounds, so a typo like ``0.000001ms`` or ``1e308`` is caught."""
    def convert(value: Any) -> float:
        seconds = parse_duration(value)
        if not low <= seconds <= high:
            raise ValueError(f"must be between {format_duration(low)} and "
                             f"{format_duration(high)}, got {value!r}")
        return seconds
    return convert


def _regex_list(value: Any) -> tuple[str, ...]:
    if isinstance(value, str):
        items = [part.strip() for part in value.split(",") if part.strip()]
    elif isinstance(value, list) and all(isinstance(v, str) for v in value):
        items = [v.strip() for v in value if v.strip()]
    else:
        raise ValueError(f"expected a comma-separated string of regular expressions, got {value!r}")
    for item in items:
        try:
            re.compile(item)
        except re.error as exc:
            raise ValueError(f"invalid regular expression {item!r}: {exc}") from None
    return tuple(items)


def _checks(value: Any) -> tuple[str, ...]:
    if isinstance(value, str):
        names = [part.strip() for part in value.split(",") if part.strip()]
    elif isinstance(value, list) and all(isinstance(v, str) for v in value):
        names = [v.strip() for v in value]
    else:
        raise ValueError(f"expected a comma-separated list of check names, got {value!r}")
    unknown = [n for n in names if n not in ALL_CHECKS]
    if unknown:
        raise ValueError(f"unknown check {unknown[0]!r}; known checks: {', '.join(ALL_CHECKS)}")
    if not names:
        raise ValueError("at least one check must be enabled")
    return tuple(dict.fromkeys(names))


def _listen(value: Any) -> str:
    text = _string(value).strip()
    if not text:
        return ""
    host, sep, port = text.rpartition(":")
    if not sep or not port.isdigit() or not 0 < int(port) < 65536:
        raise ValueError(f"expected [HOST]:PORT (for example ':2112'), got {value!r}")
    del host
    return text


def _connector_target(value: Any) -> str:
    text = _string(value).strip()
    if text and not (text.startswith("unix:") or text.startswith("dns:") or ":" in text):
        raise ValueError(f"expected a gRPC target such as unix:///run/nvsentinel/nvsentinel.sock, "
                         f"got {value!r}")
    return text


def _bool(value: Any) -> bool:
    if not isinstance(value, bool):
        raise ValueError(f"expected true or false, got {value!r}")
    return value


SCALAR_KEYS: dict[str, tuple[str, Any]] = {
    "sysfsRoot": ("sysfs_root", _string),
    "procRoot": ("proc_root", _string),
    "bootIdPath": ("boot_id_path_setting", _string),
    "stateFile": ("state_file", _string),
    "metadataPath": ("metadata_path", _string),
    "nodeName": ("node_name", _string),
    "platformConnectorSocket": ("platform_connector_socket", _connector_target),
    "platformConnectorTokenPath": ("platform_connector_token_path", _string),
    "processingStrategy": ("processing_strategy", _choice(PROCESSING_STRATEGIES)),
    "pollingInterval": ("polling_interval", _duration_between(0.1, 3600.0)),
    "checks": ("checks", _checks),
    "metricsListen": ("metrics_listen", _listen),
    "dbus": ("dbus", _choice(DBUS_MODES)),
    "eventLog": ("event_log", _string),
    "logLevel": ("log_level", _choice(LOG_LEVELS, lower=True)),
    "connectorBatchInterval": ("connector_batch_interval", _duration_between(0.01, 3600.0)),
    "connectorTimeout": ("connector_timeout", _duration_between(0.1, 600.0)),
    "cardVerdictHoldTime": ("card_verdict_hold_time", _duration_between(0.0, 86400.0)),
    "outboxMaxEvents": ("outbox_max_events", _positive_int),
    "outboxMaxBytes": ("outbox_max_bytes", _positive_int),
    "eventHistorySize": ("event_history_size", _positive_int),
    "nicExclusionRegex": ("nic_exclusion_regex", _regex_list),
    "nicInclusionRegexOverride": ("nic_inclusion_regex_override", _regex_list),
    "sysClassInfinibandPath": ("sys_class_infiniband_setting", _string),
    "sysClassNetPath": ("sys_class_net_setting", _string),
}

_COUNTER_FIELDS = {
    "name": "name", "path": "path", "enabled": "enabled", "isFatal": "is_fatal",
    "thresholdType": "threshold_type", "threshold": "threshold",
    "velocityUnit": "velocity_unit", "description": "description",
}


def load_config(path: str | None, overrides: Mapping[str, Any] | None = None,
                *, must_exist: bool = False) -> Config:
    """Load ``path`` (missing file = built-in defaults unless ``must_exist``), apply overrides.

    ``overrides`` uses the config keys (camelCase); command-line flags arrive this way so
    that they are validated exactly like the file. Raises :class:`ConfigError`.
    """
    data: dict[str, Any] = {}
    if path:
        try:
            with open(path, "rb") as handle:
                data = tomllib.load(handle)
        except FileNotFoundError:
            if must_exist:
                raise ConfigError(path, "-", "file not found") from None
        except tomllib.TOMLDecodeError as exc:
            raise ConfigError(path, "-", f"not valid TOML: {exc}") from None
        except OSError as exc:
            raise ConfigError(path, "-", f"cannot read: {exc.strerror}") from None
    return build_config(data, path, overrides or {})


def build_config(data: Mapping[str, Any], source: str | None,
                 overrides: Mapping[str, Any]) -> Config:
    """Validate parsed TOML plus flag overrides into a :class:`Config`."""
    values: dict[str, Any] = {"source": source}
    notices: list[str] = []
    for key, raw in data.items():
        if key == "counterDetection":
            continue
        if key not in SCALAR_KEYS:
            notices.append(f"{source}: {key}: unknown key ignored")
            continue
        values.update(_convert(source, key, raw))
    for key, raw in overrides.items():
        values.update(_convert(None, key, raw))
    detection = data.get("counterDetection", {})
    if not isinstance(detection, dict):
        raise ConfigError(source, "counterDetection", "expected a table")
    if "enabled" in detection:
        try:
            values["counter_detection_enabled"] = _bool(detection["enabled"])
        except ValueError as exc:
            raise ConfigError(source, "counterDetection.enabled", str(exc)) from None
    for key in detection:
        if key not in ("enabled", "counters"):
            notices.append(f"{source}: counterDetection.{key}: unknown key ignored")
    counters, counter_notices = merge_counters(detection.get("counters", []), source)
    values["counters"] = counters
    notices.extend(counter_notices)
    if not values.get("node_name"):
        values["node_name"] = os.environ.get("NODE_NAME") or socket.gethostname()
    return replace(Config(), **values, notices=tuple(notices))


def _convert(source: str | None, key: str, raw: Any) -> dict[str, Any]:
    if key not in SCALAR_KEYS:
        raise ConfigError(source, key, "unknown key")
    attr, convert = SCALAR_KEYS[key]
    try:
        return {attr: convert(raw)}
    except ValueError as exc:
        raise ConfigError(source, key, str(exc)) from None


def merge_counters(entries: Any, source: str | None
                   ) -> tuple[tuple[CounterSpec, ...], list[str]]:
    """Merge user entries over the defaults by ``name`` (override / disable / add)."""
    if not isinstance(entries, list):
        raise ConfigError(source, "counterDetection.counters", "expected an array of tables")
    merged = {c.name: c for c in DEFAULT_COUNTERS}
    order = [c.name for c in DEFAULT_COUNTERS]
    seen: set[str] = set()
    notices: list[str] = []
    for index, entry in enumerate(entries):
        where = f"counterDetection.counters[{index}]"
        if not isinstance(entry, dict):
            raise ConfigError(source, where, "expected a table")
        name = entry.get("name")
        if not isinstance(name, str) or not _COUNTER_NAME.match(name):
            raise ConfigError(source, f"{where}.name",
                              f"expected a counter name of letters, digits, '_', '.', '-', "
                              f"got {name!r}")
        where = f"counterDetection.counters[{name}]"
        if name in seen:
            raise ConfigError(source, f"{where}.name", "duplicate counter name")
        seen.add(name)
        base = merged.get(name)
        if base is None:
            if "path" not in entry:
                raise ConfigError(source, f"{where}.path",
                                  "a new counter needs a path (relative to the port directory, "
                                  "or absolute with {interface})")
            base = CounterSpec(name=name, path="")
            order.append(name)
        fields: dict[str, Any] = {}
        for key, raw in entry.items():
            attr = _COUNTER_FIELDS.get(key)
            if attr is None:
                raise ConfigError(source, f"{where}.{key}", "unknown counter field")
            fields[attr] = _counter_field(source, f"{where}.{key}", attr, raw)
        spec = replace(base, **fields)
        if spec.path == _SPEC_CARRIER_PATH:
            notices.append(f"{source}: {where}.path: {_SPEC_CARRIER_PATH} does not exist on any "
                           f"kernel; reading {REAL_CARRIER_PATH} instead")
            spec = replace(spec, path=REAL_CARRIER_PATH)
        merged[name] = _check_counter(source, where, spec)
    return tuple(merged[n] for n in order), notices


def _counter_field(source: str | None, key: str, attr: str, raw: Any) -> Any:
    if attr in ("enabled", "is_fatal"):
        if not isinstance(raw, bool):
            raise ConfigError(source, key, f"expected true or false, got {raw!r}")
        return raw
    if attr == "threshold":
        if isinstance(raw, bool) or not isinstance(raw, (int, float)):
            raise ConfigError(source, key, f"expected a number, got {raw!r}")
        if not math.isfinite(raw):
            raise ConfigError(source, key, f"threshold must be a finite number, got {raw!r}; "
                                           "to switch a counter off set enabled = false")
        if raw < 0:
            raise ConfigError(source, key, f"threshold must be >= 0, got {raw!r}")
        return float(raw)
    if not isinstance(raw, str):
        raise ConfigError(source, key, f"expected a string, got {raw!r}")
    if attr == "threshold_type" and raw not in THRESHOLD_TYPES:
        raise ConfigError(source, key, f"expected 'delta' or 'velocity', got {raw!r}")
    if attr == "velocity_unit" and raw not in VELOCITY_UNITS and raw != "":
        raise ConfigError(source, key, f"expected 'second', 'minute' or 'hour', got {raw!r}")
    return raw


def _check_counter(source: str | None, where: str, spec: CounterSpec) -> CounterSpec:
    if spec.is_velocity and spec.velocity_unit not in VELOCITY_UNITS:
        raise ConfigError(source, f"{where}.velocityUnit",
                          "a velocity counter needs velocityUnit 'second', 'minute' or 'hour'")
    path = spec.path
    if not path:
        raise ConfigError(source, f"{where}.path", "must not be empty")
    if ".." in path.split("/"):
        raise ConfigError(source, f"{where}.path", "must not contain '..'")
    placeholders = set(re.findall(r"{([^}]*)}", path))
    if placeholders - {"interface"}:
        raise ConfigError(source, f"{where}.path",
                          "the only placeholder allowed is {interface}")
    if placeholders and not path.startswith("/"):
        raise ConfigError(source, f"{where}.path",
                          "{interface} is only allowed in absolute paths")
    return spec
