"""The fake host's layout matches the kernel's sysfs and link-state-detection's tables."""

from __future__ import annotations

import json
import os
import sys
import uuid
from collections import Counter
from pathlib import Path
from typing import Dict, List

import pytest

from nichealthd.sim import SimError, kernel, tree
from nichealthd.sim.profiles import PROFILES

if sys.version_info >= (3, 11):
    import tomllib
else:  # pragma: no cover
    import tomli as tomllib

ALL = sorted(PROFILES)
BLUEFIELD = {"MT41682", "MT41686", "MT41692"}

# Intended role counts per profile: link-state-detection §4.1.3, §4.2.4, §4.3.4 and §8.6.
EXPECTED = {
    "dgx-h100": {"compute": 8, "storage": 4, "management": 1, "vf": 4},
    "oci-h100": {"compute": 16, "storage": 2},
    "a100-roce": {"compute": 16, "management": 2},
    "l40s-oci": {"storage": 6},
    "l40s-onprem": {"compute": 4, "management": 1},
    "l40s-onprem-bond": {"compute": 4, "management": 2},
    "l40s-onprem-vlan": {"compute": 4, "management": 1},
    "l40s-onprem-ipv6": {"compute": 4, "management": 1},
    "l40s-onprem-multiroute": {"compute": 4, "management": 2},
    "gb200-nvl4": {"compute": 4, "management": 2},
    "h100-34": {"compute": 16, "storage": 2, "vf": 16},
    "l40-dualport": {"compute": 4},
    "l40-dualport-3": {"compute": 6},
    "synthetic": {"compute": 8},
    "cloud-vm": {},
    "cloud-vm-ib": {"compute": 1},
    "p4d": {"compute": 4},
    "p5": {"compute": 32},
    "p5-efa-only": {"compute": 32},
    "p5e": {"compute": 32},
    "p6-b200": {"compute": 10},  # 8 EFA, 2 ConnectX-7 IB
}
# The AWS profiles have their own layout tests (tests/sim/test_efa.py).
AWS = ("p4d", "p5", "p5-efa-only", "p5e", "p6-b200")
MLX5 = [p for p in EXPECTED if p not in AWS]


def read(path: Path) -> str:
    return path.read_text()


def default_route_iface(root: Path) -> str:
    """The one default route's interface (most profiles have exactly one)."""
    (only,) = default_route_ifaces(root)
    return only


def default_route_ifaces(root: Path) -> List[str]:
    """Every default route's interface, IPv4 then IPv6."""
    lines = read(root / "proc/net/route").splitlines()
    assert lines[0].split() == [
        "Iface",
        "Destination",
        "Gateway",
        "Flags",
        "RefCnt",
        "Use",
        "Metric",
        "Mask",
        "MTU",
        "Window",
        "IRTT",
    ]
    defaults = [ln.split()[0] for ln in lines[1:] if ln.split()[1] == "00000000"]
    # IPv6 (proc/net/ipv6_route): destination ::/0, not the reject route the kernel keeps on lo.
    for line in read(root / "proc/net/ipv6_route").splitlines():
        fields = line.split()
        assert len(fields) == 10 and len(fields[0]) == 32
        if fields[:2] == ["0" * 32, "00"] and fields[9] != "lo":
            defaults.append(fields[9])
    assert defaults
    return defaults


def physical_netdevs(root: Path, iface: str) -> List[str]:
    """The netdevs under a bond (bonding/slaves) or VLAN (lower_*), or the netdev itself."""
    ndir = root / "sys/class/net" / iface
    if (ndir / "bonding/slaves").exists():
        return read(ndir / "bonding/slaves").split()
    lowers = [e[len("lower_"):] for e in os.listdir(ndir) if e.startswith("lower_")]
    return lowers or [iface]


def classify(root: Path) -> Dict[str, str]:
    """link-state-detection §4.2's classification, computed only from the files a daemon would read
    (with README, "Where nichealthd differs": no GPU with a known NUMA node skips the NUMA gate)."""
    meta = json.loads(read(root / "gpu_metadata.json"))
    gpu_numas = {g["numa_node"] for g in meta["gpus"] if g["numa_node"] != -1}
    if not (root / "sys/class/infiniband").exists():  # a host without RDMA devices
        return {}
    default_devs = set()
    for netdev in (n for i in default_route_ifaces(root) for n in physical_netdevs(root, i)):
        dr = root / "sys/class/net" / netdev / "device/infiniband"
        if dr.is_dir():
            default_devs.update(os.listdir(dr))
    roles = {}
    for name in sorted(os.listdir(root / "sys/class/infiniband")):
        dev = root / "sys/class/infiniband" / name
        if (dev / "device/physfn").exists():
            roles[name] = "vf"
            continue
        numa = int(read(dev / "device/numa_node"))
        topo = meta["nic_topology"][name]
        link = read(dev / "ports/1/link_layer").strip()
        # An EFA device has no hca_type file.
        bluefield = (dev / "hca_type").exists() and read(dev / "hca_type").strip() in BLUEFIELD
        gated = numa not in gpu_numas if gpu_numas else bluefield
        if name in default_devs or gated:
            roles[name] = "management"
        elif ({"PIX", "PXB"} & set(topo) or link == "InfiniBand"
              or (link == "Unknown" and "PHB" in topo)):  # an EFA on a GPU's root complex
            roles[name] = "compute"
        elif {"NODE", "PHB"} & set(topo):
            roles[name] = "storage"
        elif bluefield:
            roles[name] = "management"
        else:
            roles[name] = "storage"
    return roles


@pytest.mark.parametrize("profile", ALL)
def test_profile_builds_with_intended_roles(built, profile: str) -> None:
    root = built(profile)
    manifest = json.loads(read(root / "sim.json"))
    assert manifest["profile"] == profile
    assert dict(Counter(manifest["roles"].values())) == EXPECTED[profile]
    # The intended roles are what the spec's algorithm derives from the tree itself.
    assert classify(root) == manifest["roles"]


@pytest.mark.parametrize("profile", MLX5)
def test_sysfs_layout(built, profile: str) -> None:
    root = built(profile)
    manifest = tree.load(root)
    pcis = [d["pci"] for d in manifest["devices"]]
    assert len(set(pcis)) == len(pcis)
    sys_ = root / "sys"
    driver = (sys_ / "bus/pci/drivers/mlx5_core").resolve()
    assert driver.is_dir()
    for dev in manifest["devices"]:
        cls = sys_ / "class/infiniband" / dev["name"]
        assert cls.is_symlink() and not os.path.isabs(os.readlink(cls))
        assert cls.resolve() == (root / dev["ib_path"]).resolve()
        pci_dir = (cls / "device").resolve()
        assert (
            pci_dir
            == (root / dev["pci_path"]).resolve()
            == (sys_ / "bus/pci/devices" / dev["pci"]).resolve()
        )
        assert pci_dir.name == dev["pci"]
        assert f"PCI_SLOT_NAME={dev['pci']}\n" in read(cls / "device/uevent")
        assert "DRIVER=mlx5_core\n" in read(cls / "device/uevent")
        assert read(cls / "device/vendor") == "0x15b3\n"
        assert read(cls / "device/device").strip() in {"0x1021", "0x101b", "0xa2dc", "0x101e"}
        assert (cls / "device/driver").resolve() == driver
        assert int(read(cls / "device/numa_node")) == dev["numa"]
        assert read(cls / "hca_type").strip() == dev["hca_type"]
        assert read(cls / "fw_ver").count(".") == 2
        assert read(cls / "board_id").startswith("MT_")
        assert len(read(cls / "node_guid").strip().split(":")) == 4
        if dev["kind"] == "vf":
            assert (cls / "device/physfn").is_symlink()
            parent = tree.device(manifest, dev["physfn"])
            assert (cls / "device/physfn").resolve() == (root / parent["pci_path"]).resolve()
            assert not (cls / "device/sriov_totalvfs").exists()
        else:
            assert not os.path.lexists(cls / "device/physfn")
            assert int(read(cls / "device/sriov_totalvfs")) == 16
        port = cls / "ports/1"
        assert read(port / "link_layer").strip() == dev["link_layer"]
        assert read(port / "state") == kernel.port_state_line(dev["ports"]["1"]["state"])
        assert read(port / "phys_state") == kernel.phys_state_line(dev["ports"]["1"]["phys_state"])
        assert " Gb/sec (" in read(port / "rate")
        for i in range(4):
            assert len(read(port / "gids" / str(i)).strip().split(":")) == 8
            assert read(port / "gid_attrs/types" / str(i)).strip() in {"IB/RoCE v1", "RoCE v2"}
        assert sorted(os.listdir(port / "counters")) == sorted(kernel.PMA_COUNTER_WIDTHS)
        assert sorted(os.listdir(port / "hw_counters")) == sorted(
            kernel.HW_COUNTERS + kernel.NEW_HW_COUNTERS
        )
        assert all(read(p) == "0\n" for p in (port / "hw_counters").iterdir())
        iface = dev["ports"]["1"]["netdev"]
        if dev["kind"] == "pf":
            assert iface
            ndir = sys_ / "class/net" / iface
            assert (ndir / "device").resolve() == pci_dir
            assert read(ndir / "carrier_changes") == "0\n"
            assert not (ndir / "statistics/carrier_changes").exists()
            assert read(ndir / "dev_port") == "0\n"
            assert read(ndir / "operstate") in {"up\n", "down\n"}
            for stat in ("rx_bytes", "tx_bytes", "rx_errors", "tx_errors"):
                assert read(ndir / "statistics" / stat) == "0\n"
            assert (pci_dir / "net" / iface).resolve() == ndir.resolve()
            assert iface.startswith("ib" if dev["link_layer"] == "InfiniBand" else "en")
    ifaces = [p["netdev"] for d in manifest["devices"] for p in d["ports"].values() if p["netdev"]]
    assert len(set(ifaces)) == len(ifaces)


@pytest.mark.parametrize("profile", MLX5)
def test_proc_metadata_and_config(built, profile: str) -> None:
    root = built(profile)
    manifest = tree.load(root)
    boot_id = read(root / "proc/sys/kernel/random/boot_id")
    assert boot_id.endswith("\n") and uuid.UUID(boot_id.strip()).version == 4
    # Default route: through the management NIC's netdev, which maps back to its IB device.
    ifaces = default_route_ifaces(root)
    assert manifest["default_route_iface"] in ifaces
    assert len(ifaces) == (2 if profile == "l40s-onprem-multiroute" else 1)
    iface = manifest["default_route_iface"]
    if iface in ("eno1", "eth0"):  # onboard Intel NIC, or a VM's virtio NIC
        ib = root / "sys/class/net" / iface / "device/infiniband"
        vendor = "0x8086" if iface == "eno1" else "0x1af4"
        assert (root / f"sys/class/net/{iface}/device/vendor").read_text() == vendor + "\n"
        assert not ib.exists()
    else:
        for netdev in (n for i in ifaces for n in physical_netdevs(root, i)):  # bond, VLAN
            ib = root / "sys/class/net" / netdev / "device/infiniband"
            (dev,) = os.listdir(ib)
            assert (ib / dev).resolve() == (root / "sys/class/infiniband" / dev).resolve()
            assert manifest["roles"][dev] == "management"
    assert all(len(line) == 128 for line in read(root / "proc/net/route").splitlines(True))

    meta = json.loads(read(root / "gpu_metadata.json"))
    assert meta["version"] == "1.0" and meta["node_name"] == f"{profile}-sim"
    assert [g["gpu_id"] for g in meta["gpus"]] == list(range(len(meta["gpus"])))
    for gpu in meta["gpus"]:
        assert set(gpu) == {"gpu_id", "pci_address", "numa_node", "uuid", "serial_number"}
        assert gpu["uuid"].startswith("GPU-")
    pfs = [d["name"] for d in manifest["devices"] if d["kind"] == "pf"]
    assert sorted(meta["nic_topology"]) == sorted(pfs)
    for row in meta["nic_topology"].values():
        assert len(row) == len(meta["gpus"])
        assert set(row) <= {"X", "PIX", "PXB", "PHB", "NODE", "SYS"}

    with open(root / "nichealthd.toml", "rb") as fh:
        cfg = tomllib.load(fh)
    assert cfg["sysfsRoot"] == str(root / "sys") and os.path.isabs(cfg["sysfsRoot"])
    assert cfg["procRoot"] == str(root / "proc")
    assert cfg["metadataPath"] == str(root / "gpu_metadata.json")
    assert cfg["stateFile"] == str(root / "var/lib/nichealthd/state.json")
    assert cfg["eventLog"] == str(root / "events.jsonl")
    assert cfg["nodeName"] == f"{profile}-sim"
    assert (cfg["platformConnectorSocket"], cfg["dbus"], cfg["metricsListen"]) == ("", "none", "")
    assert (root / "var/lib/nichealthd").is_dir()


def _topo(root: Path) -> Dict[str, List[str]]:
    topo: Dict[str, List[str]] = json.loads(read(root / "gpu_metadata.json"))["nic_topology"]
    return topo


def test_dgx_h100_details(built) -> None:
    root = built("dgx-h100")
    m = tree.load(root)
    compute = [d for d in m["devices"] if d["role"] == "compute"]
    assert all(d["hca_type"] == "MT4129" and d["link_layer"] == "InfiniBand" for d in compute)
    assert all(
        read(root / d["ib_path"] / "ports/1/rate") == "400 Gb/sec (4X NDR)\n" for d in compute
    )
    for d in compute:  # one PXB each, to its own GPU; the 8 pairings are distinct
        assert _topo(root)[d["name"]].count("PXB") == 1
    assert len({_topo(root)[d["name"]].index("PXB") for d in compute}) == 8
    storage = [d for d in m["devices"] if d["role"] == "storage"]
    assert sorted(Counter(d["card"] for d in storage).values()) == [2, 2]
    assert {d["pci"][-1] for d in storage} == {"0", "1"}
    assert all(set(_topo(root)[d["name"]]) <= {"NODE", "SYS"} for d in storage)
    vfs = [d for d in m["devices"] if d["kind"] == "vf"]
    assert len({d["physfn"] for d in vfs}) == 2
    meta = json.loads(read(root / "gpu_metadata.json"))
    assert {g["numa_node"] for g in meta["gpus"]} == {0, 1}


def test_default_route_through_bond_vlan_and_ipv6(built) -> None:
    """The management NIC is reached through a stacked netdev or IPv6 only."""
    bond = built("l40s-onprem-bond")
    net = bond / "sys/class/net"
    assert default_route_iface(bond) == "bond0"
    assert read(net / "bond0/bonding/slaves") == "enp13s0f0np0 enp13s0f1np1\n"
    for slave in ("enp13s0f0np0", "enp13s0f1np1"):
        assert (net / "bond0" / f"lower_{slave}").resolve() == (net / slave).resolve()
        assert (net / slave / "master").resolve() == (net / "bond0").resolve()
    assert not (net / "bond0/device").exists()  # virtual
    vlan = built("l40s-onprem-vlan")
    assert default_route_iface(vlan) == "vlan100"
    assert [e for e in os.listdir(vlan / "sys/class/net/vlan100") if e.startswith("lower_")] == [
        "lower_enp13s0np0"]
    ipv6 = built("l40s-onprem-ipv6")
    assert default_route_iface(ipv6) == "enp13s0np0"
    v4 = [ln.split() for ln in read(ipv6 / "proc/net/route").splitlines()[1:]]
    assert [f for f in v4 if f[1] == "00000000"] == []  # no IPv4 default route
    assert "enp13s0np0" not in {f[0] for f in v4}
    multi = built("l40s-onprem-multiroute")
    assert default_route_ifaces(multi) == ["enp14s0np0", "enp13s0np0"]  # two uplinks
    plain = built("l40s-onprem")
    lo_reject = [ln for ln in read(plain / "proc/net/ipv6_route").splitlines()
                 if ln.endswith(" lo") and ln.split()[8] == "00200200"]
    assert len(lo_reject) == 1  # every tree has the kernel's reject route, never a default


def test_a100_management_by_numa(built) -> None:
    root = built("a100-roce")
    m = tree.load(root)
    gpu_numas = {g["numa_node"] for g in json.loads(read(root / "gpu_metadata.json"))["gpus"]}
    mgmt = {d["name"]: d["numa"] for d in m["devices"] if d["role"] == "management"}
    assert mgmt == {"mlx5_0": 0, "mlx5_13": 6}
    assert not gpu_numas & {0, 6}
    assert set(_topo(root)["mlx5_0"]) == {"SYS"} == set(_topo(root)["mlx5_13"])
    assert m["default_route_iface"] == "eno1"  # the NUMA gate is the decisive signal


def test_l40s_oci_no_pcie_switch(built) -> None:
    root = built("l40s-oci")
    for row in _topo(root).values():
        assert "PIX" not in row and "PXB" not in row
        assert "NODE" in row and "SYS" in row
    assert {d["link_layer"] for d in tree.load(root)["devices"]} == {"Ethernet"}


def test_l40s_onprem(built) -> None:
    root = built("l40s-onprem")
    m = tree.load(root)
    assert tree.device(m, "mlx5_0")["link_layer"] == "Ethernet"
    assert m["default_route_iface"] == tree.device(m, "mlx5_0")["ports"]["1"]["netdev"]
    assert len(json.loads(read(root / "gpu_metadata.json"))["gpus"]) == 8
    for name in ("mlx5_1", "mlx5_2", "mlx5_3", "mlx5_4"):
        assert tree.device(m, name)["link_layer"] == "InfiniBand"
        assert set(_topo(root)[name]) == {"NODE", "SYS"}


def test_gb200_names_and_hcas(built) -> None:
    root = built("gb200-nvl4")
    m = tree.load(root)
    hcas = {d["name"]: (d["hca_type"], d["link_layer"]) for d in m["devices"]}
    assert hcas == {
        "ibp3s0": ("MT4129", "InfiniBand"),
        "ibP2p3s0": ("MT4129", "InfiniBand"),
        "ibP16p3s0": ("MT4129", "InfiniBand"),
        "ibP18p3s0": ("MT4129", "InfiniBand"),
        "roceP6p3s0": ("MT41692", "Ethernet"),
        "roceP22p3s0": ("MT41692", "Ethernet"),
    }
    assert all(set(row) == {"SYS"} for row in _topo(root).values())
    assert read(root / "sys/class/infiniband/roceP6p3s0/device/device") == "0xa2dc\n"


def test_h100_34_vfs(built) -> None:
    root = built("h100-34")
    m = tree.load(root)
    assert [d["name"] for d in m["devices"]] == [f"mlx5_{i}" for i in range(34)]
    for i in range(34):
        dev = root / "sys/class/infiniband" / f"mlx5_{i}"
        state = read(dev / "ports/1/state")
        if i < 18:
            assert state == "4: ACTIVE\n" and read(dev / "ports/1/phys_state") == "5: LinkUp\n"
        else:
            assert state == "1: DOWN\n" and read(dev / "ports/1/phys_state") == "3: Disabled\n"
            assert (dev / "device/physfn").is_symlink()


def test_l40_dualport_uncabled_function_1(built) -> None:
    root = built("l40-dualport")
    m = tree.load(root)
    assert len({d["card"] for d in m["devices"]}) == 2
    for d in m["devices"]:
        port = root / d["ib_path"] / "ports/1"
        if d["pci"].endswith(".1"):
            assert read(port / "state") == "1: DOWN\n"
            assert read(port / "phys_state") == "2: Polling\n"
        else:
            assert read(port / "state") == "4: ACTIVE\n"


@pytest.mark.parametrize("n", [8, 34, 257])  # 257: the large hosts' tree (test_large.py)
def test_synthetic_sizes(build, n: int) -> None:
    root = build("synthetic", devices=n)
    m = tree.load(root)
    assert len(m["devices"]) == n
    assert {d["numa"] for d in m["devices"]} == {0, 1}
    assert all("PXB" in row for row in _topo(root).values())
    assert len(os.listdir(root / "sys/class/infiniband")) == n


def test_synthetic_with_vfs_as_cloud_hosts_run_sr_iov(tmp_path: Path) -> None:
    root = tmp_path / "h"
    m = tree.create(root, "synthetic", devices=2, vfs=127)  # mlx5's most per PF
    roles = Counter(m["roles"].values())
    assert (roles["vf"], len(m["devices"])) == (254, 256)
    pf = root / "sys/class/infiniband/mlx5_0/device"
    assert (read(pf / "sriov_numvfs"), read(pf / "sriov_totalvfs")) == ("127\n", "127\n")
    vfs = {os.path.realpath(pf / f"virtfn{k}") for k in range(127)}
    assert len(vfs) == 127  # each its own PCI function
    with pytest.raises(SimError):
        tree.create(tmp_path / "more", "synthetic", devices=1, vfs=128)


def test_old_kernel_lacks_new_hw_counters(build) -> None:
    root = build("dgx-h100", new_hw_counters=False)
    hw = os.listdir(root / "sys/class/infiniband/mlx5_0/ports/1/hw_counters")
    assert sorted(hw) == sorted(kernel.HW_COUNTERS)


def test_create_refuses_foreign_or_existing_dir(tmp_path: Path) -> None:
    foreign = tmp_path / "foreign"
    foreign.mkdir()
    (foreign / "precious").write_text("x")
    with pytest.raises(SimError):
        tree.create(foreign, "dgx-h100")
    assert (foreign / "precious").exists()
    root = tmp_path / "h"
    tree.create(root, "cloud-vm-ib")  # the smallest hosts, with and without an RDMA device
    assert (root / "sys/class/infiniband/mlx5_0").exists()
    with pytest.raises(SimError):
        tree.create(root, "cloud-vm-ib")
    tree.create(root, "cloud-vm", force=True)
    assert tree.load(root)["profile"] == "cloud-vm"
    assert not (root / "sys/class/infiniband/mlx5_0").exists()


def test_unknown_profile_and_bad_devices(tmp_path: Path) -> None:
    with pytest.raises(SimError, match="unknown profile"):
        tree.create(tmp_path / "a", "nope")
    with pytest.raises(SimError, match="synthetic"):
        tree.create(tmp_path / "b", "dgx-h100", devices=4)
    with pytest.raises(SimError):
        tree.create(tmp_path / "c", "synthetic", devices=0)


def test_load_requires_a_sim_tree(tmp_path: Path) -> None:
    with pytest.raises(SimError, match="not a simulated host"):
        tree.load(tmp_path)


def test_show_lists_every_port(built) -> None:
    root = built("dgx-h100")
    text = tree.show(root)
    lines = text.splitlines()
    assert lines[0].split()[:8] == [
        "DEVICE",
        "PCI",
        "NUMA",
        "LINK",
        "PORT",
        "STATE",
        "PHYS",
        "NETDEV",
    ]
    assert len(lines) == 1 + 17 + 1
    assert any(
        ln.split()[0] == "mlx5_13" and "Disabled" in ln and ln.endswith("vf") for ln in lines
    )
