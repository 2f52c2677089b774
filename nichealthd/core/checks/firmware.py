"""The firmware-drift family: same card model in a role group, same firmware.

Cards of one role group (compute, storage) with the same ``hca_type`` and ``board_id`` should
run the same ``fw_ver``: a card left on another version (a failed or forgotten flash) behaves
differently under load. No static table of "good" versions: the group's own majority is the
reference. Each minority version is one non-fatal event (the layer's degradation check,
errorCode ``firmware_drift``) naming both versions, with the minority's NICs as entities;
a device that joins the majority (or whose group no longer has one) recovers with a healthy
event. A group without a strict majority (4 and 4) says nothing: which side is wrong cannot
be told. A device's firmware changing at runtime (a flash the driver has picked up) is
logged and the group judged again at the same read.
"""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass, field, replace
from datetime import datetime
from typing import Any, Iterable, Mapping, NamedTuple, Optional

from ...sources.adapter import ADAPTER
from ..codec import Layout
from ..config import ETH_DEGRADATION_CHECK, IB_DEGRADATION_CHECK
from ..events import ENTITY_NIC, HealthEvent, make_event
from ..family import READS_DEVICES, CheckFamily, Condition, Cycle, Series, Verdict
from ..jsontypes import Json
from ..model import DeviceSnapshot
from ..state import DEGRADED
from .adapter_section import Latched, LatchSection, held
from .identity import renamed_keys
from .link_section import LinkStateSection
from .link_state import LINK_STATE, device_layer

CODE_FIRMWARE = "firmware_drift"
DEGRADATION_OF = {"InfiniBand": IB_DEGRADATION_CHECK, "Ethernet": ETH_DEGRADATION_CHECK}


Versions = Mapping[str, str]  # its picture: each device's firmware as last read


@dataclass
class FirmwareSection(LatchSection):
    """Latched drift per ``<device>:firmware`` (detail: ``<its version> vs <majority>``),
    and the last version read of each device (``firmware_versions``)."""

    LAYOUT = Layout(prefix="firmware_")

    versions: dict[str, str] = field(default_factory=dict)

    def renamed(self, renames: Mapping[str, str]) -> FirmwareSection:
        return replace(super().renamed(renames),
                       versions=renamed_keys(self.versions, renames))


def key_of(device: str) -> str:
    return f"{device}:firmware"


def _group(device: DeviceSnapshot, role: str) -> Optional[tuple[str, str, str]]:
    if not device.hca_type or not device.board_id:
        return None
    return (role, device.hca_type, device.board_id)


def majority(versions: Iterable[str]) -> Optional[str]:
    """The version more than half of the group runs; None without one."""
    counts = Counter(versions)
    if len(counts) < 2:
        return None
    version, count = counts.most_common(1)[0]
    return version if count * 2 > sum(counts.values()) else None


class Firmware(CheckFamily[FirmwareSection, Versions, None]):
    """Firmware consistency within a role group (same HCA type and board)."""

    id = "firmware"
    order = 50
    keys = FirmwareSection.keys()
    section_type = FirmwareSection
    reads = frozenset({READS_DEVICES, ADAPTER})
    device_field_types = {"firmware_drift": "?string"}

    def evaluate(self, previous: FirmwareSection, cycle: Cycle, volatile: None
                 ) -> Verdict[FirmwareSection, Versions, None]:
        facts = cycle.snapshot.fact(ADAPTER)
        if facts is None:
            return Verdict(previous)
        state = previous.copy()
        links = cycle.previous.section(LINK_STATE)
        versions, notes = _versions(previous, cycle, facts.firmware)
        state.versions = {**{k: v for k, v in previous.versions.items()
                             if k in set(links.known_devices)}, **versions}
        if held(cycle):
            return Verdict(state, (), versions, notes=tuple(notes))
        groups = _judge_groups(cycle, versions)
        fresh = _latch_new_drift(state, groups.drifting, cycle, links)
        events = [*_drift_events(fresh, cycle),
                  *_recoveries(state, groups, versions, cycle, links)]
        return Verdict(state, tuple(events), versions, notes=tuple(notes))

    def rename(self, section: FirmwareSection, renames: Mapping[str, str], now: datetime
               ) -> FirmwareSection:
        return section.renamed(renames)

    def conditions(self, section: FirmwareSection,
                   picture: Optional[Versions]) -> Iterable[Condition]:
        for key in sorted(section.latched):
            name = key.rsplit(":", 1)[0]
            yield Condition(DEGRADED, f"{name}: firmware {section.latched[key].detail}")

    def device_fields(self, section: FirmwareSection, picture: Optional[Versions], device: str,
                      present: bool) -> Mapping[str, Json]:
        """``fw_ver`` as last read (a flash at runtime shows) and ``firmware_drift`` (``<its>
        vs <the group's>`` while reported, else "")."""
        fields: dict[str, Any] = {}
        if device in section.versions:
            fields["fw_ver"] = section.versions[device]
        drift = section.latched.get(key_of(device))
        fields["firmware_drift"] = drift.detail if drift else ""
        return fields

    def series(self, section: FirmwareSection, picture: Optional[Versions]) -> Iterable[Series]:
        drift = {k.rsplit(":", 1)[0] for k in section.latched}
        yield Series("firmware_drift", "1 while a device runs another firmware than the "
                     "majority of its role group's cards of the same model (no series "
                     "otherwise)", "gauge", ("device", "fw_ver"),
                     tuple(((name, version), 1.0)
                           for name, version in sorted(section.versions.items())
                           if name in drift))


def _names(devices: list[DeviceSnapshot]) -> str:
    return ", ".join(d.name for d in devices)


Drifting = dict[str, tuple[str, str, DeviceSnapshot]]  # name -> (its version, majority, device)


def _versions(previous: FirmwareSection, cycle: Cycle, firmware: Mapping[str, str]
              ) -> tuple[dict[str, str], list[str]]:
    """Each monitored device's firmware (the adapter read, else the snapshot's ``fw_ver``),
    and a note per device whose version changed since the last read: a runtime flash."""
    versions: dict[str, str] = {}
    notes: list[str] = []
    for device in cycle.monitored:
        version = firmware.get(device.name) or device.fw_ver
        if not version:
            continue
        versions[device.name] = version
        was = previous.versions.get(device.name)
        if was is not None and was != version:
            notes.append(f"{device.name}: firmware changed {was} -> {version} "
                         f"(flashed and picked up by the driver); firmware "
                         f"consistency judged again")
    return versions, notes


class _Groups(NamedTuple):
    """The role groups' verdict of one read: the devices off their group's strict majority,
    and every device in a group judged (a device of a group without a majority is judged,
    and drifts from nothing)."""

    drifting: Drifting
    judged: set[str]


def _judge_groups(cycle: Cycle, versions: Mapping[str, str]) -> _Groups:
    """The devices off their group's strict majority, and every device in a group judged
    (a device of a group without a majority is judged, and drifts from nothing)."""
    groups: dict[tuple[str, str, str], list[DeviceSnapshot]] = {}
    for device in cycle.monitored:
        group = _group(device, cycle.roles[device.name].role)
        if group is not None and device.name in versions:
            groups.setdefault(group, []).append(device)
    drifting: Drifting = {}
    judged: set[str] = set()
    for _group_key, members in sorted(groups.items()):
        judged.update(d.name for d in members)
        expected = majority(versions[d.name] for d in members)
        if expected is None:
            continue
        for device in members:
            if versions[device.name] != expected:
                drifting[device.name] = (versions[device.name], expected, device)
    return _Groups(drifting, judged)


Fresh = dict[tuple[str, str, str], list[DeviceSnapshot]]  # (its, majority, layer) -> devices


def _latch_new_drift(state: FirmwareSection, drifting: Drifting, cycle: Cycle,
                     links: LinkStateSection) -> Fresh:
    """Latch the drift not yet latched with this detail, grouped by minority version: one
    event per group is told; a device whose check is switched off is neither told nor held."""
    fresh: Fresh = {}
    for name, (version, expected, device) in sorted(drifting.items()):
        latched = state.latched.get(key_of(name))
        detail = f"{version} vs {expected}"
        if latched is not None and latched.detail == detail:
            continue
        layer = device_layer(device, links) or "InfiniBand"
        if DEGRADATION_OF.get(layer, IB_DEGRADATION_CHECK) not in cycle.enabled:
            continue
        state.latched[key_of(name)] = Latched(cycle.now, detail)
        fresh.setdefault((version, expected, layer), []).append(device)
    return fresh


def _drift_events(fresh: Fresh, cycle: Cycle) -> list[tuple[str, HealthEvent]]:
    """One non-fatal event per minority version, naming both versions and its NICs."""
    events: list[tuple[str, HealthEvent]] = []
    for (version, expected, layer), devices in sorted(fresh.items()):
        check = DEGRADATION_OF.get(layer, IB_DEGRADATION_CHECK)
        first = devices[0]
        events.append((first.name, make_event(
            check, fatal=False, healthy=False, error_code=CODE_FIRMWARE,
            entities=tuple((ENTITY_NIC, d.name) for d in devices), at=cycle.now,
            message=(f"{_names(devices)} {'runs' if len(devices) == 1 else 'run'} "
                     f"firmware {version} while the other {first.hca_type} cards "
                     f"(board {first.board_id}) of the "
                     f"{cycle.roles[first.name].role} group run {expected}"))))
    return events


def _recoveries(state: FirmwareSection, groups: _Groups, versions: Mapping[str, str],
                cycle: Cycle, links: LinkStateSection) -> list[tuple[str, HealthEvent]]:
    """Unlatch the devices judged now and no longer drifting; a healthy event for each whose
    check is on."""
    drifting, judged = groups
    events: list[tuple[str, HealthEvent]] = []
    for key in sorted(state.latched):
        name = key.rsplit(":", 1)[0]
        if name in drifting or name not in judged:
            continue
        old = state.latched.pop(key)
        device = next(d for d in cycle.monitored if d.name == name)
        check = DEGRADATION_OF.get(device_layer(device, links) or "", IB_DEGRADATION_CHECK)
        if check in cycle.enabled:
            events.append((name, make_event(
                check, fatal=False, healthy=True, error_code=CODE_FIRMWARE,
                entities=((ENTITY_NIC, name),), at=cycle.now,
                message=(f"{name} firmware {versions[name]} is consistent with its group "
                         f"again (was {old.detail})"))))
    return events


FAMILY = FIRMWARE = Firmware()
