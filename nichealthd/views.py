"""Read-only views of the daemon's live picture: ports, devices, counters, overall health.

Plain dicts with the keys of DESIGN §2.7, built from the last poll and the committed state.
The D-Bus API, ``nichealthctl --json``, the STATUS= line and the metrics all use these, so
every surface tells the same story.
"""

from __future__ import annotations

from typing import AbstractSet, Any, Optional

from .checks.counters import saturation_key
from .checks.ports import is_active, split_state
from .config import Config
from .evaluate import CycleResult
from .events import format_timestamp
from .model import HostSnapshot, PortSnapshot, Unreadable, is_value
from .state import DEGRADED, FATAL, HEALTHY, SUPPRESSED, MonitorState, PortRecord, counter_key

HEALTH_ORDER = (HEALTHY, DEGRADED, FATAL)


def port_records(snapshot: HostSnapshot, result: CycleResult, state: MonitorState
                 ) -> list[dict[str, Any]]:
    """Every port of every non-VF device, monitored or not (then with the reason)."""
    records = []
    for device in snapshot.devices:
        role = result.roles.get(device.name)
        monitored = bool(role and role.monitored)
        for port in device.ports:
            record = state.port_states.get(port.key)
            health = _reported_health(port, record, monitored)
            records.append({
                "device": device.name,
                "port": port.port,
                "link_layer": port.link_layer or "",
                "state": split_state(port.state)[1],
                "phys_state": split_state(port.phys_state)[1],
                "rate": port.rate or "",
                "operstate": port.operstate or "",
                "netdev": port.netdev or "",
                "role": role.role if role else "",
                "monitored": monitored,
                "excluded": "" if monitored else (role.reason if role else "unknown"),
                "healthy": is_active(port.state, port.phys_state),
                "fatal": monitored and health == FATAL,
                "health": health,
                "since": format_timestamp(record.since) if record else "",
                "pci_address": device.pci_address or "",
                "gid_count": port.gid_count if port.gid_count is not None else -1,
            })
    return records


def port_health(snapshot: HostSnapshot, result: CycleResult, state: MonitorState
                ) -> dict[tuple[str, int], tuple[str, bool]]:
    """(device, port) -> (health, fatal) of every monitored port with a reported health.

    What :func:`port_records` says about health, without building the records: the D-Bus
    service compares it every poll to signal changes.
    """
    health = {}
    for device in snapshot.devices:
        role = result.roles.get(device.name)
        if not (role and role.monitored):
            continue
        for port in device.ports:
            reported = _reported_health(port, state.port_states.get(port.key), True)
            if reported:
                health[(device.name, port.port)] = (reported, reported == FATAL)
    return health


def _reported_health(port: PortSnapshot, record: Optional[PortRecord], monitored: bool) -> str:
    if record is not None and monitored:
        return record.health
    return "unknown" if not port.readable else ""


def device_records(snapshot: HostSnapshot, result: CycleResult, state: MonitorState
                   ) -> list[dict[str, Any]]:
    """Every device seen, plus known devices that are missing."""
    records = []
    for device in snapshot.devices:
        role = result.roles.get(device.name)
        records.append({
            "device": device.name,
            "hca_type": device.hca_type or "",
            "fw_ver": device.fw_ver or "",
            "board_id": device.board_id or "",
            "node_guid": device.node_guid or "",
            "pci_address": device.pci_address or "",
            "card": device.card or "",
            "numa_node": device.numa_node if device.numa_node is not None else -1,
            "driver": device.driver or "",
            "netdevs": list(device.netdevs),
            "is_vf": device.is_vf,
            "role": role.role if role else "",
            "role_reason": role.reason if role else "",
            "monitored": bool(role and role.monitored),
            "link_layer": device.link_layer or "",
            "ports": len(device.ports),
            "present": True,
        })
    present = {d.name for d in snapshot.devices}
    for name in sorted(set(state.known_devices) - present):
        gone = state.missing_devices.get(name)
        records.append({
            "device": name, "hca_type": "", "fw_ver": "", "board_id": "", "node_guid": "",
            "pci_address": "", "card": "", "numa_node": -1, "driver": "", "netdevs": [],
            "is_vf": False, "role": "", "role_reason": "", "monitored": True,
            "link_layer": gone.link_layer if gone else "", "ports": 0, "present": False,
            "missing_polls": state.device_misses.get(name, 0),
        })
    return records


def counter_records(snapshot: HostSnapshot, result: CycleResult, state: MonitorState,
                    config: Config, device: str = "", port: int = 0
                    ) -> list[dict[str, Any]]:
    """Every configured counter of every monitored port (optionally one device / port)."""
    records = []
    for dev in snapshot.devices:
        role = result.roles.get(dev.name)
        if not (role and role.monitored) or (device and dev.name != device):
            continue
        for p in dev.ports:
            if port and p.port != port:
                continue
            for spec in config.active_counters:
                key = counter_key(dev.name, p.port, spec.name)
                path = p.counter_paths.get(spec.name, spec.path)
                file_key = saturation_key(dev.name, p.port, p.counter_kinds.get(spec.name))
                reading = p.counters.get(spec.name)
                seen = result.observations.get(key)
                flag = state.breach_flags.get(key)
                records.append({
                    "device": dev.name,
                    "port": p.port,
                    "counter": spec.name,
                    "path": path,
                    "value": reading if is_value(reading) else None,
                    "error": reading.reason if isinstance(reading, Unreadable) else "",
                    "delta": seen.delta if seen else None,
                    "rate": seen.rate if seen else None,
                    "threshold": spec.threshold,
                    "type": spec.threshold_type,
                    "unit": spec.velocity_unit or "poll",
                    "fatal": spec.is_fatal,
                    "breached": flag is not None,
                    "since": format_timestamp(flag.since) if flag else "",
                    # Per file (both symbol_error entries), reported or only shown.
                    "saturated": file_key is not None and (
                        file_key in state.saturated or file_key in state.saturated_quiet),
                })
    return records


def overall_health(state: MonitorState, monitored_ports: Optional[AbstractSet[str]] = None
                   ) -> str:
    """``fatal``, ``degraded`` or ``healthy`` over everything the daemon currently reports."""
    ports = [r for k, r in state.port_states.items()
             if monitored_ports is None or k in monitored_ports]
    if (any(r.health == FATAL for r in ports) or state.missing_devices or state.card_anomalies
            or any(f.is_fatal for f in state.breach_flags.values())):
        return FATAL
    if (any(r.health == DEGRADED for r in ports) or state.breach_flags or state.saturated):
        return DEGRADED
    return HEALTHY


def port_summary(state: MonitorState, monitored_ports: AbstractSet[str]) -> dict[str, int]:
    """Counts of monitored ports by reported health (uncabled = suppressed)."""
    counts = {HEALTHY: 0, DEGRADED: 0, FATAL: 0, SUPPRESSED: 0}
    for key in monitored_ports:
        record = state.port_states.get(key)
        if record is not None:
            counts[record.health] = counts.get(record.health, 0) + 1
    counts["total"] = len(monitored_ports)
    return counts


def monitored_port_keys(snapshot: HostSnapshot, result: CycleResult) -> set[str]:
    keys: set[str] = set()
    for device in snapshot.devices:
        role = result.roles.get(device.name)
        if role and role.monitored:
            keys.update(p.key for p in device.ports)
    return keys
