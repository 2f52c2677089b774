"""The adapter facts one slow read saw: character devices, PCI functions, firmware.

The types of the adapter source's fact (:data:`nichealthd.sources.adapter.ADAPTER`), which
the adapter families import from here. These facts change rarely (a module load, a driver
bind, a firmware flash, an ``ip link set``), so the source gathers them at the adapter
cadence (``adapterCheckInterval``), not every poll: a poll that did not read them has no
``ADAPTER`` fact, and the adapter families then keep their sections as they are. Like every
observation, a fact that could not be read is None ("no information"), never an empty set or
"down".
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Mapping, Optional

# PCI class codes (pci_ids.h): the sysfs ``class`` file reads 0xCCSSPP.
PCI_CLASS_INFINIBAND = "0x0207"

# IFF_UP of <linux/if.h>: the administrative state in /sys/class/net/<if>/flags.
IFF_UP = 0x1

# What a kernel operstate (RFC 2863, net/core/net-sysfs.c) says about a netdev that should
# carry traffic: these two are "down"; dormant, testing, unknown and notpresent are not judged.
DOWN_OPERSTATES = frozenset({"down", "lowerlayerdown"})


@dataclass(frozen=True)
class CharDevices:
    """What ``/sys/class/infiniband_verbs`` and ``/sys/class/infiniband_mad`` list.

    Each set is the RDMA devices (``ibdev``) or (device, ``port``) pairs that have an entry;
    None when the class directory is absent or cannot be listed (module not loaded: the
    verdict is uncertain, kernel drivers/infiniband/core/uverbs_main.c and user_mad.c create
    these directories when ``ib_uverbs`` / ``ib_umad`` load).
    """

    uverbs: Optional[frozenset[str]] = None
    umad: Optional[frozenset[tuple[str, int]]] = None
    issm: Optional[frozenset[tuple[str, int]]] = None


@dataclass(frozen=True)
class PciNic:
    """A Mellanox physical function (vendor 0x15b3, network/InfiniBand class, no ``physfn``)
    on the PCI bus, and whether an RDMA device is registered on it (``infiniband/``)."""

    address: str
    pci_class: str  # the ``class`` file, 0xCCSSPP
    registered: bool  # <function>/infiniband/ lists a device
    driver: Optional[str] = None  # the bound driver's name; None when unbound
    netdevs: tuple[str, ...] = ()
    numa_node: Optional[int] = None

    @property
    def is_infiniband(self) -> bool:
        return self.pci_class.lower().startswith(PCI_CLASS_INFINIBAND)


@dataclass(frozen=True)
class NetdevLink:
    """A port's netdev as one read saw it: ``operstate`` and, where readable, whether it is
    administratively up (the IFF_UP bit of ``flags``; None when ``flags`` was not read)."""

    netdev: str
    operstate: Optional[str]
    admin_up: Optional[bool] = None

    @property
    def down(self) -> bool:
        return (self.operstate or "") in DOWN_OPERSTATES


@dataclass(frozen=True)
class AdapterFacts:
    """One read of the slow adapter facts (None fields: not readable this time)."""

    chardevs: CharDevices = field(default_factory=CharDevices)
    # Every Mellanox PF on the bus; None when the bus directory cannot be listed.
    pci_nics: Optional[tuple[PciNic, ...]] = None
    # fw_ver of each registered device, read now (a flash changes it at runtime).
    firmware: Mapping[str, str] = field(default_factory=dict)
    # Port key (``mlx5_0_1``) -> its netdev's link, for ports that have a netdev.
    netdevs: Mapping[str, NetdevLink] = field(default_factory=dict)
