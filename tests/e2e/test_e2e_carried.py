"""The RHEL packages' payloads, carried libraries and all, run as the service under real
systemd: el9's in a Debian 12 container (systemd 252, as RHEL 9), el10's in a Debian 13 one
(systemd 257, as RHEL 10).

The container stands in for the RHEL host as far as the service can tell: the target's
CPython minor (this machine's pyenv build, copied to /opt) is /usr/bin/python3 and reads
/usr/lib/python3.X/site-packages, where the rpm puts nichealthd and where the libraries the
package takes from RHEL's archive are installed at RHEL's versions (el9: python3-protobuf
3.14.0 with python3-six 1.15.0; packaging/targets.toml); everything else it needs it carries
in /usr/lib/nichealthd/vendor. The rpm's payload is unpacked into the root and its own %post
scriptlet runs (sysusers, bus reload, preset); then, as an operator on RHEL, `systemctl enable
--now`. The unit, with its whole sandbox (ProtectSystem=strict, MemoryDenyWriteExecute=,
SystemCallFilter= ...), must run the daemon with every surface: nichealthctl show ports over
D-Bus and varlink, /metrics, a real gRPC connector, no missing library in the journal.
"""

from __future__ import annotations

import shutil
import subprocess
import tempfile
from pathlib import Path
from typing import Iterator

import nspawn
import pytest
from connector_box import ContainerConnector, fatal_port_events

from tests.harness import wait_until
from tests.packaging.builds import built, table
from tests.packaging.payload import distro_site, interpreter_or_skip

pytestmark = pytest.mark.e2e

UNIT = "nichealthd.service"
SIM = "/srv/simhost"
CONTAINERS = {"el9": "base", "el10": "trixie"}  # Debian 12: systemd 252; 13: 257


def copy_python(python: str, root: Path, minor: str) -> None:
    """The interpreter's installation to ROOT/opt/pythonX.Y (its own site-packages left
    empty), as /usr/bin/pythonX.Y and /usr/bin/python3, with RHEL's site directories."""
    prefix = Path(python).resolve().parents[1]
    dest = root / f"opt/python{minor}"
    shutil.copytree(prefix, dest, symlinks=True, ignore=shutil.ignore_patterns(
        "test", "tests", "idle_test", "site-packages", "__pycache__", "*.a", "include"))
    site = dest / f"lib/python{minor}/site-packages"
    site.mkdir()
    # RHEL's python3 reads these two (lib64 first); the payload uses the second.
    (site / "rhel-site.pth").write_text(f"/usr/lib64/python{minor}/site-packages\n"
                                        f"/usr/lib/python{minor}/site-packages\n")
    (root / f"etc/ld.so.conf.d/python{minor}.conf").write_text(f"/opt/python{minor}/lib\n")
    for name in (f"python{minor}", "python3"):
        link = root / "usr/bin" / name
        if link.exists() or link.is_symlink():
            link.unlink()
        link.symlink_to(f"/opt/python{minor}/bin/python{minor}")


@pytest.fixture(scope="module", params=list(CONTAINERS))
def rhel(request, e2e_ready) -> Iterator[nspawn.Container]:
    target = request.param
    minor = table()["targets"][target]["python"]
    python = interpreter_or_skip(target)
    rpm = built(target)
    connector = ContainerConnector()
    c = nspawn.Container(CONTAINERS[target], nspawn_args=connector.nspawn_args)
    try:
        c.start()
        copy_python(python, c.root, minor)
        c.run(["ldconfig"])
        sitelib = c.path(f"/usr/lib/python{minor}/site-packages")
        with tempfile.TemporaryDirectory() as tmp:  # RHEL's own libraries, at its versions
            site = distro_site(target, Path(tmp) / "site")
            shutil.copytree(site.path, sitelib, dirs_exist_ok=True)
        subprocess.run(f"rpm2cpio '{rpm}' | cpio -idm --quiet", shell=True, cwd=c.root,
                       check=True)
        post = subprocess.run(["rpm", "-qp", "--qf", "%{POSTIN}", str(rpm)], check=True,
                              capture_output=True, text=True).stdout
        c.run(["sh", "-c", post, "post", "1"])  # as rpm runs it: $1 = 1, a first install
        c.run(["systemctl", "daemon-reload"])
        c.target = target  # type: ignore[attr-defined]
        c.connector = connector  # type: ignore[attr-defined]
        yield c
    finally:
        c.stop()
        connector.close()


def test_the_service_runs_the_payload_with_every_surface(rhel) -> None:
    c = rhel
    minor = table()["targets"][c.target]["python"]
    probe = c.run(["python3", "-c", "import sys, nichealthd, grpc, dbus_fast, google.protobuf;"
                   " print('%d.%d' % sys.version_info[:2], grpc.__file__, dbus_fast.__file__,"
                   " google.protobuf.__file__)"]).stdout.split()
    assert probe[0] == minor, probe
    assert all(p.startswith("/usr/lib/nichealthd/vendor/") for p in probe[1:3]), probe
    protobuf_from = "/usr/lib/nichealthd/vendor/" if "protobuf" in \
        table()["targets"][c.target]["carry"] else f"/usr/lib/python{minor}/site-packages/"
    assert probe[3].startswith(protobuf_from), probe
    c.sh(f"nichealthd-sim create {SIM} --profile dgx-h100 --no-metadata && "
         f"grep -E '^(sysfsRoot|procRoot|metadataPath|nodeName) ' {SIM}/nichealthd.toml "
         "> /etc/nichealthd/config.toml", timeout=120)
    c.run(["systemctl", "enable", "--now", UNIT])
    c.wait_for(lambda: c.show(UNIT, "SubState") == "running", 60, what="unit running")
    c.wait_for(lambda: "D-Bus API serving" in c.journal(UNIT), 60, what="the D-Bus name")
    journal = c.journal(UNIT)
    assert "is off: the Python module" not in journal, journal
    exe = c.run(["readlink", f"/proc/{c.show(UNIT, 'MainPID')}/exe"]).stdout.strip()
    assert exe == f"/opt/python{minor}/bin/python{minor}", exe  # the target's CPython
    over_dbus = c.run(["nichealthctl", "show", "ports"]).stdout
    over_varlink = c.run(["nichealthctl", "--varlink", "show", "ports"]).stdout
    assert "mlx5_0" in over_dbus and over_dbus == over_varlink
    metrics = c.run(["python3", "-c", "import urllib.request; print(urllib.request.urlopen("
                     "'http://127.0.0.1:2112/metrics', timeout=20).read().decode())"]).stdout
    assert 'nichealthd_port_health{' in metrics
    fake = c.connector.start()
    try:
        c.sh(f"nichealthd-sim uncable {SIM} mlx5_0 1")
        wait_until(lambda: fatal_port_events(fake, "mlx5_0"), "the port event at the "
                   "connector", 60, detail=lambda: c.journal(UNIT)[-2000:])
    finally:
        c.connector.stop()
    assert c.show(UNIT, "NRestarts") == "0", c.journal(UNIT)
