"""The simulated AWS hosts (p4d, p5, p5e, p6-b200): EFA and ENA functions, files, PCIe
layout as the real hwloc trees show it (sim/profiles.py cites them), mutations."""

from __future__ import annotations

import json
import os
from collections import Counter
from pathlib import Path
from typing import Callable

import pytest

from nichealthd.sim import efa, mutate, tree
from nichealthd.sim.fsio import SimError
from nichealthd.sources.pci import read_pci_topology

Build = Callable[[str], Path]  # the `built` fixture of tests/sim/conftest.py


def read(path: Path) -> str:
    return path.read_text()


def efa_devices(root: Path) -> list[dict]:
    return [d for d in tree.load(root)["devices"] if d.get("adapter") == "efa"]


def real_pci(root: Path, path: Path) -> Path:
    """The PCI function directory a link leads to, below ROOT/sys/devices."""
    return path.resolve().relative_to(root / "sys/devices")


# ------------------------------------------------------------------------------------ p5

def test_p5_32_efa_devices_named_and_placed_as_on_the_real_host(built: Build) -> None:
    p5 = built("p5")
    manifest = tree.load(p5)
    assert len(manifest["devices"]) == 32 and len(manifest["gpus"]) == 8
    # uccl's measured listing: cuda:0 53:00.0 with rdmap79s0..82s0 at 4f..52:00.0, ...
    first = [d["name"] for d in manifest["devices"][:8]]
    assert first == ["rdmap79s0", "rdmap80s0", "rdmap81s0", "rdmap82s0",
                     "rdmap96s0", "rdmap97s0", "rdmap98s0", "rdmap99s0"]
    assert manifest["devices"][-1]["name"] == "rdmap201s0"
    assert [g["pci"] for g in manifest["gpus"]][:2] == ["0000:53:00.0", "0000:64:00.0"]
    assert [g["numa"] for g in manifest["gpus"]] == [0, 0, 0, 0, 1, 1, 1, 1]
    for dev in manifest["devices"]:
        cls = p5 / "sys/class/infiniband" / dev["name"]
        assert dev["name"] == "rdmap{}s0".format(int(dev["pci"][5:7], 16))
        assert read(cls / "device/vendor") == "0x1d0f\n"
        assert read(cls / "device/device") == "0xefa1\n"  # EFA v2 (the lstopo of a p5)
        assert os.path.basename(os.readlink(cls / "device/driver")) == "efa"
        assert not (cls / "hca_type").exists()
        port = cls / "ports/1"
        assert read(port / "state") == "4: ACTIVE\n" and read(port / "phys_state") == "5: LinkUp\n"
        assert read(port / "link_layer") == "Unknown\n"
        assert read(port / "rate") == "100 Gb/sec (4X EDR)\n"  # 32 x 100 = 3200 Gbps
        assert sorted(os.listdir(port / "hw_counters")) == sorted(efa.PORT_STATS)
        assert sorted(os.listdir(cls / "hw_counters")) == sorted(efa.DEVICE_STATS)


def test_p5_every_function_alone_on_its_bus_behind_its_own_downstream_port(built: Build) -> None:
    """As the lstopo of a p5 (rdmap79s0 alone behind bridge 46:01.0) and the real p6-b200
    tree show: the ENA of an EFA is never on the EFA's bus."""
    p5 = built("p5")
    for dev in efa_devices(p5):
        cls = p5 / "sys/class/infiniband" / dev["name"]
        efa_fn = (cls / "device").resolve()
        siblings = [e for e in os.listdir(efa_fn.parent) if e[:8] == efa_fn.name[:8]]
        assert siblings == [efa_fn.name]  # alone on its bus
        ena = (p5 / "sys/class/net" / dev["ports"]["1"]["netdev"] / "device").resolve()
        assert read(ena / "vendor") == "0x1d0f\n" and read(ena / "device") == "0xec20\n"
        assert ena.name == dev["ena_pci"] and ena.name[:8] != efa_fn.name[:8]
        assert ena.parent.parent == efa_fn.parent.parent  # the same switch
        assert read(p5 / "sys/class/net" / dev["ports"]["1"]["netdev"] / "carrier") == "1\n"


def test_p5_four_efa_per_gpu_on_its_switch(built: Build) -> None:
    p5 = built("p5")
    topo = read_pci_topology(str(p5 / "sys"), str(p5 / "sys/class/infiniband"))
    assert len(topo.gpu_pci_addresses) == 8
    pairs = Counter(row.index("PIX") for row in topo.nic_topology.values())
    assert pairs == {g: 4 for g in range(8)}  # aws-ofi-nccl's p5.48xl-topo.xml
    assert all(row.count("PIX") == 1 for row in topo.nic_topology.values())
    meta = json.loads(read(p5 / "gpu_metadata.json"))
    assert {k: tuple(v) for k, v in meta["nic_topology"].items()} == dict(topo.nic_topology)


def test_p5e_is_p5_with_h200(built: Build) -> None:
    p5e = built("p5e")
    manifest = tree.load(p5e)
    assert [d["name"] for d in manifest["devices"]] == [
        d["name"] for d in tree.load(built("p5"))["devices"]]
    gpu = p5e / "sys/bus/pci/devices" / manifest["gpus"][0]["pci"]
    assert read(gpu / "device") == "0x2335\n"  # H200 SXM


# ----------------------------------------------------------------------------------- p4d

def test_p4d_efa_ena_and_gpus_share_a_root_bus(built: Build) -> None:
    """aws-ofi-nccl's p4d hwloc tree: root bus 10 holds ENA ens32 at 10:00.0, EFA rdmap16s27
    at 10:1b.0 (1d0f:efa0) and the A100s at 10:1c.0/10:1d.0; likewise 20, 90, a0."""
    p4d = built("p4d")
    manifest = tree.load(p4d)
    assert [(d["name"], d["pci"], d["ports"]["1"]["netdev"]) for d in manifest["devices"]] == [
        ("rdmap16s27", "0000:10:1b.0", "ens32"), ("rdmap32s27", "0000:20:1b.0", "ens65"),
        ("rdmap144s27", "0000:90:1b.0", "ens129"), ("rdmap160s27", "0000:a0:1b.0", "ens161")]
    for dev in manifest["devices"]:
        cls = p4d / "sys/class/infiniband" / dev["name"]
        assert read(cls / "device/device") == "0xefa0\n"
        bus = dev["pci"][:7]
        assert str(real_pci(p4d, cls / "device")) == f"pci{bus}/{dev['pci']}"
        ena = p4d / "sys/class/net" / dev["ports"]["1"]["netdev"] / "device"
        assert str(real_pci(p4d, ena)) == f"pci{bus}/{dev['ena_pci']}"
        gpus = [g for g in manifest["gpus"] if g["pci"].startswith(bus)]
        assert [g["pci_path"] for g in gpus] == [f"sys/devices/pci{bus}/{bus}:1c.0",
                                                 f"sys/devices/pci{bus}/{bus}:1d.0"]
    gpu = p4d / "sys/bus/pci/devices/0000:10:1c.0"
    assert read(gpu / "device") == "0x20b0\n"  # A100 SXM4 40GB
    topo = read_pci_topology(str(p4d / "sys"), str(p4d / "sys/class/infiniband"))
    assert topo.nic_topology["rdmap16s27"] == ("PHB", "PHB", "NODE", "NODE",
                                               "SYS", "SYS", "SYS", "SYS")
    assert read(p4d / "proc/net/route").splitlines()[1].split()[0] == "ens32"


# ------------------------------------------------------------------------------- p6-b200

def test_p6_b200_eight_efa_of_400g_two_per_switch_and_two_connectx7(built: Build) -> None:
    """aws-ofi-nccl's p6-b200 hwloc tree: EFA 1d0f:efa3 at 4f, 50, 60, 61, 71, 72, 84, 85;
    the ConnectX-7 ibp115s0f0/ibp116s0f0 on the third switch with GPUs 4 and 5."""
    p6 = built("p6-b200")
    devices = tree.load(p6)["devices"]
    assert [d["name"] for d in devices] == [
        "rdmap79s0", "rdmap80s0", "rdmap96s0", "rdmap97s0", "rdmap113s0", "rdmap114s0",
        "ibp115s0f0", "ibp116s0f0", "rdmap132s0", "rdmap133s0"]
    for dev in devices:
        cls = p6 / "sys/class/infiniband" / dev["name"]
        rate = read(cls / "ports/1/rate")
        if dev.get("adapter") == "efa":
            assert read(cls / "device/device") == "0xefa3\n"
            assert rate == "400 Gb/sec (8X HDR)\n"  # 8 x 400 = 3200 Gbps
        else:
            assert read(cls / "device/vendor") == "0x15b3\n"
            assert (dev["link_layer"], rate) == ("InfiniBand", "100 Gb/sec (2X HDR)\n")
            assert read(cls / "ports/1/state") == "4: ACTIVE\n"
    topo = read_pci_topology(str(p6 / "sys"), str(p6 / "sys/class/infiniband"))
    for name in ("ibp115s0f0", "ibp116s0f0"):  # PIX 4-5, NODE 6-7, SYS 0-3
        assert topo.nic_topology[name] == ("SYS",) * 4 + ("PIX", "PIX", "NODE", "NODE")
    assert topo.nic_topology["rdmap79s0"][:2] == ("PIX", "PIX")
    assert read(p6 / "sys/bus/pci/devices/0000:51:00.0/device") == "0x2901\n"  # B200
    assert read(p6 / "proc/net/route").splitlines()[1].split()[0] == "enp71s0"


# ------------------------------------------------------------------------------ mutations

def test_mutations_carrier_and_device_counters(built: Build) -> None:
    p5 = built("p5")
    dev = "rdmap79s0"
    mutate.carrier(p5, dev, 1, 0)
    netdev = tree.device(tree.load(p5), dev)["ports"]["1"]["netdev_path"]
    assert read(p5 / netdev / "carrier") == "0\n"
    with pytest.raises(SimError):
        mutate.carrier(p5, dev, 1, 2)
    assert mutate.counter(p5, dev, 1, "no_completion_cmds", add=1) == 1
    assert read(p5 / "sys/class/infiniband" / dev / "hw_counters/no_completion_cmds") == "1\n"
    mutate.reboot(p5)
    assert read(p5 / netdev / "carrier") == "1\n"
    assert read(p5 / "sys/class/infiniband" / dev / "hw_counters/no_completion_cmds") == "0\n"


def test_uncable_and_recable_an_efa_port(built: Build) -> None:
    """The efa driver says ACTIVE/LinkUp whatever the cable does: only the interface's
    operstate and carrier move, down and back."""
    p5 = built("p5")
    dev = "rdmap79s0"
    netdev = tree.device(tree.load(p5), dev)["ports"]["1"]["netdev_path"]
    port = p5 / "sys/class/infiniband" / dev / "ports/1"
    mutate.uncable(p5, dev, 1)
    assert (read(p5 / netdev / "operstate"), read(p5 / netdev / "carrier")) == ("down\n", "0\n")
    mutate.recable(p5, dev, 1)
    assert (read(p5 / netdev / "operstate"), read(p5 / netdev / "carrier")) == ("up\n", "1\n")
    assert read(port / "state") == "4: ACTIVE\n"
