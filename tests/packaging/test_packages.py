"""The .deb and .rpm build with the distribution's tools, lint clean and carry the same files."""

from __future__ import annotations

import re
import shutil
import subprocess
from pathlib import Path

import pytest

# The marker is registered by tests/e2e/conftest.py (pytest_configure) for the whole run.
pytestmark = pytest.mark.packaging

REPO = Path(__file__).resolve().parent.parent.parent
SYS_PATH = "/usr/sbin:/usr/bin:/sbin:/bin"


def _build(script: str, tools: list) -> Path:
    missing = [t for t in tools if shutil.which(t, path=SYS_PATH) is None]
    if missing:
        pytest.skip(f"missing {', '.join(missing)} (.ci/system-deps.sh installs them)")
    res = subprocess.run(
        [str(REPO / "packaging" / script)], capture_output=True, text=True, timeout=600
    )
    assert res.returncode == 0, f"{script} failed:\n{res.stdout}\n{res.stderr}"
    line = [ln for ln in res.stdout.splitlines() if ln.startswith("build-")][0]
    return Path(line.split(": ", 1)[1])


@pytest.fixture(scope="session")
def deb_file() -> Path:
    """packaging/build-deb.sh: dpkg-buildpackage, then lintian with warnings fatal."""
    return _build("build-deb.sh", ["dpkg-buildpackage", "dh", "lintian"])


@pytest.fixture(scope="session")
def rpm_file() -> Path:
    """packaging/build-rpm.sh: rpmbuild, then rpmlint with warnings fatal."""
    return _build("build-rpm.sh", ["rpmbuild", "rpmlint"])


EXPECTED = {
    "/etc/nichealthd/config.toml",
    "/usr/bin/nichealthd",
    "/usr/bin/nichealthctl",
    "/usr/bin/nichealthd-sim",
    "/usr/lib/systemd/system/nichealthd.service",
    "/usr/lib/sysusers.d/nichealthd.conf",
    "/usr/share/dbus-1/system.d/org.nichealthd.NicHealth1.conf",
    "/usr/share/man/man1/nichealthctl.1.gz",
    "/usr/share/man/man1/nichealthd-sim.1.gz",
    "/usr/share/man/man5/nichealthd.toml.5.gz",
    "/usr/share/man/man8/nichealthd.8.gz",
    "<sitelib>/nichealthd/__init__.py",
}


def run(*cmd: str) -> str:
    return subprocess.run(cmd, check=True, capture_output=True, text=True).stdout


def normalise(path: str) -> str | None:
    """Map a packaged path to a distribution-neutral name, or None for ignored paths.

    - /lib/... -> /usr/lib/...: Debian 12's debhelper installs units under /lib (an alias
      of /usr/lib on merged-/usr systems); Fedora/RHEL use /usr/lib.
    - Python's site directory: Debian /usr/lib/python3/dist-packages, Fedora/RHEL
      /usr/lib/python3.X/site-packages.
    - Ignored: /usr/share/doc/<pkg>/ (Debian policy puts copyright and changelog there;
      RPM keeps its changelog in the header) and __pycache__/*.pyc (rpm byte-compiles at
      build time, Debian's py3compile at install time).
    """
    if path.startswith("/lib/"):
        path = "/usr" + path
    path = re.sub(r"^/usr/lib/python3(\.\d+)?/(dist|site)-packages", "<sitelib>", path)
    if path.startswith("/usr/share/doc/") or "/__pycache__/" in path:
        return None
    return path


def deb_files(deb: Path) -> set:
    out = set()
    for line in run("dpkg-deb", "-c", str(deb)).splitlines():
        if line.startswith("-"):  # regular files only: dpkg lists every parent directory
            name = normalise(line.split()[5].lstrip("."))
            if name:
                out.add(name)
    return out


def rpm_files(rpm: Path) -> set:
    out = set()
    for line in run(
        "rpm", "-qp", "--qf", "[%{FILEMODES:perms} %{FILENAMES}\n]", str(rpm)
    ).splitlines():
        perms, name = line.split(" ", 1)
        if perms.startswith("-"):
            norm = normalise(name)
            if norm:
                out.add(norm)
    return out


def test_deb_builds_lintian_clean_with_contract(deb_file):
    assert re.fullmatch(r"nichealthd_\d+\.\d+\.\d+_all\.deb", deb_file.name)
    files = deb_files(deb_file)
    assert files >= EXPECTED, EXPECTED - files
    info = run("dpkg-deb", "-f", str(deb_file), "Depends", "Recommends", "Architecture")
    depends = re.search(r"^Depends: (.*)$", info, re.M)[1]  # type: ignore[index]
    for dep in (
        "python3 (>= 3.9)",
        "python3-dbus-fast | python3-dbus-next",
        "python3-sdnotify",
        "python3-grpcio",
        "python3-protobuf",
        "python3-prometheus-client",
        "dbus",
        "python3 (>= 3.11) | python3-tomli",
    ):
        assert dep in [d.strip() for d in depends.split(",")], dep
    assert not re.search(r"python3-[\w-]+ \(>=", depends.replace("python3 (>=", "")), depends
    assert "Recommends: python3-pystemd" in info
    assert "Architecture: all" in info
    control = Path(run("mktemp", "-d").strip())
    run("dpkg-deb", "-e", str(deb_file), str(control))
    assert (control / "conffiles").read_text().split() == ["/etc/nichealthd/config.toml"]
    postinst = (control / "postinst").read_text()
    assert "systemd-sysusers" in postinst and "nichealthd.conf" in postinst
    assert postinst.index("systemd-sysusers") < postinst.index("deb-systemd-invoke")
    assert "deb-systemd-helper enable 'nichealthd.service'" in postinst
    assert "_dh_action=restart" in postinst  # restart on upgrade
    assert "deb-systemd-invoke stop 'nichealthd.service'" in (control / "prerm").read_text()
    postrm = (control / "postrm").read_text()
    assert re.search(r'"\$1" = "purge".*\n.*rm -rf .*/var/lib/nichealthd', postrm)


def test_rpm_builds_rpmlint_clean(rpm_file):
    assert rpm_file.name.endswith(".noarch.rpm")
    scripts = run("rpm", "-qp", "--scripts", str(rpm_file))
    assert "preset nichealthd.service" in scripts
    assert "disable --now nichealthd.service" in scripts
    assert "try-restart nichealthd.service" in scripts
    configs = run("rpm", "-qpc", str(rpm_file)).split()
    assert configs == ["/etc/nichealthd/config.toml"]
    requires = run("rpm", "-qp", "--requires", str(rpm_file))
    assert "(python3-dbus-fast or python3-dbus-next)" in requires


def test_rpm_and_deb_carry_the_same_files(deb_file, rpm_file):
    deb, rpm = deb_files(deb_file), rpm_files(rpm_file)
    assert deb == rpm, {"only in .deb": deb - rpm, "only in .rpm": rpm - deb}
    assert deb >= EXPECTED
