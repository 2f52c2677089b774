"""#18.5: the simulated AWS p5: EFA and ENA functions, files, PCIe pairing, mutations."""

from __future__ import annotations

import json
import os
from collections import Counter
from pathlib import Path

import pytest

from nichealthd.sim import efa, mutate, tree
from nichealthd.sim.fsio import SimError
from nichealthd.sources.pci import read_pci_topology


@pytest.fixture(scope="module")
def p5(tmp_path_factory: pytest.TempPathFactory) -> Path:
    root = tmp_path_factory.mktemp("sim") / "p5"
    tree.create(root, "p5")
    return root


def read(path: Path) -> str:
    return path.read_text()


def test_32_efa_devices_with_the_efa_driver_files(p5: Path) -> None:
    manifest = tree.load(p5)
    assert len(manifest["devices"]) == 32 and len(manifest["gpus"]) == 8
    for dev in manifest["devices"]:
        cls = p5 / "sys/class/infiniband" / dev["name"]
        assert dev["name"] == "rdmap{}s0".format(int(dev["pci"][5:7], 16))
        assert read(cls / "device/vendor") == "0x1d0f\n"
        assert os.path.basename(os.readlink(cls / "device/driver")) == "efa"
        assert not (cls / "hca_type").exists()
        port = cls / "ports/1"
        assert read(port / "state") == "4: ACTIVE\n" and read(port / "phys_state") == "5: LinkUp\n"
        assert read(port / "link_layer") == "Unknown\n"
        assert read(port / "rate") == "100 Gb/sec (4X EDR)\n"  # 32 x 100 = 3200 Gbps
        assert sorted(os.listdir(port / "hw_counters")) == sorted(efa.PORT_STATS)
        assert sorted(os.listdir(cls / "hw_counters")) == sorted(efa.DEVICE_STATS)
        netdev = dev["ports"]["1"]["netdev"]
        ena = (p5 / "sys/class/net" / netdev / "device").resolve()
        assert read(ena / "vendor") == "0x1d0f\n" and read(ena / "device") == "0xec20\n"
        assert ena.parent == (cls / "device").resolve().parent  # same bus, same bridge
        assert read(p5 / "sys/class/net" / netdev / "carrier") == "1\n"


def test_four_efa_per_gpu_behind_its_switch(p5: Path) -> None:
    topo = read_pci_topology(str(p5 / "sys"), str(p5 / "sys/class/infiniband"))
    assert len(topo.gpu_pci_addresses) == 8
    pairs = Counter(row.index("PXB") for row in topo.nic_topology.values())
    assert pairs == {g: 4 for g in range(8)}
    assert all(row.count("PXB") == 1 for row in topo.nic_topology.values())
    meta = json.loads(read(p5 / "gpu_metadata.json"))
    assert {k: tuple(v) for k, v in meta["nic_topology"].items()} == dict(topo.nic_topology)


def test_mutations_carrier_and_device_counters(p5: Path) -> None:
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
