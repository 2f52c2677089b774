"""The kernel-log family (issue #17): mlx5 driver faults in the kernel log, as events per device.

Reads the kernel lines of the poll (``HostSnapshot.kernel_lines``, read by
:mod:`nichealthd.sources.kernel_log`), matches them against the rules of
:mod:`nichealthd.core.kernel_rules`, attributes each match to a device by its PCI address or
interface name (an unattributable one is reported against the host with its text), and reports
one event per rule and device per dedup window, timed by the kernel's own timestamps. The
source's position (the journal cursor, or the /dev/kmsg sequence number) is part of this
family's section, so it is committed with the poll's events: a poll whose commit fails is read
again, a restart neither misses nor repeats a line. A device whose role is not monitored
(excluded, a VF...) gets no events, as for every other check; its lines are counted.

Events: checkName ``SysLogsNICDriverError`` and errorCode ``[<rule>]``, as NVSentinel's
syslog monitor reports them, so its analyzer rules for repeated NIC driver errors apply to
either; fatal rules say REPLACE_VM. A fatal fault stays an open condition for the rest of the
boot (the driver does not say when a device recovers).
"""

from __future__ import annotations

import functools
from dataclasses import dataclass, field, replace
from datetime import datetime
from typing import Any, Iterable, Mapping, Optional

from ..config import Config
from ..events import (
    ENTITY_NIC,
    ENTITY_PORT,
    HealthEvent,
    format_timestamp,
    make_event,
)
from ..family import HOST, READS_DEVICES, CheckFamily, Condition, Cycle, Series, Verdict
from ..kernel_rules import CompiledRule, KernelRule, attribution, compile_rules
from ..model import DeviceSnapshot, HostSnapshot, KernelLine
from ..state import FATAL, parse_bool, parse_int, parse_str, parse_table, parse_when

CHECK_NAME = "SysLogsNICDriverError"
KEY = "kernel_log"
MAX_TEXT = 1000  # a kernel line is at most 1 KiB (PRINTKRB_RECORD_MAX) ; longer is cut


@dataclass(frozen=True)
class Fault:
    """The last driver fault of a device (``show devices``)."""

    rule: str
    at: datetime
    line: str
    fatal: bool

    def to_json(self) -> dict[str, Any]:
        return {"rule": self.rule, "at": format_timestamp(self.at), "line": self.line,
                "fatal": self.fatal}

    @classmethod
    def from_json(cls, data: Any) -> Fault:
        return cls(parse_str(data["rule"]), parse_when(data["at"]), parse_str(data["line"]),
                   parse_bool(data["fatal"]))


@dataclass(frozen=True)
class Pending:
    """A header of a stateful rule seen, waiting for its frame."""

    line: str
    left: int  # lines still to look at

    def to_json(self) -> dict[str, Any]:
        return {"line": self.line, "left": self.left}

    @classmethod
    def from_json(cls, data: Any) -> Pending:
        return cls(parse_str(data["line"]), parse_int(data["left"]))


@dataclass
class KernelLogSection:
    """The cursor, the dedup times, the match counts, the last and the fatal faults."""

    cursor: str = ""
    last_event: dict[str, datetime] = field(default_factory=dict)  # "rule|device" -> line time
    counts: dict[str, int] = field(default_factory=dict)  # "rule|device" -> matching lines
    faults: dict[str, Fault] = field(default_factory=dict)  # device (or "") -> last fault
    fatal: dict[str, str] = field(default_factory=dict)  # device (or "") -> fatal rule
    pending: dict[str, Pending] = field(default_factory=dict)  # rule -> header seen

    def copy(self) -> KernelLogSection:
        return KernelLogSection(self.cursor, dict(self.last_event), dict(self.counts),
                                dict(self.faults), dict(self.fatal), dict(self.pending))

    def without_cursor(self) -> tuple[Any, ...]:
        return (self.last_event, self.counts, self.faults, self.fatal, self.pending)

    def to_json(self) -> dict[str, Any]:
        return {KEY: {
            "cursor": self.cursor,
            "last_event": {k: format_timestamp(v) for k, v in sorted(self.last_event.items())},
            "counts": dict(sorted(self.counts.items())),
            "faults": {k: v.to_json() for k, v in sorted(self.faults.items())},
            "fatal": dict(sorted(self.fatal.items())),
            "pending": {k: v.to_json() for k, v in sorted(self.pending.items())},
        }}

    @classmethod
    def from_json(cls, data: Mapping[str, Any]) -> KernelLogSection:
        table = parse_table(data, KEY)
        return cls(
            parse_str(table.get("cursor", "")),
            {parse_str(k): parse_when(v) for k, v in parse_table(table, "last_event").items()},
            {parse_str(k): parse_int(v) for k, v in parse_table(table, "counts").items()},
            {parse_str(k): Fault.from_json(v) for k, v in parse_table(table, "faults").items()},
            {parse_str(k): parse_str(v) for k, v in parse_table(table, "fatal").items()},
            {parse_str(k): Pending.from_json(v)
             for k, v in parse_table(table, "pending").items()})


@functools.lru_cache(maxsize=4)
def _compiled(rules: tuple[KernelRule, ...]) -> tuple[CompiledRule, ...]:
    return compile_rules(rules)


class _Devices:
    """The poll's devices by PCI address and by interface name."""

    def __init__(self, snapshot: HostSnapshot) -> None:
        self.by_pci: dict[str, DeviceSnapshot] = {}
        self.by_iface: dict[str, tuple[DeviceSnapshot, Optional[int]]] = {}
        for device in snapshot.devices:
            if device.pci_address:
                self.by_pci[device.pci_address.lower()] = device
            for netdev in device.netdevs:
                self.by_iface.setdefault(netdev, (device, None))
            for port in device.ports:
                if port.netdev:
                    self.by_iface[port.netdev] = (device, port.port)

    def find(self, text: str) -> tuple[Optional[DeviceSnapshot], Optional[int]]:
        pci, iface = attribution(text)
        found = self.by_iface.get(iface) if iface else None
        device = self.by_pci.get(pci) if pci else None
        if device is not None:  # the PCI address decides; the interface may add the port
            port = found[1] if found and found[0] is device else None
            return device, port
        return (found[0], found[1]) if found else (None, None)


class KernelLog(CheckFamily[KernelLogSection]):
    """mlx5 driver faults from the kernel log, deduplicated per rule and device."""

    id = "kernel_log"
    order = 40
    keys = (KEY,)
    section_type = KernelLogSection
    reads = frozenset({READS_DEVICES})

    def enabled(self, config: Config) -> bool:
        return config.kernel_log != "off"

    def evaluate(self, previous: KernelLogSection, cycle: Cycle, memory: Any
                 ) -> Verdict[KernelLogSection]:
        snapshot = cycle.snapshot
        state = previous.copy()
        if snapshot.kernel_cursor is not None:
            state.cursor = snapshot.kernel_cursor
        if not snapshot.kernel_lines:
            return Verdict(state)
        rules = _compiled(cycle.config.kernel_rules)
        stateless = [r for r in rules if r.header is None]
        stateful = [r for r in rules if r.header is not None]
        devices = _Devices(snapshot)
        monitored = frozenset(d.name for d in cycle.monitored)
        events: list[tuple[str, HealthEvent]] = []
        for line in snapshot.kernel_lines:
            text = line.text[:MAX_TEXT]
            matched = False
            for compiled in stateful:
                name = compiled.rule.name
                assert compiled.header is not None
                if compiled.header.search(text):
                    state.pending[name] = Pending(text, compiled.rule.header_lines)
                    matched = True
                    continue
                waiting = state.pending.get(name)
                if waiting is None:
                    continue
                if compiled.pattern.search(text):
                    del state.pending[name]
                    self._match(compiled.rule, f"{waiting.line} / {text.strip()}", line, state,
                                devices, monitored, cycle, events)
                    matched = True
                elif waiting.left <= 1:
                    del state.pending[name]
                else:
                    state.pending[name] = Pending(waiting.line, waiting.left - 1)
            if matched:
                continue
            for compiled in stateless:
                if compiled.pattern.search(text):
                    self._match(compiled.rule, text, line, state, devices, monitored, cycle,
                                events)
                    break  # a line is one fault: the first rule that matches names it
        return Verdict(state, tuple(events))

    @staticmethod
    def _match(rule: KernelRule, text: str, line: KernelLine, state: KernelLogSection,
               devices: _Devices, monitored: frozenset[str], cycle: Cycle,
               events: list[tuple[str, HealthEvent]]) -> None:
        device, port = devices.find(text)
        target = device.name if device is not None else HOST
        key = f"{rule.name}|{target}"
        state.counts[key] = state.counts.get(key, 0) + 1
        if device is not None and device.name not in monitored:
            return  # excluded, a VF...: the device's own rules say it is not watched
        state.faults[target] = Fault(rule.name, line.at, text, rule.is_fatal)
        if rule.is_fatal:
            state.fatal.setdefault(target, rule.name)
        last = state.last_event.get(key)
        if last is not None and (line.at - last).total_seconds() < rule.window:
            return  # within the dedup window of the last event
        state.last_event[key] = line.at
        if device is None:
            entities: tuple[tuple[str, str], ...] = ()
            about = "host"
        elif port is None:
            entities = ((ENTITY_NIC, device.name),)
            about = device.name
        else:
            entities = ((ENTITY_NIC, device.name), (ENTITY_PORT, str(port)))
            about = f"{device.name} port {port}"
        what = rule.description or rule.name
        event = make_event(
            CHECK_NAME, fatal=rule.is_fatal, healthy=False,
            message=f"{about}: kernel driver fault {rule.name} ({what}): {text}",
            error_code=rule.code, entities=entities, at=cycle.now)
        event = replace(event, metadata={
            "kernel_log_rule": rule.name, "kernel_log_line": text,
            "kernel_log_time": format_timestamp(line.at)})
        events.append((target, event))

    def rename(self, section: KernelLogSection, renames: Mapping[str, str], now: datetime
               ) -> KernelLogSection:
        """Faults, counts and dedup times of a renamed device under its new name."""
        def key(k: str) -> str:
            rule, _, device = k.rpartition("|")
            return f"{rule}|{renames.get(device, device)}"
        return KernelLogSection(
            section.cursor, {key(k): v for k, v in section.last_event.items()},
            {key(k): v for k, v in section.counts.items()},
            {renames.get(k, k): v for k, v in section.faults.items()},
            {renames.get(k, k): v for k, v in section.fatal.items()}, dict(section.pending))

    def urgent(self, old: KernelLogSection, new: KernelLogSection, config: Config) -> bool:
        """A match is written at once; a cursor that only moved over unrelated lines is
        flushed within a minute and at stop (a crash re-reads those lines: no event)."""
        return old.without_cursor() != new.without_cursor()

    def conditions(self, section: KernelLogSection, picture: Any) -> Iterable[Condition]:
        """A fatal driver fault holds for the rest of the boot."""
        for target in sorted(section.fatal):
            who = target or "host"
            yield Condition(FATAL, f"{who}: kernel driver fault {section.fatal[target]}")

    def series(self, section: KernelLogSection, picture: Any) -> Iterable[Series]:
        samples = []
        for key in sorted(section.counts):
            rule, _, device = key.rpartition("|")
            samples.append(((rule, device), float(section.counts[key])))
        yield Series("kernel_log_matches_total", "Kernel log lines that matched a driver "
                     "fault rule, per rule and device (empty device: not attributable)",
                     "counter", ("rule", "device"), tuple(samples))


def device_fault(section: KernelLogSection, device: str) -> dict[str, Any]:
    """The ``driver_fault`` field of a device record (absent when it has none)."""
    fault = section.faults.get(device)
    if fault is None:
        return {}
    return {"driver_fault": f"{fault.rule} at {format_timestamp(fault.at)}: {fault.line}"}


FAMILY = KERNEL_LOG = KernelLog()
