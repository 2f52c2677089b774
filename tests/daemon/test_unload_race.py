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
    assert "mlx5_2" in monitored
    # The unload has taken mlx5_0 (a name gone: every device's facts are read again) and
    # mlx5_2's directory, not yet its class link: its PCI facts cannot be read.
    mutate.take_device(top, manifest, "mlx5_0")
    stash(top, top / tree.device(manifest, "mlx5_2")["ib_path"])
    monitor.poll()
    assert monitor.last.snapshot.devices  # the poll saw the others
    half = next(d for d in monitor.last.snapshot.devices if d.name == "mlx5_2")
    assert half.numa_node is None
    assert monitor.last.result.roles["mlx5_2"] == before["mlx5_2"]
    stash(top, top / tree.CLASS_IB / "mlx5_2")  # its class link goes too
    mutate.unload_driver(top)  # and the others
    monitor.poll()
    data = persisted(monitor)
    assert sorted(data["driver_event"]["devices"]) == sorted(data["known_devices"]) == monitored
