"""The kernel-log family: mlx5 driver faults in the kernel log, as events per device.

Reads the kernel lines of the poll (fact
:data:`~nichealthd.sources.kernel_log_facts.KERNEL_LINES`, read by
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

Repetition, flap-style: the lines of a non-fatal rule (``repeat``: all but
access_reg_failed) on one monitored device are counted in a sliding window, timed by the
kernel's own timestamps. Every matching line counts, not only the deduplicated events: the
dedup window (5 min) would hide a fault that comes back every minute, and NVSentinel's syslog
monitor, whose events its analyzer counts, reports every line. ``kernelLogRepeatCount`` (3)
lines within ``kernelLogRepeatWindow`` (1 h) — the figures of NVSentinel's analyzer rule
RepeatedNICDriverError, which escalates 3 non-fatal events of one pattern within 1 h to
CONTACT_SUPPORT — give ONE non-fatal event with ``recommendedAction`` CONTACT_SUPPORT under
the device's degradation check (``InfiniBandDegradationCheck``, ``EthernetDegradationCheck``,
``EFADegradationCheck``), errorCode ``<rule code>_repeated``, entities the NIC and its PCI
address; its healthy event follows when the window holds fewer lines than the count. Not under
``SysLogsNICDriverError``: that check holds the fatal faults, which no healthy event may clear
(a fatal fact of a NIC consolidates under its layer's checks, as for every other family). The
window is persisted (it survives a restart), a reboot clears it with the rest of the state,
``kernelLogRepeatCount = 0`` switches it off (with the recovery of what it had reported). At
most ``kernelLogRepeatCount`` line times are kept per rule and device: enough to decide, and
the state stays small under a flood. Unattributable lines (the host's) are not counted.
"""

from __future__ import annotations

import functools
from dataclasses import dataclass, field, replace
from datetime import datetime, timedelta
from typing import Any, Iterable, Mapping, Optional

from ...sources.kernel_log_facts import KERNEL_LINES, batch_of
from ..codec import Layout, Section, stored
from ..config import EFA_DEGRADATION_CHECK, Config
from ..duration import format_duration
from ..events import (
    ENTITY_NIC,
    ENTITY_PCI,
    ENTITY_PORT,
    HealthEvent,
    format_timestamp,
    make_event,
)
from ..family import (
    HOST,
    READS_DEVICES,
    CheckFamily,
    Condition,
    Cycle,
    Series,
    Verdict,
)
from ..jsontypes import Json
from ..kernel_rules import (
    DEFAULT_KERNEL_RULES,
    KERNEL_LOG_MODES,
    RULES_TABLE,
    CompiledRule,
    KernelRule,
    attribution,
    compile_rules,
    merge_kernel_rules,
)
from ..model import DeviceSnapshot, HostSnapshot, KernelLine
from ..settings import Choice, Duration, Integer, Settings, setting, string, table
from ..state import DEGRADED, FATAL
from .link_state import LINK_STATE
from .pci_open import layer_checks

CHECK_NAME = "SysLogsNICDriverError"
KEY = "kernel_log"
MAX_TEXT = 1000  # a kernel line is at most 1 KiB (PRINTKRB_RECORD_MAX) ; longer is cut
REPEATED = "_repeated"  # suffix of a repetition's errorCode


@dataclass(frozen=True)
class RepeatCount(Integer):
    """``kernelLogRepeatCount``: 0 (off) or a repetition, which takes at least two lines."""

    def __call__(self, value: Any) -> int:
        count = super().__call__(value)
        if count == 1:
            raise ValueError("must be 0 (repetition off) or at least 2 (one line is a fault, "
                             "not a repetition), got 1")
        return count


@dataclass(frozen=True)
class KernelLogSettings(Settings):
    """nichealthd.toml(5), KERNEL LOG: where driver faults are read from, and the rules.

    ``kernelLog``, ``kernelLogPath`` and ``kernelLogMaxLines`` are the reader's
    (:mod:`nichealthd.sources.kernel_log`); ``kernelLog = "off"`` switches the family off.
    """

    man_section = "KERNEL LOG"

    kernel_log: str = setting("kernelLog", "journal", Choice(KERNEL_LOG_MODES),
                              "journal, kmsg or off.")
    # A journal directory/file or a kmsg-format file (tests, sim).
    kernel_log_path: str = setting(
        "kernelLogPath", "", string,
        "Read this journal directory or file (journal mode), or this file of /dev/kmsg "
        "records (kmsg mode), instead of the system journal or /dev/kmsg")
    # Read per poll; the rest is read by the next polls.
    kernel_log_max_lines: int = setting("kernelLogMaxLines", 5000, Integer(10, 1_000_000),
                                        "Kernel lines read per poll at most")
    # Repetition of non-fatal driver faults: NVSentinel's analyzer rule RepeatedNICDriverError
    # (3 events of one pattern in 1 h -> CONTACT_SUPPORT); 0 is off. At most this many line
    # times are kept per rule and device (the state stays small).
    kernel_log_repeat_count: int = setting(
        "kernelLogRepeatCount", 3, RepeatCount(0, 1000),
        "How many lines of one non-fatal rule on one monitored device within "
        "kernelLogRepeatWindow make the fault a repetition")
    kernel_log_repeat_window: float = setting(
        "kernelLogRepeatWindow", 3600.0, Duration(1.0, 7 * 86400.0),
        "The sliding window of kernelLogRepeatCount")
    kernel_rules: tuple[KernelRule, ...] = table(
        RULES_TABLE, DEFAULT_KERNEL_RULES, merge_kernel_rules,
        "One table per rule to change or add, merged by name over the built-in rules")


@dataclass(frozen=True)
class Fault:
    """The last driver fault of a device (``show devices``)."""

    rule: str
    at: datetime
    line: str
    fatal: bool


@dataclass(frozen=True)
class Pending:
    """A header of a stateful rule seen, waiting for its frame."""

    line: str
    left: int  # lines still to look at


@dataclass(frozen=True)
class Told:
    """The identity a repetition event was sent with: its recovery carries exactly this one
    (the platform clears a condition by identity), even if the device was renamed since."""

    check: str
    code: str
    entities: tuple[tuple[str, str], ...]
    since: datetime


@dataclass(frozen=True)
class Repeat:
    """One non-fatal rule on one device: the times of its last lines within the repetition
    window (oldest first, at most kernelLogRepeatCount), and the repetition event told."""

    times: tuple[datetime, ...] = ()
    told: Optional[Told] = field(default=None, metadata=stored(legacy=None))


@dataclass
class KernelLogSection(Section):
    """The cursor, the dedup times, the match counts, the last and the fatal faults, the
    repetition windows (absent in state files written before repetition was counted); one
    object under ``KEY``."""

    LAYOUT = Layout(nest=KEY)

    cursor: str = ""
    last_event: dict[str, datetime] = field(default_factory=dict)  # "rule|device" -> line time
    counts: dict[str, int] = field(default_factory=dict)  # "rule|device" -> matching lines
    faults: dict[str, Fault] = field(default_factory=dict)  # device (or "") -> last fault
    fatal: dict[str, str] = field(default_factory=dict)  # device (or "") -> fatal rule
    pending: dict[str, Pending] = field(default_factory=dict)  # rule -> header seen
    repeats: dict[str, Repeat] = field(default_factory=dict)  # "rule|device" -> window

    def without_cursor(self) -> tuple[Any, ...]:
        return (self.last_event, self.counts, self.faults, self.fatal, self.pending,
                self.repeats)


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


@dataclass(frozen=True)
class _Matching:
    """One poll's matching of kernel lines: the section it counts in, the poll, where a
    line finds its device, the devices watched, and what it adds to (the events, the
    ``rule|device`` keys a repetition counted, with their device)."""

    state: KernelLogSection
    cycle: Cycle
    devices: _Devices
    monitored: frozenset[str]
    events: list[tuple[str, HealthEvent]]
    touched: dict[str, DeviceSnapshot]


class KernelLog(CheckFamily[KernelLogSection, None, None]):
    """mlx5 driver faults from the kernel log, deduplicated per rule and device."""

    id = "kernel_log"
    order = 40
    keys = (KEY,)
    section_type = KernelLogSection
    reads = frozenset({READS_DEVICES, KERNEL_LINES})
    device_field_types = {"driver_fault": "?string"}
    settings = KernelLogSettings

    def enabled(self, config: Config) -> bool:
        return config.settings(KernelLogSettings).kernel_log != "off"

    def evaluate(self, previous: KernelLogSection, cycle: Cycle, volatile: None
                 ) -> Verdict[KernelLogSection, None, None]:
        batch = batch_of(cycle.snapshot)
        moved = batch.cursor is not None and batch.cursor != previous.cursor
        if not batch.lines and not moved and not _repeats_due(previous, cycle):
            return Verdict(previous)  # the common case: nothing read, nothing expires
        state = previous.copy()
        if batch.cursor is not None:
            state.cursor = batch.cursor
        touched: dict[str, DeviceSnapshot] = {}  # "rule|device" counted this poll
        events: list[tuple[str, HealthEvent]] = []
        if batch.lines:
            self._lines(state, cycle, events, touched)
        events.extend(_repetition(state, cycle, touched))
        return Verdict(state, tuple(events))

    def _lines(self, state: KernelLogSection, cycle: Cycle,
               events: list[tuple[str, HealthEvent]],
               touched: dict[str, DeviceSnapshot]) -> None:
        """Match the poll's lines: dedup events, counts, faults, repetition times."""
        snapshot = cycle.snapshot
        rules = _compiled(cycle.config.settings(KernelLogSettings).kernel_rules)
        stateless = [r for r in rules if r.header is None]
        stateful = [r for r in rules if r.header is not None]
        matching = _Matching(state, cycle, _Devices(snapshot),
                             frozenset(d.name for d in cycle.monitored), events, touched)
        for line in batch_of(snapshot).lines:
            text = line.text[:MAX_TEXT]
            matched, completed = _advance(stateful, text, state)
            for rule, joined in completed:
                self._match(rule, joined, line, matching)
            if matched:
                continue
            for compiled in stateless:
                if compiled.pattern.search(text):
                    self._match(compiled.rule, text, line, matching)
                    break  # a line is one fault: the first rule that matches names it

    @staticmethod
    def _match(rule: KernelRule, text: str, line: KernelLine, matching: _Matching) -> None:
        state, cycle, monitored = matching.state, matching.cycle, matching.monitored
        events, touched = matching.events, matching.touched
        device, port = matching.devices.find(text)
        target = device.name if device is not None else HOST
        key = f"{rule.name}|{target}"
        state.counts[key] = state.counts.get(key, 0) + 1
        if device is not None and device.name not in monitored:
            return  # excluded, a VF...: the device's own rules say it is not watched
        state.faults[target] = Fault(rule.name, line.at, text, rule.is_fatal)
        if rule.is_fatal:
            state.fatal.setdefault(target, rule.name)
        elif device is not None and _counts_repeats(rule, cycle.config):
            _count(state, key, line.at, cycle)
            touched[key] = device
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
            {renames.get(k, k): v for k, v in section.fatal.items()}, dict(section.pending),
            {key(k): v for k, v in section.repeats.items()})  # told: the identity as sent

    def urgent(self, old: KernelLogSection, new: KernelLogSection, config: Config) -> bool:
        """A match is written at once; a cursor that only moved over unrelated lines is
        flushed within a minute and at stop (a crash re-reads those lines: no event)."""
        return old.without_cursor() != new.without_cursor()

    def conditions(self, section: KernelLogSection, picture: None) -> Iterable[Condition]:
        """A fatal driver fault holds for the rest of the boot; a repetition until its
        window holds fewer lines than kernelLogRepeatCount."""
        for target in sorted(section.fatal):
            who = target or "host"
            yield Condition(FATAL, f"{who}: kernel driver fault {section.fatal[target]}")
        for key in sorted(k for k, r in section.repeats.items() if r.told):
            rule, _, device = key.rpartition("|")
            yield Condition(DEGRADED, f"{device}: kernel driver fault {rule} repeated")

    def device_fields(self, section: KernelLogSection, picture: None, device: str,
                      present: bool) -> Mapping[str, Json]:
        return device_fault(section, device)

    def series(self, section: KernelLogSection, picture: None) -> Iterable[Series]:
        samples = []
        for key in sorted(section.counts):
            rule, _, device = key.rpartition("|")
            samples.append(((rule, device), float(section.counts[key])))
        yield Series("kernel_log_matches_total", "Kernel log lines that matched a driver "
                     "fault rule, per rule and device (empty device: not attributable)",
                     "counter", ("rule", "device"), tuple(samples))
        yield Series("kernel_log_repeat_window_matches",
                     "Lines of a non-fatal driver fault rule within kernelLogRepeatWindow, "
                     "per rule and device, as of the last poll with kernel lines (at most "
                     "kernelLogRepeatCount are kept)", "gauge", ("rule", "device"),
                     tuple((tuple(k.rpartition("|")[::2]), float(len(r.times)))
                           for k, r in sorted(section.repeats.items())))


def _advance(stateful: list[CompiledRule], text: str, state: KernelLogSection
             ) -> tuple[bool, list[tuple[KernelRule, str]]]:
    """Each multi-line rule on this line: its header starts (or restarts) a wait of
    ``header_lines`` lines; the line it waits for completes it (returned, joined to the
    header); the wait otherwise runs down. True when the line was a header or a completion
    (no single-line rule then names it)."""
    matched = False
    completed: list[tuple[KernelRule, str]] = []
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
            completed.append((compiled.rule, f"{waiting.line} / {text.strip()}"))
            matched = True
        elif waiting.left <= 1:
            del state.pending[name]
        else:
            state.pending[name] = Pending(waiting.line, waiting.left - 1)
    return matched, completed


def _counts_repeats(rule: KernelRule, config: Config) -> bool:
    """Whether the rule's lines count toward repetition under ``config``."""
    return (bool(config.settings(KernelLogSettings).kernel_log_repeat_count) and rule.repeat
            and not rule.is_fatal)


def _horizon(cycle: Cycle) -> datetime:
    """Lines at or before this time are out of the repetition window."""
    window = cycle.config.settings(KernelLogSettings).kernel_log_repeat_window
    return cycle.now - timedelta(seconds=window)


def _count(state: KernelLogSection, key: str, at: datetime, cycle: Cycle) -> None:
    """One more line of ``key`` in its window (the last kernelLogRepeatCount are kept)."""
    if at <= _horizon(cycle):
        return  # an old line (a backlog read after a restart): it repeats nothing now
    record = state.repeats.get(key) or Repeat()
    kept = cycle.config.settings(KernelLogSettings).kernel_log_repeat_count
    times = tuple(sorted((*record.times, at)))[-kept:]
    state.repeats[key] = replace(record, times=times)


def _repeats_due(section: KernelLogSection, cycle: Cycle) -> bool:
    """Whether a repetition window has something to drop or to clear (its lines expire, the
    count or the rule changed, repetition was switched off)."""
    if not section.repeats:
        return False
    config = cycle.config
    kernel = config.settings(KernelLogSettings)
    threshold = kernel.kernel_log_repeat_count
    if not threshold:
        return True
    horizon = _horizon(cycle)
    counting = {r.name for r in kernel.kernel_rules if r.enabled and _counts_repeats(r, config)}
    return any(not r.times or r.times[0] <= horizon or (r.told and len(r.times) < threshold)
               or k.rpartition("|")[0] not in counting for k, r in section.repeats.items())


def _degradation_check(device: DeviceSnapshot, cycle: Cycle) -> Optional[str]:
    """The check a repetition of ``device`` is reported under (None: layer unknown)."""
    if device.is_efa:
        return EFA_DEGRADATION_CHECK
    names = layer_checks(device, cycle.previous.section(LINK_STATE))
    return names.degradation if names else None


def _repetition(state: KernelLogSection, cycle: Cycle,
                touched: Mapping[str, DeviceSnapshot]) -> list[tuple[str, HealthEvent]]:
    """Slide every window; tell the repetitions that reached the count, clear those that
    fell below it (or whose rule no longer counts, or when switched off)."""
    if not state.repeats:
        return []
    kernel = cycle.config.settings(KernelLogSettings)
    threshold = kernel.kernel_log_repeat_count
    horizon = _horizon(cycle)
    rules = {r.name: r for r in kernel.kernel_rules if r.enabled}
    devices = _RepeatDevices(cycle, touched)
    events: list[tuple[str, HealthEvent]] = []
    for key in sorted(state.repeats):
        record = state.repeats[key]
        name, _, target = key.rpartition("|")
        rule = rules.get(name)
        counting = rule is not None and _counts_repeats(rule, cycle.config)
        times = _in_window(record, counting, horizon)
        repeating = counting and len(times) >= threshold
        told = _still_told(record, cycle)
        if told is not None and not repeating:
            events.append((target, _no_longer_repeating(told, key, len(times), counting,
                                                        cycle)))
            told = None
        elif told is None and rule is not None and repeating:
            told = _told_as(rule, devices.of(key, target), cycle)
            if told is not None:
                events.append((target, _repeat_event(rule, told, target, len(times), cycle)))
        _store(state, key, record, times, told)
    return events


def _in_window(record: Repeat, counting: bool, horizon: datetime) -> tuple[datetime, ...]:
    """The times still within the window; none once the rule no longer counts."""
    return tuple(t for t in record.times if t > horizon) if counting else ()


def _still_told(record: Repeat, cycle: Cycle) -> Optional[Told]:
    """The repetition told, unless its check was switched off since: then there is nothing
    to tell it (as link flaps)."""
    told = record.told
    return None if told is not None and told.check not in cycle.enabled else told


def _store(state: KernelLogSection, key: str, record: Repeat, times: tuple[datetime, ...],
           told: Optional[Told]) -> None:
    """Keep the slid window and what is told; a key with neither is forgotten."""
    if not times and told is None:
        del state.repeats[key]
    elif (times, told) != (record.times, record.told):
        state.repeats[key] = Repeat(times, told)


class _RepeatDevices:
    """The device a repetition key names: the one a line touched this poll, else the
    monitored device of that name (the map of those built once, only when needed)."""

    def __init__(self, cycle: Cycle, touched: Mapping[str, DeviceSnapshot]) -> None:
        self.cycle = cycle
        self.touched = touched
        self.monitored: Optional[dict[str, DeviceSnapshot]] = None

    def of(self, key: str, target: str) -> Optional[DeviceSnapshot]:
        device = self.touched.get(key)
        if device is None:
            if self.monitored is None:
                self.monitored = {d.name: d for d in self.cycle.monitored}
            device = self.monitored.get(target)
        return device


def _no_longer_repeating(told: Told, key: str, lines: int, counting: bool, cycle: Cycle
                         ) -> HealthEvent:
    """The recovery of a told repetition (``key``: ``rule|device``), under the identity it
    was told with."""
    name, _, target = key.rpartition("|")
    kernel = cycle.config.settings(KernelLogSettings)
    threshold = kernel.kernel_log_repeat_count
    window = format_duration(kernel.kernel_log_repeat_window)
    why = (f"{lines} line(s) within {window} (threshold {threshold})"
           if counting else "repetition detection switched off for this rule"
           if threshold else "repetition detection switched off")
    return make_event(
        told.check, fatal=False, healthy=True, error_code=told.code, entities=told.entities,
        at=cycle.now, message=f"{target}: kernel driver fault {name} no longer repeating - {why}")


def _told_as(rule: KernelRule, device: Optional[DeviceSnapshot], cycle: Cycle
             ) -> Optional[Told]:
    """The identity a repetition that reached the count is told with; None while its device
    or layer is unknown or its check is switched off (it is told once they are)."""
    check = _degradation_check(device, cycle) if device is not None else None
    if device is None or check is None or check not in cycle.enabled:
        return None
    return Told(check, f"{rule.code}{REPEATED}", _entities(device), cycle.now)


def _entities(device: DeviceSnapshot) -> tuple[tuple[str, str], ...]:
    if device.pci_address:
        return ((ENTITY_NIC, device.name), (ENTITY_PCI, device.pci_address))
    return ((ENTITY_NIC, device.name),)


def _repeat_event(rule: KernelRule, told: Told, target: str, lines: int, cycle: Cycle
                  ) -> HealthEvent:
    kernel = cycle.config.settings(KernelLogSettings)
    window = format_duration(kernel.kernel_log_repeat_window)
    what = rule.description or rule.name
    event = make_event(
        told.check, fatal=False, healthy=False, error_code=told.code, entities=told.entities,
        at=cycle.now,
        message=f"{target}: kernel driver fault {rule.name} ({what}) repeated - {lines} lines "
                f"within {window} (threshold {kernel.kernel_log_repeat_count}) - the driver's "
                f"recovery is not holding")
    return replace(event, recommended_action="CONTACT_SUPPORT", metadata={
        "kernel_log_rule": rule.name, "kernel_log_repeats": str(lines),
        "kernel_log_repeat_window": window})


def device_fault(section: KernelLogSection, device: str) -> dict[str, Any]:
    """The ``driver_fault`` field of a device record (absent when it has none)."""
    fault = section.faults.get(device)
    if fault is None:
        return {}
    return {"driver_fault": f"{fault.rule} at {format_timestamp(fault.at)}: {fault.line}"}


FAMILY = KERNEL_LOG = KernelLog()
