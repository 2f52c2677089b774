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
