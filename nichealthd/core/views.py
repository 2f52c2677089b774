"""Read-only views of the daemon's live picture: ports, devices, counters, overall health.

Plain dicts with the keys of nichealthctl(1), built from the last poll and the committed state.
The D-Bus API, ``nichealthctl --json``, the STATUS= line and the metrics all read them
through one :class:`~nichealthd.core.picture.PollPicture` per poll, so every surface tells
the same story.
"""

from __future__ import annotations

from datetime import datetime
from typing import Any, Mapping, Optional

from .checks import families, supplying
from .checks.ports import is_active, split_state
from .config import Config
from .evaluate import CycleResult
from .events import format_timestamp, local_clock
from .family import Family, FieldTypes
from .health import UNCABLED, UNKNOWN, HostHealth, PortHealth, assess
from .jsontypes import JsonObject
from .model import DeviceSnapshot, HostSnapshot, PortSnapshot
from .state import DEGRADED, FATAL, HEALTHY, MonitorState
from .suspect import PortFacts, decide_all, modules_of
from .topology import Role

HEALTH_ORDER = (HEALTHY, DEGRADED, FATAL)
NO_DEVICES = "no InfiniBand/RoCE devices found"

# The keys of the daemon's own port and device records (the families add theirs:
# CheckFamily.port_field_types, device_field_types), typed as the varlink interface writes them.
PORT_FIELD_TYPES: FieldTypes = {
    "device": "string", "port": "int", "link_layer": "string", "adapter": "?string",
    "state": "string", "phys_state": "string", "rate": "string", "operstate": "string",
    "netdev": "string", "role": "string", "monitored": "bool", "excluded": "string",
    "healthy": "bool", "fatal": "bool", "health": "string", "reasons": "[]string",
    "since": "string", "pci_address": "string", "gid_count": "int", "present": "bool",
    "suspect": "string", "suspect_evidence": "string",
}
DEVICE_FIELD_TYPES: FieldTypes = {
    "device": "string", "hca_type": "string", "fw_ver": "string", "board_id": "string",
    "node_guid": "string", "pci_address": "string", "card": "string", "numa_node": "int",
    "driver": "string", "adapter": "?string", "netdevs": "[]string", "is_vf": "bool",
    "role": "string", "role_reason": "string", "monitored": "bool", "link_layer": "string",
    "ports": "int", "present": "bool", "driver_event": "?bool", "renamed_from": "?string",
    "renamed_at": "?string",
}
DAEMON = "the daemon"  # who declares the daemon's own keys (:func:`declared_fields`)


def declared_fields(record: str) -> list[tuple[str, str, str]]:
    """(declarer, key, type) of every key declared for ``record`` (``port`` or ``device``):
    the daemon's own (:data:`DAEMON`) first, then each family's by its id, in order. The
    interface files are checked against them (tests/varlink/test_declared_fields.py)."""
    own = {"port": PORT_FIELD_TYPES, "device": DEVICE_FIELD_TYPES}[record]
    out = [(DAEMON, key, kind) for key, kind in own.items()]
    for family in families():
        extra = family.port_field_types if record == "port" else family.device_field_types
        out.extend((family.id, key, kind) for key, kind in extra.items())
    return out


def port_records(snapshot: HostSnapshot, result: CycleResult, state: MonitorState,
                 host: Optional[HostHealth] = None) -> list[JsonObject]:
    """Every port of every non-VF device, monitored or not (then with the reason), and the
    recorded ports of monitored devices that this poll no longer sees (``present`` False).

    ``health``/``healthy``/``fatal``/``reasons`` of a monitored port come from
    :func:`nichealthd.core.health.assess`; a port that is not monitored is never judged: its
    ``health`` is empty and ``healthy`` says only whether its link is ACTIVE/LinkUp. Each
    family adds its keys (:meth:`CheckFamily.port_fields`, and for a port no longer listed
    :meth:`CheckFamily.absent_port_fields`).
    """
    host = host if host is not None else assess_host(snapshot, result, state)
    extra = _supplying("port_fields", result, state)
    modules = modules_of(result.pictures)
    records = []
    for device in snapshot.devices:
        role = result.roles.get(device.name)
        for port in device.ports:
            record = _present_port(device, port, role, host)
            record.update(_suspect_keys(host.ports.get((device.name, port.port)),
                                        PortFacts(port.state, port.phys_state,
                                                  modules.get(port.key))))
            for family, section, picture in extra:
                record.update(family.port_fields(section, picture, (device.name, port.port)))
            records.append(record)
    roles = {d.name: result.roles.get(d.name) for d in snapshot.devices}
    gone = _supplying("absent_port_fields", result, state)
    for key, judged in sorted(host.ports.items()):
        if not judged.present:
            record = _absent_port(key, judged, roles.get(key[0]))
            record.update(_suspect_keys(judged, PortFacts()))
            for family, section, _ in gone:
                record.update(family.absent_port_fields(section, key))
            records.append(record)
    return records


def _supplying(hook: str, result: CycleResult, state: MonitorState
               ) -> list[tuple[Family, Any, Any]]:
    """The families that supply ``hook``, with their committed section and poll picture."""
    return [(f, state.section(f), result.pictures.get(f.id)) for f in supplying(hook)]


def _present_port(device: DeviceSnapshot, port: PortSnapshot, role: Optional[Role],
                  host: HostHealth) -> JsonObject:
    """The record of a port of the poll."""
    monitored = bool(role and role.monitored)
    judged = host.ports.get((device.name, port.port)) if monitored else None
    return {
        "device": device.name,
        "port": port.port,
        "link_layer": port.link_layer or "",
        "adapter": device.adapter,  # mlx5, efa or ""
        "state": split_state(port.state)[1],
        "phys_state": split_state(port.phys_state)[1],
        "rate": port.rate or "",
        "operstate": port.operstate or "",
        "netdev": port.netdev or "",
        "role": role.role if role else "",
        "monitored": monitored,
        "excluded": "" if monitored else (role.reason if role else "unknown"),
        **_health_keys(judged, port.state, port.phys_state, port.readable),
        "since": "",  # the families say (the link-state record, EFA's own)
        "pci_address": device.pci_address or "",
        "gid_count": port.gid_count if port.gid_count is not None else -1,
        "present": True,
    }


def _absent_port(key: tuple[str, int], judged: PortHealth, role: Optional[Role]
                 ) -> JsonObject:
    """The record of a recorded port the poll no longer lists; what was recorded of it
    comes from the families."""
    return {
        "device": key[0], "port": key[1], "link_layer": "", "state": "", "phys_state": "",
        "rate": "", "operstate": "", "netdev": "", "adapter": "",
        "role": role.role if role else "", "monitored": True, "excluded": "",
        **_health_keys(judged, None, None, False),
        "since": "", "pci_address": "", "gid_count": -1, "present": False,
    }


def _health_keys(judged: Optional[PortHealth], state: Optional[str], phys: Optional[str],
                 readable: bool) -> JsonObject:
    if judged is None:  # not monitored: not judged
        return {"healthy": is_active(state, phys), "fatal": False,
                "health": "" if readable else UNKNOWN, "reasons": []}
    return {"healthy": judged.health == HEALTHY, "fatal": judged.fatal,
            "health": judged.health, "reasons": list(judged.reasons)}


def _suspect_keys(judged: Optional[PortHealth], facts: PortFacts) -> JsonObject:
    """``suspect``, ``suspect_evidence``: the part to look at first of an unhealthy port
    (core/suspect.py), "" for a port with no open condition or not monitored."""
    found = decide_all(judged.codes, facts) if judged is not None else None
    return {"suspect": found.part if found else "",
            "suspect_evidence": found.evidence if found else ""}


_LAST: list[tuple[HostSnapshot, CycleResult, MonitorState, HostHealth]] = []


def assess_host(snapshot: HostSnapshot, result: CycleResult, state: MonitorState
                ) -> HostHealth:
    """The one health model (:mod:`nichealthd.core.health`) over a poll's picture.

    The poll thread works it out while the poll's data are in cache (runtime/monitor.py),
    and the daemon's :class:`~nichealthd.core.picture.PollPicture` of that poll then asks
    again: the last answer is kept (the inputs are immutable: each poll makes new ones).
    """
    last = _LAST[0] if _LAST else None
    if last is not None and last[0] is snapshot and last[1] is result and last[2] is state:
        return last[3]
    host = assess(state, snapshot, result.roles, result.pictures, result.failed)
    if last is not None and host == last[3]:
        # The health of the last poll again (a steady host, nearly every poll): that object,
        # so that what is worked out from it is kept too (health_status). Cheap: assess
        # gives each port's health as the same object while it does not change.
        host = last[3]
    _LAST[:] = [(snapshot, result, state, host)]
    return host


def device_records(snapshot: HostSnapshot, result: CycleResult, state: MonitorState
                   ) -> list[JsonObject]:
    """Every device seen, plus what the families know that the poll does not list (known
    devices missing, lost NICs); each family adds its fields (:meth:`CheckFamily.device_fields`,
    :meth:`CheckFamily.device_rows`)."""
    records: list[JsonObject] = []
    fielded = _supplying("device_fields", result, state)
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
            "adapter": device.adapter,  # mlx5, efa or ""
            "netdevs": list(device.netdevs),
            "is_vf": device.is_vf,
            "role": role.role if role else "",
            "role_reason": role.reason if role else "",
            "monitored": bool(role and role.monitored),
            "link_layer": device.link_layer or "",
            "ports": len(device.ports),
            "present": True,
            "driver_event": False,
            "renamed_from": "",
            "renamed_at": "",
        })
        for family, section, picture in fielded:
            records[-1].update(family.device_fields(section, picture, device.name, True))
    present = frozenset(d.name for d in snapshot.devices)
    for family in supplying("device_rows"):
        for row in family.device_rows(state.section(family), result.pictures.get(family.id),
                                      present):
            if not row.get("lost"):  # an RDMA device (a lost NIC never registered one)
                for other, section, picture in fielded:
                    if other is not family:
                        row.update(other.device_fields(section, picture, str(row["device"]),
                                                       False))
            records.append(row)
    return records


def counter_records(snapshot: HostSnapshot, result: CycleResult, state: MonitorState,
                    config: Config, device: str = "", port: int = 0
                    ) -> list[JsonObject]:
    """Every configured counter of every monitored port (optionally one device / port), from
    the families that judge them (:meth:`CheckFamily.counter_rows`)."""
    judging = _supplying("counter_rows", result, state)
    records: list[JsonObject] = []
    for dev in snapshot.devices:
        role = result.roles.get(dev.name)
        if not (role and role.monitored) or (device and dev.name != device):
            continue
        for family, section, picture in judging:
            records.extend(family.counter_rows(section, picture, dev, port, config))
    return records


def health_status(snapshot: Optional[HostSnapshot], result: Optional[CycleResult],
                  state: MonitorState, host: Optional[HostHealth] = None) -> dict[str, Any]:
    """The health keys of the daemon status (D-Bus GetStatus, ``nichealthctl status``, the
    STATUS= line): overall health, counts by health, the fatal and degraded ports by name
    with their reasons, the devices a driver event holds, and whether there is anything to
    watch at all. Before the first poll nothing is judged: all zero, ``healthy``. ``host``:
    the poll's assessment when the caller has it (:class:`~nichealthd.core.picture.PollPicture`)."""
    if snapshot is None or result is None:
        return {**_status_keys(HostHealth({})), "devices_found": True,
                "devices_reloading": [], "reloading_since": "", "families_failing": []}
    host = host if host is not None else assess_host(snapshot, result, state)
    reloading, since = reloading_devices(state)
    # Everything the keys are made of: the same as at the last poll (a steady host), the
    # same keys, not built again (the daemon asks once a poll, for STATUS= and D-Bus).
    inputs = (bool(snapshot.devices), reloading, since, tuple(sorted(result.failed.items())))
    last = _LAST_STATUS[0] if _LAST_STATUS else None
    if last is not None and last[0] is host and last[1] == inputs:
        return last[2]
    status = _health_status(host, *inputs)
    _LAST_STATUS[:] = [(host, inputs, status)]
    return status


_LAST_STATUS: list[tuple[HostHealth, tuple[Any, ...], dict[str, Any]]] = []


def _health_status(host: HostHealth, devices: bool, reloading: tuple[str, ...],
                   since: Optional[datetime], failed: tuple[tuple[str, str], ...]
                   ) -> dict[str, Any]:
    return {
        **_status_keys(host),
        # False only when the picture is empty: no device in this poll, no port judged (a
        # driver reload's held ports and gone devices' ports are judged) and none held.
        "devices_found": bool(devices or host.ports or reloading),
        "devices_reloading": list(reloading),
        "reloading_since": format_timestamp(since) if since else "",
        # The check families that could not judge the last poll: "id: why" (the health
        # model shows what they judge as unknown).
        "families_failing": [f"{family}: {why}" for family, why in failed],
    }


def reloading_devices(state: MonitorState) -> tuple[tuple[str, ...], Optional[datetime]]:
    """The devices a driver event holds (gone while their PCI functions stay: no verdict on
    them while it lasts; ``show devices`` says RELOADING) and since when, of every family that
    holds some (:meth:`CheckFamily.held_devices`); ``((), None)`` when none is in progress."""
    events = [held for family in supplying("held_devices")
              for held in (family.held_devices(state.section(family)),) if held is not None]
    if not events:
        return (), None
    return (tuple(sorted({d for names, _ in events for d in names})),
            min(since for _, since in events))


def _status_keys(host: HostHealth) -> dict[str, Any]:
    """The keys of one assessment (a :class:`~nichealthd.core.picture.PollPicture` builds them
    once per poll)."""
    counts = host.counts()
    return {
        "health": host.health,
        "ports_total": counts["total"],
        "ports_healthy": counts[HEALTHY],
        "ports_degraded": counts[DEGRADED],
        "ports_fatal": counts[FATAL],
        "ports_uncabled": counts[UNCABLED],
        "ports_unknown": counts[UNKNOWN],
        "fatal_ports": host.names(FATAL),
        "degraded_ports": host.names(DEGRADED),
        "problems": host.problems(),
    }


def status_summary(health: Mapping[str, Any]) -> str:
    """``12 ports: 11 healthy, 0 degraded, 1 fatal (mlx5_5/1 link_downed breached)``: the
    first part of STATUS=, from :func:`health_status`; ``no InfiniBand/RoCE devices found``
    only when there is nothing to watch and nothing wrong. During a driver reload the held
    ports keep the health they had (as ``check`` says) and the reload is named."""
    if not health.get("devices_found", True) and not health["problems"]:
        return NO_DEVICES
    text = (f"{health['ports_total']} ports: {health['ports_healthy']} healthy, "
            f"{health['ports_degraded']} degraded, {health['ports_fatal']} fatal"
            if health["ports_total"] else "no ports monitored")
    if health["ports_uncabled"]:
        text += f", {health['ports_uncabled']} uncabled"
    if health.get("ports_unknown"):
        text += f", {health['ports_unknown']} unknown"
    problems = health["problems"]
    if problems:
        shown = problems[:3]
        more = f" and {len(problems) - 3} more" if len(problems) > 3 else ""
        text += f" ({'; '.join(shown)}{more})"
    elif health["health"] != HEALTHY:
        text += f" (health {health['health']})"
    reloading = health.get("devices_reloading") or []
    if reloading:
        since = local_clock(str(health.get("reloading_since", "")))
        text += (f"; driver event: {len(reloading)} RDMA device{'s' if len(reloading) > 1 else ''}"
                 f" gone, PCI function on the bus{f', since {since}' if since else ''}: "
                 f"judgement held")
    return text
