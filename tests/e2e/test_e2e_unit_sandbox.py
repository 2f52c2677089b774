"""The shipped unit's sandbox, under real systemd, gives the daemon exactly what it needs.

systemd/nichealthd.service is installed unchanged except for ExecStart, which runs
sandbox_probe.py (a stand-in that records what it can read, write, connect to and own), so
this test does not depend on the daemon and pins down the hardening itself: the files the
daemon reads stay readable, the only writable paths are its state and log directories, the
connector socket and the system bus are reachable, the bus policy lets user nichealthd own
the name and enforces read-only access for others, and the watchdog restarts a frozen main
process.
"""

from __future__ import annotations

import json
import re
import shutil
import time
from pathlib import Path

import pytest

from tests.harness import NOBODY

pytestmark = pytest.mark.e2e

REPO = Path(__file__).resolve().parents[2]

NAME = "org.nichealthd.NicHealth1"
OBJ = "/org/nichealthd/NicHealth1"
FAKE_CONNECTOR = (
    "import os, socket; s = socket.socket(socket.AF_UNIX); "
    "s.bind('/run/nvsentinel/nvsentinel.sock'); "
    "os.chmod('/run/nvsentinel/nvsentinel.sock', 0o666); "
    "s.listen(16)\nwhile True: s.accept()[0].close()"
)


def install_sandboxed_probe(c) -> None:
    unit = (REPO / "systemd/nichealthd.service").read_text()
    unit, n = re.subn(
        r"^ExecStart=.*$",
        "ExecStart=/usr/bin/python3 /usr/local/lib/nichealthd-probe.py",
        unit,
        flags=re.M,
    )
    assert n == 1
    c.path("/etc/systemd/system/nichealthd.service").write_text(unit)
    shutil.copy(REPO / "tests/e2e/sandbox_probe.py", c.path("/usr/local/lib/nichealthd-probe.py"))
    shutil.copy(REPO / "sysusers.d/nichealthd.conf", c.path("/usr/lib/sysusers.d/nichealthd.conf"))
    shutil.copy(
        REPO / "etc/dbus-1/system.d/org.nichealthd.NicHealth1.conf",
        c.path("/usr/share/dbus-1/system.d/org.nichealthd.NicHealth1.conf"),
    )
    c.path("/etc/nichealthd").mkdir(exist_ok=True)
    shutil.copy(REPO / "etc/nichealthd/config.toml", c.path("/etc/nichealthd/config.toml"))
    c.path("/var/lib/nvsentinel").mkdir(exist_ok=True)
    c.path("/var/lib/nvsentinel/gpu_metadata.json").write_text('{"gpus": []}\n')
    c.run(["systemd-sysusers"])
    c.run(["systemctl", "reload", "dbus"])
    c.run(["systemctl", "daemon-reload"])
    c.run(
        [
            "systemd-run",
            "--unit=fake-connector",
            "-p",
            "RuntimeDirectory=nvsentinel",
            "python3",
            "-c",
            FAKE_CONNECTOR,
        ]
    )
    c.wait_for(
        lambda: (
            c.run(["test", "-S", "/run/nvsentinel/nvsentinel.sock"], check=False).returncode == 0
        ),
        10,
        what="fake connector socket",
    )


def busctl(c, *args, user=None):
    cmd = ["busctl", "--system", "call", NAME, OBJ, *args]
    if user:
        cmd = [*NOBODY, *cmd]
    return c.run(cmd, check=False)


def test_unit_sandbox_under_real_systemd(boot):
    c = boot("deps")
    install_sandboxed_probe(c)
    c.run(["systemctl", "start", "nichealthd"], timeout=60)
    assert c.show("nichealthd", "ActiveState") == "active"
    assert c.show("nichealthd", "SubState") == "running"
    assert c.show("nichealthd", "StatusText") == "sandbox probe: all checks recorded"

    r = json.loads(c.path("/var/lib/nichealthd/probe.json").read_text())
    ok = {k for k, v in r.items() if v["ok"]}
    assert r["user"]["value"] == "nichealthd"
    # Everything the daemon reads stays readable.
    for key in (
        "proc_net_route",
        "boot_id",
        "sys_class_net",
        "sys_carrier_changes",
        "gpu_metadata",
        "config",
    ):
        assert key in ok, (key, r[key])
    # ProtectProc= gives the service a fresh procfs instance, so it sees the kernel's boot
    # ID even where systemd-nspawn overmounts a per-container one: on a real host both agree.
    kernel_boot_id = Path("/proc/sys/kernel/random/boot_id").read_text().strip()
    container_boot_id = c.run(["cat", "/proc/sys/kernel/random/boot_id"]).stdout.strip()
    assert r["boot_id"]["value"] in (kernel_boot_id, container_boot_id)
    assert r["proc_net_route"]["value"].startswith("Iface")
    # Writable: only the state and log directories, files private (UMask=0077).
    assert r["state_dir_write"] == {"ok": True, "value": "0o600"}
    assert r["logs_dir_write"]["ok"]
    for key in ("sys_write", "etc_write", "home_list"):
        assert key not in ok, (key, r[key])
    # PrivateTmp: /var/tmp is writable but private to the service.
    assert "var_tmp_write" in ok and not c.path("/var/tmp/probe").exists()
    assert r["etc_write"]["errno"] == "EROFS"
    # Sockets: the connector, TCP for /metrics and rtnetlink for link changes (linkEvents);
    # nothing exotic.
    assert "connector_socket" in ok, r["connector_socket"]
    assert "metrics_bind" in ok, r["metrics_bind"]
    assert "netlink_socket" in ok, r["netlink_socket"]
    assert r["packet_socket"]["errno"] == "EAFNOSUPPORT"
    # Other users' processes are invisible; no real devices.
    assert "1" not in r["other_pids_visible"]["value"]
    assert "null" in r["dev_list"]["value"] and "kmsg" not in r["dev_list"]["value"]
    # Kernel log: the journal is readable (SupplementaryGroups=systemd-journal), /dev/kmsg is not
    assert r["journal_entries"]["ok"] and r["journal_entries"]["value"] > 0, r["journal_entries"]
    assert not r["dev_kmsg"]["ok"], r["dev_kmsg"]
    # D-Bus: user nichealthd owns the name (1 = DBUS_REQUEST_NAME_REPLY_PRIMARY_OWNER).
    assert r["dbus_request_name"] == {"ok": True, "value": 1}

    # The bus policy, enforced by the container's real dbus-daemon.
    iface = "org.nichealthd.NicHealth1"
    props = "org.freedesktop.DBus.Properties"
    for user in (None, "nobody"):
        for args in (
            (iface, "ListPorts"),
            (iface, "ListDevices"),
            (iface, "ListCounters", "sq", "", "0"),
            (iface, "ListEvents", "u", "10"),
            ("org.freedesktop.DBus.Introspectable", "Introspect"),
            ("org.freedesktop.DBus.Peer", "Ping"),
            (props, "GetAll", "s", iface),
            (props, "Get", "ss", iface, "Version"),
        ):
            res = busctl(c, *args, user=user)
            assert res.returncode == 0 and res.stdout.strip() == 's "ok"', (user, args, res)
    assert busctl(c, iface, "Reload").stdout.strip() == 's "ok"'
    denied: list = [(iface, "Reload"), (props, "Set", "ssv", iface, "LogLevel", "s", "debug")]
    for call in denied:
        res = busctl(c, *call, user="nobody")
        assert res.returncode != 0 and "Access denied" in res.stderr, (call, res)
    steal = c.run(
        [
            *NOBODY,
            "python3",
            "-c",
            "import asyncio\nfrom dbus_fast.aio import MessageBus\nfrom dbus_fast import BusType\n"
            "async def m():\n b = await MessageBus(bus_type=BusType.SYSTEM).connect()\n"
            f" await b.request_name('{NAME}')\nasyncio.run(m())",
        ],
        check=False,
    )
    assert steal.returncode != 0 and "is not allowed to own the service" in steal.stderr, steal

    # Watchdog: a frozen main process is killed and restarted (shortened via a drop-in).
    dropin = c.path("/etc/systemd/system/nichealthd.service.d/fast.conf")
    dropin.parent.mkdir(parents=True)
    dropin.write_text("[Service]\nWatchdogSec=2s\nRestartSec=100ms\n")
    c.run(["systemctl", "daemon-reload"])
    c.run(["systemctl", "restart", "nichealthd"])
    pid = c.show("nichealthd", "MainPID")
    c.run(["kill", "-STOP", pid])
    t0 = time.monotonic()
    c.wait_for(lambda: c.show("nichealthd", "NRestarts") == "1", 20, what="watchdog restart")
    c.wait_for(lambda: c.show("nichealthd", "SubState") == "running", 20, what="running again")
    assert c.show("nichealthd", "MainPID") != pid
    assert time.monotonic() - t0 < 15
    assert "Watchdog timeout" in c.journal("nichealthd")

    # The online score of the installed unit matches the offline one.
    sec = c.run(["systemd-analyze", "security", "nichealthd.service"], check=False).stdout
    m = re.search(r"Overall exposure level for nichealthd.service: ([\d.]+)", sec)
    assert m, sec
    score = float(m[1])
    assert score <= 2.0, sec

    c.run(["systemctl", "stop", "nichealthd"])
    assert c.show("nichealthd", "ActiveState") == "inactive"
