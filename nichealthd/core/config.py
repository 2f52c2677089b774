"""Configuration: the daemon's own keys and the counter tables.

A key is declared once, by its owner (:mod:`nichealthd.core.settings`): the daemon's own keys
are the fields of :class:`Config`, a check family's are the fields of its settings class
(``CheckFamily.settings``, read as ``config.settings(TheClass)``). The ``[counterDetection]``
table is the counter engine's (the ConnectX and EFA counters share its switch, and the reader
reads the files it names), so it stays here with its merging by counter name. Building a
Config from a file's values, which needs every family's keys, is
:mod:`nichealthd.core.config_build`; reading and parsing the file is
:mod:`nichealthd.sources.config_file`.
"""

from __future__ import annotations

import functools
import math
import os
import re
from dataclasses import dataclass, field, replace
from typing import Any, Callable, Dict, List, Mapping, Optional, Tuple, Type, TypeVar, cast

from .config_errors import Collector, ConfigError, Problem, show
from .config_lines import KeyLines
from .settings import (
    Choice,
    Duration,
    Integer,
    Settings,
    boolean,
    hint,
    key_label,
    setting,
    string,
)

S = TypeVar("S", bound=Settings)

DEFAULT_CONFIG_PATH = "/etc/nichealthd/config.toml"

IB_STATE_CHECK = "InfiniBandStateCheck"
IB_DEGRADATION_CHECK = "InfiniBandDegradationCheck"
ETH_STATE_CHECK = "EthernetStateCheck"
ETH_DEGRADATION_CHECK = "EthernetDegradationCheck"
# AWS Elastic Fabric Adapter: the netdev's state, and the efa driver's hw_counters.
EFA_STATE_CHECK = "EFAStateCheck"
EFA_DEGRADATION_CHECK = "EFADegradationCheck"
# NVSentinel's check of the /dev/infiniband character devices: a check of its own, so
# that `checks` can switch it off without the link checks.
CHAR_DEVICE_CHECK = "InfiniBandCharDeviceCheck"
ALL_CHECKS = (IB_STATE_CHECK, IB_DEGRADATION_CHECK, ETH_STATE_CHECK, ETH_DEGRADATION_CHECK,
              EFA_STATE_CHECK, EFA_DEGRADATION_CHECK, CHAR_DEVICE_CHECK)

PROCESSING_STRATEGIES = ("EXECUTE_REMEDIATION", "STORE_ONLY", "STORE_AND_ANALYSE")
DBUS_MODES = ("system", "session", "none")
LINK_EVENTS = ("auto", "on", "off")
# Where the GPU<->NIC topology comes from (nichealthd.toml(5)).
TOPOLOGY_SOURCES = ("auto", "metadata", "sysfs")
LOG_LEVELS = ("debug", "info", "warning", "error")
VELOCITY_UNITS = {"second": 1.0, "minute": 60.0, "hour": 3600.0}
THRESHOLD_TYPES = ("delta", "velocity")
_COUNTER_NAME = re.compile(r"^[A-Za-z0-9_.-]+$")
_SPEC_CARRIER_PATH = "/sys/class/net/{interface}/statistics/carrier_changes"
REAL_CARRIER_PATH = "/sys/class/net/{interface}/carrier_changes"
DETECTION = "counterDetection"
DETECTION_KEYS = ("enabled", "counters", "efaCounters")
COUNTERS_TABLE = "counterDetection.counters"
# The EFA counters, merged by name over DEFAULT_EFA_COUNTERS as the ConnectX ones are
# over DEFAULT_COUNTERS; their paths are relative to the device (``{port}``: the port number).
EFA_COUNTERS_KEY = "efaCounters"
EFA_COUNTERS_TABLE = "counterDetection.efaCounters"


@dataclass(frozen=True)
class CounterSpec:
    """One counter to monitor: where to read it, its thresholds (link-counter-detection §10.1)."""

    name: str
    path: str
    enabled: bool = True
    is_fatal: bool = False
    threshold_type: str = "delta"
    threshold: float = 0.0
    velocity_unit: str = ""
    description: str = ""

    # Derived once (asked for every counter of every port on every poll). Plain instance
    # attributes, not cached properties: an attribute without a descriptor on the class is
    # the interpreter's fast path. Not compared, and replace() derives them again.
    is_velocity: bool = field(init=False, repr=False, compare=False)
    # The velocity window (1 s / 1 min / 1 h); 0 for delta counters.
    window_seconds: float = field(init=False, repr=False, compare=False)
    # Seconds after its start at which a velocity window counts as full: the window less the
    # scheduling jitter accepted on it, 2 % of it and at most 50 ms (a 1 s poll wakes a few
    # milliseconds late or early, and without this a 1 s window would be evaluated only every
    # other poll). The rate is always computed over the real elapsed time.
    window_full_after: float = field(init=False, repr=False, compare=False)

    def __post_init__(self) -> None:
        is_velocity = self.threshold_type == "velocity"
        window = VELOCITY_UNITS.get(self.velocity_unit, 0.0) if is_velocity else 0.0
        object.__setattr__(self, "is_velocity", is_velocity)
        object.__setattr__(self, "window_seconds", window)
        object.__setattr__(self, "window_full_after", window - min(0.02 * window, 0.05))

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


# link-counter-detection §10.2, with carrier_changes at the kernel's real path
# (/sys/class/net/<iface>/).
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
    # Off by default, as NVSentinel ships it (its chart lists no port_xmit_wait), not the
    # spec's 10000 ticks/s: a tick is an implementation's multiple of the symbol time
    # (PortSamplesControl.Tick, not in sysfs; NVIDIA: 8 bytes per tick on Quantum switches, 32
    # per lane on Switch-IB, "may vary" by generation), so no share of time can be worked out
    # from sysfs; at 8 bytes and 4X NDR the spec's threshold is 1.6 us of waiting per second,
    # which a busy healthy port crosses (nichealthd.toml(5), "port_xmit_wait").
    replace(_velocity("port_xmit_wait", "counters/port_xmit_wait", 10000.0, "second",
                      "TX wait ticks - congestion backpressure"), enabled=False),
    _velocity("roce_slow_restart", "hw_counters/roce_slow_restart", 10.0, "second",
              "Victim flow oscillation"),
    _delta("carrier_changes", REAL_CARRIER_PATH, 2,
           "Link instability - carrier state changes"),
)


# ---------------------------------------------------------------- EFA counters
# The efa driver's rdma_hw_stats, names as in drivers/infiniband/hw/efa/efa_verbs.c
# (EFA_DEFINE_PORT_STATS / EFA_DEFINE_DEVICE_STATS; the network group retrans_* /
# unresponsive_remote_events / impaired_remote_conn_events only in newer kernels, on Nitro v4 and
# later only). Paths are relative to /sys/class/infiniband/<device>: ``{port}`` is the port
# number (EFA has one port); a device counter is judged on every port of the device (on port 1).
# The values are u64 (atomic64_t in the driver, u64 from the device): 64-bit, never wrapping.
# Thresholds (each configurable by [[counterDetection.efaCounters]] entries merged by name, as
# the ConnectX counters are; see nichealthd.toml(5) for the reasons in prose):
DEFAULT_EFA_COUNTERS: tuple[CounterSpec, ...] = (
    # An admin command the device never completed: efa_com gives up on the admin queue (it is
    # marked not running and every later command fails), so the device is unusable until it
    # is reset. Nothing but a device fault causes it: fatal at the first one.
    _delta("no_completion_cmds", "hw_counters/no_completion_cmds", 0,
           "EFA admin command never completed - device not responding", fatal=True),
    # Receive-side drops. A few are normal under incast (SRD retransmits them); a sustained
    # rate of more than 100/s is the port losing traffic (the same bar as port_xmit_discards).
    _velocity("rx_drops", "ports/{port}/hw_counters/rx_drops", 100.0, "second",
              "EFA packets dropped on receive"),
    # Work requests completed in error, and the SRD network events: single ones are a fabric's
    # life (a remote peer restarting, a path change); ten a minute on one port is a pattern.
    _velocity("rdma_read_wr_err", "ports/{port}/hw_counters/rdma_read_wr_err", 10.0, "minute",
              "RDMA read work requests completed in error"),
    _velocity("rdma_write_wr_err", "ports/{port}/hw_counters/rdma_write_wr_err", 10.0, "minute",
              "RDMA write work requests completed in error"),
    _velocity("retrans_timeout_events", "ports/{port}/hw_counters/retrans_timeout_events", 10.0,
              "minute", "SRD retransmit timeouts - network path changed"),
    _velocity("unresponsive_remote_events",
              "ports/{port}/hw_counters/unresponsive_remote_events", 10.0, "minute",
              "Remote peers that stopped responding"),
    _velocity("impaired_remote_conn_events",
              "ports/{port}/hw_counters/impaired_remote_conn_events", 10.0, "minute",
              "Connections rate-limited as impaired"),
    # Admin commands completed with an error, and verbs resource creation that failed. An
    # application hitting its own limits (RLIMIT_MEMLOCK, max QPs) fails some too, so one is
    # not a fault; ten a minute means the device refuses work.
    _velocity("cmds_err", "hw_counters/cmds_err", 10.0, "minute",
              "EFA admin commands completed with an error"),
    _velocity("reg_mr_err", "hw_counters/reg_mr_err", 10.0, "minute",
              "Memory registrations that failed"),
    _velocity("create_qp_err", "hw_counters/create_qp_err", 10.0, "minute",
              "Queue pair creations that failed"),
    _velocity("create_cq_err", "hw_counters/create_cq_err", 10.0, "minute",
              "Completion queue creations that failed"),
    _velocity("create_ah_err", "hw_counters/create_ah_err", 10.0, "minute",
              "Address handle creations that failed"),
)
# keep_alive_rcvd is read by no rule: it counts the device's keep-alive notifications, a
# heartbeat whose *rise* is health; the counter engine judges rises only (a stall rule is
# future work).


# A counter is at most 64 bits: a larger threshold could never be breached.
THRESHOLD_MAX = float(2 ** 64)
SWITCH_OFF_HINT = "to switch a counter off set enabled = false"


# ------------------------------------------------------------- parsers of the daemon's keys
# Each takes a raw TOML (or flag) value and returns the Config value or raises ValueError
# with a message; the Collector turns that into a Problem (the generic ones are in
# :mod:`nichealthd.core.settings`).

def _regex_list(value: object) -> Tuple[str, ...]:
    if isinstance(value, str):
        items = [part.strip() for part in string(value).split(",") if part.strip()]
    elif isinstance(value, list) and all(isinstance(v, str) for v in value):
        items = [string(v).strip() for v in value if v.strip()]
    else:
        raise ValueError(f"expected a comma-separated string of regular expressions, "
                         f"got {show(value)}")
    for item in items:
        try:
            re.compile(item)
        except (re.error, RecursionError, OverflowError) as exc:
            reason = str(exc) if isinstance(exc, re.error) else "nested too deeply"
            raise ValueError(f"invalid regular expression {show(item)}: {reason}") from None
    return tuple(items)


def _checks(value: object) -> Tuple[str, ...]:
    if isinstance(value, str):
        names = [part.strip() for part in value.split(",") if part.strip()]
    elif isinstance(value, list) and all(isinstance(v, str) for v in value):
        names = [v.strip() for v in value]
    else:
        raise ValueError(f"expected a comma-separated list of check names, got {show(value)}")
    unknown = [n for n in names if n not in ALL_CHECKS]
    if unknown:
        raise ValueError(f"unknown check {show(unknown[0])}{hint(unknown[0], ALL_CHECKS)}; "
                         f"known checks: {', '.join(ALL_CHECKS)}")
    if not names:
        raise ValueError("at least one check must be enabled")
    return tuple(dict.fromkeys(names))


def _listen(value: object) -> str:
    text = string(value).strip()
    if not text:
        return ""
    host, sep, port = text.rpartition(":")
    bracketed = host.startswith("[") or host.endswith("]") or ":" in host
    if (not sep or not re.fullmatch(r"[0-9]{1,5}", port) or not 0 < int(port) < 65536
            or (bracketed and not re.fullmatch(r"\[[0-9A-Fa-f:.]+(%[\w.-]+)?\]", host))):
        raise ValueError(f"expected [HOST]:PORT (for example ':2112', '127.0.0.1:2112' or "
                         f"'[::1]:2112'), got {show(value)}")
    return text


UNIX_PATH_MAX = 107  # sun_path holds 108 bytes with the terminating NUL


def _unix_socket_path(value: object) -> str:
    """An absolute path for a unix socket, or "" (disabled)."""
    text = string(value).strip()
    if not text:
        return ""
    if not text.startswith("/"):
        raise ValueError(f"expected an absolute path such as /run/nichealthd/io.nichealthd.Monitor "
                         f"or \"\" to disable, got {show(value)}")
    size = len(text.encode("utf-8", "surrogateescape"))
    if size > UNIX_PATH_MAX:
        raise ValueError(f"a unix socket path is at most {UNIX_PATH_MAX} bytes, this one has "
                         f"{size}: {show(value)}")
    return text


def _threshold(value: object) -> float:
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        raise ValueError(f"expected a number, got {show(value)}")
    if isinstance(value, float) and not math.isfinite(value):
        raise ValueError(f"threshold must be a finite number, got {show(value)}; "
                         f"{SWITCH_OFF_HINT}")
    if value < 0:
        raise ValueError(f"threshold must be >= 0, got {show(value)}")
    if value > THRESHOLD_MAX:
        raise ValueError(f"threshold must be at most 2^64 (a larger one is never breached), "
                         f"got {show(value)}; {SWITCH_OFF_HINT}")
    return float(value)


def _counter_name(value: object) -> str:
    if not isinstance(value, str) or not _COUNTER_NAME.match(value):
        raise ValueError(f"expected a counter name of letters, digits, '_', '.', '-', "
                         f"got {show(value)}")
    return value


def _velocity_unit(value: object) -> str:
    text = string(value)
    if text not in VELOCITY_UNITS and text != "":
        raise ValueError(f"expected 'second', 'minute' or 'hour', got {show(value)}")
    return text


def _threshold_type(value: object) -> str:
    text = string(value)
    if text not in THRESHOLD_TYPES:
        raise ValueError(f"expected 'delta' or 'velocity', got {show(value)}")
    return text


# Counter field -> (CounterSpec attribute, converter).
COUNTER_FIELDS: Dict[str, Tuple[str, Callable[[object], object]]] = {
    "name": ("name", _counter_name),
    "path": ("path", string),
    "enabled": ("enabled", boolean),
    "isFatal": ("is_fatal", boolean),
    "thresholdType": ("threshold_type", _threshold_type),
    "threshold": ("threshold", _threshold),
    "velocityUnit": ("velocity_unit", _velocity_unit),
    "description": ("description", string),
}


@dataclass(frozen=True)
class Config:
    """The daemon's complete, validated configuration (flags already applied).

    Its own keys are its fields made by :func:`setting`; each family's are in
    :attr:`family_settings`, read through :meth:`settings`.
    """

    source: str | None = None
    sysfs_root: str = setting("sysfsRoot", "/sys", string, "Root of sysfs")
    proc_root: str = setting("procRoot", "/proc", string, "Root of procfs")
    # The physical layer's facts (ethtool statistics, FEC, module pages) come from the kernel
    # by netlink and ioctl; a simulated host has no such netdevs, so its simulator writes them
    # as files under this directory (like kernelLogPath for the kernel log).
    ethtool_path: str = setting(
        "ethtoolPath", "", string,
        "instead of asking the kernel; for tests and the simulator")
    boot_id_path_setting: str = setting(
        "bootIdPath", "", string,
        "Host boot ID; when it changes, counter snapshots and latches are discarded.")
    state_file: str = setting(
        "stateFile", "/var/lib/nichealthd/state.json", string,
        "Persistent state and outbox of undelivered events; written atomically.")
    metadata_path: str = setting(
        "metadataPath", "/var/lib/nvsentinel/gpu_metadata.json", string,
        "GPU metadata written by NVSentinel's metadata collector.")
    # Where the GPU<->NIC topology comes from (nichealthd.toml(5)).
    topology_source: str = setting("topologySource", "auto", Choice(TOPOLOGY_SOURCES),
                                   "Where the GPU–NIC topology comes from")
    node_name: str = setting("nodeName", "", string, "Node name stamped on every event")
    # The platform connector's keys are declared beside it (surfaces/connector/settings.py).
    processing_strategy: str = setting(
        "processingStrategy", "EXECUTE_REMEDIATION", Choice(PROCESSING_STRATEGIES),
        "EXECUTE_REMEDIATION, STORE_ONLY or STORE_AND_ANALYSE.")
    polling_interval: float = setting("pollingInterval", 1.0, Duration(0.1, 3600.0),
                                      "Poll period of port state and counters")
    # rtnetlink link notifications wake an early poll (runtime/linkwake.py); "auto" is on
    # only where sysfs is the kernel's (a simulated tree has no kernel netdevs).
    link_events: str = setting("linkEvents", "auto", Choice(LINK_EVENTS),
                               "A link change of a monitored port's netdev")
    checks: tuple[str, ...] = setting("checks", ALL_CHECKS, _checks, "The checks to run")
    metrics_listen: str = setting("metricsListen", ":2112", _listen,
                                  "Address of the Prometheus /metrics and /healthz endpoint")
    dbus: str = setting("dbus", "system", Choice(DBUS_MODES), "system, session or none.")
    varlink_socket: str = setting("varlinkSocket", "/run/nichealthd/io.nichealthd.Monitor",
                                  _unix_socket_path, "Unix socket of the varlink API")
    event_log: str = setting("eventLog", "", string,
                             "Append every committed event as one JSON line to this file")
    log_level: str = setting("logLevel", "info", Choice(LOG_LEVELS, lower=True),
                             "debug, info, warning or error.")
    # Adapter facts (character devices, lost NICs, firmware, netdev state) are read
    # and judged this often, not every poll: the cadence of their reader, which four families
    # share.
    adapter_check_interval: float = setting(
        "adapterCheckInterval", 10.0, Duration(1.0, 3600.0),
        "How often the adapter facts are read and judged")
    # The outbox bounds stay here: they bound the journal every consumer reads (the outbox is
    # kept and bounded without a connector library too).
    outbox_max_events: int = setting("outboxMaxEvents", 100_000, Integer(1, 10_000_000),
                                     "Maximum number of undelivered events kept")
    outbox_max_bytes: int = setting(
        "outboxMaxBytes", 64 * 1024 * 1024, Integer(64 * 1024, 16 * 1024 ** 3),
        "Maximum total size of undelivered events, in bytes")
    event_history_size: int = setting(
        "eventHistorySize", 1000, Integer(1, 100_000),
        "Number of recent events kept (across restarts) for D-Bus ListEvents")
    nic_exclusion_regex: tuple[str, ...] = setting(
        "nicExclusionRegex", (), _regex_list,
        "NICs whose names match any of them are dropped before any classification.")
    nic_inclusion_regex_override: tuple[str, ...] = setting(
        "nicInclusionRegexOverride", (), _regex_list,
        "exactly the InfiniBand devices whose names match are monitored")
    sys_class_infiniband_setting: str = setting(
        "sysClassInfinibandPath", "", string, "InfiniBand class directory (NVSentinel's key).")
    sys_class_net_setting: str = setting("sysClassNetPath", "", string,
                                         "Network class directory (NVSentinel's key).")
    # [counterDetection]: the counter engine's, merged by name (see the module's docstring).
    counter_detection_enabled: bool = True
    counters: tuple[CounterSpec, ...] = DEFAULT_COUNTERS
    efa_counters: tuple[CounterSpec, ...] = DEFAULT_EFA_COUNTERS
    # Each family's settings that differ from its defaults (so that equal configurations
    # compare equal however they were made), in family order.
    family_settings: tuple[Settings, ...] = ()
    notices: tuple[str, ...] = field(default=(), compare=False)

    def settings(self, kind: Type[S]) -> S:
        """The loaded settings of a family (its class), its defaults when none were set."""
        found = self._settings_by_kind.get(kind)
        return cast(S, found) if found is not None else default_settings(kind)

    @functools.cached_property
    def _settings_by_kind(self) -> Dict[type, Settings]:
        return {type(s): s for s in self.family_settings}

    @property
    def boot_id_path(self) -> str:
        return self.boot_id_path_setting or os.path.join(
            self.proc_root, "sys/kernel/random/boot_id")

    @property
    def host_sysfs(self) -> bool:
        """Whether ``sysfsRoot`` is the kernel's own /sys, not a simulated tree: only then are
        the kernel's netdevs, ethtool answers and kernel log this host's."""
        return os.path.abspath(self.sysfs_root) == "/sys"

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

    @functools.cached_property
    def active_names(self) -> frozenset[str]:
        """The names of :attr:`active_counters`."""
        return frozenset(c.name for c in self.active_counters)

    @functools.cached_property
    def active_efa_counters(self) -> tuple[CounterSpec, ...]:
        """The EFA counters, or none when counter detection is switched off."""
        if not self.counter_detection_enabled:
            return ()
        return tuple(c for c in self.efa_counters if c.enabled)

    def counters_of(self, adapter: str) -> tuple[CounterSpec, ...]:
        """The counters read on a device of ``adapter``: EFA's on EFA, the configured ones
        (mlx5's) everywhere else, so neither is ever looked for on the other."""
        return self.active_efa_counters if adapter == "efa" else self.active_counters


_DEFAULTS: Dict[type, Settings] = {}


def default_settings(kind: Type[S]) -> S:
    """A family's default settings (one instance per class: asked for on every poll)."""
    found = _DEFAULTS.get(kind)
    if found is None:
        found = _DEFAULTS[kind] = kind()
    return cast(S, found)


def merge_counters(entries: object, source: Optional[str], lines: Optional[KeyLines] = None,
                   errors: Optional[Collector] = None, *, efa: bool = False
                   ) -> Tuple[Tuple[CounterSpec, ...], List[str]]:
    """Merge user entries over the defaults by ``name`` (override / disable / add): the
    ConnectX counters of ``[[counterDetection.counters]]``, or with ``efa`` the EFA ones of
    ``[[counterDetection.efaCounters]]`` (the same fields, device-relative paths).

    Problems go to ``errors`` (raised at once when no collector is given).
    """
    own = errors is None
    errors = errors if errors is not None else Collector()
    lines = lines or KeyLines()
    defaults = DEFAULT_EFA_COUNTERS if efa else DEFAULT_COUNTERS
    table = EFA_COUNTERS_TABLE if efa else COUNTERS_TABLE
    merged = {c.name: c for c in defaults}
    order = [c.name for c in defaults]
    notices: List[str] = []
    if not isinstance(entries, list):
        errors.add(source, table, f"expected an array of tables, got {show(entries)}",
                   lines.line(DETECTION, table.rpartition(".")[2]))
        entries = []
    merging = _Merging(merged, set(), source, lines, errors, notices, efa)
    for index, entry in enumerate(entries):
        spec = _counter_entry(index, entry, merging)
        if spec is not None:
            if spec.name not in merged:
                order.append(spec.name)
            merged[spec.name] = spec
    if own:
        errors.raise_if_any()
    return tuple(merged[n] for n in order), notices


@dataclass(frozen=True)
class _Merging:
    """One merge of user counter entries over the defaults (:func:`merge_counters`): the
    counters so far by name, the names given already, where the entries come from and their
    lines, where problems and notices go, and whether they are the EFA table's."""

    merged: Mapping[str, CounterSpec]
    seen: set[str]
    source: Optional[str]
    lines: KeyLines
    errors: Collector
    notices: List[str]
    efa: bool


def _counter_entry(index: int, entry: object, merging: _Merging) -> Optional[CounterSpec]:
    """One ``[[counterDetection.counters]]`` (or ``efaCounters``) entry merged over its
    default; None if invalid."""
    merged, seen, source, lines, errors, notices, efa = (
        merging.merged, merging.seen, merging.source, merging.lines, merging.errors,
        merging.notices, merging.efa)
    table = EFA_COUNTERS_TABLE if efa else COUNTERS_TABLE

    def line(key: str = "") -> Optional[int]:
        return (lines.line(table, key, index)
                or lines.line(DETECTION, table.rpartition(".")[2]))

    where = f"{table}[{index}]"
    if not isinstance(entry, dict):
        errors.add(source, where, f"expected a table, got {show(entry)}", line())
        return None
    name = errors.convert(source, f"{where}.name", _counter_name, entry.get("name"),
                          line("name"))
    if name is None:
        return None
    where = f"{table}[{name}]"
    if name in seen:
        errors.add(source, f"{where}.name", "duplicate counter name", line("name"))
        return None
    seen.add(name)
    before = len(errors.problems)
    base = merged.get(name)
    if base is None:
        if "path" not in entry:
            relative = ("the device directory, {port} standing for the port number" if efa
                        else "the port directory")
            errors.add(source, f"{where}.path", f"a new counter needs a path (relative to "
                       f"{relative}, or absolute with {{interface}})", line())
        base = CounterSpec(name=name, path="")
    fields: Dict[str, Any] = {}
    for key, raw in entry.items():
        if key not in COUNTER_FIELDS:
            errors.add(source, f"{where}.{key_label(key)}",
                       f"unknown counter field{hint(key, COUNTER_FIELDS)}; the fields are "
                       f"{', '.join(COUNTER_FIELDS)}", line(key))
            continue
        attr, convert = COUNTER_FIELDS[key]
        value = errors.convert(source, f"{where}.{key}", convert, raw, line(key))
        if value is not None:
            fields[attr] = value
    if len(errors.problems) > before:
        return None
    spec = replace(base, **fields)
    if spec.path == _SPEC_CARRIER_PATH:
        notices.append(f"{source}: {where}.path: {_SPEC_CARRIER_PATH} does not exist on any "
                       f"kernel; reading {REAL_CARRIER_PATH} instead")
        spec = replace(spec, path=REAL_CARRIER_PATH)
    for key, problem in _counter_problems(spec, efa):
        errors.add(source, f"{where}.{key}", problem, line(key) or line())
    return spec


def _counter_problems(spec: CounterSpec, efa: bool = False) -> List[Tuple[str, str]]:
    """What is wrong with a merged counter as a whole: (field, problem) pairs. An EFA
    counter's relative path (to the device) may hold ``{port}``; an absolute one, of either
    kind, ``{interface}``."""
    problems = []
    if spec.is_velocity and spec.velocity_unit not in VELOCITY_UNITS:
        problems.append(("velocityUnit",
                         "a velocity counter needs velocityUnit 'second', 'minute' or 'hour'"))
    path = spec.path
    placeholders = set(re.findall(r"{([^}]*)}", path))
    if not path:
        problems.append(("path", "must not be empty"))
    elif ".." in path.split("/"):
        problems.append(("path", "must not contain '..'"))
    elif not path.startswith("/") and efa:
        if placeholders - {"port"}:
            problems.append(("path", "the only placeholder allowed in a path relative to the "
                             "device is {port}; {interface} needs an absolute path"))
    elif placeholders - {"interface"}:
        problems.append(("path", "the only placeholder allowed is {interface}"
                         + (" ({port} only in a path relative to the device)" if efa else "")))
    elif placeholders and not path.startswith("/"):
        problems.append(("path", "{interface} is only allowed in absolute paths"))
    return problems


__all__ = ["Config", "ConfigError", "CounterSpec", "Problem", "merge_counters", "DEFAULT_COUNTERS",
           "DEFAULT_CONFIG_PATH"]
