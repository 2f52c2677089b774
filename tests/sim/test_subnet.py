"""The fake fabric's subnet manager (sim/subnet.py): what a stopped SM leaves in sysfs."""

from __future__ import annotations

from pathlib import Path
from typing import Callable

import pytest

from nichealthd.sim import SimError, mutate, subnet, tree


def port_files(root: Path, name: str) -> dict[str, str]:
    pdir = root / tree.device(tree.load(root), name)["ib_path"] / "ports" / "1"
    return {f: (pdir / f).read_text() for f in ("state", "phys_state", "lid", "sm_lid")}


def test_a_stopped_sm_leaves_every_infiniband_port_in_init(build: Callable[..., Path]) -> None:
    root = build("dgx-h100")
    before = port_files(root, "mlx5_0")
    ethernet = port_files(root, "mlx5_1")
    mutate.uncable(root, "mlx5_3", 1)  # a DOWN port stays DOWN
    taken = subnet.stop(root)
    assert ("mlx5_0", "1") in taken and ("mlx5_3", "1") not in taken
    assert all(tree.device(tree.load(root), d)["link_layer"] == "InfiniBand" for d, _ in taken)
    assert port_files(root, "mlx5_0") == {"state": "2: INIT\n", "phys_state": "5: LinkUp\n",
                                          "lid": "0x0\n", "sm_lid": "0x0\n"}
    assert port_files(root, "mlx5_1") == ethernet
    with pytest.raises(SimError, match="stopped already"):
        subnet.stop(root)
    mutate.set_port(root, "mlx5_4", 1, state="DOWN", phys_state="Polling")
    back = subnet.start(root)
    assert ("mlx5_0", "1") in back and ("mlx5_4", "1") not in back
    assert port_files(root, "mlx5_0") == before
    assert port_files(root, "mlx5_3")["state"] == "1: DOWN\n"
    with pytest.raises(SimError, match="not stopped"):
        subnet.start(root)


def test_a_reboot_with_the_sm_pending_and_a_slow_sweep(build: Callable[..., Path]) -> None:
    """reboot --sm-pending: every InfiniBand port waits in INIT; activate brings one back
    at a time, start the rest."""
    root = build("dgx-h100")
    before = port_files(root, "mlx5_0")
    ethernet = port_files(root, "mlx5_1")
    boot = (root / tree.BOOT_ID).read_text()
    boot_id, held = subnet.hold(root)
    assert (root / tree.BOOT_ID).read_text() == boot_id + "\n" != boot
    assert len(held) == 8 and ("mlx5_0", "1") in held
    assert port_files(root, "mlx5_0")["state"] == "2: INIT\n"
    assert port_files(root, "mlx5_1") == ethernet
    assert subnet.activate(root, "mlx5_0") == [("mlx5_0", "1")]
    assert port_files(root, "mlx5_0") == before
    with pytest.raises(SimError, match="holds no port of mlx5_0"):
        subnet.activate(root, "mlx5_0")
    assert len(subnet.start(root)) == 7
    assert port_files(root, "mlx5_2")["state"] == "4: ACTIVE\n"


def test_a_port_moved_to_its_own_subnet_is_stopped_and_started_alone(
        build: Callable[..., Path]) -> None:
    root = build("dgx-h100")
    assert subnet.move(root, "mlx5_6", 1, "0x2", "fe80:0:0:1") == "fe80:0000:0000:0001/0x2"
    pdir = root / tree.device(tree.load(root), "mlx5_6")["ib_path"] / "ports" / "1"
    assert (pdir / "gids" / "0").read_text().startswith("fe80:0000:0000:0001:")
    assert subnet.stop(root, "0x2") == [("mlx5_6", "1")]
    assert port_files(root, "mlx5_0")["state"] == "4: ACTIVE\n"
    with pytest.raises(SimError, match="no ACTIVE InfiniBand port of SM LID 0x2"):
        subnet.stop(root, "0x2")
    assert len(subnet.stop(root, "0x1")) == 7
    assert subnet.start(root, "0x2") == [("mlx5_6", "1")]
    assert port_files(root, "mlx5_6")["sm_lid"] == "0x2\n"
    assert len(subnet.start(root)) == 7
    with pytest.raises(SimError, match="not an InfiniBand device"):
        subnet.move(root, "mlx5_1", 1, "0x2")
    with pytest.raises(SimError, match="unicast LID"):
        subnet.move(root, "mlx5_0", 1, "0x0")
