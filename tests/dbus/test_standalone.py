"""A standalone GPU host (README): no NVSentinel metadata, no platform connector, and at
first no RDMA device — the daemon runs, says so, and picks the devices up when they appear.

Real parts: the nichealthd subprocess on a ``nichealthd-sim`` tree built ``--no-metadata``,
a private dbus-daemon, ``nichealthctl`` as a subprocess.
"""

from __future__ import annotations

import json
from typing import Any, Callable

from dbushelpers import DaemonProcess, ctl, make_sim, wait_log

from nichealthd.sim import mutate

NO_DEVICES = "no InfiniBand/RoCE devices found"


def test_no_rdma_devices_then_a_driver_loads(start_daemon: Callable[..., DaemonProcess]
                                            ) -> None:
    root = make_sim("cloud-vm-ib", metadata=False)
    mutate.hide_class(root)  # ib_core not loaded yet: no /sys/class/infiniband at all
    daemon = start_daemon(root, extra=["--platform-connector-socket",
                                       f"unix://{root}/nvsentinel.sock"])
    log = daemon.log()
    assert "topology from sysfs: topologySource = auto, no GPU metadata file" in log
    assert "NUMA gate is skipped" in log
    assert f"does not exist: {NO_DEVICES}" in log
    assert "WARNING" not in log, log

    ports = ctl("show", "ports")
    assert (ports.returncode, ports.stdout) == (0, NO_DEVICES + "\n"), ports
    devices = ctl("show", "devices")  # one line, not a bare table header
    assert (devices.returncode, devices.stdout) == (0, NO_DEVICES + "\n"), devices
    assert json.loads(ctl("show", "devices", "--json").stdout) == []
    check = ctl("check")
    assert check.returncode == 0 and f"NICHEALTH OK - {NO_DEVICES}" in check.stdout, check
    status = json.loads(ctl("status", "--json").stdout)
    assert status["devices_found"] is False and status["rdma_devices"] == 0
    assert status["topology_source"] == "sysfs"
    assert status["topology"] == ("topology from sysfs: 1 GPU with unknown NUMA node (NUMA "
                                  f"gate skipped); {NO_DEVICES}")
    # The connector's socket never existed: not installed, one info line, no warning.
    assert status["connector_state"] == "not installed"
    assert daemon.log().count("platform connector not installed") == 1
    human = ctl("status").stdout
    assert NO_DEVICES in human and "topology" in human

    mutate.unhide_class(root)  # the driver loads after boot: no restart needed
    log = wait_log(daemon, "topology read again")
    assert "new RDMA device(s) mlx5_0: topology read again" in log
    wait_log(daemon, "NIC mlx5_0: compute (InfiniBand link layer)")
    wait_log(daemon, "1 compute, 0 storage, 0 management NICs")
    listed: list[dict[str, Any]] = json.loads(ctl("show", "ports", "--json").stdout)
    assert [(p["device"], p["role"]) for p in listed] == [("mlx5_0", "compute")]
    assert ctl("check").returncode == 0
    assert "WARNING" not in daemon.log(), daemon.log()


def test_roles_from_sysfs_on_a_dgx_without_metadata(start_daemon: Callable[..., DaemonProcess]
                                                   ) -> None:
    root = make_sim("dgx-h100", metadata=False)
    manifest = json.loads((root / "sim.json").read_text())
    daemon = start_daemon(root)
    wait_log(daemon, "topology from sysfs: 8 GPUs on 2 NUMA nodes; 8 compute, 4 storage, "
                     "1 management NIC")
    devices = json.loads(ctl("show", "devices", "--json").stdout)
    assert {d["device"]: d["role"] for d in devices} == manifest["roles"]
    status = json.loads(ctl("status", "--json").stdout)
    assert status["topology_source"] == "sysfs" and status["devices_found"] is True
