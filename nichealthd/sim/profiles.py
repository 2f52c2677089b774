"""Host profiles for nichealthd-sim: the GPU and NIC layouts of the platforms in the spec.

Each profile is data (GPU list + one NicSpec per PCI function) so a new platform is a table,
not code. Device counts, NUMA nodes, link layers, topo cells and HCA types follow the field
validation tables of link-state-detection §4.1.3, §4.2.4, §4.3.4 and §8.6.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from typing import Callable, Dict, List, Optional, Tuple

COMPUTE = "compute"
STORAGE = "storage"
MANAGEMENT = "management"
VF = "vf"

IB = "InfiniBand"
ETH = "Ethernet"

TOPO_LEVELS = ("X", "PIX", "PXB", "PHB", "NODE", "SYS")

# Silicon: (PCI device id, hca_type, fw_ver, board_id, uevent PCI_ID device part).
HCAS: Dict[str, Tuple[str, str, str, str]] = {
    "cx7": ("0x1021", "MT4129", "28.41.1000", "MT_0000000838"),
    "cx6": ("0x101b", "MT4123", "20.41.1000", "MT_0000000223"),
    "bf3": ("0xa2dc", "MT41692", "32.41.1000", "MT_0000000884"),
    # ConnectX family SR-IOV virtual function (what a VF reports, whatever the PF is).
    "vf": ("0x101e", "MT4126", "28.41.1000", "MT_0000000838"),
    # AWS Elastic Fabric Adapter: no hca_type/board_id files, firmware version as the
    # efa driver shows. The PCI device id is the EFA generation: efa0 on p4d (EFA v1, Nitro
    # v3), efa1 on p5 (EFA v2, Nitro v4), efa2 on p5en (EFA v3, Nitro v5), efa3 on p6-b200
    # (EFA v4, Nitro v6), as real hwloc trees show them (aws-ofi-nccl's
    # tests/unit/fixtures/topology/{p4d,p5en,p6-b200}/topology.xml; p5: the lstopo of the
    # Hugging Face ultrascale playbook) and the generations of AWS's EFA page (efa.html).
    "efa0": ("0xefa0", "", "0.0.0.0", ""),
    "efa1": ("0xefa1", "", "0.0.0.0", ""),
    "efa2": ("0xefa2", "", "0.0.0.0", ""),
    "efa3": ("0xefa3", "", "0.0.0.0", ""),
}

RATES = {
    (IB, "cx7"): "400 Gb/sec (4X NDR)",
    (IB, "cx6"): "200 Gb/sec (4X HDR)",
    (ETH, "cx7"): "200 Gb/sec (4X HDR)",
    (ETH, "cx6"): "100 Gb/sec (4X EDR)",
    (ETH, "bf3"): "400 Gb/sec (4X NDR)",
}


@dataclass(frozen=True)
class GpuSpec:
    """One GPU as the metadata collector publishes it."""

    pci: str
    numa: int


@dataclass(frozen=True)
class NicSpec:
    """One Mellanox PCI function (PF) with a single IB port, as mlx5 exposes it.

    topo: "auto" = `pair_level` to the GPUs in `gpus`, NODE to other GPUs on the same NUMA
    node, SYS to the rest; or one fixed level for every GPU (e.g. "SYS" on Grace).
    """

    pci: str
    numa: int
    link_layer: str
    role: str
    hca: str = "cx7"
    gpus: Tuple[int, ...] = ()
    topo: str = "auto"
    pair_level: str = "PXB"
    name: Optional[str] = None
    netdev: Optional[str] = None
    state: str = "ACTIVE"
    phys_state: str = "LinkUp"
    rate: Optional[str] = None
    vfs: int = 0
    default_route: bool = False
    # "mlx5", or "efa": an Amazon EFA function of an "EFA with ENA" interface, whose
    # ENA function (netdev ``netdev``) is at ``ena_pci`` (default: the next slot of the EFA's
    # bus), or of an EFA-only interface when ``ena`` is False (no ENA, no netdev).
    adapter: str = "mlx5"
    ena: bool = True
    ena_pci: Optional[str] = None


@dataclass(frozen=True)
class Profile:
    """A named host: GPUs in metadata order and NIC PFs in mlx5 naming (PCI probe) order."""

    name: str
    description: str
    gpus: Tuple[GpuSpec, ...]
    nics: Tuple[NicSpec, ...]
    # How the default route reaches the flagged NICs: "" their own netdev, "bond" bond0 with
    # their netdevs as slaves, "vlan" vlan100 on the (single) flagged netdev.
    uplink: str = ""
    # The flagged NICs' default route is IPv6 only (/proc/net/ipv6_route), none in IPv4.
    ipv6_only: bool = False
    # PCIe: "flat" puts every function on the root bus pci0000:00 (a cloud VM); NVSwitch
    # count (class 0x068000 bridges); the GPUs' PCI device id (0x2330 H100 SXM5).
    flat: bool = False
    nvswitches: int = 0
    gpu_device: str = "0x2330"
    nvswitch_device: str = "0x22a3"  # H100/H200 NVSwitch; A100's is 0x1af1

    @property
    def default_route_iface(self) -> str:
        """Netdev carrying the default route: the flagged NIC's (or its bond/VLAN), else eno1."""
        if self.uplink:
            return UPLINKS[self.uplink]
        for nic in resolved_nics(self):
            if nic.default_route and nic.netdev:
                return nic.netdev
        return "eth0" if self.flat else "eno1"


UPLINKS = {"bond": "bond0", "vlan": "vlan100"}


def parse_pci(pci: str) -> Tuple[int, int, int, int]:
    """'0000:aa:00.1' -> (domain, bus, device, function)."""
    dom, bus, devfn = pci.split(":")
    dev, fn = devfn.split(".")
    return int(dom, 16), int(bus, 16), int(dev, 16), int(fn, 16)


def card_of(pci: str) -> str:
    """Physical card key (domain:bus:device), the spec's homogeneity grouping."""
    return pci.rsplit(".", 1)[0]


def _slot_name(pci: str, multi_function: bool) -> str:
    """systemd predictable-name path part: [P<dom>]p<bus>s<dev>[f<fn>] (decimal)."""
    dom, bus, dev, fn = parse_pci(pci)
    name = (f"P{dom}" if dom else "") + f"p{bus}s{dev}"
    return name + (f"f{fn}" if multi_function else "")


def resolved_nics(profile: Profile) -> List[NicSpec]:
    """PFs with name, netdev and rate filled in (mlx5_<n> in list order, systemd netdevs)."""
    cards: Dict[str, int] = {}
    for nic in profile.nics:
        cards[card_of(nic.pci)] = cards.get(card_of(nic.pci), 0) + 1
    out = []
    for index, nic in enumerate(profile.nics):
        if nic.adapter == "efa":
            out.append(_resolved_efa(nic))
            continue
        multi = cards[card_of(nic.pci)] > 1
        fn = parse_pci(nic.pci)[3]
        slot = _slot_name(nic.pci, multi)
        netdev = nic.netdev or (
            f"ib{slot}" if nic.link_layer == IB else f"en{slot}np{fn if multi else 0}"
        )
        out.append(
            dataclasses.replace(
                nic,
                name=nic.name or f"mlx5_{index}",
                netdev=netdev,
                rate=nic.rate or RATES.get((nic.link_layer, nic.hca), "100 Gb/sec (4X EDR)"),
            )
        )
    return out


def _resolved_efa(nic: NicSpec) -> NicSpec:
    """An EFA function named as on AWS (rdma-core's udev rule, NAME_PCI: ``rdmap<bus>s<slot>``),
    its ENA partner (if any) at ``ena_pci``, default the next slot of the same bus, named as
    systemd names it (``enp<bus>s<slot>``)."""
    _, bus, dev, _ = parse_pci(nic.pci)
    if not nic.ena:
        return dataclasses.replace(nic, name=nic.name or f"rdmap{bus}s{dev}", netdev=None,
                                   ena_pci=None, rate=nic.rate or "100 Gb/sec (4X EDR)")
    dom = parse_pci(nic.pci)[0]
    partner = nic.ena_pci or f"{dom:04x}:{bus:02x}:{dev + 1:02x}.0"
    _, ebus, edev, _ = parse_pci(partner)
    return dataclasses.replace(nic, name=nic.name or f"rdmap{bus}s{dev}",
                               netdev=nic.netdev or f"enp{ebus}s{edev}", ena_pci=partner,
                               rate=nic.rate or "100 Gb/sec (4X EDR)")


def ena_pci(nic: NicSpec) -> str:
    """The PCI address of an EFA function's ENA partner (of a resolved NicSpec)."""
    assert nic.ena_pci, f"{nic.pci} has no ENA partner"
    return nic.ena_pci


# The most VFs a PF has here: mlx5's own limit per PF (127, as cloud and Kubernetes hosts
# run them), and what one bus holds beside the PF (routing ids below 256).
MAX_VFS = 127


def vf_pcis(profile: Profile, pf: NicSpec) -> List[str]:
    """PCI addresses of a PF's VFs: routing id = PF count of the card + fn*16 + k (unique)."""
    dom, bus, dev, fn = parse_pci(pf.pci)
    funcs = sum(1 for n in profile.nics if card_of(n.pci) == card_of(pf.pci))
    out = []
    for k in range(pf.vfs):
        devfn = dev * 8 + funcs + fn * 16 + k
        out.append(f"{dom:04x}:{bus:02x}:{devfn // 8:02x}.{devfn % 8}")
    return out


def topo_row(nic: NicSpec, gpus: Tuple[GpuSpec, ...]) -> List[str]:
    """The nvidia-smi topo -m cells of one NIC, one per GPU in metadata order."""
    if nic.topo == "NODE":  # no PCIe proximity: NODE on its own NUMA node, SYS across
        return ["NODE" if gpu.numa == nic.numa else "SYS" for gpu in gpus]
    if nic.topo != "auto":
        return [nic.topo] * len(gpus)
    row = []
    for index, gpu in enumerate(gpus):
        if index in nic.gpus:
            row.append(nic.pair_level)
        elif gpu.numa == nic.numa:
            row.append("NODE")
        else:
            row.append("SYS")
    return row


def _dual(bus_dev: str, numa: int, gpu: int, link_layer: str, hca: str = "cx7") -> List[NicSpec]:
    """The two PCI functions of a dual-port compute card, both paired with one GPU."""
    return [
        NicSpec(f"{bus_dev}.{fn}", numa, link_layer, COMPUTE, hca=hca, gpus=(gpu,)) for fn in (0, 1)
    ]


def _dgx_h100() -> Profile:
    gpu_pcis = ["1b", "43", "52", "61", "9d", "c3", "d1", "df"]
    gpus = tuple(GpuSpec(f"0000:{b}:00.0", 0 if i < 4 else 1) for i, b in enumerate(gpu_pcis))

    def cmp(bus: str, numa: int, gpu: int, vfs: int = 0) -> NicSpec:
        return NicSpec(f"0000:{bus}:00.0", numa, IB, COMPUTE, gpus=(gpu,), vfs=vfs)

    def sto(bus: str, numa: int) -> List[NicSpec]:
        return [NicSpec(f"0000:{bus}:00.{fn}", numa, ETH, STORAGE) for fn in (0, 1)]

    nics = [
        cmp("18", 0, 0, vfs=2),
        *sto("29", 0),
        cmp("40", 0, 1, vfs=2),
        cmp("4f", 0, 2),
        cmp("5e", 0, 3),
        cmp("9a", 1, 4),
        *sto("aa", 1),
        cmp("c0", 1, 5),
        cmp("ce", 1, 6),
        cmp("dc", 1, 7),
        NicSpec("0000:e4:00.0", 1, ETH, MANAGEMENT, hca="cx6", default_route=True),
    ]
    return Profile(
        "dgx-h100",
        "DGX H100: 8 IB CX-7 compute, 2 dual-port Ethernet storage cards, "
        "1 management NIC (default route), 4 VFs, 4 NVSwitches",
        gpus,
        tuple(nics),
        nvswitches=4,
    )


def _oci_h100_nics() -> Tuple[Tuple[GpuSpec, ...], List[NicSpec]]:
    gpu_pcis = ["0f", "2d", "44", "5b", "89", "a8", "c0", "d8"]
    gpus = tuple(GpuSpec(f"0000:{b}:00.0", 0 if i < 4 else 1) for i, b in enumerate(gpu_pcis))
    nics = [
        *_dual("0000:0c:00", 0, 0, ETH),
        NicSpec("0000:1f:00.0", 0, ETH, STORAGE, topo="NODE"),
        *_dual("0000:2a:00", 0, 1, ETH),
        *_dual("0000:41:00", 0, 2, ETH),
        *_dual("0000:58:00", 0, 3, ETH),
        *_dual("0000:86:00", 1, 4, ETH),
        NicSpec("0000:98:00.0", 1, ETH, STORAGE, topo="NODE"),
        *_dual("0000:a5:00", 1, 5, ETH),
        *_dual("0000:bd:00", 1, 6, ETH),
        *_dual("0000:d5:00", 1, 7, ETH),
    ]
    return gpus, nics


def _oci_h100() -> Profile:
    gpus, nics = _oci_h100_nics()
    return Profile(
        "oci-h100",
        "OCI H100: 16 RoCE compute functions (8 dual-port cards, PXB) + 2 storage (NODE), "
        "no management",
        gpus,
        tuple(nics),
        nvswitches=4,
    )


def _h100_34() -> Profile:
    gpus, nics = _oci_h100_nics()
    with_vfs = [dataclasses.replace(n, vfs=1) if n.role == COMPUTE else n for n in nics]
    return Profile(
        "h100-34",
        "34-device H100 of link-state-detection §8.6: the oci-h100 18 PFs ACTIVE + 16 VFs "
        "mlx5_18..33 DOWN/Disabled",
        gpus,
        tuple(with_vfs),
        nvswitches=4,
    )


def _a100_roce() -> Profile:
    # 8 NUMA nodes; GPUs on 1, 3, 5, 7; management NICs alone on NUMA 0 and 6.
    gpu_bus = ["27", "2a", "67", "6a", "a7", "aa", "e7", "ea"]
    card_bus = ["24", "2d", "64", "6d", "a4", "ad", "e4", "ed"]
    gnuma = [1, 1, 3, 3, 5, 5, 7, 7]
    gpus = tuple(GpuSpec(f"0000:{b}:00.0", n) for b, n in zip(gpu_bus, gnuma))
    cards = [_dual(f"0000:{card_bus[g]}:00", gnuma[g], g, ETH, hca="cx6") for g in range(8)]
    nics = [NicSpec("0000:0c:00.0", 0, ETH, MANAGEMENT, hca="cx6")]
    for g in range(6):
        nics += cards[g]
    nics.append(NicSpec("0000:c5:00.0", 6, ETH, MANAGEMENT, hca="cx6"))
    for g in range(6, 8):
        nics += cards[g]
    return Profile(
        "a100-roce",
        "A100 RoCE, 8 NUMA nodes: 16 CX-6 compute (PXB) + mlx5_0 (NUMA 0) and mlx5_13 "
        "(NUMA 6) management by NUMA gate",
        gpus,
        tuple(nics),
        nvswitches=6,
        gpu_device="0x20b2",
    )


def _l40s_oci() -> Profile:
    gpus = (
        GpuSpec("0000:4a:00.0", 0),
        GpuSpec("0000:61:00.0", 0),
        GpuSpec("0000:ca:00.0", 1),
        GpuSpec("0000:e1:00.0", 1),
    )
    buses = [("17", 0), ("31", 0), ("4b", 0), ("98", 1), ("b1", 1), ("cb", 1)]
    nics = tuple(NicSpec(f"0000:{b}:00.0", n, ETH, STORAGE) for b, n in buses)
    return Profile(
        "l40s-oci",
        "OCI L40S: 4 PCIe GPUs, 6 RoCE NICs NODE/SYS to GPUs, no PIX/PXB -> all storage",
        gpus,
        nics,
        gpu_device="0x26b9",
    )


def _l40s_onprem() -> Profile:
    gpu_bus = ["17", "31", "4b", "65", "98", "b1", "ca", "e3"]
    gpus = tuple(GpuSpec(f"0000:{b}:00.0", 0 if i < 4 else 1) for i, b in enumerate(gpu_bus))
    nics = (
        NicSpec("0000:0d:00.0", 0, ETH, MANAGEMENT, hca="cx6", default_route=True),
        NicSpec("0000:1a:00.0", 0, IB, COMPUTE),
        NicSpec("0000:4e:00.0", 0, IB, COMPUTE),
        NicSpec("0000:9b:00.0", 1, IB, COMPUTE),
        NicSpec("0000:cd:00.0", 1, IB, COMPUTE),
    )
    return Profile(
        "l40s-onprem",
        "On-prem L40S: 8 PCIe GPUs, mlx5_0 Ethernet with the default route + 4 IB compute "
        "NODE to local GPUs",
        gpus,
        nics,
        gpu_device="0x26b9",
    )


def _l40s_onprem_bond() -> Profile:
    base = _l40s_onprem()
    mgmt = [NicSpec(f"0000:0d:00.{fn}", 0, ETH, MANAGEMENT, hca="cx6", default_route=True)
            for fn in (0, 1)]
    return dataclasses.replace(
        base,
        name="l40s-onprem-bond",
        description="l40s-onprem with a dual-port management card whose two functions are "
        "the slaves of bond0, which carries the default route",
        nics=(*mgmt, *base.nics[1:]),
        uplink="bond",
    )


def _l40s_onprem_vlan() -> Profile:
    return dataclasses.replace(
        _l40s_onprem(),
        name="l40s-onprem-vlan",
        description="l40s-onprem with the default route on vlan100 (vlan100@<management "
        "netdev>), not on the management NIC's own netdev",
        uplink="vlan",
    )


def _l40s_onprem_ipv6() -> Profile:
    return dataclasses.replace(
        _l40s_onprem(),
        name="l40s-onprem-ipv6",
        description="l40s-onprem, IPv6-only management: its default route is in "
        "/proc/net/ipv6_route, /proc/net/route has none",
        ipv6_only=True,
    )


def _l40s_onprem_multiroute() -> Profile:
    base = _l40s_onprem()
    second = NicSpec("0000:0e:00.0", 0, ETH, MANAGEMENT, hca="cx6", default_route=True)
    return dataclasses.replace(
        base,
        name="l40s-onprem-multiroute",
        description="l40s-onprem with two default routes (two uplinks), each through its own "
        "management NIC: every default route counts, both NICs are excluded",
        nics=(base.nics[0], second, *base.nics[1:]),
    )


def _gb200_nvl4() -> Profile:
    gpus = (
        GpuSpec("0008:01:00.0", 0),
        GpuSpec("0009:01:00.0", 0),
        GpuSpec("0018:01:00.0", 1),
        GpuSpec("0019:01:00.0", 1),
    )
    nics = (
        NicSpec("0000:03:00.0", 0, IB, COMPUTE, topo="SYS", name="ibp3s0"),
        NicSpec("0002:03:00.0", 0, IB, COMPUTE, topo="SYS", name="ibP2p3s0"),
        NicSpec(
            "0006:03:00.0",
            0,
            ETH,
            MANAGEMENT,
            hca="bf3",
            topo="SYS",
            name="roceP6p3s0",
            default_route=True,
        ),
        NicSpec("0010:03:00.0", 1, IB, COMPUTE, topo="SYS", name="ibP16p3s0"),
        NicSpec("0012:03:00.0", 1, IB, COMPUTE, topo="SYS", name="ibP18p3s0"),
        NicSpec("0016:03:00.0", 1, ETH, MANAGEMENT, hca="bf3", topo="SYS", name="roceP22p3s0"),
    )
    return Profile(
        "gb200-nvl4",
        "GB200 NVL4 (Grace): all-SYS topo, 4 IB CX-7 compute + 2 BlueField-3 management "
        "(roceP6p3s0 has the default route)",
        gpus,
        nics,
        gpu_device="0x2941",
    )


def _l40_dualport(buses: Tuple[Tuple[str, int], ...] = (("1a", 0), ("9b", 1))) -> Profile:
    gpus = (
        GpuSpec("0000:31:00.0", 0),
        GpuSpec("0000:4b:00.0", 0),
        GpuSpec("0000:b1:00.0", 1),
        GpuSpec("0000:ca:00.0", 1),
    )
    nics: List[NicSpec] = []
    for bus, numa in buses:
        nics.append(NicSpec(f"0000:{bus}:00.0", numa, IB, COMPUTE, hca="cx6"))
        nics.append(
            NicSpec(
                f"0000:{bus}:00.1", numa, IB, COMPUTE, hca="cx6", state="DOWN", phys_state="Polling"
            )
        )
    name = "l40-dualport" if len(buses) == 2 else f"l40-dualport-{len(buses)}"
    return Profile(
        name,
        f"L40: {len(buses)} dual-port IB compute cards, port of function .1 uncabled "
        f"(DOWN/Polling) on each",
        gpus,
        tuple(nics),
        gpu_device="0x26b5",
    )


def _l40_dualport_3() -> Profile:
    """Three cards: the fewest whose mode is no tie, so a short card is judged at first poll."""
    return _l40_dualport((("1a", 0), ("5e", 0), ("9b", 1)))


def synthetic(devices: int, vfs: int = 0) -> Profile:
    """N single-port IB compute PFs on 2 NUMA nodes, PXB to 8 GPUs (for benchmarks); with
    ``vfs``, each PF has that many SR-IOV VFs (a cloud or Kubernetes host: 127 per PF)."""
    if not 1 <= devices <= 4096:
        raise ValueError(f"--devices must be between 1 and 4096, got {devices}")
    if not 0 <= vfs <= MAX_VFS:
        raise ValueError(f"--vfs must be between 0 and {MAX_VFS}, got {vfs}")
    gpus = tuple(GpuSpec(f"0000:{0xE0 + 2 * g:02x}:00.0", 0 if g < 4 else 1) for g in range(8))
    nics = []
    for i in range(devices):
        gpu = i * 8 // devices
        dom, bus = divmod(i, 0xD0)
        nics.append(
            NicSpec(f"{dom:04x}:{bus + 0x08:02x}:00.0", gpus[gpu].numa, IB, COMPUTE, gpus=(gpu,),
                    vfs=vfs)
        )
    return Profile(
        "synthetic",
        "N single-port IB compute PFs over 2 NUMA nodes, PXB (create --devices N, default 8)",
        gpus,
        tuple(nics),
    )


def _cloud_vm() -> Profile:
    """A real cloud H100 VM: flat root bus, numa_node -1, no RDMA device."""
    return Profile(
        "cloud-vm",
        "cloud GPU VM: one H100 at 0000:00:06.0 on the root bus, numa_node -1, virtio eth0 "
        "with the default route, no RDMA device",
        (GpuSpec("0000:00:06.0", -1),),
        (),
        flat=True,
    )


def _cloud_vm_ib() -> Profile:
    """cloud-vm with a passed-through ConnectX-7 IB function beside the GPU (PHB to it)."""
    base = _cloud_vm()
    return dataclasses.replace(
        base,
        name="cloud-vm-ib",
        description="cloud-vm plus a passed-through ConnectX-7 InfiniBand function at "
        "0000:00:07.0 (numa_node -1, PHB to the GPU)",
        nics=(NicSpec("0000:00:07.0", -1, IB, COMPUTE, topo="PHB"),),
    )


# ------------------------------------------------------------------ AWS EFA hosts
# Where the layouts come from. Device counts and bandwidth: AWS's instance pages and EC2 user
# guide (p4d/p5/p5e: docs.aws.amazon.com/AWSEC2/latest/UserGuide/efa-acc-inst-types.html and
# p5-efa.html, "P5 and P5e instances support up to 32 network cards ... 3,200 Gbps"); the EFA
# generation of each instance type: the tables of efa.html (Nitro v3..v6). The PCI trees: real
# hwloc dumps of the instances in aws-ofi-nccl's tests/unit/fixtures/topology/<type>/
# topology.xml (p4d, p5en, p6-b200, with the expectations of its topology unit test: "p4d EFA
# NICs and GPUs meet at host bridges, not PCIe switches"; "p6-b200 places its eight Amazon EFA
# NICs behind shared PCIe switches"), and for p5 aws-ofi-nccl's topology/p5.48xl-topo.xml
# (device names) with two measured listings (uccl's 10_warmup example output: cuda:0
# 53:00.0 with rdmap79s0..82s0 at 4f..52:00.0, GPUs 0-3 on NUMA 0; the Hugging Face
# ultrascale playbook's lstopo: rdmap79s0 at 4f:00.0, id 1d0f:efa1, alone on the bus of its
# bridge 46:01.0). From p5 on every function (EFA, ENA, GPU, NVMe) sits alone on the bus of
# its own downstream port of an Amazon switch (1d0f:0200); on p4d the ENA, the EFA and two
# GPUs share one root bus.


def _p4d() -> Profile:
    """AWS p4d.24xlarge: 8 A100 SXM4 40GB and 4 EFA of 100 Gb/s (400 Gbps), EFA v1.

    The real tree (aws-ofi-nccl tests/unit/fixtures/topology/p4d/topology.xml, lspci in
    aws-ofi-nccl #64): four root buses 10, 20 (NUMA 0), 90, a0 (NUMA 1), each holding
    one "EFA with ENA" interface (ENA ens32 at 10:00.0, ens65 at 20:01.0, ens129 at 90:01.0,
    ens161 at a0:01.0; EFA 1d0f:efa0 at <bus>:1b.0, rdmap16s27...), two GPUs (10de:20b0 at
    1c.0 and 1d.0) and two NVMe disks: EFA and GPUs meet at the host bridge (PHB). Six
    NVSwitches (10de:1af1) sit on root bus 80. ens32 carries the default route.
    """
    groups = ((0x10, 0, 0x00, "ens32"), (0x20, 0, 0x01, "ens65"),
              (0x90, 1, 0x01, "ens129"), (0xA0, 1, 0x01, "ens161"))
    gpus = tuple(GpuSpec(f"0000:{bus:02x}:{dev:02x}.0", numa)
                 for bus, numa, _, _ in groups for dev in (0x1C, 0x1D))
    nics = [NicSpec(f"0000:{bus:02x}:1b.0", numa, "Unknown", COMPUTE, hca="efa0",
                    gpus=(2 * i, 2 * i + 1), pair_level="PHB", adapter="efa",
                    ena_pci=f"0000:{bus:02x}:{slot:02x}.0", netdev=netdev,
                    default_route=i == 0)
            for i, (bus, numa, slot, netdev) in enumerate(groups)]
    return Profile(
        "p4d",
        "AWS p4d.24xlarge: 8 A100, 4 EFA of 100 Gb/s on four root buses with their ENA and "
        "two GPUs each (PHB); ens32 has the default route",
        gpus,
        tuple(nics),
        nvswitches=6,
        gpu_device="0x20b0",
        nvswitch_device="0x1af1",
    )


P5_GPU_BUSES = (0x53, 0x64, 0x75, 0x86, 0x97, 0xA8, 0xB9, 0xCA)


def _p5(ena: bool = True, name: str = "p5", gpu: str = "0x2330", model: str = "H100"
        ) -> Profile:
    """AWS p5.48xlarge: 8 H100 SXM5 and 32 EFA of 100 Gb/s (3200 Gbps), EFA v2.

    GPU g at bus P5_GPU_BUSES[g] (GPUs 0-3 on NUMA 0, 4-7 on NUMA 1) with its four EFA
    (1d0f:efa1) on the four buses just below it (53:00.0 with rdmap79s0..rdmap82s0 at
    4f..52:00.0), all on downstream ports of one switch (PIX, as aws-ofi-nccl's p5 topology
    puts them). Not in any file found: where a p5's ENA functions sit. They are modelled as
    p6-b200's real tree has them, each on a bus of its own behind a downstream port of its
    EFA's switch (here the four buses above the GPU's), never on the EFA's bus; so the sysfs
    reader's bus pairing (sources/sysfs.py ``_efa_netdev``) finds no partner and pairs them by
    the MAC the EFA's link-local GID was made from (sim/efa.py ``link_local_gid``, after the
    one real p5 GID at hand). Card 0's ENA carries the default route. ``ena=False``:
    EFA-only interfaces (no ENA) but on card 0: those are watched for presence and counters
    only.
    """
    gpus = tuple(GpuSpec(f"0000:{b:02x}:00.0", 0 if i < 4 else 1)
                 for i, b in enumerate(P5_GPU_BUSES))
    nics = []
    for g, gbus in enumerate(P5_GPU_BUSES):
        for k in range(4):
            first = g == 0 and k == 0
            nics.append(NicSpec(f"0000:{gbus - 4 + k:02x}:00.0", gpus[g].numa, "Unknown",
                                COMPUTE, hca="efa1", gpus=(g,), pair_level="PIX",
                                adapter="efa", ena=ena or first,
                                ena_pci=f"0000:{gbus + 1 + k:02x}:00.0",
                                default_route=first))
    return Profile(
        name if ena else f"{name}-efa-only",
        f"AWS {name}.48xlarge: 8 {model}, 32 EFA (4 per GPU on its PCIe switch, PIX), "
        + ("each with an ENA on a bus of its own" if ena
           else "efa-only interfaces but network card 0")
        + "; card 0's ENA has the default route",
        gpus,
        tuple(nics),
        nvswitches=4,
        gpu_device=gpu,
    )


def _p5e() -> Profile:
    """AWS p5e.48xlarge: p5's layout with 8 H200 SXM (10de:2335) and the same 32 EFA v2 of
    100 Gb/s (AWS: "P5 and P5e instances support up to 32 network cards", both Nitro v4 /
    EFA v2 in efa.html). Its PCI bus numbers are not in any file found: p5's are used."""
    return _p5(name="p5e", gpu="0x2335", model="H200")


def _p6_b200() -> Profile:
    """AWS p6-b200.48xlarge: 8 B200 (10de:2901) and 8 EFA v4 (1d0f:efa3) of 400 Gb/s
    (3200 Gbps: ep-benchmarks-efa's hardware table, pplx-garden's "EFA 400Gb/s x 8"; the efa
    driver reports 400 Gbps as "400 Gb/sec (8X HDR)", efa_link_gbps_to_speed_and_width).

    The real tree (aws-ofi-nccl tests/unit/fixtures/topology/p6-b200/topology.xml): four
    switches, two per NUMA node, each with two ENA, two EFA and two GPUs (and two NVMe disks)
    on downstream ports of their own: ENA 47/48 (enp71s0, enp72s0), EFA 4f/50 (rdmap79s0,
    rdmap80s0), GPU 51/52; ENA 58/59, EFA 60/61, GPU 62/63; ENA 6a/6b, EFA 71/72, GPU 75/76;
    ENA 7c/7d, EFA 84/85, GPU 86/87. The third switch also holds two ConnectX-7 InfiniBand
    functions (15b3:1021, ibp115s0f0 and ibp116s0f0, port ACTIVE; 100 Gb/sec (2X HDR) as
    another B200 host reports them): PIX to GPUs 4-5, NODE to 6-7, SYS to 0-3. No ENA shares
    an EFA's bus, so the EFA devices get presence and counters only (see ``_p5``);
    enp71s0 carries the default route.
    """
    groups = (((0x47, 0x48), (0x4F, 0x50), (0x51, 0x52), 0),
              ((0x58, 0x59), (0x60, 0x61), (0x62, 0x63), 0),
              ((0x6A, 0x6B), (0x71, 0x72), (0x75, 0x76), 1),
              ((0x7C, 0x7D), (0x84, 0x85), (0x86, 0x87), 1))
    gpus = tuple(GpuSpec(f"0000:{b:02x}:00.0", numa) for _, _, pair, numa in groups
                 for b in pair)
    nics: List[NicSpec] = []
    for g, (enas, efas, _, numa) in enumerate(groups):
        for k in (0, 1):
            nics.append(NicSpec(f"0000:{efas[k]:02x}:00.0", numa, "Unknown", COMPUTE,
                                hca="efa3", gpus=(2 * g, 2 * g + 1), pair_level="PIX",
                                adapter="efa", ena_pci=f"0000:{enas[k]:02x}:00.0",
                                rate="400 Gb/sec (8X HDR)", default_route=g == 0 and k == 0))
    for k, bus in enumerate((0x73, 0x74)):
        name = f"ibp{bus}s0f0"
        nics.insert(6 + k, NicSpec(f"0000:{bus:02x}:00.0", 1, IB, COMPUTE, gpus=(4, 5),
                                   pair_level="PIX", name=name, netdev=name,
                                   rate="100 Gb/sec (2X HDR)"))
    return Profile(
        "p6-b200",
        "AWS p6-b200.48xlarge: 8 B200, 8 EFA of 400 Gb/s (2 per PCIe switch with 2 GPUs, "
        "PIX), 2 ConnectX-7 IB (ibp115s0f0, ibp116s0f0); enp71s0 has the default route",
        gpus,
        tuple(nics),
        gpu_device="0x2901",
    )


PROFILES: Dict[str, Callable[[], Profile]] = {
    "dgx-h100": _dgx_h100,
    "oci-h100": _oci_h100,
    "a100-roce": _a100_roce,
    "l40s-oci": _l40s_oci,
    "l40s-onprem": _l40s_onprem,
    "l40s-onprem-bond": _l40s_onprem_bond,
    "l40s-onprem-vlan": _l40s_onprem_vlan,
    "l40s-onprem-ipv6": _l40s_onprem_ipv6,
    "l40s-onprem-multiroute": _l40s_onprem_multiroute,
    "gb200-nvl4": _gb200_nvl4,
    "h100-34": _h100_34,
    "l40-dualport": _l40_dualport,
    "l40-dualport-3": _l40_dualport_3,
    "cloud-vm": _cloud_vm,
    "cloud-vm-ib": _cloud_vm_ib,
    "synthetic": lambda: synthetic(8),
    "p4d": _p4d,
    "p5": _p5,
    "p5-efa-only": lambda: _p5(ena=False),
    "p5e": _p5e,
    "p6-b200": _p6_b200,
}


def get_profile(name: str, devices: Optional[int] = None, vfs: int = 0) -> Profile:
    """Look a profile up by name; `devices` and `vfs` only apply to synthetic."""
    if name not in PROFILES:
        raise ValueError(f"unknown profile {name!r} (one of: {', '.join(PROFILES)})")
    if devices is not None or vfs:
        if name != "synthetic":
            raise ValueError("--devices and --vfs only apply to the synthetic profile")
        return synthetic(8 if devices is None else devices, vfs)
    return PROFILES[name]()
