"""The netdevs and IB devices under the host's default routes (the management NIC carries them).

link-state-detection §4.2 classifies the NIC of the default route as the management NIC.

Read from ``/proc/net/route``, ``/proc/net/ipv6_route`` and ``/sys/class/net`` at start and on
reload; anything unreadable adds nothing. The IB devices classify RDMA devices; the netdevs
recognise a management function that has no RDMA device at all (the lost-NIC family).
"""

from __future__ import annotations

import os

from ..core.numbers import ROUTE_FLAGS, value

RTF_REJECT = 0x0200  # an unreachable/prohibit route (IPv6 has one on lo by default)
MAX_NETDEV_DEPTH = 8  # bond over VLAN over bond ... deeper than any real stack


def parse_default_routes_v4(text: str) -> list[str]:
    """Interfaces of every IPv4 default route in ``/proc/net/route`` text (any metric).

    A default route has Destination and Mask ``00000000``; reject routes (interface ``*``,
    RTF_REJECT) carry no traffic.
    """
    interfaces = []
    for line in text.splitlines()[1:]:
        fields = line.split()
        if len(fields) < 8 or fields[1] != "00000000" or fields[7] != "00000000":
            continue
        flags = value(fields[3], ROUTE_FLAGS)
        if flags is None:
            continue
        if fields[0] != "*" and not flags & RTF_REJECT:
            interfaces.append(fields[0])
    return interfaces


def parse_default_routes_v6(text: str) -> list[str]:
    """Interfaces of every IPv6 default route in ``/proc/net/ipv6_route`` text.

    Columns: destination, prefix length, source, source prefix length, next hop, metric,
    refcount, use, flags, interface. The default route is destination ``0``*32 with prefix
    length ``00``; the reject route the kernel keeps on ``lo`` is not one.
    """
    interfaces = []
    for line in text.splitlines():
        fields = line.split()
        if len(fields) < 10 or fields[0] != "0" * 32 or fields[1] != "00":
            continue
        flags = value(fields[8], ROUTE_FLAGS)
        if flags is None:
            continue
        if fields[9] != "lo" and not flags & RTF_REJECT:
            interfaces.append(fields[9])
    return interfaces


def lower_netdevs(sys_class_net: str, iface: str) -> list[str]:
    """``iface`` and every netdev below it: bond slaves, VLAN parents, any ``lower_*`` link.

    Recursive to ``MAX_NETDEV_DEPTH`` levels; a loop (which sysfs should never show) ends
    where a name repeats. Unreadable directories simply add nothing.
    """
    seen: list[str] = []
    level = [iface]
    for _ in range(MAX_NETDEV_DEPTH + 1):
        below: list[str] = []
        for name in level:
            if name in seen or not name or "/" in name or name in (".", ".."):
                continue
            seen.append(name)
            below.extend(_lower_of(os.path.join(sys_class_net, name)))
        if not below:
            break
        level = below
    return seen


def _lower_of(netdev_dir: str) -> list[str]:
    names: list[str] = []
    try:
        names.extend(e[len("lower_"):] for e in sorted(os.listdir(netdev_dir))
                     if e.startswith("lower_"))
    except OSError:
        return []
    try:
        with open(os.path.join(netdev_dir, "bonding/slaves"), encoding="ascii") as handle:
            names.extend(handle.read().split())
    except (OSError, UnicodeDecodeError):
        pass
    return names


def read_default_route_interfaces(proc_root: str) -> list[str]:
    """Interfaces of every IPv4 and IPv6 default route; a missing table adds nothing."""
    interfaces: list[str] = []
    for name, parse in (("net/route", parse_default_routes_v4),
                        ("net/ipv6_route", parse_default_routes_v6)):
        try:
            with open(os.path.join(proc_root, name), encoding="ascii") as handle:
                interfaces.extend(parse(handle.read()))
        except (OSError, UnicodeDecodeError):
            continue
    return list(dict.fromkeys(interfaces))


def read_default_route_netdevs(proc_root: str, sys_class_net: str) -> frozenset[str]:
    """Every netdev that carries a default route: the interface of each default route (IPv4
    and IPv6) and every netdev below it, through bonds, VLANs and other stacked netdevs
    (:func:`lower_netdevs`); empty when it cannot be told."""
    return frozenset(netdev for iface in read_default_route_interfaces(proc_root)
                     for netdev in lower_netdevs(sys_class_net, iface))


def rdma_devices_of(sys_class_net: str, netdevs: frozenset[str]) -> frozenset[str]:
    """The IB devices of ``netdevs``: ``/sys/class/net/<iface>/device/infiniband/<dev>``
    (the kernel's sysfs); a netdev without that directory adds nothing."""
    devices: set[str] = set()
    for netdev in netdevs:
        try:
            devices.update(os.listdir(os.path.join(sys_class_net, netdev, "device/infiniband")))
        except OSError:
            continue
    return frozenset(devices)


def read_default_route_devices(proc_root: str, sys_class_net: str) -> frozenset[str]:
    """IB devices under the interfaces of every default route; empty when it cannot be told
    (:func:`read_default_route_netdevs`, then :func:`rdma_devices_of`)."""
    return rdma_devices_of(sys_class_net, read_default_route_netdevs(proc_root, sys_class_net))
