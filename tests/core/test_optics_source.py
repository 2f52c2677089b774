"""The optics source without a kernel: the simulator's files under ethtoolPath, a simulated
host without it (the kernel is not asked), VFs and ports without a netdev left out."""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path
from typing import Optional

from nichealthd.core.model import HostSnapshot, PortSnapshot
from nichealthd.sim import optics as sim_optics
from nichealthd.sources.optics import FilePages, Optics, module_request, read_port

from .builders import config, device, host, port


def eth_port(dev: str, netdev: Optional[str]) -> PortSnapshot:
    return replace(port(dev, layer="Ethernet"), netdev=netdev)


def snapshot() -> HostSnapshot:
    return host(device("mlx5_0", ports=(eth_port("mlx5_0", "eth0"),)),
                device("mlx5_1", pci="0000:48:00.0", ports=(eth_port("mlx5_1", "eth1"),)),
                device("mlx5_2", pci="0000:49:00.0", ports=(eth_port("mlx5_2", None),)),
                device("mlx5_3", pci="0000:4a:00.0", is_vf=True,
                       ports=(eth_port("mlx5_3", "eth3"),)))


def test_files_under_ethtool_path(tmp_path: Path) -> None:
    sim_optics.write_module(tmp_path, "eth0", "400 Gb/sec (4X NDR)")
    source = Optics(config(ethtoolPath=str(tmp_path / "ethtool")))
    facts = source.read(snapshot(), ["mlx5_0", "mlx5_1", "mlx5_2", "mlx5_3"])
    assert sorted(facts) == ["mlx5_0_1", "mlx5_1_1"]  # no netdev, a VF: not read
    assert facts["mlx5_0_1"].diagnostics is not None
    assert facts["mlx5_0_1"].diagnostics.spec == "CMIS"
    assert facts["mlx5_1_1"].diagnostics is None
    assert facts["mlx5_1_1"].reason.startswith("no module plugged in")


def test_a_simulated_host_without_ethtool_path_does_not_ask_the_kernel(tmp_path: Path) -> None:
    source = Optics(config(sysfsRoot=str(tmp_path)))
    facts = source.read(snapshot(), ["mlx5_0"])
    assert facts["mlx5_0_1"].reason == "not asked: a simulated host without ethtoolPath"
    assert source._kernel is None


def test_an_unknown_identifier_and_a_missing_page(tmp_path: Path) -> None:
    folder = tmp_path / "eth0" / "module"
    folder.mkdir(parents=True)
    (folder / "page-00-bank-0").write_bytes(bytes([0x03]) + bytes(255))  # an SFP
    fact = read_port(FilePages(str(tmp_path)), "eth0")
    assert fact.diagnostics is None and fact.reason == "no SFF-8636 or CMIS module " \
                                                       "(identifier 0x03)"
    sim_optics.write_module(tmp_path.parent / "x", "eth0", "100 Gb/sec")
    pages = tmp_path.parent / "x/ethtool/eth0/module"
    (folder / "page-00-bank-0").write_bytes((pages / "page-00-bank-0").read_bytes())
    fact = read_port(FilePages(str(tmp_path)), "eth0")  # no page 03h: no thresholds
    assert fact.diagnostics is not None and fact.diagnostics.thresholds == {}
    assert fact.diagnostics.temperature == 40.0


def test_the_request_attributes() -> None:
    """HEADER (nest 1 | NLA_F_NESTED, DEV_NAME 2), OFFSET 2, LENGTH 3 (u32), PAGE 4, BANK 5,
    I2C_ADDRESS 6 (u8), as include/uapi/linux/ethtool_netlink.h numbers them."""
    from nichealthd.sources import genetlink

    attrs = genetlink.attrs(module_request("eth0", 0x11, 128))
    assert [kind for kind, _ in attrs] == [1, 2, 3, 4, 5, 6]
    assert genetlink.get_str(genetlink.attr_map(attrs[0][1]).get(2)) == "eth0"
    assert [genetlink.get_u32(attrs[1][1]), genetlink.get_u32(attrs[2][1])] == [128, 128]
    assert [genetlink.get_u8(a[1]) for a in attrs[3:]] == [0x11, 0, 0x50]
