"""The PCI source: the slow PCI facts of the monitored NICs, PCIe link hops, AER tables, sensors.

A source of the seam (:mod:`.seam`) with three facts (:data:`PCIE`, :data:`AER`,
:data:`HWMON`, typed by :mod:`.pci_facts`) that share one plan of paths, each read by the
monitor only in a poll in which a family judging it is due
(:func:`nichealthd.core.evaluate.due_reads`), never every poll, inside its own boundary.
What to read is planned once per device and PCI function (a device that comes back at
another address is planned again):
its resolved path ``/sys/devices/pciDDDD:BB/<root port>/…/<function>`` (as
:mod:`nichealthd.sources.pci` resolves it for the topology) gives the functions on the way up.
The links are paired from the bottom: the NIC and the port above it, then the switch upstream
port above that port and *its* parent, and so on (PCIe alternates root/downstream ports with
upstream ports or endpoints; a switch's upstream-to-downstream step is internal, no link).
Each link file is read with open/read/close (three syscalls) every pcieLinkInterval: a few
hundred on a big host, their paths joined once per directory.
The AER files (the NIC function's and the port's above it, and the root port's
``aer_rootport_total_err_*`` at the top of the path) stay open and are re-read with pread; a
root port above several NICs is read once per poll.
Like every source it never raises on bad content: an unreadable value is None (not judged).
Every number goes through :mod:`nichealthd.core.numbers` with its kind: a width outside the
PCIe set, an AER total beyond 64 bits or one that rose faster than the kernel can count
(:data:`~nichealthd.core.numbers.AER_MAX_PER_SECOND`) is unreadable, logged once per file.
"""

from __future__ import annotations

import logging
import os
from dataclasses import dataclass, replace
from typing import Any, Callable, Iterable, Mapping, Optional, Sequence

from ..core.config import Config
from ..core.model import DeviceSnapshot, Fact, HostSnapshot
from ..core.numbers import AER_TOTAL, PCIE_WIDTH, Number, RateGate, Unreadable, boottime, parse
from .attribute import AttributeFiles
from .hwmon import HwmonReader
from .pci_facts import (
    AER_FILES,
    ROOTPORT_FILES,
    AerTable,
    LinkEnd,
    PcieHop,
    Sensor,
    parse_aer_total,
    parse_speed,
)
from .problems import ProblemLog
from .seam import Source

log = logging.getLogger("nichealthd.pcie")

# The facts of the PCI source, each by the device name of a monitored physical function; their
# value types are in .pci_facts, which the snapshot's own pcie/aer/hwmon fields use too.
PCIE: Fact[Mapping[str, tuple[PcieHop, ...]]] = Fact("pcie")  # every hop up to its root port
AER: Fact[Mapping[str, tuple[AerTable, ...]]] = Fact("aer")  # its, its port's, its root's
HWMON: Fact[Mapping[str, tuple[Sensor, ...]]] = Fact("hwmon")  # its temperature sensors

_OPEN_FLAGS = os.O_RDONLY | os.O_CLOEXEC | os.O_NONBLOCK
_READ_SIZE = 4096
# AER tables are read every 10 s: kept open and re-read with pread (one syscall instead of
# three); at most this many stay open, the rest are opened for each read.
AER_KEPT_OPEN = 256


def read_text(path: str) -> Optional[str]:
    """A small file's whole text; None when it cannot be read (absent, I/O error)."""
    try:
        fd = os.open(path, _OPEN_FLAGS)
        try:
            raw = os.read(fd, _READ_SIZE)
        finally:
            os.close(fd)
    except OSError:
        return None
    return raw.decode("ascii", errors="replace")


def is_bdf(name: str) -> bool:
    """``0000:17:01.0``."""
    parts = name.split(":")
    return (len(parts) == 3 and len(parts[0]) == 4 and len(parts[1]) == 2
            and "." in parts[2] and all(c in "0123456789abcdef.:" for c in name.lower()))


@dataclass(frozen=True)
class FunctionPath:
    """The PCI functions from the root port down to a NIC function: (address, directory)."""

    chain: tuple[tuple[str, str], ...]

    def hops(self) -> tuple[tuple[tuple[str, str], tuple[str, str]], ...]:
        """(upstream, downstream) of every link, from the NIC up (see the module doc)."""
        out = []
        index = len(self.chain) - 1
        while index >= 1:
            out.append((self.chain[index - 1], self.chain[index]))
            index -= 2
        return tuple(out)


def function_path(sysfs_root: str, link: str) -> Optional[FunctionPath]:
    """The chain of functions above and including the function ``link`` resolves to."""
    devices = os.path.realpath(os.path.join(sysfs_root, "devices"))
    real = os.path.realpath(link)
    relative = os.path.relpath(real, devices)
    if relative == "." or relative.startswith(".."):
        return None
    chain = []
    here = devices
    for part in relative.split(os.sep):
        here = os.path.join(here, part)
        if is_bdf(part):
            chain.append((part, here))
    return FunctionPath(tuple(chain)) if chain else None


class PciFactsReader:
    """Reads the requested slow parts for the monitored devices of a snapshot."""

    def __init__(self, sysfs_root: str, class_infiniband: str,
                 hwmon: Optional[HwmonReader] = None,
                 clock: Callable[[], float] = boottime) -> None:
        self.sysfs_root = sysfs_root
        self.class_infiniband = class_infiniband
        self.hwmon = hwmon or HwmonReader()
        self.problems = ProblemLog(log)
        self.rates = RateGate(clock)  # each AER total held to what the kernel can count
        self._paths: dict[tuple[str, str], Optional[FunctionPath]] = {}
        self.aer_files = AttributeFiles(preader=lambda fd, _size, offset: os.pread(
            fd, _READ_SIZE, offset), budget=AER_KEPT_OPEN)
        self.reads = 0  # files read (the bench reports it)
        # Each AER file's last content and what it parsed to: an unchanged table (the steady
        # state) is not decoded and parsed again every pcieAerInterval.
        self._aer_last: dict[str, tuple[bytes, Number]] = {}
        # The paths of the files read in each function's directory, joined once: a big host
        # reads hundreds every pcieAerInterval.
        self._files: dict[tuple[str, tuple[str, ...]], tuple[str, ...]] = {}

    def reconfigure(self, sysfs_root: str, class_infiniband: str) -> None:
        if (sysfs_root, class_infiniband) != (self.sysfs_root, self.class_infiniband):
            self.sysfs_root, self.class_infiniband = sysfs_root, class_infiniband
            self._paths.clear()
            self.hwmon.forget()
            self.aer_files.close()
            self._aer_last.clear()
            self._files.clear()
            self.rates.retain(set())

    def close(self) -> None:
        self.aer_files.close()

    def read(self, snapshot: HostSnapshot, parts: frozenset[str],
             devices: Iterable[str]) -> HostSnapshot:
        """``snapshot`` with the requested parts of the named devices in its fields of the
        same name (as a table test builds them; the monitor reads each part into ``facts``)."""
        wanted = tuple(devices)
        if PCIE in parts:
            snapshot = replace(snapshot, pcie=self.links(snapshot, wanted))
        if AER in parts:
            snapshot = replace(snapshot, aer=self.aer_tables(snapshot, wanted))
        if HWMON in parts:
            snapshot = replace(snapshot, hwmon=self.sensors(snapshot, wanted))
        return snapshot

    def links(self, snapshot: HostSnapshot, devices: Iterable[str]
              ) -> dict[str, tuple[PcieHop, ...]]:
        """Fact :data:`PCIE` of the named devices."""
        return {name: self._hops(path) for name, path in self._found(snapshot, devices).items()}

    def aer_tables(self, snapshot: HostSnapshot, devices: Iterable[str]
                   ) -> dict[str, tuple[AerTable, ...]]:
        """Fact :data:`AER` of the named devices."""
        found = self._found(snapshot, devices)
        rootports: dict[str, Optional[AerTable]] = {}  # read once per poll
        now = self.rates.clock()  # the rate of every total is judged at one time
        return {name: self._aer(path, rootports, now) for name, path in found.items()}

    def sensors(self, snapshot: HostSnapshot, devices: Iterable[str]
                ) -> dict[str, tuple[Sensor, ...]]:
        """Fact :data:`HWMON` of the named devices."""
        return {name: self.hwmon.sensors(path.chain[-1][1])
                for name, path in self._found(snapshot, devices).items()}

    def _found(self, snapshot: HostSnapshot, devices: Iterable[str]
               ) -> dict[str, FunctionPath]:
        """The path of each named physical function that has one."""
        wanted = frozenset(devices)
        chosen = [d for d in snapshot.devices if d.name in wanted and not d.is_vf]
        paths = {d.name: self._path(d) for d in chosen}
        self._forget_gone(chosen)
        return {name: path for name, path in paths.items() if path is not None}

    def _forget_gone(self, chosen: list[DeviceSnapshot]) -> None:
        """A device that went away (or moved): forget its path and close its AER files."""
        present = {(d.name, d.pci_address or "") for d in chosen}
        kept = {k: v for k, v in self._paths.items() if k in present}
        if len(kept) == len(self._paths):
            return
        self._paths = kept
        keep = set(_aer_paths(p for p in kept.values() if p))
        self.aer_files.retain(keep)
        self._aer_last = {k: v for k, v in self._aer_last.items() if k in keep}
        self.rates.retain(keep)
        self._files = {}

    def _path(self, device: DeviceSnapshot) -> Optional[FunctionPath]:
        key = (device.name, device.pci_address or "")
        if key not in self._paths:
            link = os.path.join(self.class_infiniband, device.name, "device")
            self._paths[key] = function_path(self.sysfs_root, link)
        return self._paths[key]

    def _paths_in(self, directory: str, names: tuple[str, ...]) -> tuple[str, ...]:
        """``names`` joined to ``directory``, once per directory and set of names."""
        key = (directory, names)
        paths = self._files.get(key)
        if paths is None:
            paths = self._files[key] = tuple(os.path.join(directory, n) for n in names)
        return paths

    def _line(self, path: str) -> Optional[str]:
        self.reads += 1
        text = read_text(path)
        return text.split("\n", 1)[0] if text is not None else None

    def _speed(self, path: str) -> Optional[float]:
        text = self._line(path)
        value = parse_speed(text)
        if value is None and text is not None and text.strip() != "Unknown":
            self.problems.report(path, f"{path}: not a PCIe link speed: {text[:40]!r}; "
                                 "taken as unreadable")
        elif value is not None:
            self.problems.clear(path)
        return value

    def _width(self, path: str) -> Optional[int]:  # 0: the link is down, no width
        return self.problems.number(path, self._line(path), PCIE_WIDTH) or None

    def _end(self, address: str, directory: str, current: bool) -> LinkEnd:
        if current:
            speed, width, max_speed, max_width = self._paths_in(directory, _LINK_FILES)
            return LinkEnd(address, self._speed(speed), self._width(width),
                           self._speed(max_speed), self._width(max_width))
        max_speed, max_width = self._paths_in(directory, _MAX_LINK_FILES)
        return LinkEnd(address, max_speed=self._speed(max_speed),
                       max_width=self._width(max_width))

    def _hops(self, path: FunctionPath) -> tuple[PcieHop, ...]:
        return tuple(PcieHop(self._end(*up, current=False), self._end(*down, current=True))
                     for up, down in path.hops())

    def _aer(self, path: FunctionPath, rootports: dict[str, Optional[AerTable]], now: float
             ) -> tuple[AerTable, ...]:
        tables = [self._aer_table(*path.chain[-1], upstream=False, now=now)]
        if len(path.chain) >= 2:
            tables.append(self._aer_table(*path.chain[-2], upstream=True, now=now))
            address, directory = path.chain[0]
            if address not in rootports:
                rootports[address] = self._rootport_table(address, directory, now)
            table = rootports[address]
            if table is not None:
                tables.append(table)
        return tuple(t for t in tables if t.totals or t.unreadable)

    def _rootport_table(self, address: str, directory: str, now: float
                        ) -> Optional[AerTable]:
        """The ``aer_rootport_total_err_*`` of the function at the top of the path; None
        where it has none (not a root port, no AER: a VM, a function on the root bus)."""
        totals, unreadable = self._totals(directory, _ROOTPORT_NAMES, _ONE_NUMBER, now)
        if not totals and not unreadable:
            return None
        return AerTable(address, totals, unreadable, rootport=True)

    def _count(self, path: str, total: Optional[str], now: float) -> Optional[int]:
        """The count of one AER file: its ``total`` line (an ``aer_dev_*`` table) or its one
        number (None: an ``aer_rootport_total_*`` file), held to the kind of an AER total;
        None when it is not one (logged once). Raises the read's OSError."""
        raw = self.aer_files.read(path)
        last = self._aer_last.get(path)
        if last is not None and last[0] == raw:
            number = last[1]
        else:
            text = raw.decode("ascii", errors="replace")
            number = parse(text, AER_TOTAL) if total is None else parse_aer_total(text, total)
            self._aer_last[path] = (raw, number)
        if not isinstance(number, Unreadable):
            number = self.rates.check(path, number, AER_TOTAL, now)
        if isinstance(number, Unreadable):
            self.problems.report(path, f"{path}: {number.reason}; taken as unreadable")
            return None
        self.problems.clear(path)
        return number

    def _aer_table(self, address: str, directory: str, upstream: bool, now: float
                   ) -> AerTable:
        totals, unreadable = self._totals(directory, _AER_NAMES, _AER_TOTAL_LINES, now)
        return AerTable(address, totals, unreadable, upstream)

    def _totals(self, directory: str, names: tuple[str, ...],
                lines: tuple[Optional[str], ...], now: float
                ) -> tuple[dict[str, int], tuple[str, ...]]:
        """The counts of the AER files ``names`` in ``directory`` (each read by its total
        line in ``lines``, None: a file of one number), and the names of those that hold no
        AER total. A file that cannot be read is neither: no AER capability here (a VM, a
        port without it)."""
        totals: dict[str, int] = {}
        unreadable = []
        for name, line, path in zip(names, lines, self._paths_in(directory, names)):
            self.reads += 1
            try:
                value = self._count(path, line, now)
            except OSError:
                continue
            if value is None:
                unreadable.append(name)
            else:
                totals[name] = value
        return totals, tuple(unreadable)


_LINK_FILES = ("current_link_speed", "current_link_width", "max_link_speed", "max_link_width")
_MAX_LINK_FILES = _LINK_FILES[2:]  # the upstream end of a link: its capability only
_AER_NAMES = tuple(name for name, _ in AER_FILES)
_AER_TOTAL_LINES: tuple[Optional[str], ...] = tuple(line for _, line in AER_FILES)
_ROOTPORT_NAMES = tuple(name for name, _ in ROOTPORT_FILES)
_ONE_NUMBER: tuple[Optional[str], ...] = (None,) * len(ROOTPORT_FILES)  # no total line


def _aer_paths(paths: Iterable[FunctionPath]) -> Iterable[str]:
    """Every AER file the reader may keep open for ``paths``."""
    for path in paths:
        for _, directory in path.chain[-2:]:
            for name, _ in AER_FILES:
                yield os.path.join(directory, name)
        if len(path.chain) >= 2:
            for name, _ in ROOTPORT_FILES:
                yield os.path.join(path.chain[0][1], name)


class PciSource(Source):
    """The seam's reader of the PCI facts: one :class:`PciFactsReader`, so the three facts
    share its plan of paths, its kept-open AER tables (their share of the open-file limit)
    and its hwmon channels."""

    fact = PCIE
    description = "the PCIe links"
    facts = {PCIE: description, AER: "the AER tables", HWMON: "the NIC temperature sensors"}

    def __init__(self, config: Config) -> None:
        super().__init__(config)
        self.reader = PciFactsReader(config.sysfs_root, config.sys_class_infiniband)

    def read(self, snapshot: HostSnapshot, devices: Sequence[str]) -> Any:
        return self.reader.links(snapshot, devices)

    def read_fact(self, key: str, snapshot: HostSnapshot, devices: Sequence[str]) -> Any:
        reads: Mapping[str, Callable[[HostSnapshot, Iterable[str]], Any]] = {
            PCIE: self.reader.links, AER: self.reader.aer_tables, HWMON: self.reader.sensors}
        return reads[key](snapshot, devices)

    def reconfigure(self, config: Config) -> None:
        super().reconfigure(config)
        self.reader.reconfigure(config.sysfs_root, config.sys_class_infiniband)

    def close(self) -> None:
        self.reader.close()


SOURCE = PciSource
