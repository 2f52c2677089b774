"""AWS Elastic Fabric Adapter functions in the fake host: EFA, its ENA partner, files.

What the efa driver shows (drivers/infiniband/hw/efa/efa_verbs.c): one port that is always
``4: ACTIVE`` / ``5: LinkUp``, at the rate of the device's link (``efa_query_port``: older
kernels hard-code IB_SPEED_EDR x IB_WIDTH_4X, ``100 Gb/sec (4X EDR)``; newer ones map the
device's ``max_link_speed_gbps``, 400 to ``400 Gb/sec (8X HDR)``), link layer ``Unknown``
(IB_LINK_LAYER_UNSPECIFIED), one GID, the port statistics under ``ports/1/hw_counters`` and
the device statistics under ``hw_counters``. The netdev of an "EFA with ENA" interface is
the ENA function's (vendor 0x1d0f, device 0xec20, driver ena) at the profile's ``ena_pci``
(on the EFA's root bus on p4d, behind a downstream port of its own from p5 on), with
``operstate`` and ``carrier``. The PCI device id is the EFA generation (profiles.HCAS).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any, Dict, Optional, Tuple

from . import kernel
from .fsio import symlink, write_new
from .hostfiles import HostWriter
from .profiles import HCAS, NicSpec, ena_pci

EFA_DRIVER = "sys/bus/pci/drivers/efa"
AMAZON = "0x1d0f"
ENA_DEVICE_ID = "0xec20"
# EFA_DEFINE_PORT_STATS (with the rdma_write and network groups of newer kernels) and
# EFA_DEFINE_DEVICE_STATS of efa_verbs.c, in the driver's order.
PORT_STATS: Tuple[str, ...] = (
    "tx_bytes", "tx_pkts", "rx_bytes", "rx_pkts", "rx_drops", "send_bytes", "send_wrs",
    "recv_bytes", "recv_wrs", "rdma_read_wrs", "rdma_read_bytes", "rdma_read_wr_err",
    "rdma_read_resp_bytes", "rdma_write_wrs", "rdma_write_bytes", "rdma_write_wr_err",
    "rdma_write_recv_bytes", "retrans_bytes", "retrans_pkts", "retrans_timeout_events",
    "unresponsive_remote_events", "impaired_remote_conn_events",
)
DEVICE_STATS: Tuple[str, ...] = (
    "submitted_cmds", "completed_cmds", "cmds_err", "no_completion_cmds", "keep_alive_rcvd",
    "alloc_pd_err", "create_qp_err", "create_cq_err", "reg_mr_err", "alloc_ucontext_err",
    "create_ah_err", "mmap_err",
)


def ena_mac(guid: str) -> str:
    """The ENA partner's hardware address: locally administered unicast, as AWS gives its
    network interfaces (``16:b0:33:f8:77:cd``), the last five bytes from the EFA's GUID."""
    digits = guid.replace(":", "")[-10:]
    return "16:" + ":".join(digits[i:i + 2] for i in range(0, 10, 2))


def link_local_gid(mac: str) -> str:
    """The link-local GID with the modified EUI-64 of ``mac`` (RFC 4291 appendix A): what an
    "EFA with ENA" interface shows as its GID 0, by the one real p5 GID at hand
    (``fe80::14b0:33ff:fef8:77cd`` is ``16:b0:33:f8:77:cd``'s). The reader pairs the two by
    it (sources/sysfs.py)."""
    octets = [int(part, 16) for part in mac.split(":")]
    octets[0] ^= 0x02  # the universal/local bit, inverted in an EUI-64 identifier
    iid = octets[:3] + [0xFF, 0xFE] + octets[3:]
    return "fe80:0000:0000:0000:" + ":".join(f"{iid[i]:02x}{iid[i + 1]:02x}"
                                             for i in range(0, 8, 2))


def _function(builder: HostWriter, pci: str, numa: int, device: str, driver: str,
              pclass: str) -> Path:
    pdir: Path = builder.root / "sys/devices" / builder.layout.path_of(pci)
    builder.plain_function(pdir, pci, AMAZON, device, pclass, numa, driver, None)
    return pdir


def efa_pf(builder: HostWriter, nic: NicSpec, index: int, guid: str, ip: str) -> Dict[str, Any]:
    """One EFA function (and its ENA partner); returns its manifest record."""
    assert nic.name and nic.rate
    pdir = _function(builder, nic.pci, nic.numa, HCAS[nic.hca][0], "efa", "0x020000")
    builder.link_files(pdir, "32.0 GT/s PCIe", 16)
    idir = pdir / "infiniband" / nic.name
    write_new(idir / "fw_ver", "0.0.0.0\n")
    write_new(idir / "node_guid", guid + "\n")
    write_new(idir / "node_type", "1: CA\n")
    write_new(idir / "node_desc", f"{builder.profile.name}-sim {nic.name}\n")
    symlink(idir / "device", pdir)
    port = idir / "ports" / "1"
    write_new(port / "state", kernel.port_state_line("ACTIVE"))
    write_new(port / "phys_state", kernel.phys_state_line("LinkUp"))
    write_new(port / "rate", nic.rate + "\n")
    write_new(port / "link_layer", "Unknown\n")
    mac = ena_mac(guid) if nic.netdev else None
    gid = link_local_gid(mac) if mac else "fe80:0000:0000:0000:" + guid
    write_new(port / "gids" / "0", gid + "\n")
    for name in PORT_STATS:
        write_new(port / "hw_counters" / name, "0\n")
    for name in DEVICE_STATS:
        write_new(idir / "hw_counters" / name, "0\n")
    symlink(builder.root / "sys/class/infiniband" / nic.name, idir)
    ndir: Optional[Path] = None
    if nic.netdev:
        ena = _function(builder, ena_pci(nic), nic.numa, ENA_DEVICE_ID, "ena", "0x020000")
        ndir = builder.netdev(ena, nic.netdev, "Ethernet", guid, guid.encode()[:8], True, mac)
        write_new(ndir / "carrier", "1\n")
        builder._connected_route(nic.netdev, ip, nic.default_route)
    return {
        "name": nic.name,
        "pci": nic.pci,
        "card": nic.pci.rsplit(".", 1)[0],
        "kind": "pf",
        "role": nic.role,
        "numa": nic.numa,
        "link_layer": "Unknown",
        "hca_type": "",
        "ena_pci": nic.ena_pci,
        "adapter": "efa",
        "physfn": None,
        "pci_path": builder.rel(pdir),
        "ib_path": builder.rel(idir),
        "ports": {"1": {
            "state": "ACTIVE", "phys_state": "LinkUp", "rate": nic.rate,
            "netdev": nic.netdev, "netdev_path": builder.rel(ndir) if ndir else None,
            "operstate": "up" if ndir else None,
        }},
    }
