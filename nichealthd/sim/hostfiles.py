"""The writer of one fake host's plain parts: a PCI function, its link files, a netdev, a route.

Both the builder of mlx5 hosts (sim/tree.py) and the EFA functions (sim/efa.py) write through
it, so it sits below both; it keeps what must be unique or collected across the host (ifindex,
hwmon numbering, routes, the manifest's device records).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any, Dict, List, Optional, Tuple

from . import kernel
from .fsio import symlink, write_new
from .pcie import Layout
from .profiles import IB, Profile


class HostWriter:
    """Writes the plain parts of one host; keeps what must be unique or collected across it."""

    def __init__(self, root: Path, profile: Profile, new_hw_counters: bool,
                 layout: Layout) -> None:
        self.root = root
        self.profile = profile
        self.layout = layout
        self.new_hw_counters = new_hw_counters
        self.ifindex = 1
        self.hwmons = 0  # hwmon<N> numbering
        self.routes: List[Tuple[str, str, str, int, str]] = []  # iface, dst, gw, flags, mask
        self.devices: List[Dict[str, Any]] = []

    def rel(self, path: Path) -> str:
        return str(path.relative_to(self.root))

    def link_files(self, pdir: Path, speed: str, width: int) -> None:
        """current/max link speed and width, as a PCIe function shows them (pci-sysfs.c)."""
        for kind in ("current", "max"):
            write_new(pdir / f"{kind}_link_speed", speed + "\n")
            write_new(pdir / f"{kind}_link_width", f"{width}\n")

    def plain_function(self, pdir: Path, pci: str, vendor: str, device: str, pclass: str,
                       numa: int, driver: Optional[str], link: Optional[str]) -> None:
        """A PCI function that is not a NIC: GPU, NVSwitch, bridge, host bridge, virtio."""
        write_new(pdir / "vendor", vendor + "\n")
        write_new(pdir / "device", device + "\n")
        write_new(pdir / "class", pclass + "\n")
        write_new(pdir / "numa_node", f"{numa}\n")
        uevent = f"PCI_CLASS={int(pclass, 16):X}\nPCI_ID={vendor[2:].upper()}:" \
                 f"{device[2:].upper()}\nPCI_SLOT_NAME={pci}\n"
        write_new(pdir / "uevent", (f"DRIVER={driver}\n" if driver else "") + uevent)
        if link:
            self.link_files(pdir, link, 16)
        if driver:
            drv = self.root / "sys/bus/pci/drivers" / driver
            drv.mkdir(parents=True, exist_ok=True)
            symlink(pdir / "driver", drv)
            symlink(drv / pci, pdir)
        symlink(self.root / "sys/bus/pci/devices" / pci, pdir)

    def netdev(
        self, pdir: Path, iface: str, link_layer: str, guid: str, mac_seed: bytes, up: bool,
        mac: Optional[str] = None,
    ) -> Path:
        """net/<iface> of a function plus its class/net link; returns the netdev dir.
        ``mac``: the hardware address, when the caller decides it (an AWS ENA's)."""
        ndir = pdir / "net" / iface
        self.ifindex += 1
        if mac is not None:
            address, mtu, ntype = mac, "9001", "1"
        elif link_layer == IB:  # IPoIB hardware address: QPN + GID
            address = "00:00:10:49:fe:80:00:00:00:00:00:00:" + ":".join(
                guid.replace(":", "")[i : i + 2] for i in range(0, 16, 2)
            )
            mtu, ntype = "4092", "32"
        else:
            address = "b8:3f:d2:" + ":".join(f"{b:02x}" for b in mac_seed[:3])
            mtu, ntype = "9000", "1"
        for name, value in (
            ("operstate", "up" if up else "down"),
            ("flags", "0x1003"),  # IFF_UP | IFF_BROADCAST | IFF_MULTICAST
            ("carrier_changes", "0"),
            ("dev_port", "0"),
            ("dev_id", "0x0"),
            ("address", address),
            ("mtu", mtu),
            ("type", ntype),
            ("ifindex", str(self.ifindex)),
        ):
            write_new(ndir / name, value + "\n")
        for stat in kernel.NETDEV_STATISTICS:
            write_new(ndir / "statistics" / stat, "0\n")
        symlink(ndir / "device", pdir)
        symlink(self.root / "sys/class/net" / iface, ndir)
        return ndir

    def _connected_route(self, iface: str, ip: str, default: bool) -> None:
        net = ip.rsplit(".", 1)[0] + ".0"
        if default:
            self.routes.insert(0, (iface, "0.0.0.0", net[:-1] + "1", 0x0003, "0.0.0.0"))
        self.routes.append((iface, net, "0.0.0.0", 0x0001, "255.255.255.0"))
