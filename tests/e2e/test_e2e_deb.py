"""The .deb on fresh Debian 12 and Debian 13 containers under real systemd.

One container per Debian release, the steps in order, as a new operator meets them:

1. ``apt-get install ./nichealthd_*.deb`` on a fresh host with the DEFAULT configuration
   (nothing written before, no NVSentinel, no RDMA device — README): the dependencies come
   from Debian only (pre-fetched into apt's cache), at the versions packaging/targets.toml
   records for that release (the table the other targets' checks rely on); the unit is enabled
   and active (running), and ``systemctl status nichealthd`` and ``nichealthctl status`` say "no
   InfiniBand/RoCE devices found"; apt prints no "did not start" line and no deb-systemd-invoke
   noise, and the bus grants the daemon its name at the first request;
2. the operator points it the way the README says at a nichealthd-sim host under /srv built
   WITHOUT a GPU metadata file (its host keys copied into /etc/nichealthd/config.toml), then a
   plain ``systemctl restart``: the roles come from the PCI tree (sysfs);
3. nichealthctl lists the host's ports with their roles, as root and as any user, over D-Bus
   and over varlink alike; /metrics answers; an event reaches a real gRPC platform connector
   (tests/e2e/connector_box.py) through Debian's own python3-grpcio (1.51.1: on Debian 13 the
   only place it is exercised, PyPI having no build of it for CPython 3.13);
4. remove stops it and keeps the state; purge deletes it, without dpkg warnings.

Each container installs its own target's package (packaging/build-deb.sh --target debian12,
debian13). Debian 13 itself builds the .deb from a release tarball with its own debhelper,
and its lintian (not the host's Debian 12 one) finds nothing in either build.
"""

from __future__ import annotations

import json
import re
import shutil
from importlib.util import find_spec
from pathlib import Path
from typing import Iterator

import nspawn
import pytest
from connector_box import ContainerConnector, fatal_port_events
from install import REPO, built_deb

from tests.harness import NOBODY, wait_until
from tests.packaging.builds import table
from tests.readme import SIM_HOST, recipe
from tests.release import unpack_release

pytestmark = pytest.mark.e2e

UNIT = "nichealthd.service"
NO_DEVICES = "no InfiniBand/RoCE devices found"
CTL_MISSING = find_spec("nichealthd.cli.ctl") is None
SIM = "/srv/simhost"
# The README's recipe (Install: "Trying the installed service on a simulated host"), read
# from README.md and run as written: build the host, copy its keys into the config, check and
# restart, pull a cable, plug it back.
RECIPE = recipe(SIM_HOST)
SIM_CONFIG = " && ".join(RECIPE[:2])


FLAVOURS = {"debian12": "base", "debian13": "trixie"}


@pytest.fixture(scope="module", params=list(FLAVOURS))
def box(request, e2e_ready) -> Iterator[nspawn.Container]:
    deb = built_deb(request.param)
    connector = ContainerConnector()
    c = nspawn.Container(FLAVOURS[request.param], nspawn_args=connector.nspawn_args)
    try:
        c.start()
        shutil.copy(deb, c.path("/root/" + deb.name))
        c.deb_name = deb.name  # type: ignore[attr-defined]
        c.target = request.param  # type: ignore[attr-defined]
        c.connector = connector  # type: ignore[attr-defined]
        yield c
    finally:
        c.stop()
        connector.close()


def apt(c, *args: str):
    return c.run(
        ["apt-get", "-y", "-q", "-o", "Dpkg::Options::=--force-confold", *args], timeout=300
    )


def assert_archive_versions(c) -> None:
    """The versions packaging/targets.toml records for this Debian release are the ones its
    archive installed (the upstream part: 1.84.2 of 1.84.2-1+b1)."""
    archive = table()["targets"][c.target]["archive"]
    for package, entry in archive.items():
        if not package.startswith("python3-") or not entry["version"]:
            continue
        got = c.run(["dpkg-query", "-W", "-f", "${Version}", package], check=False).stdout
        if not got:  # not pulled in by this install (python3-dbus-next, an alternative)
            continue
        upstream = re.sub(r"^\d+:", "", got).split("-")[0].split("+")[0]
        assert upstream == entry["version"] or upstream.startswith(entry["version"] + "."), \
            (package, got, entry["version"])


def test_fresh_host_install_with_default_config(box):
    c = box
    assert not c.path("/etc/nichealthd").exists()  # nothing prepared: a fresh host
    assert c.run(["dpkg-query", "-W", "python3-grpcio"], check=False).returncode != 0
    res = apt(c, "install", f"/root/{c.deb_name}")
    output = res.stdout + res.stderr
    assert "Could not execute systemctl" not in output, output
    assert "pip" not in res.stdout.lower()
    for pkg in ("python3-dbus-fast", "python3-grpcio", "python3-protobuf", "dbus"):
        st = c.run(["dpkg-query", "-W", "-f", "${Status}", pkg]).stdout
        assert st == "install ok installed", (pkg, st)
    assert_archive_versions(c)
    # Nothing came from outside Debian's packages: no pip-installed Python modules.
    assert not list(c.path("/usr/local/lib").glob("python3*/dist-packages/*"))
    assert c.run(["dpkg", "-S", "dbus_fast"]).stdout.startswith("python3-dbus-fast:")
    assert c.path("/usr/lib/systemd/system/nichealthd.service").is_file()
    assert c.run(["systemctl", "is-enabled", UNIT]).stdout.strip() == "enabled"
    assert c.run(["id", "-un", "nichealthd"]).stdout.strip() == "nichealthd"
    assert c.path("/usr/share/dbus-1/system.d/org.nichealthd.NicHealth1.conf").exists()
    assert c.path("/usr/share/man/man8/nichealthd.8.gz").exists()
    # The shipped config is the commented defaults, and this host has no GPU metadata, no
    # platform connector and no RDMA device (the container sees the build host's /sys, which
    # has no /sys/class/infiniband): it runs anyway and says so.
    assert "did not start" not in output, output
    c.wait_for(lambda: c.show(UNIT, "SubState") == "running", 30, what="unit running")
    assert c.show(UNIT, "StatusText").startswith(NO_DEVICES), c.show(UNIT, "StatusText")
    assert "connector not installed" in c.show(UNIT, "StatusText")
    status = c.run(["systemctl", "status", "--no-pager", "-n", "20", UNIT],
                   check=False).stdout  # fmt: skip
    assert "active (running)" in status and NO_DEVICES in status, status
    assert "topology from sysfs" in c.journal(UNIT)
    # The postinst creates the user before the bus reloads the policy that names it, and that
    # before the start: the daemon's first request for its name is granted (it used to be
    # refused on every first install, logged, and granted a second later).
    c.wait_for(lambda: "D-Bus API serving" in c.journal(UNIT), 30, what="the D-Bus name")
    assert "D-Bus API unavailable" not in c.journal(UNIT), c.journal(UNIT)


@pytest.mark.skipif(CTL_MISSING, reason="nichealthctl (nichealthd.cli.ctl) not on this branch yet")
def test_nichealthctl_on_a_host_without_rdma_devices(box):
    c = box
    c.wait_for(lambda: c.run(["nichealthctl", "status"], check=False).returncode == 0, 20,
               what="nichealthd on the system bus")
    assert NO_DEVICES in c.run(["nichealthctl", "status"]).stdout
    assert c.run(["nichealthctl", "show", "ports"]).stdout == NO_DEVICES + "\n"
    check = c.run(["nichealthctl", "check"], check=False)
    assert check.returncode == 0 and NO_DEVICES in check.stdout, check.stdout


def test_point_it_at_a_host_without_metadata_then_plain_restart(box):
    c = box
    assert RECIPE[2] == ("nichealthctl config check /etc/nichealthd/config.toml && "
                         "systemctl restart nichealthd")
    c.sh(SIM_CONFIG, timeout=120)
    assert not c.path(f"{SIM}/gpu_metadata.json").exists()
    config = c.path("/etc/nichealthd/config.toml").read_text()
    assert "stateFile" not in config and f'ethtoolPath = "{SIM}/ethtool"' in config, config
    res = c.sh(RECIPE[2], check=False)  # no reset-failed before the restart
    assert res.returncode == 0, res.stdout + res.stderr + c.journal(UNIT)
    c.wait_for(lambda: c.show(UNIT, "SubState") == "running", 30, what="unit running")
    assert " ports: " in c.show(UNIT, "StatusText")
    assert c.path("/var/lib/nichealthd/state.json").exists()
    c.wait_for(lambda: "8 compute, 4 storage, 1 management NIC" in c.journal(UNIT), 20,
               what="the topology line")
    assert "topology from sysfs: 8 GPUs on 2 NUMA nodes" in c.journal(UNIT)


@pytest.mark.skipif(CTL_MISSING, reason="nichealthctl (nichealthd.cli.ctl) not on this branch yet")
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
    manifest = json.loads(c.path(f"{SIM}/sim.json").read_text())  # roles from sysfs
    assert {p["device"]: p["role"] for p in ports} == {
        d: r for d, r in manifest["roles"].items() if d in devices}
    status = json.loads(c.run(["nichealthctl", "--json", "status"]).stdout)
    assert status["topology_source"] == "sysfs", status
    # Any user may read.
    user = c.run([*NOBODY, "nichealthctl", "show", "ports"])
    assert "mlx5_0" in user.stdout
    # The same answer over varlink (the socket of the unit's RuntimeDirectory).
    assert c.run(["nichealthctl", "--varlink", "show", "ports"]).stdout == out
    metrics = c.run(["python3", "-c", "import urllib.request; print(urllib.request.urlopen("
                     "'http://127.0.0.1:2112/metrics', timeout=20).read().decode())"]).stdout
    assert 'nichealthd_port_health{' in metrics
    # The simulated modules, through the recipe's ethtoolPath: values, not "n/a".
    modules = json.loads(c.run(["nichealthctl", "--json", "show", "optics"]).stdout)
    assert any(m.get("module_status") == "ok" for m in modules), modules


def test_an_event_reaches_a_real_platform_connector(box):
    """The connector appears after the start (as NVSentinel's may); the daemon finds its
    socket, sends what it holds, and a port taken down arrives as a fatal event."""
    c = box
    fake = c.connector.start()
    try:
        pulled = c.sh(RECIPE[3], timeout=60)  # the README's: uncable, then the last events
        assert "mlx5_0" in pulled.stdout, pulled.stdout
        wait_until(lambda: fatal_port_events(fake, "mlx5_0"), "the port event at the "
                   "connector", 60, detail=lambda: c.journal(UNIT)[-2000:])
        c.wait_for(lambda: "connector connected" in c.show(UNIT, "StatusText"), 30,
                   what="STATUS= naming the connector connected")
        c.sh(RECIPE[4], timeout=60)  # and recable: the port's recovery follows
        c.wait_for(lambda: '"mlx5_0"' in c.run(["nichealthctl", "--json", "show", "ports"]
                                               ).stdout and not fatal_ports(c), 30,
                   what="mlx5_0 port 1 healthy again after recable")
    finally:
        c.connector.stop()


def fatal_ports(c) -> list:
    ports = json.loads(c.run(["nichealthctl", "--json", "show", "ports"]).stdout)
    return [p for p in ports if p["fatal"]]


def test_apt_remove_stops_and_keeps_state(box):
    c = box
    apt(c, "remove", "nichealthd")
    assert c.show(UNIT, "ActiveState") in ("inactive", "")
    assert c.run(["pgrep", "-u", "nichealthd"], check=False).returncode == 1
    assert c.path("/var/lib/nichealthd/state.json").exists()
    assert c.path("/etc/nichealthd/config.toml").exists()  # conffiles stay until purge


def test_apt_purge_removes_state_without_warnings(box):
    c = box
    res = apt(c, "purge", "nichealthd")
    output = res.stdout + res.stderr
    # Debian 13 with units under /lib: "directory '/lib/systemd/system' not empty".
    assert not re.search(r"warning|not empty", output, re.I), output
    assert not c.path("/var/lib/nichealthd").exists()
    assert not c.path("/var/log/nichealthd").exists()
    assert not c.path("/etc/nichealthd/config.toml").exists()
    assert c.run(["dpkg-query", "-W", "nichealthd"], check=False).returncode != 0


def release_tarball(dest: Path) -> None:
    """The tree as `git archive` ships it (no .git): a release tarball, unpacked."""
    unpack_release(dest)


def test_debian13_builds_it_lintian_clean_and_the_same(e2e_ready):
    """With Debian 13's debhelper and lintian (the host has Debian 12's): the README's build
    command from a release tarball, lintian with warnings fatal (its first complaint was
    4 x aliased-location for /lib/systemd/system), and the host-built .deb lints clean too
    and holds the same files."""
    if not (REPO / ".git").exists():
        pytest.skip("this checkout is itself a release tarball")
    deb = built_deb("debian13")
    with nspawn.Container("trixie-build") as c:
        release_tarball(c.path("/root/nichealthd"))
        build = c.sh("cd /root/nichealthd && packaging/build-deb.sh --target debian13",
                     check=False, timeout=600)
        assert build.returncode == 0, build.stdout + build.stderr
        assert "build-deb: lintian clean" in build.stdout
        shutil.copy(deb, c.path("/root/" + deb.name))
        lint = c.run(["lintian", "--fail-on", "error,warning", "--display-info",
                      "--tag-display-limit", "0", f"/root/{deb.name}"], check=False,
                     timeout=300)  # fmt: skip
        version = c.run(["dpkg-query", "-W", "-f", "${Version}", "lintian"]).stdout
        ours = c.run(["dpkg-deb", "-c", f"/root/{deb.name}"]).stdout
        theirs = c.run(["dpkg-deb", "-c", f"/root/nichealthd/packaging/out/{deb.name}"]).stdout
    assert version.startswith("2.12"), version  # trixie's lintian, 2.122 or later
    assert lint.returncode == 0, lint.stdout + lint.stderr
    assert not re.search(r"^[EW]: ", lint.stdout, re.M), lint.stdout

    def names(listing: str) -> set:
        """Paths, without the installer's bookkeeping in dist-info (Debian 12's pybuild
        keeps RECORD, Debian 13's writes INSTALLER instead)."""
        paths = {line.split()[5] for line in listing.splitlines()}
        return {p for p in paths if not re.search(r"\.dist-info/(RECORD|INSTALLER)$", p)}

    assert "./usr/lib/systemd/system/nichealthd.service" in names(theirs)
    assert names(ours) == names(theirs), names(ours) ^ names(theirs)
