"""Roles follow the PCI function across renames (core/pcitopo.py): the GPU↔NIC matrix is keyed by
kernel name, and a driver reload may permute the names (mlx5_0 <-> mlx5_1) while NVSentinel's
metadata file keeps the old ones.

On the DGX-H100 sim, mlx5_0 is the InfiniBand compute function 0000:18:00.0 (PXB to GPU 0) and
mlx5_1 the Ethernet storage function 0000:29:00.0 (NODE to the GPUs of NUMA 0). After
``driver-reload --swap mlx5_0 mlx5_1`` the file's ``mlx5_0`` row is still the IB function's.
"""

from __future__ import annotations

import json
import logging
from dataclasses import replace
from datetime import datetime, timezone
from pathlib import Path

import pytest

from nichealthd.core.config import Config
from nichealthd.core.model import DeviceSnapshot
from nichealthd.core.topology import GpuTopology, Topology, classify, classify_all
from nichealthd.runtime.startup import choose_gpu_topology, choose_topology
from nichealthd.sim import mutate
from nichealthd.sources.config_file import load_config
from nichealthd.sources.gpu_metadata import resolve_names
from nichealthd.sources.pci import current_functions
from nichealthd.sources.routes import read_default_route_devices
from nichealthd.storage.metadata_names import load_names, names_path, save_names

from .. import simtrees
from .builders import device, port
from .conftest import reader_for

IB, ETH = "0000:18:00.0", "0000:29:00.0"
PXB_ROW, NODE_ROW = ("PXB", "NODE"), ("NODE", "NODE")


def nic(name: str, pci: str | None, layer: str) -> DeviceSnapshot:
    return replace(device(name, pci=pci or "", ports=(port(name, 1, layer=layer),)),
                   pci_address=pci)


def matrix(addresses: dict[str, str]) -> GpuTopology:
    """The file as written before the reload: mlx5_0 the IB compute row, mlx5_1 storage."""
    return GpuTopology(frozenset({0}), ("0000:1b:00.0", "0000:43:00.0"),
                       {"mlx5_0": PXB_ROW, "mlx5_1": NODE_ROW}, nic_addresses=addresses)


def role(dev: DeviceSnapshot, gpus: GpuTopology) -> tuple[str, str]:
    found = classify(dev, gpus, frozenset())
    return found.role, found.reason


# ------------------------------------------------------------------ the lookup (pure)

def test_after_a_permutation_each_function_keeps_its_row() -> None:
    resolved = matrix({"mlx5_0": IB, "mlx5_1": ETH})
    eth_now_0, ib_now_1 = nic("mlx5_0", ETH, "Ethernet"), nic("mlx5_1", IB, "InfiniBand")
    assert role(eth_now_0, resolved) == ("storage", "Ethernet, NODE/PHB to a GPU")
    assert role(ib_now_1, resolved) == ("compute", "shares a PCIe switch with a GPU (PIX/PXB)")
    # By name (what an unresolved matrix gives): the Ethernet function gets the IB row.
    assert role(eth_now_0, matrix({}))[0] == "compute"


def test_a_name_resolved_to_another_function_gives_its_device_no_row() -> None:
    """mlx5_1 named the IB function when the file was read; a new function called mlx5_1
    now (0000:99:00.0, in no row) is judged without the matrix, not with the IB row."""
    resolved = matrix({"mlx5_0": ETH, "mlx5_1": IB})
    newcomer = nic("mlx5_1", "0000:99:00.0", "Ethernet")
    assert resolved.levels_of(newcomer) == ()
    assert role(newcomer, resolved) == ("storage", "Ethernet, no PCIe relationship to a GPU")


def test_by_name_where_the_name_or_the_device_address_is_not_resolved() -> None:
    only_0 = matrix({"mlx5_0": IB})
    # mlx5_1 was not resolved (no such device when the file was read): its row by name.
    assert only_0.levels_of(nic("mlx5_1", "0000:99:00.0", "Ethernet")) == NODE_ROW
    # A device whose PCI address cannot be read: by name, as before.
    assert only_0.levels_of(nic("mlx5_0", None, "Ethernet")) == PXB_ROW
    assert matrix({}).levels_of(nic("mlx5_0", ETH, "Ethernet")) == PXB_ROW


def test_classify_all_classifies_again_under_a_topology_with_another_resolution() -> None:
    """The roles are kept per topology object: a topology read again with another
    resolution classifies afresh, the same one keeps each device's role object."""
    devices = [nic("mlx5_0", ETH, "Ethernet"), nic("mlx5_1", IB, "InfiniBand")]
    by_name = Topology(matrix({}))
    first = classify_all(devices, by_name)
    assert first["mlx5_0"].role == "compute"
    by_pci = Topology(matrix({"mlx5_0": IB, "mlx5_1": ETH}))
    second = classify_all(devices, by_pci)
    assert second["mlx5_0"].role == "storage"
    again = classify_all(devices, by_pci)
    assert all(again[n] is second[n] for n in again)


def test_resolve_names_keeps_what_was_kept_and_adds_only_unclaimed_functions() -> None:
    names = ["mlx5_0", "mlx5_1", "mlx5_2", "mlx5_3"]
    kept = {"mlx5_0": IB, "mlx5_1": ETH}
    current = {"mlx5_0": ETH, "mlx5_1": IB, "mlx5_2": "0000:29:00.1", "mlx5_3": IB}
    # The kept names stay as they were; mlx5_2 (absent at the first read) joins; mlx5_3's
    # function is mlx5_0's already (the file cannot have named it twice): unresolved.
    assert resolve_names(names, current, kept) == {**kept, "mlx5_2": "0000:29:00.1"}
    assert resolve_names(names, current, None) == {"mlx5_0": ETH, "mlx5_1": IB,
                                                   "mlx5_2": "0000:29:00.1"}
    assert resolve_names(names, {}, {}) == {}


# --------------------------------------------------- the resolution and its keeping (sim)

@pytest.fixture
def dgx() -> Path:
    root = simtrees.take("dgx-h100")
    return root


def config_of(root: Path) -> Config:
    return load_config(str(root / "nichealthd.toml"))


def roles_now(root: Path, gpus: GpuTopology) -> dict[str, tuple[str, str]]:
    """Roles of mlx5_0..2 as the host is now (a fresh reader: the names moved)."""
    cfg = config_of(root)
    routes = read_default_route_devices(cfg.proc_root, cfg.sys_class_net)
    devices = reader_for(root).observe(datetime.now(timezone.utc)).devices
    return {d.name: (d.pci_address or "", classify(d, gpus, routes).role) for d in devices
            if d.name in ("mlx5_0", "mlx5_1", "mlx5_2")}


RIGHT = {"mlx5_0": (ETH, "storage"), "mlx5_1": (IB, "compute"),
         "mlx5_2": ("0000:29:00.1", "storage")}


def test_a_reread_of_the_unchanged_file_after_a_swap_keeps_the_first_resolution(
        dgx: Path) -> None:
    cfg = config_of(dgx)
    choice = choose_topology(cfg)
    first = choice.gpus
    assert (first.nic_addresses["mlx5_0"], first.nic_addresses["mlx5_1"]) == (IB, ETH)
    assert choice.notes == (f"GPU metadata file {cfg.metadata_path}: 13 of its 13 device "
                            f"names resolved to PCI functions (kept while its content is "
                            f"unchanged: roles follow the function across renames)",)
    record = json.loads(Path(names_path(cfg.state_dir)).read_text())
    assert record["names"] == dict(first.nic_addresses)
    mutate.driver_reload(dgx, swap=("mlx5_0", "mlx5_1"))
    assert current_functions(cfg.sys_class_infiniband)["mlx5_0"] == ETH
    choice = choose_topology(cfg)  # a new name, a reload, or a restart reads it again
    again = choice.gpus
    assert again.nic_addresses == first.nic_addresses
    assert choice.notes == (f"GPU metadata file {cfg.metadata_path} predates a rename: "
                            f"mlx5_0 is 0000:18:00.0, now mlx5_1; mlx5_1 is 0000:29:00.0, "
                            f"now mlx5_0",)
    assert roles_now(dgx, again) == RIGHT
    # What reading the file again as on main does: the old names on the new devices.
    assert roles_now(dgx, replace(again, nic_addresses={}))["mlx5_0"] == (ETH, "compute")


def test_a_rewritten_file_is_resolved_afresh(dgx: Path) -> None:
    """The collector rewrote the file after the reload (its keys follow the new names): a
    new content, resolved through today's names."""
    cfg = config_of(dgx)
    choose_gpu_topology(cfg)
    mutate.driver_reload(dgx, swap=("mlx5_0", "mlx5_1"))
    path = Path(cfg.metadata_path)
    data = json.loads(path.read_text())
    rows = data["nic_topology"]
    rows["mlx5_0"], rows["mlx5_1"] = rows["mlx5_1"], rows["mlx5_0"]
    path.write_text(json.dumps(data))
    fresh, _ = choose_gpu_topology(cfg)
    assert (fresh.nic_addresses["mlx5_0"], fresh.nic_addresses["mlx5_1"]) == (ETH, IB)
    assert roles_now(dgx, fresh) == RIGHT


def test_names_absent_at_the_first_read_are_resolved_when_they_appear(dgx: Path) -> None:
    """Started before the RDMA driver: nothing to resolve yet; the read that follows the
    devices' arrival (a new name) resolves them, and a later swap is then followed."""
    cfg = config_of(dgx)
    mutate.unload_driver(dgx)
    empty, _ = choose_gpu_topology(cfg)
    assert dict(empty.nic_addresses) == {}
    mutate.load_driver(dgx)
    loaded, _ = choose_gpu_topology(cfg)
    assert loaded.nic_addresses["mlx5_0"] == IB
    mutate.driver_reload(dgx, swap=("mlx5_0", "mlx5_1"))
    assert roles_now(dgx, choose_gpu_topology(cfg)[0]) == RIGHT


def test_the_sysfs_topology_follows_the_functions_without_a_new_walk(dgx: Path) -> None:
    """topologySource = sysfs derives the rows at start, on reload and when a new name
    appears; a permutation brings no new name, so the rows carry their functions."""
    cfg = replace(config_of(dgx), topology_source="sysfs")
    derived, _ = choose_gpu_topology(cfg)
    assert (derived.nic_addresses["mlx5_0"], derived.nic_addresses["mlx5_1"]) == (IB, ETH)
    mutate.driver_reload(dgx, swap=("mlx5_0", "mlx5_1"))
    assert roles_now(dgx, derived) == RIGHT
    assert roles_now(dgx, replace(derived, nic_addresses={}))["mlx5_0"] == (ETH, "compute")


def test_a_record_that_cannot_be_used_is_resolved_afresh(
        dgx: Path, caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level(logging.DEBUG, "nichealthd.store")
    cfg = config_of(dgx)
    record = Path(names_path(cfg.state_dir))
    record.parent.mkdir(parents=True, exist_ok=True)
    record.write_text('{"version": 1, "sha256": 5}')
    gpus, _ = choose_gpu_topology(cfg)
    assert gpus.nic_addresses["mlx5_0"] == IB
    assert f"{record} is not a record of resolved device names" in caplog.text
    assert json.loads(record.read_text())["names"]["mlx5_0"] == IB  # replaced by a good one
    assert load_names(str(record), "another content") is None


def test_a_record_that_cannot_be_written_leaves_this_read_resolved(
        dgx: Path, caplog: pytest.LogCaptureFixture) -> None:
    """Said at debug level only: the state file beside it fails loudly in that directory
    (and a start that fails there says only that)."""
    caplog.set_level(logging.DEBUG, "nichealthd.store")
    cfg = config_of(dgx)
    blocked = Path(cfg.state_dir)
    blocked.parent.mkdir(parents=True, exist_ok=True)
    if blocked.exists():
        blocked.rmdir()
    blocked.write_text("not a directory")
    gpus, _ = choose_gpu_topology(cfg)
    assert gpus.nic_addresses["mlx5_1"] == ETH
    assert f"cannot write {names_path(cfg.state_dir)}" in caplog.text
    assert not save_names(names_path(cfg.state_dir), "x", {})
