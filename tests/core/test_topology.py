"""NIC role classification against the spec's field-validation tables (§4.1.3, §4.2.4) and the
homogeneity rules (§4.3, REFERENCE §2)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from nichealthd.model import DeviceSnapshot
from nichealthd.topology import (
    CardCount,
    GpuTopology,
    MetadataError,
    anomalous_cards,
    classify,
    group_mode,
    load_gpu_topology,
    read_default_route_devices,
)

from .builders import device, port


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
                    inclusion_override=("^rdmap",)).role == "compute"
    assert classify(nic("mlx5_2", 0), gpus, frozenset(),
                    exclusion=("^mlx5_2$",)).role == "excluded"


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
    bad = write(tmp_path / "a.json", {"gpus": [{"numa_node": -1}], "nic_topology": {"x": []}})
    with pytest.raises(MetadataError, match="numa_node -1"):
        load_gpu_topology(bad)
    no_topo = write(tmp_path / "b.json", {"gpus": [{"numa_node": 0}]})
    with pytest.raises(MetadataError, match="nic_topology"):
        load_gpu_topology(no_topo)
    good = write(tmp_path / "c.json", {"gpus": [{"numa_node": 0, "pci_address": "0000:0f:00.0"},
                                                {"numa_node": -1}],
                                       "nic_topology": {"mlx5_0": ["PIX", "SYS"]}})
    topology = load_gpu_topology(good)
    assert topology.gpu_numa_nodes == {0}
    assert topology.nic_topology["mlx5_0"] == ("PIX", "SYS")


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
