"""The adapter source: the slow adapter facts (char devices, PCI NICs, firmware).

A source of the seam (:mod:`.seam`) with one fact, :data:`ADAPTER` (its types in
:mod:`.adapter_facts`), which the char-device, lost-NIC, firmware and netdev-link families
read. Every ``adapterCheckInterval`` (and at the first poll) one read gathers:

- the entries of ``<sysfs>/class/infiniband_verbs`` (``uverbsN/ibdev``) and
  ``<sysfs>/class/infiniband_mad`` (``umadN`` / ``issmN`` with ``ibdev`` and ``port``), as the
  kernel's drivers/infiniband/core/uverbs_main.c and user_mad.c create them: one listdir per
  class directory (``umad`` and ``issm`` share one); what an entry names is read once and
  cached while the set of RDMA devices stays the same (a reload may give ``uverbs0`` to
  another device); on a host with SR-IOV VFs the last answer is kept without listing while
  every device read still has all its entries (:class:`_Proof`);
- the Mellanox physical functions of ``<sysfs>/bus/pci/devices``: one listdir; ``vendor``,
  ``class`` and ``physfn`` of an address are read once (fixed while it exists), then one
  listdir of ``<function>/infiniband`` per Mellanox PF that no RDMA device of the poll's
  snapshot stands for (a registered function needs no proof);
- ``fw_ver`` of each registered device (a flash changes it at runtime);
- ``operstate`` of each port's netdev, and ``flags`` (IFF_UP) when it is down.

``fw_ver`` and ``operstate`` are kept open and re-read with pread, as the counters are: one
syscall a file instead of three, every read. They are kept in the sysfs reader's own
:class:`~.attribute.AttributeFiles` (:meth:`AdapterSource.keep_open_in`), so one open-file
budget covers every file kept open (runtime/fdplan.py), and closed as soon as the poll's
devices change.

Polls in between read nothing (no ``ADAPTER`` fact): no information, nothing judged.
Like every source it never raises on bad content: what cannot be read is None, and every
number (``port``, ``numa_node``, ``flags``) goes through :mod:`nichealthd.core.numbers` with
its kind (``--1`` in ``numa_node`` is an unknown node, logged once, not a failed read).
"""

from __future__ import annotations

import logging
import os
import time
from dataclasses import dataclass
from typing import Any, Callable, Iterable, Optional, Sequence, TypeVar

from ..core.config import Config
from ..core.model import DeviceSnapshot, Fact, HostSnapshot
from ..core.numbers import NETDEV_FLAGS, NUMA_NODE, PORT_NUMBER
from .adapter_facts import IFF_UP, AdapterFacts, CharDevices, NetdevLink, PciNic
from .attribute import AttributeFiles, read_text
from .problems import ProblemLog
from .seam import Source

log = logging.getLogger("nichealthd.adapter")
T = TypeVar("T")

# The fact of the adapter source: one read of the slow adapter facts (.adapter_facts).
ADAPTER: Fact[AdapterFacts] = Fact("adapter")

MELLANOX_VENDOR = "0x15b3"
# PCI class codes of network controllers: Ethernet, InfiniBand, other (pci_ids.h 0x0200,
# 0x0207, 0x0280); the sysfs ``class`` file reads 0xCCSSPP.
NETWORK_CLASSES = ("0x0200", "0x0207", "0x0280")


def listdir(path: str) -> Optional[list[str]]:
    try:
        return os.listdir(path)
    except OSError:
        return None


class AdapterReader:
    """Reads :class:`AdapterFacts` once per ``adapterCheckInterval``."""

    def __init__(self, config: Config, monotonic: Callable[[], float] = time.monotonic,
                 files: Optional[AttributeFiles] = None) -> None:
        self.config = config
        self._monotonic = monotonic
        self._read_at: Optional[float] = None
        # class entry (``uverbs0``, ``umad3``) -> (ibdev, port or 0); dropped whole when the
        # RDMA device names change (``_names``: those of the last poll).
        self._entries: dict[str, tuple[str, int]] = {}
        self._names: Optional[frozenset[str]] = None
        # PCI address -> (class, physfn present) of Mellanox functions; None: not one.
        self._functions: dict[str, Optional[tuple[str, bool]]] = {}
        # The last answer of each listing while its directory lists the same entries, and of
        # the PCI functions while the bus lists the same ones with the same devices registered:
        # kept only when it read nothing but what the tables above hold. On a host with
        # SR-IOV VFs (a thousand functions and devices) each answer is a loop over them all.
        self._listings: dict[tuple[str, str], tuple[list[str], list[tuple[str, int]]]] = {}
        self._nics: Optional[tuple[list[str], frozenset[str], tuple[PciNic, ...]]] = None
        self._answers: dict[str, tuple[list[tuple[str, int]], frozenset[Any]]] = {}
        self._proof: Optional[_Proof] = None
        self.reads = 0
        self.problems = ProblemLog(log)
        # fw_ver and operstate files, kept open between reads and closed when no longer read:
        # the sysfs reader's own files, so that one open-file budget covers every kept file.
        self.files = files if files is not None else AttributeFiles()
        self.kept: frozenset[str] = frozenset()
        self._used: set[str] = set()

    def reconfigure(self, config: Config) -> None:
        self.config = config
        self._read_at = None  # read at the next poll under the new config
        self._nics = None
        self.release()

    def release(self) -> None:
        """Close every kept file and list the char devices at the next read (the device set
        changed: the next read opens what it needs)."""
        self._forget(self.kept)
        self._proof = None

    def _forget(self, paths: frozenset[str]) -> None:
        """Close kept files that are read no more."""
        for path in paths:
            self.files.forget(path)
        self.kept -= paths

    def due(self) -> bool:
        now = self._monotonic()
        last = self._read_at
        return last is None or now < last or now - last >= self.config.adapter_check_interval

    def observe(self, devices: Iterable[DeviceSnapshot],
                names: Optional[frozenset[str]] = None) -> Optional[AdapterFacts]:
        """The facts, or None when the interval has not elapsed since the last read.

        ``devices``: those whose firmware, port netdevs and PCI function may be read; the
        reader leaves out the SR-IOV VFs (none of these is read for a VF: a VF's function
        is never a NIC of its own here, it has no ports). ``names``: every RDMA device's
        name, VFs included (default: ``devices``'); the same set object from one read to the
        next tells at a glance that the char-device entries still name the same devices.
        Asked every poll, it drops what it knows of the char-device entries and closes the
        kept files at once when the devices change (those of a device gone are not kept open
        until the next read).
        """
        devices = tuple(devices)
        if names is None:
            names = frozenset(d.name for d in devices)
        if names is not self._names and names != self._names:
            if self._names is not None:
                self.release()
            self._entries, self._listings, self._names = {}, {}, names
        if not self.due():
            return None
        self._read_at = self._monotonic()
        self.reads += 1
        chardevs = self._chardevs(devices, names)
        registered = frozenset(d.pci_address for d in devices if d.pci_address)
        self._used = set()
        facts = AdapterFacts(
            chardevs=chardevs,
            pci_nics=self._pci_nics(registered),
            firmware=self._firmware(devices),
            netdevs=self._netdevs(devices))
        self._forget(self.kept - self._used)  # a device or netdev gone: its files are closed
        self.kept = frozenset(self._used)
        return facts

    def _kept(self, path: str) -> Optional[str]:
        """The first line of a file read at every adapter read, kept open; None if unreadable.

        A file kept open from a device that was removed and registered again fails once
        (ENODEV): it is opened afresh at once, so the new device's value is not lost."""
        for _attempt in range(2 if path in self.files else 1):
            try:
                raw = self.files.read(path)
                break
            except OSError:
                continue
        else:
            return None
        self._used.add(path)
        return raw.decode("ascii", errors="replace").split("\n", 1)[0].strip() or None

    # ------------------------------------------------------------ char devices

    def _chardevs(self, devices: tuple[DeviceSnapshot, ...], names: frozenset[str]
                  ) -> CharDevices:
        """The char-device entries: last read's answer while it still holds (see
        :class:`_Proof`), else both class directories listed."""
        proof = self._proof
        if proof is not None and proof.holds(devices, names):
            return proof.answer
        root = self.config.sysfs_root
        verbs = os.path.join(root, "class/infiniband_verbs")
        mad = os.path.join(root, "class/infiniband_mad")
        verbs_entries = listdir(verbs)
        mad_entries = listdir(mad)  # once for both umad and issm
        answer = CharDevices(
            uverbs=self._device_entries(verbs, verbs_entries, "uverbs"),
            umad=self._port_entries(mad, mad_entries, "umad"),
            issm=self._port_entries(mad, mad_entries, "issm"))
        self._proof = None
        if len(names) > len(devices):  # a host with VFs: the listings are mostly theirs
            read = frozenset(d.name for d in devices)
            self._proof = _Proof.of(answer, devices, names, [
                os.path.join(directory, entry)
                for directory, entries in ((verbs, verbs_entries), (mad, mad_entries))
                for entry in entries or () if self._entries.get(entry, ("", 0))[0] in read])
        return answer

    def _listing(self, directory: str, entries: Optional[list[str]], prefix: str
                 ) -> Optional[list[tuple[str, int]]]:
        """(ibdev, port or 0) of the ``entries`` of ``directory`` named ``<prefix>N``."""
        if entries is None:
            return None
        last = self._listings.get((directory, prefix))
        if last is not None and last[0] == entries:
            return last[1]
        found = []
        whole = True
        for entry in entries:
            if not entry.startswith(prefix) or not entry[len(prefix):].isdecimal():
                continue  # abi_version and anything else
            known = self._entries.get(entry)
            if known is None:
                base = os.path.join(directory, entry)
                ibdev = read_text(os.path.join(base, "ibdev"))
                if ibdev is None:
                    whole = False
                    continue  # being created or removed: seen at the next read
                path = os.path.join(base, "port")
                port = self.problems.number(path, read_text(path), PORT_NUMBER) or 0
                known = self._entries[entry] = (ibdev, port)
            found.append(known)
        if whole:
            self._listings[(directory, prefix)] = (entries, found)
        return found

    def _device_entries(self, directory: str, entries: Optional[list[str]], prefix: str
                        ) -> Optional[frozenset[str]]:
        listing = self._listing(directory, entries, prefix)
        if listing is None:
            return None
        return self._answer(prefix, listing, lambda: frozenset(ibdev for ibdev, _ in listing))

    def _port_entries(self, directory: str, entries: Optional[list[str]], prefix: str
                      ) -> Optional[frozenset[tuple[str, int]]]:
        listing = self._listing(directory, entries, prefix)
        if listing is None:
            return None
        return self._answer(prefix, listing,
                            lambda: frozenset(entry for entry in listing if entry[1] > 0))

    def _answer(self, prefix: str, listing: list[tuple[str, int]],
                make: Callable[[], frozenset[T]]) -> frozenset[T]:
        """The set made of a listing, made again only when the listing is not last time's
        (the same list object: :meth:`_listing` kept it)."""
        last = self._answers.get(prefix)
        if last is not None and last[0] is listing:
            return last[1]
        answer = make()
        self._answers[prefix] = (listing, answer)
        return answer

    # ------------------------------------------------------------ PCI functions

    def _pci_nics(self, registered: frozenset[str]) -> Optional[tuple[PciNic, ...]]:
        bus = os.path.join(self.config.sysfs_root, "bus/pci/devices")
        addresses = listdir(bus)
        if addresses is None:
            return None
        last = self._nics
        if last is not None and last[0] == addresses and last[1] == registered:
            return last[2]
        present = set(addresses)
        for gone in [a for a in self._functions if a not in present]:
            del self._functions[gone]
        nics = []
        known_only = True  # every function's answer is from the tables, nothing read
        for address in sorted(addresses):
            pdir = os.path.join(bus, address)
            if address not in self._functions:
                self._functions[address] = mellanox_function(pdir)
            known = self._functions[address]
            if known is None or known[1]:
                continue  # not a Mellanox network function, or a VF
            bound = address in registered
            if not bound:
                known_only = False
                bound = bool(listdir(os.path.join(pdir, "infiniband")))
            driver = netdevs = numa = None
            if not bound:  # the details only for a function the evaluator may report
                try:
                    driver = os.path.basename(os.readlink(os.path.join(pdir, "driver")))
                except OSError:
                    driver = None
                netdevs = tuple(sorted(listdir(os.path.join(pdir, "net")) or ()))
                path = os.path.join(pdir, "numa_node")
                numa = self.problems.number(path, read_text(path), NUMA_NODE)
            nics.append(PciNic(address, known[0], bound, driver, netdevs or (), numa))
        answer = tuple(nics)
        self._nics = (addresses, registered, answer) if known_only else None
        return answer

    # ------------------------------------------------------------ firmware, netdevs

    def _firmware(self, devices: tuple[DeviceSnapshot, ...]) -> dict[str, str]:
        base = self.config.sys_class_infiniband
        firmware = {}
        for device in devices:
            if device.is_vf:
                continue
            version = self._kept(os.path.join(base, device.name, "fw_ver"))
            if version is not None:
                firmware[device.name] = version
        return firmware

    def _netdevs(self, devices: tuple[DeviceSnapshot, ...]) -> dict[str, NetdevLink]:
        base = self.config.sys_class_net
        links = {}
        for device in devices:
            for port in device.ports:
                if not port.netdev:
                    continue
                operstate = port.operstate or self._kept(
                    os.path.join(base, port.netdev, "operstate"))
                admin_up = None
                if operstate is not None and operstate != "up":
                    path = os.path.join(base, port.netdev, "flags")
                    flags = self.problems.number(path, read_text(path), NETDEV_FLAGS)
                    admin_up = None if flags is None else bool(flags & IFF_UP)
                links[port.key] = NetdevLink(port.netdev, operstate, admin_up)
        return links


class AdapterSource(Source):
    """The adapter facts of a poll (:data:`ADAPTER`) from one :class:`AdapterReader`."""

    fact = ADAPTER
    description = "the adapter facts"

    def __init__(self, config: Config, monotonic: Callable[[], float] = time.monotonic
                 ) -> None:
        super().__init__(config)
        self.reader = AdapterReader(config, monotonic)

    def keep_open_in(self, files: AttributeFiles) -> None:
        """Keep ``fw_ver`` and ``operstate`` open in the sysfs reader's files."""
        self.reader.release()
        self.reader.files = files

    def read(self, snapshot: HostSnapshot, devices: Sequence[str]) -> Optional[AdapterFacts]:
        """Of every device of the poll but the VFs of its index (none of these facts is read
        for a VF), as the sysfs reader gave them; None between reads."""
        parts = snapshot.parts
        return self.reader.observe(parts.judged, parts.names)

    def reconfigure(self, config: Config) -> None:
        super().reconfigure(config)
        self.reader.reconfigure(config)

    def close(self) -> None:
        self.reader.release()


SOURCE = AdapterSource


@dataclass(frozen=True)
class _Proof:
    """Why the last char-device answer still holds without listing, on a host with SR-IOV
    VFs, where both class directories hold an entry of each of a thousand VFs (never judged)
    beside those of the few devices read: the same RDMA device names, the same devices read
    with the same ports, each of which had all its entries (``uverbs``, and ``umad`` and
    ``issm`` per port), and each of those entries still there (one ``lstat``).

    A device read that loses an entry fails the proof, and one that lacked an entry never
    makes one: both are listed at every read, as before. A VF's entry that comes or goes is
    seen at the next read that lists. What an entry names is taken as fixed while the device
    names stay the same, as the listing's own cache of entries takes it; a rediscovery after
    a change (:meth:`AdapterReader.release`) drops the proof.
    """

    answer: CharDevices
    names: frozenset[str]
    shape: tuple[tuple[str, tuple[int, ...]], ...]  # each device read and its ports
    entries: tuple[str, ...]  # the entry directories of the devices read

    @staticmethod
    def shape_of(devices: tuple[DeviceSnapshot, ...]) -> tuple[tuple[str, tuple[int, ...]], ...]:
        return tuple((d.name, tuple(port.port for port in d.ports)) for d in devices)

    @classmethod
    def of(cls, answer: CharDevices, devices: tuple[DeviceSnapshot, ...],
           names: frozenset[str], entries: list[str]) -> Optional[_Proof]:
        """The proof of ``answer``; None when a device read lacks an entry or a class
        directory could not be listed."""
        uverbs, umad, issm = answer.uverbs, answer.umad, answer.issm
        if uverbs is None or umad is None or issm is None:
            return None
        for device in devices:
            if device.name not in uverbs or any(
                    (device.name, port.port) not in umad or (device.name, port.port) not in issm
                    for port in device.ports):
                return None
        return cls(answer, names, cls.shape_of(devices), tuple(entries))

    def holds(self, devices: tuple[DeviceSnapshot, ...], names: frozenset[str]) -> bool:
        return ((names is self.names or names == self.names)
                and self.shape_of(devices) == self.shape
                and all(os.path.lexists(entry) for entry in self.entries))


def mellanox_function(pdir: str) -> Optional[tuple[str, bool]]:
    """(class, is a VF) of a Mellanox network/InfiniBand function; None for anything else."""
    if (read_text(os.path.join(pdir, "vendor")) or "").lower() != MELLANOX_VENDOR:
        return None
    pci_class = (read_text(os.path.join(pdir, "class")) or "").lower()
    if not pci_class.startswith(NETWORK_CLASSES):
        return None
    return pci_class, os.path.lexists(os.path.join(pdir, "physfn"))
