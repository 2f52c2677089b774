"""The IB character-device family: NVSentinel's ``InfiniBandCharDeviceCheck``.

A process opens an RDMA device through ``/dev/infiniband/uverbsN`` (verbs) and
``/dev/infiniband/umadN`` (management datagrams, per port); a device whose node is missing is
unusable by every job even with its links ACTIVE. The kernel lists them in sysfs
(drivers/infiniband/core/uverbs_main.c, user_mad.c): ``/sys/class/infiniband_verbs/uverbsN``
with ``ibdev``, ``/sys/class/infiniband_mad/umadN`` and ``issmN`` with ``ibdev`` and ``port``.

Rules (NVSentinel #1546, #1728): one ``uverbs`` per monitored device, one ``umad`` per
InfiniBand port, one ``issm`` per InfiniBand port only when ``charDeviceIssm`` asks for it
(platforms such as GB300 create none). Missing for 3 consecutive adapter reads -> fatal
``REPLACE_VM`` with errorCode ``uverbs`` / ``umad`` / ``issm``; latched until seen again
(then a healthy event). A class directory that is absent (``ib_uverbs`` / ``ib_umad`` not
loaded) is uncertain: nothing is counted, nothing reported. No count either while the
enumeration is uncertain or a driver reload is in progress. The check is switched off
by leaving ``InfiniBandCharDeviceCheck`` out of ``checks``: the family then does not run (its
section is kept as it is, as for every check switched off).
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime
from typing import Iterable, Mapping, NamedTuple, Optional

from ...sources.adapter import ADAPTER
from ...sources.adapter_facts import CharDevices
from ..codec import Layout
from ..config import CHAR_DEVICE_CHECK as CHAR_DEVICE_CHECK  # re-exported
from ..config import Config
from ..events import ENTITY_NIC, ENTITY_PORT, HealthEvent, make_event
from ..family import (
    HOST,
    READS_DEVICES,
    READS_PORTS,
    CheckFamily,
    Condition,
    Cycle,
    Series,
    Verdict,
)
from ..jsontypes import Json
from ..settings import Settings, boolean, setting
from ..state import FATAL
from .adapter_section import LatchSection, held, scoped_clear

MISSING_READS = 3  # consecutive adapter reads without the entry (NVSentinel's 3 polls)
UVERBS, UMAD, ISSM = "uverbs", "umad", "issm"
CLASS_DIR = {UVERBS: "/sys/class/infiniband_verbs", UMAD: "/sys/class/infiniband_mad",
             ISSM: "/sys/class/infiniband_mad"}


class CharDeviceSection(LatchSection):
    LAYOUT = Layout(prefix="char_device_")


def key_of(device: str, port: Optional[int], code: str) -> str:
    """``mlx5_0:uverbs``, ``mlx5_0:1:umad``."""
    return f"{device}:{code}" if port is None else f"{device}:{port}:{code}"


def parse_key(key: str) -> tuple[str, Optional[int], str]:
    device, _, rest = key.partition(":")
    number, sep, code = rest.partition(":")
    if sep and number.isdecimal():
        return device, int(number), code
    return device, None, rest


def _present(chardevs: CharDevices, device: str, port: Optional[int], code: str
             ) -> Optional[bool]:
    """Whether the entry is listed; None when its class directory could not be listed."""
    if code == UVERBS:
        return None if chardevs.uverbs is None else device in chardevs.uverbs
    table = chardevs.umad if code == UMAD else chardevs.issm
    return None if table is None else (device, port or 0) in table


def _entities(device: str, port: Optional[int]) -> tuple[tuple[str, str], ...]:
    if port is None:
        return ((ENTITY_NIC, device),)
    return ((ENTITY_NIC, device), (ENTITY_PORT, str(port)))


def _what(device: str, port: Optional[int]) -> str:
    return f"Device {device}" if port is None else f"Device {device} port {port}"


def missing_event(device: str, port: Optional[int], code: str, now: datetime) -> HealthEvent:
    return make_event(
        CHAR_DEVICE_CHECK, fatal=True, healthy=False, error_code=code,
        entities=_entities(device, port), at=now,
        message=(f"{_what(device, port)}: {code} character device missing from "
                 f"{CLASS_DIR[code]} for {MISSING_READS} consecutive checks, processes cannot "
                 f"open /dev/infiniband/{code}*"))


def back_event(device: str, port: Optional[int], code: str, now: datetime, why: str
               ) -> HealthEvent:
    return make_event(
        CHAR_DEVICE_CHECK, fatal=False, healthy=True, error_code=code,
        entities=_entities(device, port), at=now,
        message=f"{_what(device, port)}: {code} character device {why}")


@dataclass(frozen=True)
class CharDeviceSettings(Settings):
    """nichealthd.toml(5): charDeviceIssm."""

    # Expected only on request (NVSentinel #1728: platforms such as GB300 create none).
    char_device_issm: bool = setting(
        "charDeviceIssm", False, boolean,
        "Expect one issm character device per InfiniBand port besides uverbs (per device) "
        "and umad")


class CharDeviceFamily(CheckFamily[CharDeviceSection, CharDevices, None]):
    """One uverbs per device, one umad (and opt-in issm) per InfiniBand port."""

    id = "char_devices"
    order = 40
    keys = CharDeviceSection.keys()
    section_type = CharDeviceSection
    reads = frozenset({READS_DEVICES, READS_PORTS, ADAPTER})
    device_field_types = {"char_devices_missing": "?[]string"}
    settings = CharDeviceSettings

    def enabled(self, config: Config) -> bool:
        return CHAR_DEVICE_CHECK in config.checks

    def evaluate(self, previous: CharDeviceSection, cycle: Cycle, volatile: None
                 ) -> Verdict[CharDeviceSection, CharDevices, None]:
        facts = cycle.snapshot.fact(ADAPTER)
        if facts is None:  # not read this poll: nothing to judge
            return Verdict(previous)
        now, chardevs = cycle.now, facts.chardevs
        state = previous.copy()
        events: list[tuple[str, HealthEvent]] = []
        notes: list[str] = []
        host: list[HealthEvent] = []
        if not state.cleared:
            state.cleared = True
            if cycle.earlier:  # a host where nichealthd never ran has nothing to clear
                host.append(scoped_clear(CHAR_DEVICE_CHECK, now, "no state of this check"))
        hold = held(cycle)
        codes = _port_codes(cycle)
        expected = _expected(cycle, codes)
        for key, entry in expected.items():
            present = _present(chardevs, *entry)
            if present is None:
                continue  # class directory absent: uncertain, the misses are held
            if present:
                event = _present_again(state, key, entry, now)
            elif hold:
                continue
            else:
                event = _missed(state, key, entry, now)
            if event is not None:
                events.append((entry.device, event))
        # Misses of entries no longer expected (device gone or excluded, port no longer
        # InfiniBand) start again; a class directory that vanished holds them.
        for key in [k for k in state.misses if k not in expected]:
            del state.misses[key]
        if ISSM not in codes:  # the opt-in was switched off: nothing to hold any more
            events.extend(_release_issm(state, now))
        if chardevs.uverbs is None or chardevs.umad is None:
            notes.extend(_uncertain(chardevs, previous, cycle))
        events.extend((HOST, e) for e in host)
        return Verdict(state, tuple(events), chardevs, notes=tuple(notes))

    def rename(self, section: CharDeviceSection, renames: Mapping[str, str], now: datetime
               ) -> CharDeviceSection:
        return section.renamed(renames)

    def conditions(self, section: CharDeviceSection,
                   picture: Optional[CharDevices]) -> Iterable[Condition]:
        for key in sorted(section.latched):
            device, port, code = parse_key(key)
            reason = f"{code} character device missing"
            if port is None:
                yield Condition(FATAL, f"{device}: {reason}")
            else:
                yield Condition(FATAL, reason, (device, port), alone=f"{key} missing",
                                code=code)

    def device_fields(self, section: CharDeviceSection, picture: Optional[CharDevices], device: str,
                      present: bool) -> Mapping[str, Json]:
        """``char_devices_missing``: the kinds reported missing (``uverbs``, ``umad:1``...)."""
        missing: list[Json] = []
        for key in sorted(section.latched):
            name, port, code = parse_key(key)
            if name == device:
                missing.append(code if port is None else f"{code}:{port}")
        return {"char_devices_missing": missing}

    def series(self, section: CharDeviceSection,
               picture: Optional[CharDevices]) -> Iterable[Series]:
        samples = []
        for key in sorted(section.latched):
            device, port, code = parse_key(key)
            samples.append(((device, str(port or ""), code), 1.0))
        yield Series("char_device_missing", "Character devices (uverbs, umad, issm) reported "
                     "missing: 1 while the condition is latched", "gauge",
                     ("device", "port", "kind"), tuple(samples))


def _uncertain(chardevs: CharDevices, previous: CharDeviceSection, cycle: Cycle
               ) -> list[str]:
    """One line per poll at most, only when there is something to say about it."""
    if not cycle.monitored:
        return []
    absent = [CLASS_DIR[c] for c, v in ((UVERBS, chardevs.uverbs), (UMAD, chardevs.umad))
              if v is None]
    if cycle.baseline or previous.misses or previous.latched:
        return [f"{' and '.join(absent)} absent (ib_uverbs / ib_umad not loaded?): character "
                f"devices not judged this time"]
    return []


def _port_codes(cycle: Cycle) -> tuple[str, ...]:
    """The character devices expected per InfiniBand port: umad, and issm when opted in."""
    return (UMAD, ISSM) if cycle.config.settings(CharDeviceSettings).char_device_issm \
        else (UMAD,)


class _Entry(NamedTuple):
    """One expected character device: a device's uverbs (no port) or a port's umad/issm."""

    device: str
    port: Optional[int]
    code: str


def _expected(cycle: Cycle, codes: tuple[str, ...]) -> dict[str, _Entry]:
    """Key -> entry of every character device expected: each monitored device's uverbs, and
    each of its InfiniBand ports' ``codes`` (umad, issm when opted in)."""
    expected: dict[str, _Entry] = {}
    for device in cycle.monitored:
        expected[key_of(device.name, None, UVERBS)] = _Entry(device.name, None, UVERBS)
        for port in device.ports:
            if port.link_layer == "InfiniBand":
                for code in codes:
                    expected[key_of(device.name, port.port, code)] = _Entry(
                        device.name, port.port, code)
    return expected


def _present_again(state: CharDeviceSection, key: str, entry: _Entry, now: datetime
                   ) -> Optional[HealthEvent]:
    """A present entry: its misses start again, and a latched one recovers."""
    state.misses.pop(key, None)
    if key not in state.latched:
        return None
    del state.latched[key]
    return back_event(*entry, now, f"present again in {CLASS_DIR[entry.code]}")


def _missed(state: CharDeviceSection, key: str, entry: _Entry, now: datetime
            ) -> Optional[HealthEvent]:
    """A missing entry (not held): latched with one event after MISSING_READS reads."""
    code = entry.code
    if key in state.latched or not state.miss(key, MISSING_READS, now,
                                              f"{code} missing from {CLASS_DIR[code]}"):
        return None
    return missing_event(*entry, now)


def _release_issm(state: CharDeviceSection, now: datetime) -> list[tuple[str, HealthEvent]]:
    """``charDeviceIssm`` switched off: every latched issm entry recovers."""
    events: list[tuple[str, HealthEvent]] = []
    for key in [k for k in state.latched if parse_key(k)[2] == ISSM]:
        name, number, code = parse_key(key)
        del state.latched[key]
        events.append((name, back_event(name, number, code, now,
                                        "no longer expected (charDeviceIssm = false)")))
    return events


FAMILY = CHAR_DEVICES = CharDeviceFamily()
