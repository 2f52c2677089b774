"""NIC role classification against the field-validation tables and
homogeneity rules of link-state-detection §4.1.3, §4.2.4 and §4.3."""

from __future__ import annotations

import json
import os
import re
from dataclasses import replace
from pathlib import Path
from typing import Callable, Optional

import pytest

from nichealthd.core.model import DeviceIndex, DeviceSnapshot, HostSnapshot
from nichealthd.core.topology import (
    CardCount,
    GpuTopology,
    MetadataError,
    NicFilters,
    Topology,
    anomalous_cards,
    classify,
    classify_all,
    classify_host,
    group_mode,
)
from nichealthd.sources.gpu_metadata import MAX_METADATA_BYTES, load_gpu_topology
from nichealthd.sources.routes import (
    MAX_NETDEV_DEPTH,
    lower_netdevs,
    parse_default_routes_v4,
    parse_default_routes_v6,
    read_default_route_devices,
    read_default_route_netdevs,
)

from .builders import at, device, host, port


def nic(name: str, numa: int, layer: str = "InfiniBand", hca: str = "MT4129",
        is_vf: bool = False) -> DeviceSnapshot:
    return device(name, numa=numa, hca=hca, is_vf=is_vf, ports=(port(name, 1, layer=layer),))


def roles(nics: list[DeviceSnapshot], gpu_numa: set[int], topo: dict[str, list[str]],
          default_route: frozenset[str] = frozenset()) -> dict[str, str]:
    gpus = GpuTopology(frozenset(gpu_numa), (), {k: tuple(v) for k, v in topo.items()})
    return {d.name: classify(d, gpus, default_route).role for d in nics}


def test_a100_oci_roce_management_nics_on_gpu_less_numa_nodes() -> None:
    nics = [nic("mlx5_0", 0, "Ethernet"), nic("mlx5_13", 6, "Ethernet")]
    topo = {"mlx5_0": ["SYS"] * 8, "mlx5_13": ["SYS"] * 8}
    for i in [*range(1, 13), *range(14, 18)]:
        numa = (1, 3, 5, 7)[i % 4]
        nics.append(nic(f"mlx5_{i}", numa, "Ethernet"))
        topo[f"mlx5_{i}"] = ["PXB" if g == i % 8 else "SYS" for g in range(8)]
    result = roles(nics, {1, 3, 5, 7}, topo)
    assert [n for n, r in result.items() if r == "management"] == ["mlx5_0", "mlx5_13"]
    assert sum(r == "compute" for r in result.values()) == 16


def test_h100_oci_storage_nics_have_node_to_all_gpus() -> None:
    nics, topo = [], {}
    for i in range(18):
        storage = i in (2, 11)
        nics.append(nic(f"mlx5_{i}", i % 2, "Ethernet" if storage else "InfiniBand"))
        topo[f"mlx5_{i}"] = ["NODE"] * 8 if storage else [
            "PXB" if g == i % 8 else "SYS" for g in range(8)]
    result = roles(nics, {0, 1}, topo)
    assert sorted(n for n, r in result.items() if r == "storage") == ["mlx5_11", "mlx5_2"]
    assert sum(r == "compute" for r in result.values()) == 16


def test_l40s_oci_all_ethernet_node_is_storage() -> None:
    nics = [nic(f"mlx5_{i}", i % 2, "Ethernet") for i in range(6)]
    topo = {f"mlx5_{i}": ["NODE", "NODE", "SYS", "SYS"] if i % 2 == 0
            else ["SYS", "SYS", "NODE", "NODE"] for i in range(6)}
    assert set(roles(nics, {0, 1}, topo).values()) == {"storage"}


def test_onprem_l40s_link_layer_and_default_route() -> None:
    nics = [nic("mlx5_0", 0, "Ethernet")] + [nic(f"mlx5_{i}", i % 2) for i in range(1, 5)]
    topo = {f"mlx5_{i}": ["NODE"] * 4 + ["SYS"] * 4 for i in range(5)}
    assert roles(nics, {0, 1}, topo) == {
        "mlx5_0": "storage", "mlx5_1": "compute", "mlx5_2": "compute",
        "mlx5_3": "compute", "mlx5_4": "compute"}
    with_route = roles(nics, {0, 1}, topo, frozenset({"mlx5_0"}))
    assert with_route["mlx5_0"] == "management"


def test_gb200_bluefield_dpus_are_management() -> None:
    names = ["ibp3s0", "ibP2p3s0", "ibP16p3s0", "ibP18p3s0"]
    nics = [nic(n, i % 2) for i, n in enumerate(names)]
    nics += [nic("roceP6p3s0", 0, "Ethernet", "MT41692"),
             nic("roceP22p3s0", 1, "Ethernet", "MT41692")]
    topo = {d.name: ["SYS"] * 4 for d in nics}
    result = roles(nics, {0, 1}, topo)
    assert [result[n] for n in names] == ["compute"] * 4
    assert result["roceP6p3s0"] == result["roceP22p3s0"] == "management"


def test_unknown_numa_vf_and_non_mellanox() -> None:
    gpus = GpuTopology(frozenset({0}), (), {})
    assert classify(nic("mlx5_0", -1), gpus, frozenset()).role == "management"
    assert classify(nic("mlx5_1", 0, is_vf=True), gpus, frozenset()).role == "vf"
    other = DeviceSnapshot(name="rdmap0s6", numa_node=0, ports=(port("rdmap0s6"),))
    assert classify(other, gpus, frozenset()).role == "unsupported"
    assert classify(other, gpus, frozenset(),
                    NicFilters(inclusion_override=("^rdmap",))).role == "compute"
    assert classify(nic("mlx5_2", 0), gpus, frozenset(),
                    NicFilters(exclusion=("^mlx5_2$",))).role == "excluded"


def test_a_device_whose_numa_node_cannot_be_read_keeps_the_role_of_last_poll() -> None:
    """Unreadable is not the kernel's -1: the PCI function could not be read (the device is
    leaving, or reads fail), so what was read of it is no fact. A compute NIC stays compute,
    to be judged when it is gone; a VF, whose ``physfn`` could not be seen, stays a VF.
    Seen for the first time, it is not monitored until it can be read."""
    gpus = GpuTopology(frozenset({0}), (), {"mlx5_0": ("PIX",), "mlx5_1": ("PIX",)})
    compute = classify(nic("mlx5_0", 0), gpus, frozenset())
    vf = classify(nic("mlx5_1", 0, is_vf=True), gpus, frozenset())
    assert (compute.role, vf.role) == ("compute", "vf")
    leaving = replace(nic("mlx5_0", 0), numa_node=None, vendor=None, driver=None)
    leaving_vf = replace(nic("mlx5_1", 0), numa_node=None, vendor=None, driver=None)
    assert classify(leaving, gpus, frozenset(), previous=compute) is compute
    assert classify(leaving_vf, gpus, frozenset(), previous=vf) is vf
    first = classify(leaving_vf, gpus, frozenset())
    assert (first.role, first.reason) == ("management", "NUMA node unreadable")
    assert classify(nic("mlx5_0", -1), gpus, frozenset(), previous=compute).role == "management"
    assert classify_all([leaving, leaving_vf], Topology(gpus), previous={
        "mlx5_0": compute, "mlx5_1": vf}) == {"mlx5_0": compute, "mlx5_1": vf}


@pytest.mark.parametrize("counts,mode", [
    ([1, 1, 1, 0], 1), ([2, 2, 1], 2), ([1], None), ([1, 0], None), ([0, 0, 1], None),
    ([2, 2, 1, 1], None), ([], None),
])
def test_group_mode(counts: list[int], mode: int) -> None:
    assert group_mode(counts) == mode


def test_homogeneity_per_role_group_and_management_exemption() -> None:
    def card(cid: str, role: str, active: int, exempt: bool = False) -> CardCount:
        return CardCount(cid, role, (cid,), active, True, exempt, "InfiniBand")
    cards = [card(f"c{i}", "compute", 2) for i in range(8)] + [
        card("s0", "storage", 1), card("s1", "storage", 1), card("s2", "storage", 1)]
    assert anomalous_cards(cards)[0] == {}  # storage is not compared with compute
    cards[0] = card("c0", "compute", 1)
    cards[8] = card("s0", "storage", 0)
    assert sorted(anomalous_cards(cards)[0]) == ["c0", "s0"]
    cards[0] = card("c0", "compute", 1, exempt=True)
    assert sorted(anomalous_cards(cards)[0]) == ["s0"]
    # Two storage cards, one down: a tie (1 vs 0) is no evidence; the port event covers it.
    assert sorted(anomalous_cards(cards[:10])[0]) == []


def write(path: Path, data: object) -> str:
    path.write_text(json.dumps(data))
    return str(path)


def test_metadata_is_a_hard_dependency(tmp_path: Path) -> None:
    with pytest.raises(MetadataError, match="does not exist"):
        load_gpu_topology(str(tmp_path / "missing.json"))
    # README: every GPU at -1 (a VM) skips the NUMA gate instead of refusing to start.
    vm = load_gpu_topology(write(tmp_path / "a.json", {"gpus": [{"numa_node": -1}],
                                                       "nic_topology": {"x": []}}))
    assert not vm.numa_gate and vm.gpu_numa_nodes == frozenset()
    no_topo = write(tmp_path / "b.json", {"gpus": [{"numa_node": 0}]})
    with pytest.raises(MetadataError, match="nic_topology"):
        load_gpu_topology(no_topo)
    good = write(tmp_path / "c.json", {"gpus": [{"numa_node": 0, "pci_address": "0000:0f:00.0"},
                                                {"numa_node": -1}],
                                       "nic_topology": {"mlx5_0": ["PIX", "SYS"]}})
    topology = load_gpu_topology(good)
    assert topology.gpu_numa_nodes == {0}
    assert topology.nic_topology["mlx5_0"] == ("PIX", "SYS")


@pytest.mark.parametrize("make, reason", [
    (lambda p: os.mkfifo(p), "is a FIFO, not a regular file"),
    (lambda p: os.mkdir(p), "is a directory, not a regular file"),
    (lambda p: p.write_bytes(b"\xff\xfe{}"), "not valid JSON"),
    (lambda p: p.write_text("[" * 100_000 + "]" * 100_000), "not valid JSON"),
    (lambda p: p.write_bytes(b" " * (MAX_METADATA_BYTES + 1)), "larger than"),
])
def test_metadata_that_is_not_a_small_json_file_is_a_clear_error(
        tmp_path: Path, make: Callable[[Path], object], reason: str) -> None:
    """A FIFO (would block), /dev/zero (a read that never ends), a directory, bytes that are
    not UTF-8, JSON nested past the recursion limit: one MetadataError naming the file."""
    path = tmp_path / "gpu_metadata.json"
    make(path)
    with pytest.raises(MetadataError, match=re.escape(f"{path} ") + ".*" + re.escape(reason)):
        load_gpu_topology(str(path))


def test_dev_zero_as_metadata_is_refused_at_once() -> None:
    with pytest.raises(MetadataError, match="is a character device, not a regular file"):
        load_gpu_topology("/dev/zero")


def test_default_route_maps_to_the_ib_device(tmp_path: Path) -> None:
    proc = tmp_path / "proc" / "net"
    proc.mkdir(parents=True)
    (proc / "route").write_text(
        "Iface\tDestination\tGateway\tFlags\tRefCnt\tUse\tMetric\tMask\tMTU\tWindow\tIRTT\n"
        "eth1\t0000A8C0\t00000000\t0001\t0\t0\t0\t00FFFFFF\t0\t0\t0\n"
        "eth0\t00000000\t0100A8C0\t0003\t0\t0\t0\t00000000\t0\t0\t0\n")
    (tmp_path / "net" / "eth0" / "device" / "infiniband" / "mlx5_4").mkdir(parents=True)
    devices = read_default_route_devices(str(tmp_path / "proc"), str(tmp_path / "net"))
    assert devices == {"mlx5_4"}
    assert read_default_route_devices(str(tmp_path / "nothing"), str(tmp_path)) == frozenset()


def test_a_tie_uses_the_last_decisive_mode_of_the_boot() -> None:
    def card(cid: str, active: int) -> CardCount:
        return CardCount(cid, "compute", (cid,), active, True, False, "InfiniBand")
    healthy = [card("a", 1), card("b", 1)]
    verdicts, modes = anomalous_cards(healthy)
    assert verdicts == {} and modes == {"compute": 1}
    dropped = [card("a", 0), card("b", 1)]
    assert anomalous_cards(dropped)[0] == {}  # at first sight a tie is no evidence
    verdicts, modes = anomalous_cards(dropped, {"compute": 1})
    assert list(verdicts) == ["a"] and modes == {}


# ------------------------------------------- default routes through bonds, VLANs, IPv6

ROUTE_HEAD = "Iface\tDestination\tGateway\tFlags\tRefCnt\tUse\tMetric\tMask\tMTU\tWindow\tIRTT\n"
V6_ZERO = "0" * 32


def v4_default(iface: str, metric: int = 100, flags: str = "0003") -> str:
    return f"{iface}\t00000000\t0100000A\t{flags}\t0\t0\t{metric}\t00000000\t0\t0\t0\n"


def v6_line(dest: str, plen: str, iface: str, flags: str = "00450003") -> str:
    return (f"{dest} {plen} {V6_ZERO} 00 fe800000000000000000000000000001 00000400 00000001 "
            f"00000000 {flags} {iface:>8}\n")


class Host:
    """A /proc and /sys/class/net with real directories and symlinks, as the kernel lays out."""

    def __init__(self, root: Path) -> None:
        self.root = root
        self.proc = root / "proc"
        self.net = root / "sys/class/net"
        (self.proc / "net").mkdir(parents=True)
        self.net.mkdir(parents=True)

    def routes(self, v4: str = "", v6: str = "") -> None:
        (self.proc / "net/route").write_text(ROUTE_HEAD + v4)
        (self.proc / "net/ipv6_route").write_text(v6)

    def physical(self, iface: str, ib_device: Optional[str]) -> None:
        """A netdev of a PCI function; ``ib_device`` None: the function has no RDMA device."""
        pci = self.root / "sys/devices/pci0000:00" / (ib_device or f"no-rdma-{iface}")
        if ib_device:
            (pci / "infiniband" / ib_device).mkdir(parents=True)
        ndir = pci / "net" / iface
        ndir.mkdir(parents=True)
        (ndir / "device").symlink_to(pci)
        (self.net / iface).symlink_to(ndir)

    def virtual(self, iface: str, lowers: tuple[str, ...] = (), slaves: str = "") -> None:
        ndir = self.root / "sys/devices/virtual/net" / iface
        ndir.mkdir(parents=True)
        for lower in lowers:
            (ndir / f"lower_{lower}").symlink_to(self.net / lower)
        if slaves:
            (ndir / "bonding").mkdir()
            (ndir / "bonding/slaves").write_text(slaves + "\n")
        (self.net / iface).symlink_to(ndir)

    def devices(self) -> frozenset[str]:
        return read_default_route_devices(str(self.proc), str(self.net))


def onprem_roles(default_route: frozenset[str]) -> dict[str, str]:
    """The on-prem L40S host: mlx5_0/mlx5_5 are Ethernet NODE to GPUs, storage by topology."""
    nics = [nic("mlx5_0", 0, "Ethernet"), nic("mlx5_5", 0, "Ethernet")] + [
        nic(f"mlx5_{i}", i % 2) for i in range(1, 5)]
    topo = {d.name: ["NODE"] * 4 + ["SYS"] * 4 for d in nics}
    return roles(nics, {0, 1}, topo, default_route)


def test_parsers_find_every_default_route_and_skip_reject_routes() -> None:
    v4 = (ROUTE_HEAD + v4_default("eth0", 100) + v4_default("eth1", 200)
          + "eth2\t00000000\t00000000\t0001\t0\t0\t0\t000000FF\t0\t0\t0\n"  # 0.0.0.0/8
          + v4_default("*", 0, "0201") + v4_default("eth3", 0, "0201") + "short line\n")
    assert parse_default_routes_v4(v4) == ["eth0", "eth1"]
    v6 = (v6_line(V6_ZERO, "00", "eth0") + v6_line(V6_ZERO, "00", "eth4")
          + v6_line("fe800000000000000000000000000000", "40", "eth5", "00000001")
          + v6_line(V6_ZERO, "00", "lo", "00200200") + v6_line(V6_ZERO, "00", "eth6", "00200200")
          + "garbage\n")
    assert parse_default_routes_v6(v6) == ["eth0", "eth4"]


@pytest.mark.parametrize("how", ["slaves-file", "lower-links", "both"])
def test_management_nic_behind_a_bond_is_excluded(tmp_path: Path, how: str) -> None:
    host = Host(tmp_path)
    host.physical("ens1f0np0", "mlx5_0")
    host.physical("ens1f1np1", "mlx5_5")
    lowers = ("ens1f0np0", "ens1f1np1") if how != "slaves-file" else ()
    host.virtual("bond0", lowers, "ens1f0np0 ens1f1np1" if how != "lower-links" else "")
    host.routes(v4=v4_default("bond0"))
    assert host.devices() == {"mlx5_0", "mlx5_5"}
    result = onprem_roles(host.devices())
    assert (result["mlx5_0"], result["mlx5_5"]) == ("management", "management")
    assert onprem_roles(frozenset())["mlx5_0"] == "storage"  # without the route: storage


def test_the_netdevs_of_the_default_route_without_any_rdma_device(tmp_path: Path) -> None:
    """A front-end NIC with RoCE off (or mlx5_ib not loaded): the route's netdevs are known
    down to the bond's slaves although no RDMA device names them."""
    host = Host(tmp_path)
    host.physical("ens1f0np0", None)
    host.physical("ens1f1np1", None)
    host.physical("ens2f0np0", None)  # not under the route
    host.virtual("bond0", ("ens1f0np0", "ens1f1np1"), "ens1f0np0 ens1f1np1")
    host.virtual("bond0.100", ("bond0",))
    host.routes(v4=v4_default("bond0.100"))
    assert host.devices() == frozenset()
    netdevs = read_default_route_netdevs(str(host.proc), str(host.net))
    assert netdevs == {"bond0.100", "bond0", "ens1f0np0", "ens1f1np1"}
    assert read_default_route_netdevs(str(tmp_path / "nothing"), str(host.net)) == frozenset()


def test_management_nic_behind_a_vlan_and_a_vlan_on_a_bond(tmp_path: Path) -> None:
    host = Host(tmp_path)
    host.physical("ens1f0np0", "mlx5_0")
    host.physical("ens2f0np0", "mlx5_5")
    host.virtual("vlan100", ("ens1f0np0",))
    host.routes(v4=v4_default("vlan100"))
    assert host.devices() == {"mlx5_0"}
    assert onprem_roles(host.devices())["mlx5_0"] == "management"
    host.virtual("bond1", ("ens2f0np0",), "ens2f0np0")
    host.virtual("bond1.200", ("bond1",))
    host.routes(v4=v4_default("vlan100") + v4_default("bond1.200", metric=300))
    assert host.devices() == {"mlx5_0", "mlx5_5"}  # every default route, whatever its metric


def test_ipv6_only_default_route(tmp_path: Path) -> None:
    host = Host(tmp_path)
    host.physical("ens1f0np0", "mlx5_0")
    host.routes(v6=v6_line(V6_ZERO, "00", "lo", "00200200")
                + v6_line(V6_ZERO, "00", "ens1f0np0"))
    assert host.devices() == {"mlx5_0"}
    assert onprem_roles(host.devices())["mlx5_0"] == "management"
    (host.proc / "net/ipv6_route").unlink()  # IPv6 disabled: no table, no route
    assert host.devices() == frozenset()


def test_lower_links_loops_and_depth_are_bounded(tmp_path: Path) -> None:
    host = Host(tmp_path)
    host.physical("ens1f0np0", "mlx5_0")
    for name, lower in (("a", "b"), ("b", "a")):  # a loop sysfs should never show
        ndir = tmp_path / "sys/devices/virtual/net" / name
        ndir.mkdir(parents=True)
        (ndir / f"lower_{lower}").symlink_to(tmp_path / "sys/devices/virtual/net" / lower)
        (host.net / name).symlink_to(ndir)
    assert lower_netdevs(str(host.net), "a") == ["a", "b"]
    chain = [f"v{i}" for i in range(12)]
    host.virtual(chain[-1], ("ens1f0np0",))
    for upper, lower in zip(reversed(chain[:-1]), reversed(chain[1:])):
        host.virtual(upper, (lower,))
    assert len(lower_netdevs(str(host.net), "v0")) == MAX_NETDEV_DEPTH + 1
    host.routes(v4=v4_default("v9"))  # 3 levels above the NIC: found
    assert host.devices() == {"mlx5_0"}
    host.routes(v4=v4_default("v0"))  # 12 levels: beyond any real stack, not followed
    assert host.devices() == frozenset()
    host.routes(v4=v4_default("a") + v4_default("nonexistent"))
    assert host.devices() == frozenset()


def test_classify_all_keeps_a_role_only_for_the_same_device_and_inputs() -> None:
    """An unchanged device (the reader's same snapshot) keeps its role object; another
    snapshot, topology or filter is classified afresh."""
    nics = [nic("mlx5_0", 0), nic("mlx5_1", 1, "Ethernet")]
    gpus = GpuTopology(frozenset({0}), (), {"mlx5_1": ("SYS",)})
    topology = Topology(gpus)
    first = classify_all(nics, topology)
    assert {n: r.role for n, r in first.items()} == {"mlx5_0": "compute",
                                                      "mlx5_1": "management"}
    again = classify_all(nics, topology)
    assert all(again[n] is first[n] for n in first)
    moved = replace(nics[1], numa_node=0)  # another snapshot of mlx5_1
    third = classify_all([nics[0], moved], topology)
    assert third["mlx5_0"] is first["mlx5_0"] and third["mlx5_1"].role == "storage"
    assert classify_all([nics[0], moved], topology, ("mlx5_0",))["mlx5_0"].role == "excluded"
    other = Topology(GpuTopology(frozenset({1}), (), {}))
    assert classify_all(nics, other)["mlx5_0"].role == "management"
    assert classify_all(nics, other, (), ("mlx5_1",))["mlx5_0"].role == "excluded"


def _reader_like(devices: list[DeviceSnapshot], vfs: tuple[DeviceSnapshot, ...]
                 ) -> HostSnapshot:
    """A snapshot indexed as the reader indexes it: ``vfs`` is the tuple of every poll."""
    names = frozenset(d.name for d in devices)
    judged = tuple(d for d in devices if d not in vfs)
    return HostSnapshot(at(0), "boot-1", tuple(devices), index=DeviceIndex(names, judged, vfs))


def test_classify_host_is_classify_all_with_the_vfs_looked_at_once() -> None:
    """With the reader's VFs (the same tuple poll after poll) only the other devices are
    classified; the table is classify_all's, in its order, and last poll's own object while
    no role changed. A device that stops being a VF is classified (link-state-detection §8)."""
    topology = Topology(GpuTopology(frozenset({0}), (), {}))
    pf = nic("mlx5_0", 0)
    vfs = tuple(nic(f"mlx5_{i}", 0, is_vf=True) for i in range(1, 12))
    devices = sorted([pf, *vfs], key=lambda d: d.name)  # the reader's order: by name
    first = classify_host(_reader_like(devices, vfs), topology)
    assert first == classify_all(devices, topology) and list(first) == [d.name for d in devices]
    assert first["mlx5_3"].role == "vf" and first["mlx5_0"].role == "compute"
    again = classify_host(_reader_like(devices, vfs), topology, previous=first)
    assert again is first
    excluded = classify_host(_reader_like(devices, vfs), topology, ("mlx5_0",), previous=first)
    assert excluded is not first and list(excluded) == list(first)
    assert excluded == classify_all(devices, topology, ("mlx5_0",))
    assert excluded["mlx5_0"].role == "excluded"
    # mlx5_5 is a PF now (discovery makes a new VF tuple): judged like any other.
    now_pf = nic("mlx5_5", 0)
    fewer = tuple(v for v in vfs if v.name != "mlx5_5")
    changed = [now_pf if d.name == "mlx5_5" else d for d in devices]
    after = classify_host(_reader_like(changed, fewer), topology, previous=excluded)
    assert after["mlx5_5"].role == "compute" and after == classify_all(changed, topology)
    # A VF whose NUMA node cannot be read is not indexed as a VF: it keeps its last role.
    unread = replace(vfs[0], numa_node=None)
    odd = [unread if d is vfs[0] else d for d in devices]
    assert classify_host(host(*odd), topology, previous={vfs[0].name: first["mlx5_0"]}
                         )[vfs[0].name] == first["mlx5_0"]
