"""Immutable observations of the host: what one poll saw, with explicit "unknown" markers.

The reader never guesses: a value it could not read is :data:`ABSENT` (no such file — the
counter does not exist here) or an :class:`Unreadable` (the file exists but gave no usable
value this time). The evaluator treats both as "no information", never as 0 or DOWN.
"""

from __future__ import annotations

import functools
from dataclasses import dataclass, field
from datetime import datetime
from typing import TYPE_CHECKING, Any, Generic, Mapping, Optional, TypeVar, Union, cast

if TYPE_CHECKING:  # pragma: no cover
    from typing import TypeGuard  # 3.10; only read by the type checker

from ..sources.adapter_facts import AdapterFacts
from ..sources.pci_facts import AerTable, PcieHop, Sensor
from .numbers import Unreadable as Unreadable  # the marker of every reader

T = TypeVar("T")


class Fact(str, Generic[T]):
    """The key of one kind of fact and the type of its value: ``Fact[Mapping[str, PhyReading]]``.

    The module of the source that reads a fact owns its key and types (``PHY`` of
    :mod:`nichealthd.sources.phy`): the source declares it as its ``fact``, the
    families that need it put it in ``reads`` and get its value, typed, with
    :meth:`HostSnapshot.fact`. The name is written once, in that module; being a ``str`` it is
    also the fact's name in ``reads``, in ``HostSnapshot.unread`` and in the log.
    """

    __slots__ = ()


class _Absent:
    """Marker: the attribute file does not exist."""

    _instance: Optional[_Absent] = None

    def __new__(cls) -> _Absent:
        if cls._instance is None:
            cls._instance = super().__new__(cls)
        return cls._instance

    def __repr__(self) -> str:
        return "ABSENT"

    def __bool__(self) -> bool:
        return False


ABSENT = _Absent()


CounterReading = Union[int, _Absent, Unreadable]


@dataclass(frozen=True)
class CounterKind:
    """What a counter file is, decided by the reader from where it lives (the kernel's
    drivers/infiniband/core/sysfs.c).

    The evaluator judges wraps and saturation from this and never looks at a path: an IB PMA
    counter under ``counters/`` is narrow and *saturating* (it sticks at all-ones), a
    ``hw_counters/`` value is a 32-bit *wrapping* counter, anything else is taken as 64-bit
    (a decrease is a reset).
    """

    file: str  # the file's own name: two config entries reading one file share it
    width: int = 64  # bits of the hardware counter
    saturating: bool = False  # stops at 2^width-1 instead of wrapping to 0

    @property
    def limit(self) -> Optional[int]:
        """The value a saturating counter sticks at; None for one that wraps."""
        return (1 << self.width) - 1 if self.saturating else None

    @property
    def modulus(self) -> Optional[int]:
        """2^width of a counter that wraps inside the value range (narrower than 64 bits)."""
        return 1 << self.width if not self.saturating and self.width < 64 else None


def is_value(reading: object) -> TypeGuard[int]:
    """True for a real counter value (bool is excluded on purpose)."""
    return isinstance(reading, int) and not isinstance(reading, bool)


ADAPTER_MLX5 = "mlx5"
ADAPTER_EFA = "efa"
EFA_VENDOR = "0x1d0f"  # Amazon.com (pci.ids)


@dataclass(frozen=True)
class PortSnapshot:
    """One port as seen in one poll. ``state``/``phys_state`` keep the raw sysfs text."""

    device: str
    port: int
    link_layer: Optional[str]
    state: Optional[str]
    phys_state: Optional[str]
    rate: Optional[str] = None
    operstate: Optional[str] = None
    netdev: Optional[str] = None
    gid_count: Optional[int] = None
    counters: Mapping[str, CounterReading] = field(default_factory=dict)
    counter_paths: Mapping[str, str] = field(default_factory=dict)
    # What each counter read is (config name -> kind); a counter without one is 64-bit.
    counter_kinds: Mapping[str, CounterKind] = field(default_factory=dict)
    # The netdev's ``carrier`` (EFA): 1, 0, or None (not read, unreadable, or EINVAL
    # on an administratively down interface: no signal).
    carrier: Optional[int] = None
    # The InfiniBand subnet an ACTIVE port is on: its GID prefix and its subnet manager's LID
    # (``fe80:0000:0000:0000/0x1``), read when the port became ACTIVE (the SM had just
    # configured it); None otherwise (not ACTIVE, RoCE, unreadable).
    fabric: Optional[str] = None

    @functools.cached_property  # asked several times per port per poll (frozen: stays right)
    def key(self) -> str:
        """The port-state key of the persisted state (link-counter-detection §6.6): ``mlx5_0_1``."""
        return f"{self.device}_{self.port}"

    @functools.cached_property
    def readable(self) -> bool:
        """State, physical state and link layer were all read: health can be judged."""
        return None not in (self.state, self.phys_state, self.link_layer)


@dataclass(frozen=True)
class DeviceSnapshot:
    """One RDMA device (``/sys/class/infiniband/<name>``) with its PCI facts."""

    name: str
    hca_type: Optional[str] = None
    fw_ver: Optional[str] = None
    board_id: Optional[str] = None
    node_guid: Optional[str] = None
    pci_address: Optional[str] = None
    numa_node: Optional[int] = None
    driver: Optional[str] = None
    vendor: Optional[str] = None
    netdevs: tuple[str, ...] = ()
    is_vf: bool = False
    ports: tuple[PortSnapshot, ...] = ()
    ports_listed: bool = True

    def with_ports(self, ports: tuple[PortSnapshot, ...]) -> DeviceSnapshot:
        """This device with this poll's ports: what every poll makes of every device.

        ``dataclasses.replace`` re-validates every field (3 µs); a copy of the instance
        dict is a fifth of that, and stays right when a field is added (no ``__slots__``).
        It copies the cached properties too: none of them depends on the ports (the
        ``link_layer`` that does is a plain property).
        """
        made = object.__new__(DeviceSnapshot)
        made.__dict__.update(self.__dict__)
        object.__setattr__(made, "ports", ports)
        return made

    @functools.cached_property
    def card(self) -> Optional[str]:
        """The physical card: PCI domain:bus:device without the function (``0000:47:00``)."""
        if not self.pci_address or "." not in self.pci_address:
            return self.pci_address
        return self.pci_address.rsplit(".", 1)[0]

    @functools.cached_property
    def is_mellanox(self) -> bool:
        """link-state-detection §5.3 and the PCI vendor id: ``mlx5_*``, ``mlx5_core`` or 0x15b3."""
        return (self.name.startswith("mlx5_") or self.driver == "mlx5_core"
                or (self.vendor or "").lower() == "0x15b3")

    @functools.cached_property
    def is_efa(self) -> bool:
        """An AWS Elastic Fabric Adapter: driver ``efa``, else PCI vendor 0x1d0f
        (Amazon; its ENA network functions have no RDMA device, so under
        ``/sys/class/infiniband`` the vendor alone names an EFA)."""
        if self.driver is not None:
            return self.driver == "efa"
        return (self.vendor or "").lower() == EFA_VENDOR

    @functools.cached_property
    def adapter(self) -> str:
        """The adapter family: ``mlx5``, ``efa`` or ``""`` (neither: unsupported)."""
        if self.is_efa:
            return ADAPTER_EFA
        return ADAPTER_MLX5 if self.is_mellanox else ""

    @property
    def link_layer(self) -> Optional[str]:
        """The first readable port's link layer (devices are single-layer in practice)."""
        for port in self.ports:
            if port.link_layer:
                return port.link_layer
        return None


@dataclass(frozen=True)
class DeviceIndex:
    """A poll's devices split for the passes that look at every device each poll.

    An SR-IOV VF whose NUMA node was read has the VF role whatever the topology, the filters
    or its last role (:func:`~nichealthd.core.topology.classify`, link-state-detection §8: never
    judged), so a pass that skips VFs need not look at it. On a host of 8 PFs with 127 VFs each that
    is 1,016 of 1,024 devices. The reader gives one index per poll whose ``vfs`` is the same
    tuple while discovery has not changed them: a pass that remembers what it made of the VFs
    knows them unchanged at a glance (``is``).
    """

    names: frozenset[str]  # every device's name
    judged: tuple[DeviceSnapshot, ...]  # every device but ``vfs``, in the snapshot's order
    vfs: tuple[DeviceSnapshot, ...]  # the VFs with a readable NUMA node
    efa_vfs: bool = False  # one of ``vfs`` is an EFA

    @classmethod
    def of(cls, devices: tuple[DeviceSnapshot, ...]) -> DeviceIndex:
        """The index of ``devices`` (one pass: snapshots not made by the reader)."""
        judged: list[DeviceSnapshot] = []
        vfs: list[DeviceSnapshot] = []
        for device in devices:
            (vfs if plain_vf(device) else judged).append(device)
        return cls(frozenset(d.name for d in devices), tuple(judged), tuple(vfs),
                   any(d.is_efa for d in vfs))

    @property
    def any_efa(self) -> bool:
        """One of the devices is an EFA."""
        return self.efa_vfs or any(d.is_efa for d in self.judged)


def plain_vf(device: DeviceSnapshot) -> bool:
    """An SR-IOV VF that keeps the VF role whatever else (see :class:`DeviceIndex`)."""
    return device.is_vf and device.numa_node is not None


@dataclass(frozen=True)
class KernelLine:
    """One kernel log message read this poll: its text and when the kernel logged it."""

    text: str
    at: datetime


# The facts a snapshot also has a field of the same name for, in which a table test builds
# them (the PCI source's, sources/pcie.py, and the adapter source's, sources/adapter.py).
FIELD_FACTS = frozenset({"pcie", "aer", "hwmon", "adapter"})


@dataclass(frozen=True)
class HostSnapshot:
    """Everything one poll observed. ``complete`` is False when enumeration was uncertain."""

    taken_at: datetime
    boot_id: Optional[str]
    devices: tuple[DeviceSnapshot, ...]
    complete: bool = True
    # Mellanox network/InfiniBand functions on the PCI bus, counted only when the class
    # directory lists no device (None: not looked): the hardware is there, the driver is not.
    pci_functions: Optional[int] = None
    # The PCI addresses listed under bus/pci/devices, read only in a poll in which a known
    # device's function has no device in the class directory (None: not listed, or not
    # listable): is the hardware still there (a driver event) or did it leave the bus?
    pci_bus: Optional[frozenset[str]] = None
    # The PCI source's facts (sources/pcie.py) as a table test builds them: the monitor
    # puts what the source reads in ``facts``, and :meth:`fact` falls back to these fields.
    pcie: Optional[Mapping[str, tuple[PcieHop, ...]]] = None
    aer: Optional[Mapping[str, tuple[AerTable, ...]]] = None
    hwmon: Optional[Mapping[str, tuple[Sensor, ...]]] = None
    # The adapter source's fact (sources/adapter.py) as a table test builds it; the monitor
    # puts what the source reads in ``facts`` (:meth:`fact` falls back to this field).
    adapter: Optional[AdapterFacts] = None
    # Kernel log lines, oldest first, and the position after them (None: keep it) as a table
    # test builds them: the monitor puts the kernel-log source's batch in ``facts``
    # (sources/kernel_log_facts.py, whose ``batch_of`` falls back to these fields).
    kernel_lines: tuple[KernelLine, ...] = ()
    kernel_cursor: Optional[str] = None
    # Why this poll could see nothing at all ("" normally): the configured sysfs root is not a
    # sysfs (no class directory; e.g. a tree the service's sandbox hides). Not a host without
    # devices: the health model makes it a host-wide degradation.
    blind: str = ""
    # The parts (family.READS_*, fact keys) whose source failed this poll -> why: the families
    # that read them are not judged (core/evaluate.py), and the surfaces show them as unknown.
    unread: Mapping[str, str] = field(default_factory=dict)
    # The facts of the sources on the Source seam (sources/seam.py), by their :class:`Fact`
    # key, read only in a poll in which a family needing them is due (absent: not read this
    # poll). Families read them typed, with :meth:`fact`.
    facts: Mapping[str, Any] = field(default_factory=dict)
    # The devices split for the per-device passes (the reader's, built once per discovery
    # but for the PFs); None: made from ``devices`` when first asked (:attr:`parts`).
    index: Optional[DeviceIndex] = field(default=None, compare=False, repr=False)
    # What several passes of one poll work out of it alike (the link families' readings:
    # core/checks/readings.py), once: by key. Not an argument, so ``replace`` starts afresh.
    memo: dict[str, Any] = field(default_factory=dict, init=False, compare=False, repr=False)

    @functools.cached_property
    def parts(self) -> DeviceIndex:
        """:attr:`devices` split for the per-device passes (:class:`DeviceIndex`)."""
        index = self.index
        if index is None or len(index.judged) + len(index.vfs) != len(self.devices):
            return DeviceIndex.of(self.devices)  # none, or not of these devices
        return index

    def fact(self, key: Fact[T]) -> Optional[T]:
        """The value of fact ``key`` this poll, as its source module typed it; None when it
        was not read this poll (no family needing it due, or its source failed). A fact the
        snapshot also has a field for (:data:`FIELD_FACTS`) is that field when ``facts``
        lacks it."""
        value = self.facts.get(key)
        if value is None and key in FIELD_FACTS:
            value = getattr(self, key)
        return cast(Optional[T], value)

    def device(self, name: str) -> Optional[DeviceSnapshot]:
        for device in self.devices:
            if device.name == name:
                return device
        return None
