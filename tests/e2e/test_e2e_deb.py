"""Issue 8: the .deb in a fresh Debian 12 container under real systemd.

One container for the module, the steps in order: install with apt from Debian only (the
daemon's dependencies come from Debian's archive; the cached rootfs holds them downloaded,
not installed), enabled and active on a sim host configured in /etc/nichealthd/config.toml,
nichealthctl lists the host's ports, remove stops it and keeps the state, purge deletes it.
"""

from __future__ import annotations

import json
import shutil
from importlib.util import find_spec

import nspawn
import pytest
from install import built_deb, sim_host_from_outside

pytestmark = pytest.mark.e2e

UNIT = "nichealthd.service"
CTL_MISSING = find_spec("nichealthd.ctl") is None


@pytest.fixture(scope="module")
def box(e2e_ready):
    deb = built_deb()
    c = nspawn.Container("base")
    try:
        c.start()
        root = sim_host_from_outside(c)
        conf = c.path("/etc/nichealthd/config.toml")
        conf.parent.mkdir(parents=True)
        conf.write_text(
            f'sysfsRoot = "{root}/sys"\nprocRoot = "{root}/proc"\n'
            f'metadataPath = "{root}/gpu_metadata.json"\nnodeName = "e2e-deb"\n'
            'eventLog = "/var/log/nichealthd/events.jsonl"\n'
        )
        shutil.copy(deb, c.path("/root/" + deb.name))
        c.deb_name = deb.name  # type: ignore[attr-defined]
        yield c
    finally:
        c.stop()


def apt(c, *args: str):
    return c.run(
        ["apt-get", "-y", "-q", "-o", "Dpkg::Options::=--force-confold", *args], timeout=300
    )


def test_apt_install_pulls_debian_deps_and_starts(box):
    c = box
    assert c.run(["dpkg-query", "-W", "python3-grpcio"], check=False).returncode != 0
    res = apt(c, "install", f"/root/{c.deb_name}")
    assert "pip" not in res.stdout.lower()
    for pkg in ("python3-dbus-fast", "python3-sdnotify", "python3-grpcio", "python3-protobuf",
                "python3-prometheus-client", "dbus"):  # fmt: skip
        st = c.run(["dpkg-query", "-W", "-f", "${Status}", pkg]).stdout
        assert st == "install ok installed", (pkg, st)
    # Nothing came from outside Debian's packages: no pip-installed Python modules.
    assert not list(c.path("/usr/local/lib").glob("python3*/dist-packages/*"))
    assert c.run(["dpkg", "-S", "/usr/lib/python3/dist-packages/dbus_fast"]).stdout.startswith(
        "python3-dbus-fast:"
    )
    assert c.run(["systemctl", "is-enabled", UNIT]).stdout.strip() == "enabled"
    c.wait_for(lambda: c.show(UNIT, "SubState") == "running", 30, what="unit running")
    status = c.run(["systemctl", "status", "--no-pager", UNIT], check=False).stdout
    assert "active (running)" in status, status + c.journal(UNIT)
    assert " ports: " in c.show(UNIT, "StatusText")
    assert c.run(["id", "-un", "nichealthd"]).stdout.strip() == "nichealthd"
    assert c.path("/var/lib/nichealthd/state.json").exists()
    assert c.path("/usr/share/dbus-1/system.d/org.nichealthd.NicHealth1.conf").exists()
    assert c.path("/usr/share/man/man8/nichealthd.8.gz").exists()


@pytest.mark.skipif(CTL_MISSING, reason="nichealthctl (nichealthd.ctl) not on this branch yet")
def test_nichealthctl_show_ports_lists_the_sim_host(box):
    c = box
    # READY follows the first committed poll; the D-Bus name is taken right after it.
    c.wait_for(lambda: c.run(["nichealthctl", "status"], check=False).returncode == 0, 20,
               what="nichealthd on the system bus")
    out = c.run(["nichealthctl", "show", "ports"]).stdout
    assert "mlx5_0" in out
    ports = json.loads(c.run(["nichealthctl", "--json", "show", "ports"]).stdout)
    devices = {p["device"] for p in ports}
    assert {f"mlx5_{i}" for i in range(8)} <= devices, devices
    for p in ports:
        assert {"device", "port", "link_layer", "state", "phys_state", "healthy", "fatal",
                "role"} <= set(p)  # fmt: skip
    # Any user may read.
    user = c.run(["setpriv", "--reuid=65534", "--regid=65534", "--clear-groups",
                  "nichealthctl", "show", "ports"])  # fmt: skip
    assert "mlx5_0" in user.stdout


def test_apt_remove_stops_and_keeps_state(box):
    c = box
    apt(c, "remove", "nichealthd")
    assert c.show(UNIT, "ActiveState") in ("inactive", "")
    assert c.run(["pgrep", "-u", "nichealthd"], check=False).returncode == 1
    assert c.path("/var/lib/nichealthd/state.json").exists()
    assert c.path("/etc/nichealthd/config.toml").exists()  # conffiles stay until purge


def test_apt_purge_removes_state(box):
    c = box
    apt(c, "purge", "nichealthd")
    assert not c.path("/var/lib/nichealthd").exists()
    assert not c.path("/var/log/nichealthd").exists()
    assert not c.path("/etc/nichealthd/config.toml").exists()
    assert c.run(["dpkg-query", "-W", "nichealthd"], check=False).returncode != 0
