"""Reading sysfs: device discovery and per-poll reads into an immutable :class:`HostSnapshot`.

This is the only module that touches /sys. It never raises on bad content: a missing file is
ABSENT, anything else that cannot be used is :class:`Unreadable` with a reason, logged once:
a number outside its kind (:mod:`nichealthd.core.numbers`: a counter beyond its width), a port
state without its number, an operstate the kernel does not print.

Cost matters on hosts polled every second: the attribute files are opened once and re-read
with ``pread(fd, …, 0)`` (sysfs regenerates the value on every read at offset 0), so a
steady-state counter value costs one syscall. Discovery (listing devices and ports, static
attributes, GIDs) runs only when the device list changes, when a cached file goes away, and
every ``REDISCOVER_SECONDS`` as a safety net. On a host with SR-IOV VFs the class directory
itself is listed only when something read may have changed (:meth:`SysfsReader._listing_due`),
and a VF's snapshot is its discovery's facts. Files that fail with EINVAL (restricted
functions, where each read logs a kernel error, ``mlx5_cmd_out_err ... ACCESS_REG``) are remembered
and not read again.

Open files are budgeted (:func:`fd_budget`, from the soft ``RLIMIT_NOFILE``): files beyond the
budget are read with open/read/close each poll instead of being kept open, so a host with
hundreds of devices stays monitored under a small limit, at two extra syscalls per such read.
Every attribute is opened with ``O_NONBLOCK``: a FIFO put in place of a sysfs file reads as
unreadable instead of hanging the poll.
"""

from __future__ import annotations

import errno
import functools
import logging
import os
import resource
import time
from dataclasses import dataclass, field, replace
from datetime import datetime
from types import MappingProxyType
from typing import Callable, Iterable, Mapping, Optional, Sequence, Union

from ..core.config import Config, CounterSpec
from ..core.model import (
    ABSENT,
    ADAPTER_EFA,
    EFA_VENDOR,
    CounterKind,
    CounterReading,
    DeviceIndex,
    DeviceSnapshot,
    HostSnapshot,
    PortSnapshot,
    Unreadable,
    plain_vf,
)
from ..core.numbers import (
    CARRIER,
    GID_INDEX,
    LID,
    NETDEV_PORT,
    NUMA_NODE,
    PORT_NUMBER,
    PORT_STATE,
    Kind,
    counter,
    parse,
    value,
)
from .adapter import mellanox_function
from .attribute import FD_EXHAUSTED as _FD_EXHAUSTED
from .attribute import AttributeFiles
from .attribute import read_text as _read_text
from .problems import ProblemLog
from .sandbox import sysfs_root_problem

log = logging.getLogger("nichealthd.sysfs")

REDISCOVER_SECONDS = 60.0
# A host with SR-IOV VFs lists its class directory at least this often (see _listing_due).
LIST_SECONDS = 10.0
OPERSTATES = frozenset({"unknown", "notpresent", "down", "lowerlayerdown", "testing", "dormant",
                        "up"})
GID_SCAN_LIMIT = 32
_GONE = (errno.ENOENT, errno.ENODEV, errno.ESTALE, errno.ENXIO)
# File descriptors left for everything but kept sysfs files: D-Bus, gRPC, the metrics HTTP
# server and its clients, the journal, the state and outbox files, discovery's own reads.
FD_RESERVE = 128


def fd_budget(soft_limit: Optional[int] = None) -> Optional[int]:
    """How many sysfs files may be kept open under the soft NOFILE limit (None: no limit).

    The reserve is ``FD_RESERVE`` or an eighth of the limit, whichever is larger, so a big
    limit also leaves room for many metrics clients; a limit at or below the reserve keeps
    nothing open (every read is open/read/close).
    """
    if soft_limit is None:
        soft_limit = resource.getrlimit(resource.RLIMIT_NOFILE)[0]
    if soft_limit == resource.RLIM_INFINITY or soft_limit < 0:
        return None
    return max(0, soft_limit - max(FD_RESERVE, soft_limit // 8))


# IB PMA PortCounters widths (IBTA vol. 1 §16.1.3.5): under ``counters/`` these stick at
# all-ones instead of wrapping. The others there are 64-bit extended counters.
PMA_WIDTHS = {
    "symbol_error": 16,
    "port_rcv_errors": 16,
    "port_xmit_discards": 16,
    "port_rcv_remote_physical_errors": 16,
    "port_rcv_switch_relay_errors": 16,
    "VL15_dropped": 16,
    "link_downed": 8,
    "link_error_recovery": 8,
    "port_rcv_constraint_errors": 8,
    "port_xmit_constraint_errors": 8,
    "local_link_integrity_errors": 4,
    "excessive_buffer_overrun_errors": 4,
    "port_xmit_wait": 32,
}
HW_COUNTER_WIDTH = 32  # mlx5 hw_counters are 32-bit firmware Q counters that wrap ...
# ... except these, read as 64-bit values: the congestion counters (query_cong_statistics),
# the PPCNT extended counter and the flow-counter-based op counters
# (drivers/infiniband/hw/mlx5/counters.c: cong_cnts, ext_ppcnt_cnts, *_op_cnts).
HW_COUNTERS_64 = frozenset({
    "rp_cnp_ignored", "rp_cnp_handled", "np_ecn_marked_roce_packets", "np_cnp_sent",
    "rx_icrc_encapsulated", "cc_rx_ce_pkts", "cc_rx_cnp_pkts", "cc_tx_cnp_pkts",
    "rdma_tx_packets", "rdma_tx_bytes", "rdma_rx_packets", "rdma_rx_bytes"})


@functools.lru_cache(maxsize=8192)
def counter_kind(path: str) -> CounterKind:
    """What the counter file at ``path`` is, from its directory and name (decided once, at
    discovery: the evaluator gets it as data on the snapshot)."""
    directory, name = os.path.split(path)
    parent = os.path.basename(directory)
    if parent == "counters" and name in PMA_WIDTHS:
        return CounterKind(name, PMA_WIDTHS[name], saturating=True)
    if parent == "hw_counters":
        return CounterKind(name, 64 if name in HW_COUNTERS_64 else HW_COUNTER_WIDTH)
    return CounterKind(name)


# The counters of a device whose counters are not read (not monitored): one shared empty
# mapping, so that its unchanged ports stay the same snapshots.
NOT_READ: Mapping[str, CounterReading] = MappingProxyType({})


@dataclass
class _PortPlan:
    device: str
    port: int
    directory: str
    netdev: Optional[str]
    counter_files: dict[str, str] = field(default_factory=dict)  # counter name -> path
    counter_kinds: dict[str, CounterKind] = field(default_factory=dict)  # name -> its kind
    gid_count: Optional[int] = None
    # A port's link layer is fixed while its device is registered (an IB/Ethernet change
    # re-creates the device), so it is read until known, then not again.
    link_layer: Optional[str] = None
    # Built once at discovery so a poll does no path arithmetic: the four port attributes,
    # the netdev's operstate, and (config name, path or None) in config order.
    attribute_paths: tuple[str, str, str, str] = ("", "", "", "")
    operstate_path: Optional[str] = None
    # EFA: its health is its netdev's; ``carrier`` is read beside ``operstate``.
    efa: bool = False
    carrier_path: Optional[str] = None
    # An InfiniBand port's subnet (PortSnapshot.fabric), read once each time it is seen
    # ACTIVE after another state (and again after each discovery).
    fabric: Optional[str] = None
    fabric_read: bool = False
    counter_reads: tuple[tuple[str, Optional[str]], ...] = ()
    counter_paths: tuple[str, ...] = ()  # each counter file once (two entries may share one)
    counter_numbers: tuple[Kind, ...] = ()  # the number kind of each (its width)
    # The raw bytes of the last clean read of the counter files and what they parsed to: a
    # port read again with the same bytes reuses the mapping (and the evaluator then knows
    # it is unchanged at a glance).
    last_raw: Optional[Sequence[Union[bytes, OSError, None]]] = None
    last_counters: Mapping[str, CounterReading] = field(default_factory=dict)
    # Likewise each text attribute's last clean read (path -> bytes, text), and the last
    # snapshot: a port whose files all read as before is that same (immutable) snapshot.
    last_texts: dict[str, tuple[bytes, str]] = field(default_factory=dict)
    last_snapshot: Optional[PortSnapshot] = None


@dataclass
class _DevicePlan:
    info: DeviceSnapshot
    ports: list[_PortPlan]
    last_snapshot: Optional[DeviceSnapshot] = None  # reused while its ports are the same


@dataclass(frozen=True)
class _Found:
    """What the discovery of a device's ports needs of the device: its name, its directory
    under class/infiniband and its PCI function's, the function's netdevs, its adapter, and
    an EFA's own netdev (or its ENA partner's)."""

    name: str
    base: str
    pci: str
    netdevs: tuple[str, ...]
    adapter: str
    efa_netdev: Optional[str]


class SysfsReader:
    """Discovers devices and reads one :class:`HostSnapshot` per poll."""

    def __init__(self, config: Config, files: Optional[AttributeFiles] = None,
                 problems: Optional[ProblemLog] = None,
                 monotonic: Callable[[], float] = time.monotonic) -> None:
        self.config = config
        self.files = files or AttributeFiles(budget=fd_budget())
        self.problems = problems or ProblemLog(log)
        self._monotonic = monotonic
        self._plans: list[_DevicePlan] = []
        self._names: Optional[frozenset[str]] = None
        # Made at discovery, so that a poll touches only the devices it reads: the snapshot's
        # devices with the VFs in place (:func:`~nichealthd.core.model.plain_vf`: nothing of
        # theirs is read), the plans read each poll by their place, the VFs, and what
        # follows from the plans alone.
        self._template: list[DeviceSnapshot] = []
        self._read_at: list[tuple[int, _DevicePlan]] = []
        self._vfs: tuple[DeviceSnapshot, ...] = ()
        self._efa_vfs = False
        self._complete = True
        self._addresses_seen: frozenset[Optional[str]] = frozenset()
        self._entries_read: tuple[str, ...] = ()  # the class entries of the devices read
        self._listed_at = float("-inf")  # the last listing that succeeded
        # The devices (PCI address, else name) that left and are not back, VFs aside.
        self._left: frozenset[Optional[str]] = frozenset()
        self._discovered_at = float("-inf")
        self._dirty = True
        self._boot_id: Optional[str] = None  # constant for the life of the process
        self._blind = ""  # why the sysfs root shows nothing at all (set while it cannot list)
        self.einval: set[str] = set()
        # Devices whose counters are not read (management NICs, excluded devices): the
        # monitor sets this from the roles, so no firmware query is spent on them.
        self.skip_counters: frozenset[str] = frozenset()
        # The PCI functions of the known devices (the monitor sets this from the state): a
        # poll in which one of them has no device lists the bus (HostSnapshot.pci_bus).
        self.watched_functions: frozenset[str] = frozenset()
        self._addresses: Optional[dict[str, str]] = None  # netdev -> MAC, per discovery
        # What the netdev class directory listed at the last discovery (None: it could not
        # be listed); see _discover.
        self._netdev_names: Optional[frozenset[str]] = None
        self.unreadable_reads = 0
        self.discoveries = 0
        self.listings = 0  # of the class directory
        self._fd_exhausted = False  # this poll saw EMFILE/ENFILE (logged once, not per file)
        # The files the plan polls, kept open in ``files`` (which the adapter source shares:
        # a new plan closes only the reader's own files it no longer polls).
        self._polled: frozenset[str] = frozenset()

    # ----------------------------------------------------------------- public

    def reconfigure(self, config: Config) -> None:
        """Apply a reloaded config: counters or paths may have changed, so rediscover."""
        self.config = config
        self._dirty = True

    def observe(self, now: datetime) -> HostSnapshot:
        """Read everything one poll needs. Never raises on bad sysfs content."""
        boot_id = self._boot_id or self._read_boot_id()
        names = self._list_devices() if self._listing_due() else self._names
        if names is not None and names == self._names:
            names = self._names  # the same set object: the passes' memos know it at a glance
        if names is None:
            return HostSnapshot(now, boot_id, (), complete=False, blind=self._blind)
        discovered = (self._dirty or names != self._names
                      or self._monotonic() - self._discovered_at >= REDISCOVER_SECONDS)
        if discovered:
            self._discover(names)
        self._fd_exhausted = False
        reads, transient = self.files.reads, self.files.transient_reads
        devices, index = self._read_devices(names)
        if discovered:
            self._report_budget(self.files.reads - reads, self.files.transient_reads - transient)
        if not self._fd_exhausted:
            self.problems.clear("fd-exhausted", "file descriptors are available again")
        # An empty class directory: is the hardware still there (a driver event)?
        functions = None if names else self._mellanox_functions()
        return HostSnapshot(now, boot_id, devices, complete=self._complete,
                            pci_functions=functions, pci_bus=self._bus_if_unregistered(),
                            index=index)

    def _read_devices(self, names: frozenset[str]
                      ) -> tuple[tuple[DeviceSnapshot, ...], DeviceIndex]:
        """This poll's devices, in name order, and their index: only the devices that are
        not VFs are read (a VF's snapshot is its plan's facts: no port of it is read)."""
        # Written in place, not copied: a copy of a thousand references (and its release)
        # touches every VF's snapshot twice more each poll, on caches gone cold in a second.
        devices = self._template
        judged = []
        for place, plan in self._read_at:
            devices[place] = device = self._read_device(plan)
            judged.append(device)
        return tuple(devices), DeviceIndex(names, tuple(judged), self._vfs, self._efa_vfs)

    def _bus_if_unregistered(self) -> Optional[frozenset[str]]:
        """The addresses on the PCI bus when a watched function has no device this poll (one
        directory listing, only then); None otherwise or when the bus cannot be listed."""
        watched = self.watched_functions
        if not watched or watched <= self._addresses_seen:
            return None
        entries = _listdir(os.path.join(self.config.sysfs_root, "bus/pci/devices"))
        return None if entries is None else frozenset(entries)

    def _mellanox_functions(self) -> Optional[int]:
        """Mellanox (vendor 0x15b3) network or InfiniBand functions on the PCI bus.

        Read only while the class directory lists no device: a driver unload leaves the PCI
        functions (unbound) where a failed card takes its own away. None when the bus
        directory cannot be listed (no evidence either way)."""
        bus = os.path.join(self.config.sysfs_root, "bus/pci/devices")
        entries = _listdir(bus)
        if entries is None:
            return None
        count = 0
        for entry in entries:
            if mellanox_function(os.path.join(bus, entry)) is not None:
                count += 1
        return count

    def observe_boot_id(self) -> Optional[str]:
        """The host boot ID (None when unreadable, logged once)."""
        return self._read_boot_id()

    def counter_availability(self) -> tuple[list[str], list[str]]:
        """(available, unavailable) counter names over all monitored ports, for the start log."""
        available: set[str] = set()
        wanted: set[str] = set()
        for plan in self._plans:
            if plan.info.is_vf:
                continue
            wanted.update(c.name for c in self.config.counters_of(plan.info.adapter))
            for port in plan.ports:
                available.update(port.counter_files)
        return sorted(available), sorted(wanted - available)

    def close(self) -> None:
        self.files.close()

    # ------------------------------------------------------------- discovery

    def _listing_due(self) -> bool:
        """Whether this poll lists the class directory: always, but on a host with SR-IOV VFs.

        There the listing is most of the poll (1,024 names on 8 PFs with 127 VFs each), and
        what it would tell at once is kept this way:
        - a device read each poll that is gone has no class entry (one ``lstat`` each): the
          listing and discovery are in the poll that finds it gone, as before;
        - a device that left and is not back (or a watched PCI function without a device)
          is looked for every poll, so its return is seen in the poll it comes back;
        - a listing that failed, a read that found a file gone, a reload and the periodic
          rediscovery list as ever.
        A device never seen before and a VF that comes or goes (never judged,
        link-state-detection §8) are seen within ``LIST_SECONDS``.
        """
        if not self._vfs or self._dirty or self._names is None or self._left:
            return True
        now = self._monotonic()
        if (now - self._listed_at >= LIST_SECONDS
                or now - self._discovered_at >= REDISCOVER_SECONDS):
            return True
        watched = self.watched_functions
        if watched and not watched <= self._addresses_seen:
            return True
        return not all(os.path.lexists(entry) for entry in self._entries_read)

    def _list_devices(self) -> Optional[frozenset[str]]:
        try:
            names = frozenset(os.listdir(self.config.sys_class_infiniband))
            self._listed_at = self._monotonic()
            self.listings += 1
            self.problems.clear("class", f"{self.config.sys_class_infiniband} is there: "
                                f"{len(names)} RDMA device(s) found")
            return names
        except OSError as exc:
            self._listed_at = float("-inf")
            blind = self._blind = sysfs_root_problem(self.config.sysfs_root)
            if blind:  # not a sysfs at all (a tree the service's sandbox hides): say why
                self.problems.report("class", blind)
            elif not isinstance(exc, FileNotFoundError):
                self.problems.report("class", f"cannot list {self.config.sys_class_infiniband}: "
                                     f"{exc.strerror} (holding the last known state)")
            elif not self._names:  # never saw a device: a host without RDMA, not a fault
                self.problems.report(
                    "class", f"{self.config.sys_class_infiniband} does not exist: no "
                    "InfiniBand/RoCE devices found (devices that appear later, when their "
                    "driver loads, are picked up without a restart)", logging.INFO)
            else:
                self.problems.report(
                    "class", f"{self.config.sys_class_infiniband} does not exist; no RDMA "
                    "devices are visible (holding the last known state)")
        return None

    def _discover(self, names: frozenset[str]) -> None:
        """Build the read plan again, keeping the fds of files that are still polled.

        Keeping them is safe on sysfs: a file of a device that went away (or was re-created
        under the same name) fails with ENODEV, which reopens it and makes the next poll
        discover afresh, so a re-discovery costs no close/open pair per polled file.
        """
        self.problems.clear("class")
        # The periodic safety net (nothing seen to change) only re-lists ports, netdevs and
        # counter files and re-scans RoCE GID tables. What is fixed while a device stays
        # registered (hardware facts, link layers, InfiniBand GID tables, which follow the port
        # GUID) is carried over: re-reading it costs ~100 syscalls per port.
        periodic = not self._dirty and names == self._names
        known = self._plans
        self._addresses = None
        previous = {plan.info.name: plan for plan in self._plans} if periodic else {}
        # One listing of the netdev class directory stands for the ``device/net`` listing of
        # each VF (a thousand of them on a host with SR-IOV): a netdev that is created,
        # removed, renamed or moved to another namespace changes both at once. While it lists
        # what it listed at the last discovery, a periodic one keeps the VFs as they were.
        netdev_names = _names_in(self.config.sys_class_net)
        netdevs_same = (periodic and netdev_names is not None
                        and netdev_names == self._netdev_names)
        self._plans = [self._discover_device(name, previous.get(name), netdevs_same)
                       for name in sorted(names)]
        polled = frozenset(path for plan in self._plans for port in plan.ports
                           for path in _polled_paths(port))
        self.files.forget_all(self._polled - polled)
        self._polled = polled
        self._template = [plan.info for plan in self._plans]
        self._read_at = [(place, plan) for place, plan in enumerate(self._plans)
                         if not plain_vf(plan.info)]
        vfs = tuple(plan.info for plan in self._plans if plain_vf(plan.info))
        if len(vfs) != len(self._vfs) or any(a is not b for a, b in zip(vfs, self._vfs)):
            self._vfs = vfs  # else the same tuple: the passes know the VFs unchanged
        self._efa_vfs = any(vf.is_efa for vf in self._vfs)
        self._complete = all(plan.info.ports_listed or plan.info.is_vf for plan in self._plans)
        # A device's PCI address is one of its facts: fixed from one discovery to the next.
        self._addresses_seen = frozenset(plan.info.pci_address for plan in self._plans)
        self._left = (self._left | {_identity(plan.info) for plan in known
                                    if not plain_vf(plan.info)}
                      ) - {_identity(plan.info) for plan in self._plans}
        self._entries_read = tuple(os.path.join(self.config.sys_class_infiniband, plan.info.name)
                                   for _, plan in self._read_at)
        self._names = names
        self._netdev_names = netdev_names
        self._discovered_at = self._monotonic()
        self._dirty = False
        self.discoveries += 1

    def _report_budget(self, total: int, transient: int) -> None:
        """One line when the open-file budget cannot keep every polled file open.

        Judged on the first poll after a discovery (what was really read), so the line
        changes only when the device set does.
        """
        if not transient:
            self.problems.clear("fd-budget", "every polled sysfs file is kept open again")
            return
        soft = resource.getrlimit(resource.RLIMIT_NOFILE)[0]
        self.problems.report(
            "fd-budget", f"{transient} of {total} sysfs files are read without keeping "
            f"them open (open-file limit {soft}, {self.files.budget} kept open): each such "
            "read costs "
            "an open and a close; raise the limit (LimitNOFILE= in the systemd unit, "
            "ulimit -n) to keep them all open")

    def _netdev_addresses(self) -> Mapping[str, str]:
        """Every netdev's hardware address (lower case), listed once per discovery and only
        when an EFA needs it."""
        if self._addresses is None:
            net = self.config.sys_class_net
            self._addresses = {}
            for name in _listdir(net) or ():
                address = _read_text(os.path.join(net, name, "address"))
                if address:
                    self._addresses[name] = address.lower()
        return self._addresses

    def _discover_device(self, name: str, previous: Optional[_DevicePlan] = None,
                         netdevs_same: bool = False) -> _DevicePlan:
        """A device's plan; a VF whose facts are complete is ``previous`` itself while no
        netdev changed (``netdevs_same``) or its own netdevs are the same: none of a VF's
        ports is listed or read."""
        whole = previous if previous is not None and _facts_complete(previous.info) else None
        kept = whole if whole is not None and whole.info.is_vf else None
        if kept is not None and netdevs_same:
            return kept
        base = os.path.join(self.config.sys_class_infiniband, name)
        pci = os.path.join(base, "device")
        facts = whole.info if whole is not None else _read_facts(name, base, pci, self.problems)
        netdevs = tuple(sorted(_listdir(os.path.join(pci, "net")) or ()))
        if kept is not None and netdevs == facts.netdevs:
            return kept
        # An EFA function's own netdev, else its ENA partner's; never the device's
        # netdevs (those decide the management role by the default route, and the ENA of
        # network card 0 carries it on every AWS instance).
        efa_netdev = (_efa_netdev(pci, netdevs, os.path.join(base, "ports", "1", "gids", "0"),
                                  self._netdev_addresses) if facts.is_efa else None)
        port_names = None if facts.is_vf else _listdir(os.path.join(base, "ports"))
        known = {port.port: port for port in previous.ports} if previous else {}
        found = _Found(name, base, pci, netdevs, facts.adapter, efa_netdev)
        ports = []
        for port_name in sorted(port_names or (), key=_port_sort_key):
            number = value(port_name, PORT_NUMBER)
            if number is not None:
                ports.append(self._discover_port(found, number,
                                                 os.path.join(base, "ports", port_name),
                                                 known.get(number)))
        if port_names is None and not facts.is_vf:
            self.problems.report(f"{name}:ports", f"{name}: cannot list {base}/ports; its "
                                 "ports are unknown this poll (holding their last state)")
        info = replace(facts, netdevs=netdevs,
                       ports_listed=port_names is not None or facts.is_vf)
        return _DevicePlan(info, ports)

    def _discover_port(self, found: _Found, port: int, directory: str,
                       previous: Optional[_PortPlan] = None) -> _PortPlan:
        device, adapter, device_dir = found.name, found.adapter, found.base
        efa = adapter == ADAPTER_EFA
        netdev = found.efa_netdev if efa else _netdev_for_port(found.pci, found.netdevs, port)
        if previous is not None and previous.link_layer is not None:
            link_layer: Optional[str] = previous.link_layer
        else:
            link_layer = _read_text(os.path.join(directory, "link_layer"))
        if previous is not None and link_layer == "InfiniBand":
            gid_count = previous.gid_count
        else:
            gid_count = _count_gids(directory)
        plan = _PortPlan(device, port, directory, netdev, gid_count=gid_count,
                         link_layer=link_layer, efa=efa)
        specs = self.config.counters_of(adapter)
        self._place_counters(plan, specs, device_dir)
        plan.attribute_paths = (os.path.join(directory, "state"),
                                os.path.join(directory, "phys_state"),
                                os.path.join(directory, "link_layer"),
                                os.path.join(directory, "rate"))
        if netdev:
            plan.operstate_path = os.path.join(self.config.sys_class_net, netdev, "operstate")
            if efa:
                plan.carrier_path = os.path.join(self.config.sys_class_net, netdev, "carrier")
        plan.counter_reads = tuple((spec.name, plan.counter_files.get(spec.name))
                                   for spec in specs)
        plan.counter_paths = tuple(dict.fromkeys(plan.counter_files.values()))
        widths = {path: plan.counter_kinds[name].width
                  for name, path in plan.counter_files.items()}
        plan.counter_numbers = tuple(counter(widths[path]) for path in plan.counter_paths)
        return plan

    def _place_counters(self, plan: _PortPlan, specs: Iterable[CounterSpec], device_dir: str
                        ) -> None:
        """Each configured counter's kind and, where its file exists (and did not answer
        EINVAL), its file."""
        for spec in specs:
            if plan.efa and not spec.path.startswith("/"):
                # EFA paths are relative to the device (hw_counters/ of the device, and
                # ports/{port}/hw_counters/); every value is a u64: 64-bit, never wrapping.
                path: Optional[str] = os.path.join(
                    device_dir, spec.path.replace("{port}", str(plan.port)))
            else:
                path = self._counter_path(spec, plan.directory, plan.netdev)
            if path is None:
                continue
            # What the counter is does not change while its file is briefly absent: the
            # evaluator keeps judging (and keeps the saturation record of) a known kind.
            plan.counter_kinds[spec.name] = (CounterKind(os.path.basename(path)) if plan.efa
                                             else counter_kind(path))
            if path not in self.einval and (path in self.files or os.path.exists(path)):
                plan.counter_files[spec.name] = path

    def _counter_path(self, spec: CounterSpec, port_dir: str, netdev: Optional[str]
                      ) -> Optional[str]:
        """Resolve a configured path: relative to the port, or absolute re-rooted to sysfs."""
        path = spec.path
        if not path.startswith("/"):
            return os.path.join(port_dir, path)
        if "{interface}" in path:
            if netdev is None:
                return None
            path = path.replace("{interface}", netdev)
        return self._reroot(path)

    def _reroot(self, path: str) -> str:
        for prefix, replacement in (("/sys/class/net/", self.config.sys_class_net),
                                    ("/sys/class/infiniband/",
                                     self.config.sys_class_infiniband),
                                    ("/sys/", self.config.sysfs_root)):
            if path.startswith(prefix):
                return os.path.join(replacement, path[len(prefix):])
        return path

    # ------------------------------------------------------------------ reads

    def _read_device(self, plan: _DevicePlan) -> DeviceSnapshot:
        if plan.info.is_vf:
            return plan.info
        ports = tuple(self._read_port(plan, port) for port in plan.ports)
        last = plan.last_snapshot
        if last is not None and len(last.ports) == len(ports) and all(
                a is b for a, b in zip(last.ports, ports)):
            return last
        plan.last_snapshot = plan.info.with_ports(ports)
        return plan.last_snapshot

    def _read_port(self, device: _DevicePlan, plan: _PortPlan) -> PortSnapshot:
        texts = plan.last_texts
        attribute = self._attribute
        state_path, phys_path, layer_path, rate_path = plan.attribute_paths
        state = attribute(state_path, texts, _not_a_state)
        phys_state = attribute(phys_path, texts, _not_a_state)
        link_layer = plan.link_layer
        if link_layer is None:
            link_layer = plan.link_layer = attribute(layer_path)
        rate = attribute(rate_path, texts)
        operstate = None
        carrier = None
        if plan.operstate_path and (link_layer == "Ethernet" or plan.efa):
            operstate = attribute(plan.operstate_path, texts, _not_an_operstate)
        if plan.carrier_path:
            carrier = self._carrier(plan.carrier_path)
        fabric = _port_fabric(plan, link_layer, state)
        counters = (NOT_READ if plan.device in self.skip_counters
                    else self._read_counters(plan))
        last = plan.last_snapshot
        if last is not None and last.counters is counters and (
                last.state, last.phys_state, last.link_layer, last.rate, last.operstate,
                last.carrier, last.gid_count, last.fabric) == (
                state, phys_state, link_layer, rate, operstate, carrier, plan.gid_count,
                fabric):
            return last  # netdev, paths and kinds are the plan's own: fixed with it
        plan.last_snapshot = PortSnapshot(
            device=plan.device, port=plan.port, link_layer=link_layer, state=state,
            phys_state=phys_state, rate=rate, operstate=operstate, netdev=plan.netdev,
            gid_count=plan.gid_count, counters=counters, counter_paths=plan.counter_files,
            counter_kinds=plan.counter_kinds, carrier=carrier, fabric=fabric)
        return plan.last_snapshot

    def _carrier(self, path: str) -> Optional[int]:
        """A netdev's ``carrier``: 1, 0 or None. The kernel answers EINVAL while the
        interface is administratively down (``netif_running`` false): no signal, not an
        error, so it is neither logged nor remembered (operstate says "down" then)."""
        try:
            raw = self.files.read(path)
        except OSError as exc:
            if exc.errno != errno.EINVAL:
                self._failed(path, exc)
            return None
        return self.problems.number(path, raw, CARRIER)

    def _attribute(self, path: str, texts: Optional[dict[str, tuple[bytes, str]]] = None,
                   check: Optional[Callable[[str], str]] = None) -> Optional[str]:
        """A text attribute; None (unknown) when it cannot be read, logged once.

        ``texts``: the port's last clean reads; the same bytes again are the same text (a
        read that fails or gives no text drops its entry, so a recovery is still logged).
        ``check``: why a text is not a reading of this attribute (empty when it is one): a
        port state without its number, an operstate the kernel does not print, is unknown,
        not a state to judge.
        """
        try:
            raw = self.files.read(path)
        except OSError as exc:
            if texts:
                texts.pop(path, None)
            self._failed(path, exc)
            return None
        if texts is not None:
            seen = texts.get(path)
            if seen is not None and seen[0] == raw:
                return seen[1]
        try:
            text = raw.decode("ascii").split("\n", 1)[0].strip()
        except UnicodeDecodeError:
            text = ""
        why = "empty or not text" if not text else check(text) if check else ""
        if why:
            if texts:
                texts.pop(path, None)
            self.unreadable_reads += 1
            self.problems.report(path, f"{path}: {why}; value unknown this poll")
            return None
        self.problems.clear(path)
        if texts is not None:
            texts[path] = (raw, text)
        return text

    def _read_counters(self, plan: _PortPlan) -> Mapping[str, CounterReading]:
        """Every configured counter of a port: name -> value, ABSENT or Unreadable."""
        raws: Optional[Sequence[Union[bytes, OSError, None]]] = self.files.read_open(
            plan.counter_paths)
        if raws is None:
            raws = self._read_counter_files(plan)
        if raws == plan.last_raw:
            return plan.last_counters
        values = {path: self._counter(path, raw, kind)
                  for path, raw, kind in zip(plan.counter_paths, raws, plan.counter_numbers)}
        counters = {name: ABSENT if path is None else values[path]
                    for name, path in plan.counter_reads}
        clean = all(isinstance(raw, bytes) and isinstance(values[path], int) or raw is None
                    for path, raw in zip(plan.counter_paths, raws))
        plan.last_raw = raws if clean else None
        plan.last_counters = counters
        return counters

    def _read_counter_files(self, plan: _PortPlan) -> list[Union[bytes, OSError, None]]:
        """The port's counter files one by one: None for a file remembered for EINVAL (not
        read again), the error of a read that failed."""
        raws: list[Union[bytes, OSError, None]] = []
        einval, read = self.einval, self.files.read
        for path in plan.counter_paths:
            if path in einval:
                raws.append(None)
                continue
            try:
                raws.append(read(path))
            except OSError as exc:
                raws.append(exc)  # never equal to a last read: the port is parsed afresh
        return raws

    def _counter(self, path: str, raw: Union[bytes, OSError, None], kind: Kind
                 ) -> CounterReading:
        """Parse one counter read (None: a file remembered for EINVAL, not read): a number
        of its width (:func:`~nichealthd.core.numbers.counter`), else unreadable."""
        if raw is None:
            return Unreadable("EINVAL (not read again)")
        if isinstance(raw, OSError):
            exc = raw
            if exc.errno == errno.EINVAL:
                self.einval.add(path)
                self.files.forget(path)
                self.problems.report(path, f"{path}: read fails with EINVAL (a restricted "
                                     "function); this counter will not be read again")
                return Unreadable("EINVAL")
            if exc.errno == errno.ENOENT:
                self._dirty = True
                return ABSENT
            self._failed(path, exc)
            return Unreadable(exc.strerror or str(exc))
        value = parse(raw, kind)
        if isinstance(value, Unreadable):
            self.unreadable_reads += 1
            self.problems.report(path, f"{path}: {value.reason}; counter skipped this poll")
        else:
            self.problems.clear(path)
        return value

    def _failed(self, path: str, exc: OSError) -> None:
        self.unreadable_reads += 1
        if exc.errno in _FD_EXHAUSTED:  # one line for the whole host, not one per file
            self._fd_exhausted = True
            self.problems.report("fd-exhausted", "out of file descriptors (EMFILE/ENFILE): "
                                 "some sysfs values are unknown this poll; raise the open-file "
                                 "limit (LimitNOFILE= in the systemd unit)")
            return
        if exc.errno in _GONE:
            self._dirty = True  # the device or port may be gone: rediscover next poll
        self.problems.report(path, f"{path}: {exc.strerror or exc}; value unknown this poll")

    def _read_boot_id(self) -> Optional[str]:
        text = _read_text(self.config.boot_id_path)
        if not text:
            self.problems.report("boot_id", f"cannot read the boot ID from "
                                 f"{self.config.boot_id_path}")
            return None
        self.problems.clear("boot_id")
        self._boot_id = text
        return text


def _read_facts(name: str, base: str, pci: str, problems: ProblemLog) -> DeviceSnapshot:
    """A device's hardware facts, fixed while it stays registered (ports come later)."""
    uevent = _read_text(os.path.join(pci, "uevent"), whole=True) or ""
    slot = next((line.split("=", 1)[1] for line in uevent.splitlines()
                 if line.startswith("PCI_SLOT_NAME=")), None)
    numa_path = os.path.join(pci, "numa_node")
    numa = problems.number(numa_path, _read_text(numa_path), NUMA_NODE)
    try:
        driver: Optional[str] = os.path.basename(os.readlink(os.path.join(pci, "driver")))
    except OSError:
        driver = None
    return DeviceSnapshot(
        name=name,
        hca_type=_read_text(os.path.join(base, "hca_type")),
        fw_ver=_read_text(os.path.join(base, "fw_ver")),
        board_id=_read_text(os.path.join(base, "board_id")),
        node_guid=_read_text(os.path.join(base, "node_guid")),
        pci_address=slot,
        numa_node=numa,
        driver=driver,
        vendor=_read_text(os.path.join(pci, "vendor")),
        is_vf=os.path.lexists(os.path.join(pci, "physfn")),
    )


def _not_a_state(text: str) -> str:
    """Why ``text`` is not a port ``state`` / ``phys_state`` reading: ``"<n>: <name>"``
    (``drivers/infiniband/core/sysfs.c``, ``state_show``, ``phys_state_show``)."""
    number, sep, _ = text.partition(":")
    found = parse(number, PORT_STATE) if sep else Unreadable(f"no state number: {text[:40]!r}")
    return found.reason if isinstance(found, Unreadable) else ""


def _not_an_operstate(text: str) -> str:
    """Why ``text`` is not a netdev ``operstate`` (``net/core/net-sysfs.c``, operstates[])."""
    return "" if text in OPERSTATES else f"not an operstate: {text[:40]!r}"


def _facts_complete(info: DeviceSnapshot) -> bool:
    """Whether every fact was readable (a partly unreadable device is read again)."""
    return None not in (info.hca_type, info.fw_ver, info.board_id, info.node_guid,
                        info.pci_address, info.numa_node, info.driver, info.vendor)


def _polled_paths(plan: _PortPlan) -> Iterable[str]:
    """Every file a poll reads for one port."""
    yield from plan.attribute_paths
    if plan.operstate_path:
        yield plan.operstate_path
    if plan.carrier_path:
        yield plan.carrier_path
    yield from plan.counter_files.values()


def _listdir(path: str) -> Optional[list[str]]:
    try:
        return os.listdir(path)
    except OSError:
        return None


def _names_in(path: str) -> Optional[frozenset[str]]:
    """The entries of a directory; None when it cannot be listed."""
    entries = _listdir(path)
    return None if entries is None else frozenset(entries)


def _port_sort_key(name: str) -> tuple[int, str]:
    number = value(name, PORT_NUMBER)
    return (number, "") if number is not None else (1 << 30, name)


def _identity(device: DeviceSnapshot) -> Optional[str]:
    """Which device this is across discoveries: its PCI address, else its name."""
    return device.pci_address or device.name


def _netdev_for_port(pci: str, netdevs: Iterable[str], port: int) -> Optional[str]:
    """The netdev of a port: ``dev_port`` is the 0-based port index; else the first netdev."""
    netdevs = list(netdevs)
    for name in netdevs:
        dev_port = _read_text(os.path.join(pci, "net", name, "dev_port"))
        if dev_port is not None and value(dev_port, NETDEV_PORT) == port - 1:
            return name
    return netdevs[0] if netdevs else None


def _efa_netdev(pci: str, netdevs: tuple[str, ...], gid_path: str,
                addresses: Callable[[], Mapping[str, str]]) -> Optional[str]:
    """The netdev an EFA function's health is read from.

    Its own (``device/net``) when it has one; else the one netdev of the other Amazon
    (vendor 0x1d0f) functions on its PCI bus: an "efa" interface is an ENA and an EFA
    function of one network card side by side (p4d). From p5 on every function sits on a bus
    of its own; there the partner is the one netdev whose hardware address is the source of
    the EFA's link-local GID (:func:`mac_of_link_local_gid`). None when there is no such
    partner (an "efa-only" interface) or it is ambiguous: then only the device's presence
    is watched. ``addresses``: netdev -> hardware address, listed once per discovery.
    """
    if netdevs:
        return netdevs[0]
    found = _bus_partner_netdevs(pci)
    if found:
        return found[0] if len(found) == 1 else None
    mac = mac_of_link_local_gid(_read_text(gid_path) or "")
    if mac is None:
        return None
    owners = [name for name, address in addresses().items() if address == mac]
    return owners[0] if len(owners) == 1 else None


def _bus_partner_netdevs(pci: str) -> list[str]:
    """The netdevs of the other Amazon functions on the PCI bus of ``pci`` (p4d: the ENA
    beside its EFA)."""
    real = os.path.realpath(pci)
    own = os.path.basename(real)
    bus = own.rsplit(":", 1)[0] + ":"
    parent = os.path.dirname(real)
    found: list[str] = []
    for sibling in _listdir(parent) or ():
        if sibling == own or not sibling.startswith(bus):
            continue
        sdir = os.path.join(parent, sibling)
        if (_read_text(os.path.join(sdir, "vendor")) or "").lower() != EFA_VENDOR:
            continue
        found.extend(_listdir(os.path.join(sdir, "net")) or ())
    return found


def mac_of_link_local_gid(gid: str) -> Optional[str]:
    """The MAC a link-local GID's modified EUI-64 interface identifier was made from
    (``fe80::14b0:33ff:fef8:77cd`` -> ``16:b0:33:f8:77:cd``, RFC 4291 appendix A); None for
    any other GID. An EFA's GID 0 has this form, the one real p5 GID at hand shows; a MAC
    matches exactly or not at all, so a pairing by it cannot be wrong by chance."""
    groups = gid.strip().lower().split(":")
    if len(groups) != 8 or groups[:4] != ["fe80", "0000", "0000", "0000"]:
        return None
    try:
        iid = bytes.fromhex("".join(groups[4:]))
    except ValueError:
        return None
    if len(iid) != 8 or iid[3:5] != b"\xff\xfe":
        return None
    octets = [iid[0] ^ 0x02, *iid[1:3], *iid[5:]]
    return ":".join(f"{octet:02x}" for octet in octets)


def _port_fabric(plan: _PortPlan, link_layer: Optional[str], state: Optional[str]
                 ) -> Optional[str]:
    """The fabric of an ACTIVE InfiniBand port, read once per stretch of ACTIVE (a port that
    leaves ACTIVE reads it again when it is back); None for any other port."""
    if link_layer == "InfiniBand" and state is not None and state.startswith("4:"):
        if not plan.fabric_read:
            plan.fabric, plan.fabric_read = _fabric_of(plan.directory), True
        return plan.fabric
    plan.fabric_read = False
    return None


def _fabric_of(port_dir: str) -> Optional[str]:
    """``<GID prefix>/<SM LID>`` of an ACTIVE InfiniBand port (``fe80:0000:0000:0000/0x1``):
    the subnet prefix is GID 0's upper 64 bits (``gids/0``, printed ``%pI6``), the SM LID is
    ``sm_lid`` (``0x%x``, kernel drivers/infiniband/core/sysfs.c). None when either cannot
    be read or the port has no SM (LID 0)."""
    gid = (_read_text(os.path.join(port_dir, "gids", "0")) or "").split(":")
    lid = _read_text(os.path.join(port_dir, "sm_lid")) or ""
    sm_lid = value(lid, LID) if lid.lower().startswith("0x") else 0
    if sm_lid is None or len(gid) != 8 or not 0 < sm_lid < 0xFFFF:
        return None
    return f"{':'.join(gid[:4]).lower()}/0x{sm_lid:x}"


def _count_gids(port_dir: str) -> Optional[int]:
    """Non-zero GIDs among the first entries of ``gids/`` (an empty table breaks RoCE)."""
    names = _listdir(os.path.join(port_dir, "gids"))
    if names is None:
        return None
    count = 0
    numbered = ((value(n, GID_INDEX), n) for n in names)
    for _, name in sorted((i, n) for i, n in numbered if i is not None)[:GID_SCAN_LIMIT]:
        gid = _read_text(os.path.join(port_dir, "gids", name)) or ""
        if gid.replace("0", "").replace(":", ""):
            count += 1
    return count
