"""The GPU↔NIC matrix derived from the PCI tree: NCCL's rule as a table, and on
every simulated host the same matrix and the same roles as the metadata file gives."""

from __future__ import annotations

from dataclasses import replace
from datetime import datetime, timezone

import pytest

from nichealthd.core.config import ConfigError
from nichealthd.core.config_build import build_config
from nichealthd.core.model import DeviceSnapshot
from nichealthd.core.pcitopo import PciFunction, derive, is_gpu, relation, summary
from nichealthd.core.topology import GpuTopology, Role, classify
from nichealthd.runtime.startup import StartupError, choose_gpu_topology
from nichealthd.sim.profiles import PROFILES
from nichealthd.sources.config_file import load_config
from nichealthd.sources.gpu_metadata import load_gpu_topology
from nichealthd.sources.pci import scan
from nichealthd.sources.routes import read_default_route_devices
from nichealthd.sources.sandbox import sandbox_hint

from .. import simtrees
from .builders import device, port
from .conftest import reader_for


def nic_device(name: str, numa: int, layer: str = "InfiniBand",
               hca: str = "MT4129") -> DeviceSnapshot:
    return device(name, numa=numa, hca=hca, ports=(port(name, 1, layer=layer),))


def fn(path: str, numa: int = 0) -> PciFunction:
    parts = tuple(path.split("/"))
    return PciFunction(parts[-1], parts, numa)


RC = "pci0000:15/0000:15:01.0/0000:16:00.0"  # host bridge, root port, switch upstream port


@pytest.mark.parametrize("nic, gpu, level", [
    # One switch level between them (both on downstream ports of one switch): PIX.
    (f"{RC}/0000:17:01.0/0000:19:00.0", f"{RC}/0000:17:00.0/0000:18:00.0", "PIX"),
    # The NIC behind a second switch: two bridges apart, one root port: PXB.
    (f"{RC}/0000:17:01.0/0000:1a:00.0/0000:1b:00.0/0000:1c:00.0",
     f"{RC}/0000:17:00.0/0000:18:00.0", "PXB"),
    # Only the host bridge shared (two root ports of one root complex): PHB.
    ("pci0000:15/0000:15:01.0/0000:16:00.0", "pci0000:15/0000:15:02.0/0000:17:00.0", "PHB"),
    # A VM's flat root bus: PHB.
    ("pci0000:00/0000:00:07.0", "pci0000:00/0000:00:06.0", "PHB"),
    # Different root complexes on one NUMA node: NODE; across NUMA nodes: SYS.
    ("pci0000:29/0000:29:01.0/0000:2a:00.0", "pci0000:15/0000:15:01.0/0000:16:00.0", "NODE"),
])
def test_nccl_pci_distance(nic: str, gpu: str, level: str) -> None:
    assert relation(fn(nic), fn(gpu)) == level


def test_numa_and_domains() -> None:
    nic = fn("pci0000:29/0000:29:01.0/0000:2a:00.0", 0)
    assert relation(nic, fn("pci0000:95/0000:95:01.0/0000:96:00.0", 1)) == "SYS"
    # NCCL compares numa_node as read: two unknown (-1) are equal.
    assert relation(fn("pci0000:29/0000:29:01.0/0000:2a:00.0", -1),
                    fn("pci0000:15/0000:15:01.0/0000:16:00.0", -1)) == "NODE"
    # Grace: every device in a PCI segment of its own, the GPU on NVLink-C2C: SYS, as
    # nvidia-smi reports it (link-state-detection §4.2.4 GB200), even on the same NUMA node.
    assert relation(fn("pci0006:02/0006:02:01.0/0006:03:00.0", 0),
                    fn("pci0008:00/0008:00:01.0/0008:01:00.0", 0)) == "SYS"
    # A path outside any host bridge (not a PCI device): NUMA decides.
    assert relation(PciFunction("0000:01:00.0", (), 0), fn("pci0000:15/0000:16:00.0", 0)) \
        == "NODE"


def test_gpu_recognition() -> None:
    assert is_gpu("0x10de", "0x030200", False)  # 3D controller (H100)
    assert is_gpu("0x10de", "0x030000", False)  # VGA (L40S)
    assert not is_gpu("0x10de", "0x068000", False)  # NVSwitch
    assert not is_gpu("0x10de", "0x030200", True)  # a vGPU/SR-IOV virtual function
    assert not is_gpu("0x15b3", "0x030200", False)
    assert not is_gpu("0x10de", "garbage", False) and not is_gpu(None, None, False)


def test_derive_skips_the_numa_gate_without_gpu_numa() -> None:
    vm = derive([fn("pci0000:00/0000:00:06.0", -1)], {"mlx5_0": fn("pci0000:00/0000:00:07.0", -1)})
    assert not vm.numa_gate and vm.nic_topology == {"mlx5_0": ("PHB",)}
    assert "unknown NUMA node" in summary(vm)
    # README: the -1 NIC is not management when the gate is skipped; IB -> compute.
    assert classify(nic_device("mlx5_0", -1), vm, frozenset()).role == "compute"
    assert classify(nic_device("dpu", -1, "Ethernet", "MT41692"), vm, frozenset()).role \
        == "management"
    none = derive([], {"mlx5_0": fn("pci0000:00/0000:00:07.0", 0)})
    assert not none.numa_gate and "no GPU found" in summary(none)
    assert classify(nic_device("mlx5_0", 0, "Ethernet"), none, frozenset()).role == "storage"
    gated = GpuTopology(frozenset({0}), ("0000:18:00.0",), {}, source="sysfs")
    assert summary(gated, [Role("compute", ""), Role("management", "")]) == (
        "topology from sysfs: 1 GPU on 1 NUMA node; 1 compute, 0 storage, 1 management NIC")


@pytest.mark.parametrize("profile", sorted(PROFILES))
def test_sysfs_topology_equals_the_metadata_on_every_profile(profile: str) -> None:
    """The PCI tree and the metadata file are built consistently; derived from the tree, the
    matrix and every role are what the metadata file gives."""
    root = simtrees.take(profile)
    manifest = simtrees.manifest_of(root)
    config = load_config(str(root / "nichealthd.toml"))
    found = scan(config.sysfs_root, config.sys_class_infiniband)
    derived = found.topology()
    assert derived.source == "sysfs"
    assert [g.address for g in found.gpus] == [g["pci"] for g in manifest["gpus"]]
    assert found.nvswitches == len(manifest["nvswitches"])
    routes = read_default_route_devices(config.proc_root, config.sys_class_net)
    devices = reader_for(root).observe(datetime.now(timezone.utc)).devices
    assert len(devices) == len(manifest["devices"])
    by_sysfs = {d.name: classify(d, derived, routes).role for d in devices}
    assert by_sysfs == manifest["roles"]
    if not manifest["roles"]:  # no RDMA device: NVSentinel's file would have no matrix
        assert derived.nic_topology == {}
        return
    metadata = load_gpu_topology(config.metadata_path)
    assert metadata.gpu_pci_addresses == derived.gpu_pci_addresses
    assert metadata.gpu_numa_nodes == derived.gpu_numa_nodes
    assert metadata.numa_gate == derived.numa_gate
    for name, row in metadata.nic_topology.items():
        assert derived.nic_topology[name] == row, name
    assert {d.name: classify(d, metadata, routes).role for d in devices} == by_sysfs


def test_topology_source_choice() -> None:
    """auto: the metadata file when it exists and is valid, else sysfs, with the reason;
    sysfs: always derived; metadata: the file is required (exit 1); a bad value: exit 2."""
    root = simtrees.take("dgx-h100")
    base = load_config(str(root / "nichealthd.toml"))
    gpus, reason = choose_gpu_topology(base)
    assert gpus.source == "metadata" and "topologySource = auto" in reason
    forced, reason = choose_gpu_topology(replace(base, topology_source="sysfs"))
    assert forced.source == "sysfs" and reason == "topologySource = sysfs"
    assert {k: forced.nic_topology[k] for k in gpus.nic_topology} == gpus.nic_topology
    (root / "gpu_metadata.json").write_text('{"gpus": []}')
    fallback, reason = choose_gpu_topology(base)
    assert fallback.source == "sysfs" and "'gpus' is missing or empty" in reason
    with pytest.raises(StartupError, match="'gpus' is missing.*topologySource = \"auto\""):
        choose_gpu_topology(replace(base, topology_source="metadata"))
    (root / "gpu_metadata.json").unlink()
    absent, reason = choose_gpu_topology(base)
    missing = f"{root}/gpu_metadata.json"  # with PrivateTmp='s hint where the tree is in /tmp
    assert absent.source == "sysfs" and reason == (
        f"topologySource = auto, no GPU metadata file at {missing}"
        f"{sandbox_hint(missing, 'metadataPath')}")
    pinned, reason = choose_gpu_topology(replace(base, nic_inclusion_regex_override=("x",)))
    assert pinned.source == "none" and "nicInclusionRegexOverride" in reason
    with pytest.raises(ConfigError, match="topologySource"):
        build_config({"topologySource": "nvml"}, "x.toml", {})
