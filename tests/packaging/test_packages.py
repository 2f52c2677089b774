"""The .deb and .rpm build with the distribution's tools, lint clean and carry the same files.

The rpm has the layout of its target distribution (RHEL 9 by default: Python 3.9's
site-packages, never Debian's dist-packages) and requires only packages that distribution
ships (packaging/rpm/README.md, with sources); both packages build from a release tarball.
"""

from __future__ import annotations

import re
import shutil
import subprocess
from pathlib import Path
from typing import Dict, Set, TypedDict

import pytest

# The marker is registered by tests/e2e/conftest.py (pytest_configure) for the whole run.
pytestmark = pytest.mark.packaging

REPO = Path(__file__).resolve().parent.parent.parent
SYS_PATH = "/usr/sbin:/usr/bin:/sbin:/bin"


DEB_TOOLS = ["dpkg-buildpackage", "dh", "lintian"]
RPM_TOOLS = ["rpmbuild", "rpmlint"]


def _build(script: str, tools: list, *args: str, repo: Path = REPO) -> Path:
    missing = [t for t in tools if shutil.which(t, path=SYS_PATH) is None]
    if missing:
        pytest.skip(f"missing {', '.join(missing)} (.ci/system-deps.sh installs them)")
    res = subprocess.run(
        [str(repo / "packaging" / script), *args], capture_output=True, text=True, timeout=600
    )
    assert res.returncode == 0, f"{script} failed:\n{res.stdout}\n{res.stderr}"
    line = [ln for ln in res.stdout.splitlines() if ln.startswith("build-")][0]
    return Path(line.split(": ", 1)[1])


@pytest.fixture(scope="session")
def deb_file() -> Path:
    """packaging/build-deb.sh: dpkg-buildpackage, then lintian with warnings fatal."""
    return _build("build-deb.sh", DEB_TOOLS)


@pytest.fixture(scope="session")
def rpm_file() -> Path:
    """packaging/build-rpm.sh (target RHEL 9): rpmbuild, then rpmlint with warnings fatal."""
    return _build("build-rpm.sh", RPM_TOOLS)


@pytest.fixture(scope="session")
def rpm_fedora() -> Path:
    return _build("build-rpm.sh", RPM_TOOLS, "--target", "fedora42")


class Target(TypedDict):
    python: str
    dist: str
    ships: Set[str]


# What each rpm target ships (packaging/rpm/README.md gives the source of each line):
# RHEL 9 BaseOS/AppStream plus EPEL 9; Fedora 42.
TARGETS: Dict[str, Target] = {
    "rhel9": {
        "python": "3.9",
        "dist": ".el9",
        "ships": {
            "bash", "python3", "python3-tomli", "python3-protobuf", "dbus", "util-linux-core",
            "python3-systemd",  # RHEL 9
            "python3-grpcio", "python3-prometheus_client", "python3-sdnotify",  # EPEL 9
        },
    },
    "fedora42": {
        "python": "3.13",
        "dist": ".fc42",
        "ships": {
            "bash", "python3", "python3-protobuf", "dbus", "util-linux-core", "python3-systemd",
            "python3-grpcio", "python3-prometheus_client", "python3-sdnotify",
            "python3-dbus-fast", "python3-dbus-next", "python3-pystemd",
        },
    },
}  # fmt: skip
# Paths another package of the distribution provides, as the rpm names them.
PROVIDED_PATHS = {"/bin/sh": "bash", "/usr/bin/python3": "python3",
                  "/usr/bin/kill": "util-linux-core"}  # fmt: skip


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
    # package data the daemon reads: the D-Bus introspection and the varlink interface
    "<sitelib>/nichealthd/surfaces/org.nichealthd.NicHealth1.xml",
    "<sitelib>/nichealthd/surfaces/io.nichealthd.Monitor.varlink",
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
      build time, Debian's py3compile at install time), and the installer's bookkeeping in
      dist-info (Debian keeps RECORD; Fedora's %pyproject_install writes INSTALLER, drops RECORD).
    """
    if path.startswith("/lib/"):
        path = "/usr" + path
    path = re.sub(r"^/usr/lib/python3(\.\d+)?/(dist|site)-packages", "<sitelib>", path)
    if path.startswith("/usr/share/doc/") or "/__pycache__/" in path:
        return None
    if re.search(r"\.dist-info/(RECORD|INSTALLER)$", path):
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
        "python3-grpcio",
        "python3-protobuf",
        "python3-prometheus-client",
        "dbus",
        "python3 (>= 3.11) | python3-tomli",
    ):
        assert dep in [d.strip() for d in depends.split(",")], dep
    assert not re.search(r"python3-[\w-]+ \(>=", depends.replace("python3 (>=", "")), depends
    assert "sdnotify" not in depends  # spoken by nichealthd.runtime.notify itself
    assert "Recommends: python3-pystemd" in info
    recommends = re.search(r"^Recommends: (.*)$", info, re.M)[1]  # type: ignore[index]
    assert "python3-systemd" in [r.strip() for r in recommends.split(",")]  # #17: journal
    assert "Architecture: all" in info
    control = Path(run("mktemp", "-d").strip())
    run("dpkg-deb", "-e", str(deb_file), str(control))
    assert (control / "conffiles").read_text().split() == ["/etc/nichealthd/config.toml"]
    postinst = (control / "postinst").read_text()
    assert "systemd-sysusers" in postinst and "nichealthd.conf" in postinst
    assert postinst.index("systemd-sysusers") < postinst.index("deb-systemd-invoke")
    assert "deb-systemd-helper enable 'nichealthd.service'" in postinst
    assert "_action=restart" in postinst  # restart on upgrade
    assert "deb-systemd-invoke stop 'nichealthd.service'" in (control / "prerm").read_text()
    postrm = (control / "postrm").read_text()
    assert re.search(r'"\$1" = "purge".*\n.*rm -rf .*/var/lib/nichealthd', postrm)


def _in_order(script: str, *needles: str) -> None:
    at = [script.index(n) for n in needles]
    assert at == sorted(at), (needles, at, script)


def test_the_user_exists_before_the_bus_reloads_its_policy_and_the_unit_starts(
        deb_file, rpm_file, tmp_path):
    """The policy names the user nichealthd: a bus that reloads it before the user exists
    drops those rules, and the daemon's first request for its name is refused (logged on
    every first install). So: the user (sysusers.d), then the bus reload (waited for), then
    the start. tests/e2e/test_e2e_deb.py checks the journal of a real first install."""
    run("dpkg-deb", "-e", str(deb_file), str(tmp_path))
    postinst = (tmp_path / "postinst").read_text()
    _in_order(postinst, "systemd-sysusers", "ReloadConfig", 'deb-systemd-invoke "$_action"')
    reload = postinst[postinst.rindex("dbus-send", 0, postinst.index("ReloadConfig")):]
    assert reload.startswith("dbus-send --system --print-reply"), reload[:80]
    scripts = run("rpm", "-qp", "--scripts", str(rpm_file))
    post = scripts[scripts.index("postinstall scriptlet"):scripts.index("preuninstall")]
    _in_order(post, "systemd-sysusers", "ReloadConfig", "systemctl")


def test_deb_units_under_usr_lib(deb_file):
    """Debian 13's lintian: aliased-location for /lib/systemd/system (and purge warns that
    /lib/systemd/system is not empty); Debian 12's wants /usr/lib too."""
    listing = run("dpkg-deb", "-c", str(deb_file))
    assert " ./usr/lib/systemd/system/nichealthd.service\n" in listing
    assert " ./lib/" not in listing, listing


def test_deb_start_failure_is_one_line_not_apt_noise(deb_file, tmp_path):
    """A service that cannot start yet prints one line pointing to its status, never
    deb-systemd-invoke's "Could not execute systemctl", and never fails the installation."""
    run("dpkg-deb", "-e", str(deb_file), str(tmp_path))
    postinst = (tmp_path / "postinst").read_text()
    assert "_dh_action" not in postinst  # dh's start (stderr not redirected) is disabled
    start = postinst[postinst.index('deb-systemd-invoke "$_action"'):]
    assert start.startswith('deb-systemd-invoke "$_action" nichealthd.service >/dev/null 2>&1')
    assert "systemctl status nichealthd" in start
    assert 'if [ -n "$2" ]; then _action=restart; else _action=start; fi' in postinst


def rpm_query(rpm: Path, *args: str) -> list:
    return run("rpm", "-qp", *args, str(rpm)).splitlines()


def check_target_layout(rpm: Path, target: str) -> None:
    py = TARGETS[target]["python"]
    sitelib = f"/usr/lib/python{py}/site-packages/"
    assert rpm.name.endswith(f"{TARGETS[target]['dist']}.noarch.rpm"), rpm.name
    files = rpm_query(rpm, "-l")
    assert sitelib + "nichealthd/__init__.py" in files
    assert sitelib + "nichealthd/runtime/daemon.py" in files
    assert "/usr/lib/systemd/system/nichealthd.service" in files
    allowed = ("/etc/nichealthd", "/usr/bin/", sitelib, "/usr/lib/systemd/system/",
               "/usr/lib/sysusers.d/", "/usr/share/dbus-1/", "/usr/share/man/",
               "/usr/share/doc/nichealthd")  # fmt: skip  (#17: the kmsg drop-in example)
    for f in files:
        assert f.startswith(allowed), f  # never dist-packages, /lib, /usr/local
        if f.endswith(".pyc"):  # bytecode only for the target's Python
            tag = "cpython-" + py.replace(".", "")
            assert re.search(rf"/__pycache__/[^/]+\.{tag}(\.opt-1)?\.pyc$", f), f
    head = run("sh", "-c", f"rpm2cpio '{rpm}' | cpio -i --quiet --to-stdout ./usr/bin/nichealthd")
    assert head.startswith("#!/usr/bin/python3\n"), head[:40]


def check_target_requires(rpm: Path, target: str) -> None:
    ships = TARGETS[target]["ships"]
    for req in rpm_query(rpm, "-R"):
        if req.startswith(("rpmlib(", "config(nichealthd)")):
            continue
        if req.startswith("python(abi)"):
            assert req == f"python(abi) = {TARGETS[target]['python']}", req
            continue
        if req in PROVIDED_PATHS:
            assert PROVIDED_PATHS[req] in ships, req
            continue
        names = re.findall(r"[\w.+-]+", req.strip("()").replace(" or ", " "))
        assert any(n in ships for n in names), f"{target} ships none of {req}"
        assert "dist(" not in req, req  # PyPI versions no distribution has (grpcio>=1.51)


def test_rpm_rhel9_layout(rpm_file):
    """Issue 22: RHEL 9's Python 3.9 reads /usr/lib/python3.9/site-packages only."""
    check_target_layout(rpm_file, "rhel9")


def test_rpm_rhel9_requires_exist_in_rhel9_epel9(rpm_file):
    check_target_requires(rpm_file, "rhel9")
    requires = "\n".join(rpm_query(rpm_file, "-R"))
    assert "python3-tomli" in requires  # Python 3.9 has no tomllib
    assert "sdnotify" not in requires  # spoken by nichealthd.runtime.notify itself
    # Neither D-Bus library is in RHEL 9 or EPEL 9: weak, the daemon runs without its API.
    assert "dbus-fast" not in requires
    assert rpm_query(rpm_file, "--recommends")[0] == "(python3-dbus-fast or python3-dbus-next)"


def test_rpm_fedora_layout_and_requires(rpm_fedora):
    check_target_layout(rpm_fedora, "fedora42")
    check_target_requires(rpm_fedora, "fedora42")
    requires = rpm_query(rpm_fedora, "-R")
    assert "(python3-dbus-fast or python3-dbus-next)" in requires
    assert "python3-systemd" in rpm_query(rpm_fedora, "--recommends")  # #17: weak
    assert "python3-systemd" not in requires
    assert "python3-tomli" not in requires  # Python 3.13: tomllib


def test_rpm_unknown_target_is_refused():
    res = subprocess.run([str(REPO / "packaging/build-rpm.sh"), "--target", "rhel8"],
                         capture_output=True, text=True)  # fmt: skip
    assert res.returncode == 2 and "unknown target 'rhel8'" in res.stderr


def test_rpm_builds_rpmlint_clean(rpm_file):
    assert rpm_file.name.endswith(".noarch.rpm")
    scripts = run("rpm", "-qp", "--scripts", str(rpm_file))
    assert "preset nichealthd.service" in scripts
    assert "disable --now nichealthd.service" in scripts
    assert "try-restart nichealthd.service" in scripts
    configs = run("rpm", "-qpc", str(rpm_file)).split()
    assert configs == ["/etc/nichealthd/config.toml"]


def test_rpm_and_deb_carry_the_same_files(deb_file, rpm_file):
    deb, rpm = deb_files(deb_file), rpm_files(rpm_file)
    assert deb == rpm, {"only in .deb": deb - rpm, "only in .rpm": rpm - deb}
    assert deb >= EXPECTED


def test_both_ship_the_kmsg_drop_in_as_an_example(deb_file, rpm_file):
    """#17: kernelLog = "kmsg" needs systemd/examples/kmsg.conf, which both packages install
    uncompressed at the path the daemon's message and nichealthd(8) name (/usr/share/doc is
    left out of the file comparison above: Debian's copyright and changelog live there)."""
    from nichealthd.sources.kernel_log import KMSG_DROPIN

    assert f" .{KMSG_DROPIN}\n" in run("dpkg-deb", "-c", str(deb_file))
    assert KMSG_DROPIN in rpm_query(rpm_file, "-l")
    assert KMSG_DROPIN in rpm_query(rpm_file, "-d")  # marked as documentation


def test_builds_from_release_tarball(deb_file, rpm_file, tmp_path):
    """`git archive` output (no .git) builds the same packages as the clone (issue 22)."""
    if not (REPO / ".git").exists():
        pytest.skip("this checkout is itself a release tarball")
    tree = subprocess.run(["git", "stash", "create"], cwd=REPO, capture_output=True,
                          text=True, check=True).stdout.strip() or "HEAD"  # fmt: skip
    src = tmp_path / "nichealthd-release"
    src.mkdir()
    archive = subprocess.run(["git", "archive", "--format=tar", tree], cwd=REPO,
                             capture_output=True, check=True).stdout  # fmt: skip
    subprocess.run(["tar", "-x", "-C", str(src)], input=archive, check=True)
    assert not (src / ".git").exists()
    deb = _build("build-deb.sh", DEB_TOOLS, "--no-lintian", repo=src)
    rpm = _build("build-rpm.sh", RPM_TOOLS, "--no-rpmlint", repo=src)
    assert deb.parent == src / "packaging/out" and rpm.parent == src / "packaging/out"
    assert deb_files(deb) == deb_files(deb_file)
    assert rpm_query(rpm, "-l") == rpm_query(rpm_file, "-l")
