"""The MTU of each monitored port's netdev: a source on the Source seam (sources/seam.py).

The worked example of ARCHITECTURE.md, "Adding a check family": copied into
``nichealthd/sources/`` it is found by the registry (it defines ``SOURCE``) and read only in a
poll in which a family needing its fact is due. The fact is typed here: its key
``NETDEV_MTU`` and its type ``Mtus``, which the family imports from this module. Every number
goes through the one parser (``core/numbers.py``): an MTU outside 68..65535 (the kernel's
``ETH_MIN_MTU`` and ``IP_MAX_MTU``) is unreadable, like a missing file, and never raises.
"""

from __future__ import annotations

import os
from typing import Mapping, Optional, Sequence

from nichealthd.core.model import Fact, HostSnapshot
from nichealthd.core.numbers import Kind, value
from nichealthd.sources.seam import Source

Mtus = Mapping[str, tuple[str, Optional[int]]]  # port key -> (netdev, MTU or None: unreadable)
NETDEV_MTU: Fact[Mtus] = Fact("netdev_mtu")
MTU = Kind("MTU", 68, 65535)


class NetdevMtu(Source):
    """``<sysfs>/class/net/<netdev>/mtu`` of each port with a netdev."""

    fact = NETDEV_MTU
    description = "the ports' netdev MTUs"

    def read(self, snapshot: HostSnapshot, devices: Sequence[str]) -> Mtus:
        """Port key -> (netdev, MTU or None when unreadable)."""
        wanted = set(devices)
        out: dict[str, tuple[str, Optional[int]]] = {}
        for device in snapshot.devices:
            if device.name not in wanted:
                continue
            for port in device.ports:
                if port.netdev:
                    out[port.key] = (port.netdev, value(self._text(port.netdev), MTU))
        return out

    def _text(self, netdev: str) -> Optional[bytes]:
        try:
            with open(os.path.join(self.config.sys_class_net, netdev, "mtu"), "rb") as file:
                return file.read(64)
        except OSError:
            return None


SOURCE = NetdevMtu
