"""The link-state family's section of the state: port records, device presence, card verdicts.

Its keys are those of link-counter-detection §6.6 (``port_states``, ``known_devices``) plus
nichealthd's own (misses, missing devices, latched card verdicts, group modes, held verdicts, the
hardware identity of each known device, a driver event being held, the hold-down's pending edges and
blips, and the InfiniBand fabric of each port with the fabric events in progress), with the
same JSON as before the check-family seam: a state file of an older nichealthd loads
unchanged (a key absent: nothing of it known yet).
"""

from __future__ import annotations

from dataclasses import dataclass, field, replace
from datetime import datetime, timezone
from typing import Any, Mapping, Optional

from ..codec import Layout, Section, stored
from ..events import format_timestamp
from ..observed import DeviceIdentity
from ..state import HEALTHY

EPOCH = datetime(1970, 1, 1, tzinfo=timezone.utc)  # the time of a port record that had none
# Complete enumerations without a known device or port before it is gone (the link-state
# and EFA families count them the same way).
MISSES_BEFORE_GONE = 3


@dataclass(frozen=True)
class PortRecord:
    """Last known state of a port and the health the platform was last told about."""

    LAYOUT = Layout(order=("state", "physical_state", "device", "port", "link_layer",
                           "health", "since", "misses"))

    device: str
    port: int = field(metadata=stored(high=2**16))
    state: str
    physical_state: str
    link_layer: str = field(metadata=stored(legacy=""))
    health: str = field(metadata=stored(legacy=HEALTHY))
    since: datetime = field(metadata=stored(legacy=EPOCH))
    misses: int = field(default=0, metadata=stored(legacy=0))


@dataclass(frozen=True)
class PortHold:
    """A healthy->unhealthy edge held down (``stateHoldDown``): since when, and the
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
    # port keys whose fatal event rested on this verdict
    ports: tuple[str, ...] = field(default=(), metadata=stored(legacy=()))


def _told_before(fields: Mapping[str, Any]) -> tuple[str, ...]:
    """A driver event written before ``told`` existed had told every device once reported."""
    devices: tuple[str, ...] = fields["devices"]
    return devices if fields["reported"] else ()


def rename_fields(identity: Optional[DeviceIdentity]) -> dict[str, Any]:
    """A device record's last rename at the same PCI function: old name and when."""
    if identity is None or not identity.renamed_from or identity.renamed_at is None:
        return {"renamed_from": "", "renamed_at": ""}
    return {"renamed_from": identity.renamed_from,
            "renamed_at": format_timestamp(identity.renamed_at)}


def missing_device_row(name: str, identity: Optional[DeviceIdentity], misses: int,
                       held: bool, link_layer: str = "", adapter: str = "") -> dict[str, Any]:
    """The device record of a known device missing from the poll (``present`` False): what
    its recorded identity says, its misses and whether a driver event holds it."""
    return {
        "device": name, "hca_type": "", "fw_ver": "", "board_id": "",
        "node_guid": identity.node_guid if identity else "",
        "pci_address": identity.pci_address if identity else "", "card": "",
        "numa_node": -1, "driver": "", "netdevs": [],
        "is_vf": False, "role": "", "role_reason": "", "monitored": True,
        "link_layer": link_layer, "ports": 0, "present": False,
        "missing_polls": misses, "driver_event": held, "adapter": adapter,
        **rename_fields(identity),
    }


@dataclass(frozen=True)
class DriverEvent:
    """RDMA devices gone while their PCI functions stay (:mod:`.driver`): a driver unload,
    unbind or reload, or a firmware reset of one card or all.

    ``devices`` are the names held now (no per-device verdict while they are), each since it
    left (``left``; ``since`` for those of the event's first poll). ``told`` are the devices
    named in the host-level non-fatal event sent after ``driverReloadGrace``, under ``checks``
    (the state checks of their link layers): the close goes to them. An event written before
    ``left`` and ``told`` existed held every device since its start.
    """

    since: datetime
    devices: tuple[str, ...]
    reported: bool = field(default=False, metadata=stored(legacy=False))
    checks: tuple[str, ...] = field(default=(), metadata=stored(legacy=()))
    left: Mapping[str, datetime] = field(default_factory=dict, metadata=stored(legacy={}))
    told: tuple[str, ...] = field(default=(), metadata=stored(legacy_from=_told_before))
    # The devices that left while another known device stayed present (one card's reset,
    # not the driver's): judged after ``cardResetTimeout``. Emptied in a poll that sees
    # every known device gone (a driver unload that took them a few at a time).
    alone: tuple[str, ...] = field(default=(), metadata=stored(
        legacy=(), omit=lambda event: not event.alone))

    def left_at(self, name: str) -> datetime:
        """When ``name`` left (the event's start for a device without its own time)."""
        return self.left.get(name, self.since)

    def renamed(self, renames: Mapping[str, str]) -> DriverEvent:
        """The event with every device under its new name (a rename, core/checks/identity.py)."""
        def new(name: str) -> str:
            return renames.get(name, name)

        return replace(self, devices=tuple(sorted(new(n) for n in self.devices)),
                       left={new(n): t for n, t in self.left.items()},
                       told=tuple(sorted(new(n) for n in self.told)),
                       alone=tuple(sorted(new(n) for n in self.alone)))


@dataclass(frozen=True)
class FabricEvent:
    """An InfiniBand fabric whose ports all left ACTIVE for the SM's states (:mod:`.fabric`):
    since when, the NICs on it, and whether the non-fatal event was sent (its recovery is)."""

    since: datetime
    devices: tuple[str, ...]
    reported: bool = field(default=False, metadata=stored(legacy=False))


@dataclass
class LinkStateSection(Section):
    """What the link-state family remembers; a value of one poll (see :meth:`copy`)."""

    port_states: dict[str, PortRecord] = field(default_factory=dict)
    known_devices: list[str] = field(default_factory=list, metadata=stored(sort=True))
    device_misses: dict[str, int] = field(default_factory=dict)
    missing_devices: dict[str, MissingDevice] = field(default_factory=dict)
    card_anomalies: dict[str, CardAnomaly] = field(default_factory=dict)
    group_modes: dict[str, int] = field(default_factory=dict)
    # card -> since when its shortfall rests only on non-fatal ports (verdict held)
    card_pending: dict[str, datetime] = field(default_factory=dict)
    # name -> hardware identity of each known device
    identities: dict[str, DeviceIdentity] = field(default_factory=dict,
                                                  metadata=stored(key="device_identities"))
    driver_event: Optional[DriverEvent] = None
    # port key -> its pending hold-down, and the blips it absorbed this boot
    port_holds: dict[str, PortHold] = field(default_factory=dict)
    port_blips: dict[str, int] = field(default_factory=dict)
    # port key -> the InfiniBand fabric it was last ACTIVE on; fabric -> its event (.fabric)
    port_fabrics: dict[str, str] = field(default_factory=dict)
    fabric_events: dict[str, FabricEvent] = field(default_factory=dict)


KEYS = LinkStateSection.keys()
