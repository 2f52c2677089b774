"""Build a fake GPU host (sysfs, procfs, GPU metadata, daemon config) from a profile.

The tree mirrors the kernel's layout with real symlinks (class -> devices, device -> PCI
function, physfn, driver) so the daemon's discovery code runs unchanged against it. ROOT/sim.json
records what was built (paths, initial port states, intended roles) so mutations and tests do not
have to rediscover it, and so tests can compare the daemon's classification with the spec.
"""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import uuid
from pathlib import Path
from typing import Any, Dict, List, NamedTuple, Optional, Tuple, cast

from . import chardev, kernel, phy
from .fsio import PathLike, PortId, SimError, symlink, write_new
from .hostfiles import HostWriter
from .pcie import ROOT_PORT, plan
from .pcifiles import aer_files, hwmon, rootport_files
from .profiles import (
    HCAS,
    IB,
    VF,
    NicSpec,
    Profile,
    card_of,
    get_profile,
    resolved_nics,
    topo_row,
    vf_pcis,
)

MANIFEST = "sim.json"
BOOT_ID = "proc/sys/kernel/random/boot_id"
CLASS_IB = "sys/class/infiniband"
MLX5_DRIVER = "sys/bus/pci/drivers/mlx5_core"
SRIOV_TOTALVFS = 16
GID_COUNT = 4

Manifest = Dict[str, Any]


def _digest(*parts: str) -> bytes:
    """Stable bytes per (profile, device) so GUIDs, MACs and UUIDs repeat across builds."""
    return hashlib.sha256("/".join(parts).encode()).digest()


def _guid(raw: bytes) -> str:
    """'0a7f:bc12:45ef:d23b' style GUID from 8 bytes."""
    hexs = raw[:8].hex()
    return ":".join(hexs[i : i + 4] for i in range(0, 16, 4))


def _ipv4_hex(addr: str) -> str:
    """/proc/net/route spelling of an IPv4 address: the __be32 printed as a host-order %08X."""
    return bytes(int(x) for x in addr.split("."))[::-1].hex().upper()


def _pf_address(index: int, default_route: bool) -> str:
    """A unique IPv4 address per PF index (up to 4096 PFs, the synthetic profile's limit).

    Each PF gets its own /24 (172.16.0.0/12 holds 4096 of them), the default-route PF one
    in 10.0.<n>.0/24; every octet stays below 256 however many devices a host has.
    """
    if default_route:
        high, low = divmod(index, 240)
        return f"10.0.{high}.{10 + low}"
    high, low = divmod(index, 256)
    return f"172.{16 + high}.{low}.10"


GEN5, GEN4 = "32.0 GT/s PCIe", "16.0 GT/s PCIe"
BRIDGE_IDS = {ROOT_PORT: ("0x8086", "0x352a")}  # Intel root port; switches: Broadcom PEX
SWITCH_IDS = ("0x1000", "0xc030")


class _Port(NamedTuple):
    """The one port of a simulated IB device: its layer, rate and states, and the netdev and
    IPv4 address a RoCE port's GIDs carry (a VF has neither)."""

    link_layer: str
    rate: str
    state: str
    phys: str
    netdev: Optional[str] = None
    ip: Optional[str] = None


class _IbDevice(NamedTuple):
    """One simulated IB device: its name, HCA (a HCAS key), firmware, node GUID and port."""

    name: str
    hca: str
    fw: str
    guid: str
    port: _Port


class _Function(NamedTuple):
    """The PCI function an IB device is under, as the device's manifest record names it."""

    pci: str
    kind: str  # "pf" or "vf"
    role: str
    numa: int
    physfn: Optional[str]  # a VF's PF (its device name)
    pdir: Path


class _Builder(HostWriter):
    """Writes one host of mlx5 NICs, GPUs and the PCIe tree over :class:`HostWriter`."""

    def pci_function(
        self, pci: str, numa: int, hca: str, link_layer: str, physfn: Optional[Path] = None
    ) -> Path:
        """The PCI function dir with its driver and bus links."""
        dev_id = HCAS[hca][0]
        pdir = self.root / "sys/devices" / self.layout.path_of(pci)
        pclass = "0x020700" if link_layer == IB else "0x020000"
        if physfn is None:
            self.link_files(pdir, GEN4 if hca == "cx6" else GEN5, 16)
            aer_files(pdir)  # AER tables and the ASIC sensor of a physical function
            hwmon(pdir, self.hwmons)
            self.hwmons += 1
        write_new(pdir / "vendor", "0x15b3\n")
        write_new(pdir / "device", dev_id + "\n")
        write_new(pdir / "subsystem_vendor", "0x15b3\n")
        write_new(pdir / "subsystem_device", "0x0007\n")
        write_new(pdir / "class", pclass + "\n")
        write_new(pdir / "numa_node", f"{numa}\n")
        write_new(
            pdir / "uevent",
            f"DRIVER=mlx5_core\nPCI_CLASS={int(pclass, 16):X}\n"
            f"PCI_ID=15B3:{dev_id[2:].upper()}\nPCI_SUBSYS_ID=15B3:0007\n"
            f"PCI_SLOT_NAME={pci}\nMODALIAS=pci:v000015B3d0000{dev_id[2:].upper()}\n",
        )
        driver = self.root / MLX5_DRIVER
        symlink(pdir / "driver", driver)
        symlink(driver / pci, pdir)
        symlink(self.root / "sys/bus/pci/devices" / pci, pdir)
        if physfn is not None:
            symlink(pdir / "physfn", physfn)
        return pdir

    def pcie_tree(self) -> None:
        """Host bridges, root ports, switch ports, GPUs and NVSwitches (see :mod:`.pcie`)."""
        devices = self.root / "sys/devices"
        for name in self.layout.host_bridges:
            write_new(devices / name / "uevent", "")
        for bridge in self.layout.bridges:
            vendor, device = BRIDGE_IDS.get(bridge.kind, SWITCH_IDS)
            self.plain_function(devices / bridge.path, bridge.bdf, vendor, device, "0x060400",
                                bridge.numa, "pcieport", GEN5)
            aer_files(devices / bridge.path)
            if bridge.kind == ROOT_PORT:  # the totals of the hierarchy below it
                rootport_files(devices / bridge.path)
        for gpu in self.profile.gpus:
            self.plain_function(devices / self.layout.path_of(gpu.pci), gpu.pci, "0x10de",
                                self.profile.gpu_device, "0x030200", gpu.numa, "nvidia", GEN5)
        numa = max(min((g.numa for g in self.profile.gpus), default=0), 0)
        for pci in self.layout.nvswitches:
            self.plain_function(devices / self.layout.path_of(pci), pci, "0x10de",
                                self.profile.nvswitch_device, "0x068000", numa, "nvidia",
                                GEN4)
        if self.profile.flat:  # the VM's host bridge function on the root bus
            self.plain_function(devices / "pci0000:00/0000:00:00.0", "0000:00:00.0",
                                "0x8086", "0x1237", "0x060000", -1, None, None)

    def virtio_eth0(self) -> None:
        """The VM's virtio NIC eth0 (0000:00:05.0) carrying the default route."""
        pci = "0000:00:05.0"
        pdir = self.root / "sys/devices/pci0000:00" / pci
        self.plain_function(pdir, pci, "0x1af4", "0x1041", "0x020000", -1, "virtio-pci", None)
        write_new(pdir / "virtio1/vendor", "0x1af4\n")  # the virtio device (bus "virtio")
        write_new(pdir / "virtio1/device", "0x0001\n")
        ndir = self.netdev(pdir / "virtio1", "eth0", "Ethernet", "",
                           _digest(self.profile.name, "eth0"), True)
        (ndir / "dev_port").unlink()
        self._connected_route("eth0", "10.128.0.20", True)

    def port(self, pdir: Path, spec: _Port, gid_seed: str) -> None:
        """ports/1 with state, gids and every counter file."""
        link_layer, rate, state, phys, netdev, ip = spec
        port = pdir / "ports" / "1"
        write_new(port / "state", kernel.port_state_line(state))
        write_new(port / "phys_state", kernel.phys_state_line(phys))
        write_new(port / "rate", rate + "\n")
        write_new(port / "link_layer", link_layer + "\n")
        lid = int(gid_seed[-4:], 16) & 0xFFF if link_layer == IB and state == "ACTIVE" else 0
        write_new(port / "lid", f"0x{lid:x}\n")
        write_new(port / "sm_lid", "0x1\n" if lid else "0x0\n")
        write_new(port / "lid_mask_count", "0\n")
        write_new(port / "sm_sl", "0\n")
        write_new(port / "cap_mask", "0xa651e848\n" if link_layer == IB else "0x04010000\n")
        zero = "0000:0000:0000:0000:0000:0000:0000:0000"
        local = "fe80:0000:0000:0000:" + gid_seed
        if link_layer == IB:
            gids = [local, zero, zero, zero]
            types = ["IB/RoCE v1"] * GID_COUNT
        else:
            v4 = zero
            if ip:
                octets = [int(x) for x in ip.split(".")]
                v4 = "0000:0000:0000:0000:0000:ffff:{:02x}{:02x}:{:02x}{:02x}".format(*octets)
            gids = [local, local, v4, v4]
            types = ["IB/RoCE v1", "RoCE v2"] * 2
        for index in range(GID_COUNT):
            write_new(port / "gids" / str(index), gids[index] + "\n")
            write_new(port / "gid_attrs" / "types" / str(index), types[index] + "\n")
            if link_layer != IB and netdev and gids[index] != zero:
                write_new(port / "gid_attrs" / "ndevs" / str(index), netdev + "\n")
        for name in kernel.PMA_COUNTER_WIDTHS:
            write_new(port / "counters" / name, "0\n")
        hw = kernel.HW_COUNTERS + (kernel.NEW_HW_COUNTERS if self.new_hw_counters else ())
        for name in hw:
            write_new(port / "hw_counters" / name, "0\n")

    def ib_device(self, pdir: Path, device: _IbDevice) -> Path:
        """infiniband/<name> under the function, its device link and the class link."""
        name, hca, fw, guid, port = device
        idir = pdir / "infiniband" / name
        _, hca_type, _, board = HCAS[hca]
        write_new(idir / "hca_type", hca_type + "\n")
        write_new(idir / "fw_ver", fw + "\n")
        write_new(idir / "board_id", board + "\n")
        write_new(idir / "node_guid", guid + "\n")
        write_new(idir / "sys_image_guid", guid + "\n")
        write_new(idir / "node_type", "1: CA\n")
        write_new(idir / "node_desc", f"{self.profile.name}-sim {name}\n")
        symlink(idir / "device", pdir)
        seed = guid if guid.strip("0:") else _guid(_digest(self.profile.name, name, "port"))
        self.port(idir, port, seed)
        symlink(self.root / CLASS_IB / name, idir)
        return idir

    def pf(self, nic: NicSpec, index: int) -> Path:
        """One physical function: PCI dir, IB device, netdev, route, manifest entry."""
        seed = _digest(self.profile.name, nic.pci)
        guid = _guid(seed)
        if nic.adapter == "efa":  # an AWS EFA function (sim/efa.py)
            from .efa import efa_pf
            self.devices.append(efa_pf(self, nic, index, guid,
                                       _pf_address(index, nic.default_route)))
            return self.root / "sys/devices" / self.layout.path_of(nic.pci)
        assert nic.name and nic.netdev and nic.rate
        pdir = self.pci_function(nic.pci, nic.numa, nic.hca, nic.link_layer)
        write_new(pdir / "sriov_totalvfs", f"{max(SRIOV_TOTALVFS, nic.vfs)}\n")
        write_new(pdir / "sriov_numvfs", f"{nic.vfs}\n")
        up = nic.state == "ACTIVE"
        ip = _pf_address(index, nic.default_route)
        device = _IbDevice(nic.name, nic.hca, HCAS[nic.hca][2], guid,
                           _Port(nic.link_layer, nic.rate, nic.state, nic.phys_state,
                                 nic.netdev, ip))
        idir = self.ib_device(pdir, device)
        ndir = self.netdev(pdir, nic.netdev, nic.link_layer, guid, seed[8:], up)
        if nic.link_layer == "Ethernet":  # RoCE: its PHY counters at a healthy BER
            phy.write_healthy(self.root, nic.netdev, nic.rate)
        if up:
            self._connected_route(nic.netdev, ip, nic.default_route)
        self.devices.append(self._entry(
            device, _Function(nic.pci, "pf", nic.role, nic.numa, None, pdir), idir, ndir))
        return pdir

    def vf(self, pf: NicSpec, pf_dir: Path, pci: str, name: str, vf_no: int) -> None:
        """One SR-IOV virtual function of `pf`: DOWN/Disabled, physfn link, no netdev."""
        assert pf.name and pf.rate
        pdir = self.pci_function(pci, pf.numa, "vf", pf.link_layer, physfn=pf_dir)
        symlink(pf_dir / f"virtfn{vf_no}", pdir)
        device = _IbDevice(name, "vf", HCAS[pf.hca][2], "0000:0000:0000:0000",
                           _Port(pf.link_layer, pf.rate, "DOWN", "Disabled"))
        idir = self.ib_device(pdir, device)
        self.devices.append(self._entry(
            device, _Function(pci, "vf", VF, pf.numa, pf.name, pdir), idir, None))

    def _entry(self, device: _IbDevice, function: _Function, idir: Path, ndir: Optional[Path]
               ) -> Dict[str, Any]:
        """The manifest record of one IB device."""
        name, hca, spec = device.name, device.hca, device.port
        pci, kind, role, numa, physfn, pdir = function
        link_layer, state = spec.link_layer, spec.state
        port = {
            "state": state,
            "phys_state": spec.phys,
            "rate": spec.rate,
            "netdev": ndir.name if ndir else None,
            "netdev_path": self.rel(ndir) if ndir else None,
            "operstate": ("up" if state == "ACTIVE" else "down") if ndir else None,
        }
        return {
            "name": name,
            "pci": pci,
            "card": card_of(pci),
            "kind": kind,
            "role": role,
            "numa": numa,
            "link_layer": link_layer,
            "hca_type": HCAS[hca][1],
            "physfn": physfn,
            "pci_path": self.rel(pdir),
            "ib_path": self.rel(idir),
            "ports": {"1": port},
        }

    def non_mellanox_eno1(self) -> None:
        """Onboard Intel NIC carrying the default route on hosts without a Mellanox one."""
        pdir = self.root / "sys/devices/pci0000:00/0000:00:1f.6"
        write_new(pdir / "vendor", "0x8086\n")
        write_new(pdir / "device", "0x15bb\n")
        write_new(pdir / "class", "0x020000\n")
        write_new(pdir / "numa_node", "0\n")
        write_new(
            pdir / "uevent",
            "DRIVER=e1000e\nPCI_CLASS=20000\nPCI_ID=8086:15BB\nPCI_SLOT_NAME=0000:00:1f.6\n",
        )
        driver = self.root / "sys/bus/pci/drivers/e1000e"
        driver.mkdir(parents=True, exist_ok=True)
        symlink(pdir / "driver", driver)
        symlink(self.root / "sys/bus/pci/devices/0000:00:1f.6", pdir)
        self.netdev(pdir, "eno1", "Ethernet", "", _digest(self.profile.name, "eno1"), True)
        self._connected_route("eno1", "192.168.1.20", True)

    def loopback(self) -> None:
        """lo, a virtual netdev every host has (no device link, no route)."""
        ndir = self.root / "sys/devices/virtual/net/lo"
        write_new(ndir / "operstate", "unknown\n")
        write_new(ndir / "carrier_changes", "0\n")
        write_new(ndir / "ifindex", "1\n")
        symlink(self.root / "sys/class/net/lo", ndir)

    def uplink(self, kind: str, name: str, slaves: List[str]) -> None:
        """A bond or VLAN netdev over `slaves`, as the kernel shows it; it takes their routes.

        Virtual (no device link): bond0 lists its slaves in bonding/slaves, and both kinds
        link their lower devices as lower_<slave> (the slaves link back as upper_<name>).
        """
        ndir = self.root / "sys/devices/virtual/net" / name
        self.ifindex += 1
        slave_dirs = [(self.root / "sys/class/net" / slave).resolve() for slave in slaves]
        address = (slave_dirs[0] / "address").read_text()
        for attr, value in (("operstate", "up\n"), ("carrier_changes", "0\n"),
                            ("ifindex", f"{self.ifindex}\n"), ("type", "1\n"),
                            ("mtu", "9000\n"), ("address", address)):
            write_new(ndir / attr, value)
        for slave, sdir in zip(slaves, slave_dirs):
            symlink(ndir / f"lower_{slave}", sdir)
            symlink(sdir / f"upper_{name}", ndir)
            if kind == "bond":
                symlink(sdir / "master", ndir)
        if kind == "bond":
            write_new(ndir / "bonding/slaves", " ".join(slaves) + "\n")
            write_new(ndir / "bonding/mode", "802.3ad 4\n")
        symlink(self.root / "sys/class/net" / name, ndir)
        routes: List[Tuple[str, str, str, int, str]] = []
        for route in self.routes:
            if route[0] in slaves:
                route = (name, *route[1:])
            if route not in routes:
                routes.append(route)
        self.routes = routes

    def ipv6_route_table(self, ipv6_only: List[str]) -> str:
        """/proc/net/ipv6_route: link-local routes of every routed netdev, lo's reject default.

        Netdevs in `ipv6_only` lose their IPv4 routes and get a global prefix and the IPv6
        default route (via a link-local router, as router advertisements install it).
        """
        zero = "0" * 32
        lines = []
        for iface in ipv6_only:
            lines.append(f"{zero} 00 {zero} 00 fe800000000000000000000000000001 00000400 "
                         f"00000001 00000000 00450003 {iface:>8}")
            lines.append(f"20010db8000000000000000000000000 40 {zero} 00 {zero} 00000100 "
                         f"00000001 00000000 00000001 {iface:>8}")
        self.routes = [r for r in self.routes if r[0] not in ipv6_only]
        for iface in dict.fromkeys([*ipv6_only, *(r[0] for r in self.routes)]):
            lines.append(f"fe800000000000000000000000000000 40 {zero} 00 {zero} 00000100 "
                         f"00000001 00000000 00000001 {iface:>8}")
        lines.append(f"{'0' * 31}1 80 {zero} 00 {zero} 00000000 00000002 00000000 80200001 "
                     f"{'lo':>8}")
        lines.append(f"{zero} 00 {zero} 00 {zero} ffffffff 00000001 00000000 00200200 "
                     f"{'lo':>8}")
        return "".join(line + "\n" for line in lines)

    def route_table(self) -> str:
        """/proc/net/route exactly as fib_trie prints it (lines padded to 127 columns)."""
        lines = [
            "Iface\tDestination\tGateway \tFlags\tRefCnt\tUse\tMetric\tMask\t\tMTU\tWindow\tIRTT"
        ]
        for iface, dst, gw, flags, mask in self.routes:
            lines.append(
                f"{iface}\t{_ipv4_hex(dst)}\t{_ipv4_hex(gw)}\t{flags:04X}\t0\t0\t"
                f"{100 if flags & 2 else 0}\t{_ipv4_hex(mask)}\t0\t0\t0"
            )
        return "".join(f"{line:<127}\n" for line in lines)


def _metadata(profile: Profile, nics: List[NicSpec]) -> Dict[str, Any]:
    """gpu_metadata.json in NVSentinel's format (link-state-detection §12.2), keyed by PF."""
    gpus = []
    for index, gpu in enumerate(profile.gpus):
        seed = _digest(profile.name, "gpu", gpu.pci)
        gpus.append(
            {
                "gpu_id": index,
                "pci_address": gpu.pci,
                "numa_node": gpu.numa,
                "uuid": "GPU-" + str(uuid.UUID(bytes=seed[:16], version=4)),
                "serial_number": str(1650000000000 + int.from_bytes(seed[:4], "big") % 10**9),
            }
        )
    return {
        "version": "1.0",
        "node_name": f"{profile.name}-sim",
        "gpus": gpus,
        "nic_topology": {nic.name: topo_row(nic, profile.gpus) for nic in nics},
    }


def _config(root: Path, node_name: str) -> str:
    """nichealthd.toml pointing the daemon at this tree (absolute paths)."""
    values = [
        ("sysfsRoot", str(root / "sys")),
        ("procRoot", str(root / "proc")),
        ("ethtoolPath", str(root / "ethtool")),
        ("metadataPath", str(root / "gpu_metadata.json")),
        ("stateFile", str(root / "var/lib/nichealthd/state.json")),
        ("eventLog", str(root / "events.jsonl")),
        ("nodeName", node_name),
        ("platformConnectorSocket", ""),
        ("dbus", "none"),
        ("metricsListen", ""),
        ("varlinkSocket", ""),
    ]
    head = "# Written by nichealthd-sim: runs nichealthd against this fake host.\n"
    return head + "".join(f"{key} = {json.dumps(val)}\n" for key, val in values)


def _prepare_root(root: Path, force: bool) -> None:
    """Refuse to build over anything but an empty dir or (with force) an old sim tree."""
    if root.exists() and any(root.iterdir()):
        if not (root / MANIFEST).is_file():
            raise SimError(f"{root} is not empty and holds no {MANIFEST}; refusing to touch it")
        if not force:
            raise SimError(f"{root} already holds a simulated host (use --force to rebuild)")
        shutil.rmtree(root)
    root.mkdir(parents=True, exist_ok=True)


def create(
    root: PathLike,
    profile: str = "dgx-h100",
    *,
    devices: Optional[int] = None,
    vfs: int = 0,
    new_hw_counters: bool = True,
    force: bool = False,
    metadata: bool = True,
) -> Manifest:
    """Build the fake host under `root` and return its manifest (also saved as sim.json).

    ``metadata=False`` leaves gpu_metadata.json out (a host without NVSentinel): the daemon
    then derives the topology from the PCI tree.
    """
    try:
        prof = get_profile(profile, devices, vfs)
    except ValueError as exc:
        raise SimError(str(exc)) from None
    top = Path(os.path.abspath(root))
    _prepare_root(top, force)
    layout = plan(prof)
    builder = _Builder(top, prof, new_hw_counters, layout)
    (top / MLX5_DRIVER).mkdir(parents=True)
    if prof.nics:  # a host without RDMA devices has no class/infiniband (no ib_core)
        (top / CLASS_IB).mkdir(parents=True)
    builder.loopback()
    builder.pcie_tree()
    nics = resolved_nics(prof)
    _functions(builder, prof, nics)
    chardev.build(top, builder.devices)  # character devices
    from .optics import build as build_modules
    build_modules(top, builder.devices)  # healthy module pages of the Ethernet ports
    default_iface = prof.default_route_iface
    _routes(builder, prof, nics)
    write_new(top / BOOT_ID, f"{uuid.uuid4()}\n")
    node_name = f"{prof.name}-sim"
    if metadata:
        write_new(top / "gpu_metadata.json",
                  json.dumps(_metadata(prof, nics), indent=2) + "\n")
    write_new(top / "nichealthd.toml", _config(top, node_name))
    (top / "var/lib/nichealthd").mkdir(parents=True)
    manifest: Manifest = {
        "version": 1,
        "profile": prof.name,
        "description": prof.description,
        "node_name": node_name,
        "new_hw_counters": new_hw_counters,
        "default_route_iface": default_iface,
        "metadata": metadata,
        "roles": {dev["name"]: dev["role"] for dev in builder.devices},
        "devices": builder.devices,
        "gpus": [{"pci": gpu.pci, "numa": gpu.numa,
                  "pci_path": f"sys/devices/{layout.path_of(gpu.pci)}"} for gpu in prof.gpus],
        "nvswitches": layout.nvswitches,
    }
    write_new(top / MANIFEST, json.dumps(manifest, indent=2) + "\n")
    return manifest


def _functions(builder: _Builder, prof: Profile, nics: List[NicSpec]) -> None:
    """Every NIC's physical function, then the VFs of each, numbered after all the PFs."""
    pf_dirs = [builder.pf(nic, index) for index, nic in enumerate(nics)]
    next_index = len(nics)
    for nic, pf_dir in zip(nics, pf_dirs):
        for vf_no, pci in enumerate(vf_pcis(prof, nic)):
            builder.vf(nic, pf_dir, pci, f"mlx5_{next_index}", vf_no)
            next_index += 1


def _routes(builder: _Builder, prof: Profile, nics: List[NicSpec]) -> None:
    """The default route's interface (an onboard or virtio NIC, a bond or VLAN over the
    flagged netdevs, or a NIC's own) and the IPv4 and IPv6 route tables."""
    top = builder.root
    default_iface = prof.default_route_iface
    if default_iface == "eno1":
        builder.non_mellanox_eno1()
    elif default_iface == "eth0":
        builder.virtio_eth0()
    flagged = [nic.netdev for nic in nics if nic.default_route and nic.netdev]
    if prof.uplink:  # the default route goes through a bond or VLAN over the flagged netdevs
        builder.uplink(prof.uplink, default_iface, flagged)
    ipv6 = builder.ipv6_route_table([default_iface] if prof.ipv6_only else [])
    write_new(top / "proc/net/ipv6_route", ipv6)
    write_new(top / "proc/net/route", builder.route_table())


def load(root: PathLike) -> Manifest:
    """The manifest of a built tree; SimError when ROOT is not one."""
    path = Path(root) / MANIFEST
    try:
        data: Manifest = json.loads(path.read_text())
    except FileNotFoundError:
        raise SimError(f"{root} is not a simulated host (no {MANIFEST}; run create)") from None
    except (OSError, ValueError) as exc:
        raise SimError(f"cannot read {path}: {exc}") from None
    return data


def save_manifest(root: Path, manifest: Manifest) -> None:
    """Write sim.json atomically (a reader never sees half of it); beside :func:`load`, so that
    the builder and every mutation read and write it through this module alone."""
    path = root / MANIFEST
    tmp = path.with_name(path.name + ".tmp")
    tmp.write_text(json.dumps(manifest, indent=2) + "\n")
    os.replace(tmp, path)


def device(manifest: Manifest, name: str) -> Dict[str, Any]:
    """A device record by IB device name; SimError names the known ones otherwise."""
    for dev in manifest["devices"]:
        if dev["name"] == name:
            return cast(Dict[str, Any], dev)
    known = [d["name"] for d in manifest["devices"]]
    shown = ", ".join(known[:8]) + (", ..." if len(known) > 8 else "")
    raise SimError(f"unknown device {name!r} (this host has: {shown})")


def port_record(dev: Dict[str, Any], port: PortId) -> Dict[str, Any]:
    """A port record of a device; SimError for a port the device never had."""
    key = str(port)
    if key not in dev["ports"]:
        raise SimError(f"{dev['name']} has no port {key} (ports: {', '.join(dev['ports'])})")
    rec: Dict[str, Any] = dev["ports"][key]
    return rec


def port_dir(root: PathLike, dev: Dict[str, Any], port: PortId) -> Path:
    """The live ports/<n> dir (via the devices tree, so hide-class does not affect it)."""
    port_record(dev, port)
    path = Path(root) / str(dev["ib_path"]) / "ports" / str(port)
    if not path.is_dir():
        raise SimError(f"{dev['name']} port {port} is removed (restore it first)")
    return path


def _read(path: Path) -> str:
    """File content for display: '-' when absent, '?' when unreadable."""
    try:
        return path.read_text().strip()
    except FileNotFoundError:
        return "-"
    except OSError:
        return "?"


def show(root: PathLike) -> str:
    """A short table of every device's live port state and intended role."""
    manifest = load(root)
    top = Path(root)
    header = ("DEVICE", "PCI", "NUMA", "LINK", "PORT", "STATE", "PHYS", "NETDEV", "OPER", "ROLE")
    rows: List[Tuple[str, ...]] = [header]
    for dev in manifest["devices"]:
        idir = top / dev["ib_path"]
        for port, rec in dev["ports"].items():
            pdir = idir / "ports" / port
            if not idir.is_dir():
                state = phys = "(removed)"
            elif not pdir.is_dir():
                state = phys = "(no port)"
            else:
                state = kernel.state_name(_read(pdir / "state"))
                phys = kernel.state_name(_read(pdir / "phys_state"))
            oper = _read(top / rec["netdev_path"] / "operstate") if rec["netdev_path"] else "-"
            numa = _read(top / dev["pci_path"] / "numa_node")
            rows.append(
                (
                    dev["name"],
                    dev["pci"],
                    numa,
                    dev["link_layer"],
                    port,
                    state,
                    phys,
                    rec["netdev"] or "-",
                    oper,
                    dev["role"],
                )
            )
    widths = [max(len(row[i]) for row in rows) for i in range(len(header))]
    lines = ["  ".join(cell.ljust(w) for cell, w in zip(row, widths)).rstrip() for row in rows]
    extra = f"profile {manifest['profile']}, default route via {manifest['default_route_iface']}"
    if not (top / CLASS_IB).exists():
        extra += ", sys/class/infiniband HIDDEN"
    return "\n".join(lines + [extra]) + "\n"
