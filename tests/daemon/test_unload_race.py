"""A poll that reads a device half-way out of sysfs (listed, its directory gone) during a
driver unload: the device keeps its role, so the unload holds it with the others and it is
judged like them (a real unload removes devices one at a time; the daemon polls meanwhile)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from nichealthd.runtime.monitor import Monitor
from nichealthd.sim import mutate, tree
from nichealthd.sim.fsio import stash


def persisted(monitor: Monitor) -> dict[str, Any]:
    data: dict[str, Any] = json.loads(Path(monitor.config.state_file).read_text())
    return data


def test_a_device_read_half_way_out_keeps_its_role_and_joins_the_driver_event(
        monitor: Monitor) -> None:
    top = Path(monitor.config.sysfs_root).parent
    manifest = tree.load(top)
    monitor.poll()
    assert monitor.last is not None
    before = dict(monitor.last.result.roles)
    monitored = sorted(name for name, role in before.items() if role.monitored)
    assert "mlx5_2" in monitored and before["mlx5_13"].role == "vf"
    # The unload has taken mlx5_0 (a name gone: every device's facts are read again), and
    # the directories of mlx5_2 (storage) and mlx5_13 (a VF), not yet their class links:
    # their PCI facts cannot be read (no numa_node, no physfn).
    mutate.take_device(top, manifest, "mlx5_0")
    for name in ("mlx5_2", "mlx5_13"):
        stash(top, top / tree.device(manifest, name)["ib_path"])
    monitor.poll()
    half = {d.name: d for d in monitor.last.snapshot.devices}
    assert half["mlx5_2"].numa_node is None and not half["mlx5_13"].is_vf
    for name in ("mlx5_2", "mlx5_13"):
        assert monitor.last.result.roles[name] == before[name]
        stash(top, top / tree.CLASS_IB / name)  # their class links go too
    mutate.unload_driver(top)  # and the others
    monitor.poll()
    data = persisted(monitor)
    assert sorted(data["driver_event"]["devices"]) == sorted(data["known_devices"]) == monitored
