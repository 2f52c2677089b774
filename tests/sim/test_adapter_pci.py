"""The sim's PCI files: root port AER totals, and character devices that go with their device."""

from __future__ import annotations

import os
from pathlib import Path
from typing import Callable

import pytest

from nichealthd.sim import SimError, adapter, chardev, mutate, pcifiles, tree
from nichealthd.sim.cli import main

IB0 = "sys/class/infiniband/mlx5_0"


@pytest.fixture
def root(build: Callable[..., Path]) -> Path:
    return build("dgx-h100")


def function(root: Path, dev: str) -> Path:
    return pcifiles.device_function(root, tree.device(tree.load(root), dev))


def chardev_paths(root: Path, dev: str) -> list[Path]:
    """Every entry directory and class link of DEV's character devices."""
    record = tree.device(tree.load(root), dev)
    out = []
    for key, name in record["chardevs"].items():
        sub, cls = (("infiniband_verbs", chardev.CLASS_VERBS) if key == "uverbs"
                    else ("infiniband_mad", chardev.CLASS_MAD))
        out += [root / record["pci_path"] / sub / name, root / cls / name]
    return out


# ------------------------------------------------------------ root port AER totals

def test_root_ports_have_the_totals_and_nothing_else_does(root: Path) -> None:
    nic = function(root, "mlx5_0")
    top, *middle = pcifiles.chain(nic)
    for name in pcifiles.ROOTPORT.values():
        assert (top / name).read_text() == "0\n"  # sysfs_emit("%llu\n")
        assert not any((f / name).exists() for f in middle)  # switch ports, the NIC
    assert (top / "aer_dev_fatal").is_file()  # a root port has its own table as well


def test_an_error_of_the_nic_counts_in_its_table_and_its_root_ports_total(root: Path) -> None:
    nic = function(root, "mlx5_0")
    top = pcifiles.chain(nic)[0]
    assert pcifiles.aer(nic, "fatal", 2, "MalfTLP") == 2
    assert "TOTAL_ERR_FATAL 2" in (nic / "aer_dev_fatal").read_text()
    assert (top / "aer_rootport_total_err_fatal").read_text() == "2\n"
    assert (top / "aer_rootport_total_err_cor").read_text() == "0\n"
    pcifiles.aer(nic, "correctable", 1, root=False)  # only the function's table
    assert (top / "aer_rootport_total_err_cor").read_text() == "0\n"
    # Another device below the root port (a GPU): only the total moves, in place.
    fd = os.open(top / "aer_rootport_total_err_cor", os.O_RDONLY)
    try:
        assert pcifiles.rootport_aer(nic, "correctable", 5) == (top.name, 5)
        assert os.pread(fd, 64, 0) == b"5\n"
    finally:
        os.close(fd)
    assert "TOTAL_ERR_COR 1" in (nic / "aer_dev_correctable").read_text()
    with pytest.raises(SimError, match="kind"):
        pcifiles.rootport_aer(nic, "bogus")
    with pytest.raises(SimError, match="count"):
        pcifiles.aer(nic, "fatal", 0)


def test_the_aer_verb_bumps_only_the_root_port_with_rootport_only(
        root: Path, capsys: pytest.CaptureFixture[str]) -> None:
    top = pcifiles.chain(function(root, "mlx5_1"))[0]
    assert main(["aer", str(root), "mlx5_1", "nonfatal", "--rootport-only", "--count", "3"]) == 0
    assert capsys.readouterr().out == (f"root port {top.name}: "
                                       f"aer_rootport_total_err_nonfatal = 3\n")
    assert "TOTAL_ERR_NONFATAL 0" in (function(root, "mlx5_1") / "aer_dev_nonfatal").read_text()


def test_a_function_on_the_root_bus_has_no_root_port(build: Callable[..., Path]) -> None:
    vm = build("cloud-vm-ib")
    dev = tree.load(vm)["devices"][0]["name"]
    nic = function(vm, dev)
    assert pcifiles.aer(nic, "fatal") == 1  # its own table; nothing above it to count
    with pytest.raises(SimError, match="no root port"):
        pcifiles.rootport_aer(nic, "fatal")


# ------------------------------------------------------------ remove-device

def test_remove_device_takes_its_character_devices_and_restore_brings_them_back(
        root: Path) -> None:
    paths = chardev_paths(root, "mlx5_0")
    assert len(paths) == 6 and all(os.path.lexists(p) for p in paths)  # uverbs, umad, issm
    others = chardev_paths(root, "mlx5_1")
    mutate.remove_device(root, "mlx5_0")
    assert not any(os.path.lexists(p) for p in paths)  # as a real hot-unplug
    assert all(os.path.lexists(p) for p in others)
    mutate.restore_device(root, "mlx5_0")
    assert all(os.path.lexists(p) for p in paths)
    assert (paths[0] / "ibdev").read_text() == "mlx5_0\n"
    assert not tree.load(root).get(adapter.TAKEN)


def test_an_entry_removed_before_the_device_stays_removed_after_its_restore(
        root: Path) -> None:
    umad = adapter.remove_chardev(root, "mlx5_0", "umad", 1)
    mutate.remove_device(root, "mlx5_0")
    mutate.restore_device(root, "mlx5_0")
    assert not os.path.lexists(root / chardev.CLASS_MAD / umad)
    assert os.path.lexists(root / chardev.CLASS_VERBS / "uverbs0")
    adapter.restore_chardev(root, "mlx5_0", "umad", 1)
    assert (root / chardev.CLASS_MAD / umad / "ibdev").read_text() == "mlx5_0\n"


def test_restore_refuses_while_an_entry_has_nowhere_to_go_and_moves_nothing(
        root: Path) -> None:
    mutate.remove_device(root, "mlx5_0")
    mad = root / chardev.CLASS_MAD
    os.rename(mad, root / "mad-elsewhere")  # the class directory gone (not by a mutation)
    with pytest.raises(SimError, match="infiniband_mad"):
        mutate.restore_device(root, "mlx5_0")
    assert not os.path.lexists(root / IB0)  # nothing moved
    os.rename(root / "mad-elsewhere", mad)
    mutate.restore_device(root, "mlx5_0")
    assert all(os.path.lexists(p) for p in chardev_paths(root, "mlx5_0"))


def test_a_driver_reload_takes_every_entry_and_a_rename_retitles_them(root: Path) -> None:
    names = mutate.unload_driver(root)
    assert os.listdir(root / chardev.CLASS_VERBS) == ["abi_version"]
    assert sorted(os.listdir(root / chardev.CLASS_MAD)) == ["abi_version"]
    mutate.load_driver(root, rename=True)
    count = len(names)
    new = f"mlx5_{count}"
    assert all(os.path.lexists(p) for p in chardev_paths(root, new))
    assert (root / chardev.CLASS_VERBS / "uverbs0" / "ibdev").read_text() == new + "\n"
    mutate.rename_device(root, new, "mlx5_99")
    assert (root / chardev.CLASS_VERBS / "uverbs0" / "ibdev").read_text() == "mlx5_99\n"
    assert (root / chardev.CLASS_MAD / "issm0" / "ibdev").read_text() == "mlx5_99\n"


# ------------------------------------------------------------ unbind, bind --driver

def test_bind_to_another_driver_gives_a_driver_link_and_nothing_else(
        root: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """vfio-pci takes the unbound function (passthrough): what the lost-NIC check reads is
    its driver link; unbind lets it go, bind hands it back to mlx5_core as it was."""
    pdir = function(root, "mlx5_4")
    address = pdir.name
    assert main(["unbind", str(root), "mlx5_4"]) == 0
    assert not os.path.lexists(pdir / "driver") and not os.path.lexists(pdir / "infiniband")
    assert main(["bind", str(root), "mlx5_4", "--driver", "vfio-pci"]) == 0
    assert os.path.basename(os.readlink(pdir / "driver")) == "vfio-pci"
    assert (root / "sys/bus/pci/drivers/vfio-pci" / address).resolve() == pdir.resolve()
    assert not os.path.lexists(pdir / "infiniband") and not os.path.lexists(pdir / "net")
    with pytest.raises(SimError, match="bound to vfio-pci already"):
        adapter.bind(root, "mlx5_4", "other")
    with pytest.raises(SimError, match="a driver name"):
        adapter.bind(root, "mlx5_4", "../x")
    assert adapter.unbind(root, "mlx5_4") == address  # vfio-pci lets go: unbound again
    assert not os.path.lexists(pdir / "driver")
    assert not os.path.lexists(root / "sys/bus/pci/drivers/vfio-pci" / address)
    adapter.bind(root, "mlx5_4", "vfio-pci")
    assert main(["bind", str(root), "mlx5_4"]) == 0  # straight back to mlx5_core
    assert os.path.basename(os.readlink(pdir / "driver")) == "mlx5_core"
    assert os.path.isdir(pdir / "infiniband/mlx5_4") and os.path.lexists(root / IB0)
    assert not os.path.lexists(root / "sys/bus/pci/drivers/vfio-pci" / address)
    assert tree.load(root).get(adapter.UNBOUND) == {}
    assert capsys.readouterr().out.split() == [address] * 3
