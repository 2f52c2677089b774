"""The link-state family's section of the state: port records, device presence, card verdicts.

Its keys are those of spec §6.6 (``port_states``, ``known_devices``) plus nichealthd's own
(misses, missing devices, latched card verdicts, group modes, held verdicts, the hardware
identity of each known device, a driver event being held, the hold-down's pending edges and
blips, and the InfiniBand fabric of each port with the fabric events in progress), with the
same JSON as before the check-family seam: a state file of an older nichealthd loads
unchanged (a key absent: nothing of it known yet).
"""

from __future__ import annotations

from dataclasses import dataclass, field, replace
from datetime import datetime
from typing import Any, Mapping, Optional

from ..events import format_timestamp
from ..state import (
    HEALTHY,
    epoch,
    parse_bool,
    parse_int,
    parse_list,
    parse_str,
    parse_table,
    parse_when,
    timestamps,
)

KEYS = ("port_states", "known_devices", "device_misses", "missing_devices", "card_anomalies",
        "group_modes", "card_pending", "device_identities", "driver_event", "port_holds",
        "port_blips", "port_fabrics", "fabric_events")


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
class PortHold:
    """A healthy->unhealthy edge held down (``stateHoldDown``, #15.4): since when, and the
    unhealthy reading that started it (what the event says if the hold expires)."""

    since: datetime
    state: str
    physical_state: str


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


@dataclass(frozen=True)
class DeviceIdentity:
    """What a device is, whatever the kernel calls it (DESIGN §2.10, #19): its PCI function,
    with the node GUID as a cross-check where it was readable ("" when not)."""

    pci_address: str
    node_guid: str = ""
    renamed_from: str = ""  # the name it had before its last rename ("" if none)
    renamed_at: Optional[datetime] = None


def rename_fields(identity: Optional[DeviceIdentity]) -> dict[str, Any]:
    """A device record's last rename at the same PCI function (#19.1): old name and when."""
    if identity is None or not identity.renamed_from or identity.renamed_at is None:
        return {"renamed_from": "", "renamed_at": ""}
    return {"renamed_from": identity.renamed_from,
            "renamed_at": format_timestamp(identity.renamed_at)}


@dataclass(frozen=True)
class DriverEvent:
    """RDMA devices gone while their PCI functions stay (:mod:`.driver`): a driver unload,
    unbind or reload, or a firmware reset of one card or all.

    ``devices`` are the names held now (no per-device verdict while they are), each since it
    left (``left``; ``since`` for those of the event's first poll). ``told`` are the devices
    named in the host-level non-fatal event sent after ``driverReloadGrace``, under ``checks``
    (the state checks of their link layers): the close goes to them.
    """

    since: datetime
    devices: tuple[str, ...]
    reported: bool = False
    checks: tuple[str, ...] = ()
    left: Mapping[str, datetime] = field(default_factory=dict)
    told: tuple[str, ...] = ()

    def left_at(self, name: str) -> datetime:
        """When ``name`` left (the event's start for a device without its own time)."""
        return self.left.get(name, self.since)

    def renamed(self, renames: Mapping[str, str]) -> DriverEvent:
        """The event with every device under its new name (a rename, DESIGN §2.10)."""
        def new(name: str) -> str:
            return renames.get(name, name)

        return replace(self, devices=tuple(sorted(new(n) for n in self.devices)),
                       left={new(n): t for n, t in self.left.items()},
                       told=tuple(sorted(new(n) for n in self.told)))


@dataclass(frozen=True)
class FabricEvent:
    """An InfiniBand fabric whose ports all left ACTIVE for the SM's states (:mod:`.fabric`):
    since when, the NICs on it, and whether the non-fatal event was sent (its recovery is)."""

    since: datetime
    devices: tuple[str, ...]
    reported: bool = False


@dataclass
class LinkStateSection:
    """What the link-state family remembers; a value of one poll (see :meth:`copy`)."""

    port_states: dict[str, PortRecord] = field(default_factory=dict)
    known_devices: list[str] = field(default_factory=list)
    device_misses: dict[str, int] = field(default_factory=dict)
    missing_devices: dict[str, MissingDevice] = field(default_factory=dict)
    card_anomalies: dict[str, CardAnomaly] = field(default_factory=dict)
    group_modes: dict[str, int] = field(default_factory=dict)
    # card -> since when its shortfall rests only on non-fatal ports (verdict held, #21)
    card_pending: dict[str, datetime] = field(default_factory=dict)
    # name -> hardware identity of each known device (#19.1)
    identities: dict[str, DeviceIdentity] = field(default_factory=dict)
    driver_event: Optional[DriverEvent] = None
    # port key -> its pending hold-down, and the blips it absorbed this boot (#15.4)
    port_holds: dict[str, PortHold] = field(default_factory=dict)
    port_blips: dict[str, int] = field(default_factory=dict)
    # port key -> the InfiniBand fabric it was last ACTIVE on; fabric -> its event (.fabric)
    port_fabrics: dict[str, str] = field(default_factory=dict)
    fabric_events: dict[str, FabricEvent] = field(default_factory=dict)

    def copy(self) -> LinkStateSection:
        """A copy whose containers can be changed without touching this one."""
        return LinkStateSection(
            dict(self.port_states), list(self.known_devices), dict(self.device_misses),
            dict(self.missing_devices), dict(self.card_anomalies), dict(self.group_modes),
            dict(self.card_pending), dict(self.identities), self.driver_event,
            dict(self.port_holds), dict(self.port_blips), dict(self.port_fabrics),
            dict(self.fabric_events))

    def to_json(self) -> dict[str, Any]:
        ts = format_timestamp
        return {
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
            "group_modes": dict(sorted(self.group_modes.items())),
            "card_pending": timestamps(self.card_pending),
            "device_identities": identities_json(self.identities),
            "driver_event": _driver_event_json(self.driver_event),
            "port_holds": {
                k: {"since": ts(h.since), "state": h.state, "physical_state": h.physical_state}
                for k, h in sorted(self.port_holds.items())},
            "port_blips": dict(sorted(self.port_blips.items())),
            "port_fabrics": dict(sorted(self.port_fabrics.items())),
            "fabric_events": {
                k: {"since": ts(e.since), "devices": list(e.devices), "reported": e.reported}
                for k, e in sorted(self.fabric_events.items())},
        }

    @classmethod
    def from_json(cls, data: Mapping[str, Any]) -> LinkStateSection:
        """Layout 1, the only one so far. Raises on anything malformed."""
        when = parse_when
        return cls(
            port_states={
                parse_str(k): PortRecord(
                    parse_str(v["device"]), parse_int(v["port"], 2**16), parse_str(v["state"]),
                    parse_str(v["physical_state"]), parse_str(v.get("link_layer", "")),
                    parse_str(v.get("health", HEALTHY)),
                    when(v["since"]) if "since" in v else epoch(),
                    parse_int(v.get("misses", 0)))
                for k, v in parse_table(data, "port_states").items()},
            known_devices=[parse_str(d)
                           for d in parse_list(data.get("known_devices", []), "known_devices")],
            device_misses={parse_str(k): parse_int(v)
                           for k, v in parse_table(data, "device_misses").items()},
            missing_devices={
                parse_str(k): MissingDevice(parse_str(v["link_layer"]), when(v["since"]))
                for k, v in parse_table(data, "missing_devices").items()},
            card_anomalies={
                parse_str(k): CardAnomaly(
                    parse_str(v["role"]), parse_int(v["active"]), parse_int(v["expected"]),
                    parse_str(v["check_name"]), when(v["since"]),
                    tuple(parse_str(p) for p in parse_list(v.get("ports", []), "ports")))
                for k, v in parse_table(data, "card_anomalies").items()},
            group_modes={parse_str(k): parse_int(v)
                         for k, v in parse_table(data, "group_modes").items()},
            card_pending={parse_str(k): when(v)
                          for k, v in parse_table(data, "card_pending").items()},
            identities=parse_identities(data, "device_identities"),
            driver_event=_driver_event(data.get("driver_event")),
            port_holds={parse_str(k): PortHold(when(v["since"]), parse_str(v["state"]),
                                               parse_str(v["physical_state"]))
                        for k, v in parse_table(data, "port_holds").items()},
            port_blips={parse_str(k): parse_int(v)
                        for k, v in parse_table(data, "port_blips").items()},
            port_fabrics={parse_str(k): parse_str(v)
                          for k, v in parse_table(data, "port_fabrics").items()},
            fabric_events={
                parse_str(k): FabricEvent(
                    when(v["since"]),
                    tuple(parse_str(d) for d in parse_list(v["devices"], "devices")),
                    parse_bool(v.get("reported", False)))
                for k, v in parse_table(data, "fabric_events").items()},
        )


def identities_json(identities: Mapping[str, DeviceIdentity]) -> dict[str, Any]:
    """Device identities as the state file holds them (``device_identities``, and the EFA
    state family's ``efa_device_identities``)."""
    return {
        k: {"pci_address": i.pci_address, "node_guid": i.node_guid,
            **({"renamed_from": i.renamed_from, "renamed_at": format_timestamp(i.renamed_at)}
               if i.renamed_from and i.renamed_at else {})}
        for k, i in sorted(identities.items())}


def parse_identities(data: Mapping[str, Any], key: str) -> dict[str, DeviceIdentity]:
    """The identities under ``key`` of the state file (absent: none). Raises on garbage."""
    return {
        parse_str(k): DeviceIdentity(
            parse_str(v["pci_address"]), parse_str(v.get("node_guid", "")),
            parse_str(v.get("renamed_from", "")),
            parse_when(v["renamed_at"]) if "renamed_at" in v else None)
        for k, v in parse_table(data, key).items()}


def _driver_event_json(event: Optional[DriverEvent]) -> Optional[dict[str, Any]]:
    if event is None:
        return None
    return {"since": format_timestamp(event.since), "devices": list(event.devices),
            "reported": event.reported, "checks": list(event.checks),
            "left": timestamps(event.left), "told": list(event.told)}


def _driver_event(value: Any) -> Optional[DriverEvent]:
    """A driver event of the state file; one written before ``left`` and ``told`` existed
    held every device since its start and, once reported, had told them all."""
    if value is None:
        return None
    if not isinstance(value, dict):
        raise TypeError("driver_event must be an object or null")
    devices = tuple(parse_str(d) for d in parse_list(value["devices"], "driver_event.devices"))
    reported = parse_bool(value.get("reported", False))
    told = (tuple(parse_str(d) for d in parse_list(value["told"], "driver_event.told"))
            if "told" in value else devices if reported else ())
    return DriverEvent(
        parse_when(value["since"]), devices, reported,
        tuple(parse_str(c) for c in parse_list(value.get("checks", []), "driver_event.checks")),
        {parse_str(k): parse_when(v)
         for k, v in parse_table(value, "left").items()},
        told)
