"""Every target's package builds with the distribution's tools, lints clean, prints its path,
and depends only on what its target's own archive holds (packaging/README.md).

The dependency check reads the built package (dpkg-deb -f, rpm -qp --requires/--recommends)
and resolves every name against packaging/targets.toml, the table of what each archive holds
(with its sources): a Debian/Ubuntu package name, a version constraint against the recorded
version (dpkg --compare-versions), an rpm soname or path through the `provides` of the
package that has it, a glibc symbol version against the recorded glibc. The Debian archive is
resolved for real too, by apt in the containers of tests/e2e/test_e2e_deb.py; the Ubuntu and
RHEL archives are not used by the tests: the table is the reference there.

What a package carries is listed in /usr/share/doc/nichealthd/BUNDLED and, in the rpm, as
Provides: bundled(python3dist(NAME)) = VERSION, exactly the table's pins; it lives in
/usr/lib/nichealthd/vendor only. Every package has the same files of its own (the
distribution-neutral names of `normalise`), and builds from a release tarball.
"""

from __future__ import annotations

import re
import subprocess
from pathlib import Path

import pytest

from ..release import unpack_release
from .builds import REPO, TARGETS, built, family, path_printed, run_build, table
from .payload import interpreter_or_skip

pytestmark = pytest.mark.packaging

VENDOR = "/usr/lib/nichealthd/vendor/"
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
    # the fleet's Prometheus rules and Grafana dashboard (nichealthd(8), FILES)
    "/usr/share/nichealthd/prometheus/nichealthd-rules.yml",
    "/usr/share/nichealthd/grafana/nichealthd-dashboard.json",
    "<sitelib>/nichealthd/__init__.py",
    # package data the daemon reads: the D-Bus introspection and the varlink interface
    "<sitelib>/nichealthd/surfaces/org.nichealthd.NicHealth1.xml",
    "<sitelib>/nichealthd/surfaces/io.nichealthd.Monitor.varlink",
    # journalctl -x's explanations of the events, nichealthctl's shell completions
    "/usr/lib/systemd/catalog/nichealthd.catalog",
    "/usr/share/bash-completion/completions/nichealthctl",
    "<zsh-completions>/_nichealthctl",
}
NAMES = {"deb": r"nichealthd_0\.1\.0\+(deb1[23]|ubuntu2[24]\.04)_(all|amd64)\.deb",
         "rpm": r"nichealthd-0\.1\.0-1\.(el9|el10|fc42)\.(noarch|x86_64)\.rpm"}


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
      dist-info (Debian keeps RECORD; Fedora's %pyproject_install writes INSTALLER, drops RECORD),
      and what a package carries (its vendor directory and the marker naming it) with the
      Debian machinery it brings (lintian overrides, dh_python3's rtupdate hook that
      recompiles the vendor directory).
    """
    if path.startswith("/lib/"):
        path = "/usr" + path
    path = re.sub(r"^/usr/lib/python3(\.\d+)?/(dist|site)-packages", "<sitelib>", path)
    # zsh's completion directory: vendor-completions on Debian and Ubuntu, site-functions on
    # Fedora and RHEL (each is in its zsh's fpath)
    path = re.sub(r"^/usr/share/zsh/(vendor-completions|site-functions)/", "<zsh-completions>/",
                  path)
    if path.startswith(("/usr/share/doc/", VENDOR, "/usr/share/lintian/overrides/",
                        "/usr/share/python3/runtime.d/")) or "/__pycache__/" in path:
        return None
    if re.search(r"\.dist-info/(RECORD|INSTALLER)$", path) or \
            path == "<sitelib>/nichealthd/carried-libraries":
        return None
    return path


def files(package: Path) -> list[str]:
    """Every regular file of the package (absolute paths)."""
    if package.suffix == ".deb":
        return [line.split()[5].lstrip(".") for line in
                run("dpkg-deb", "-c", str(package)).splitlines() if line.startswith("-")]
    return [name for perms, name in (
        line.split(" ", 1) for line in run(
            "rpm", "-qp", "--qf", "[%{FILEMODES:perms} %{FILENAMES}\n]", str(package)
        ).splitlines()) if perms.startswith("-")]


def without_bytecode(names: list[str]) -> list[str]:
    return [n for n in names if "/__pycache__/" not in n]


def own_files(package: Path) -> set[str]:
    return {n for n in map(normalise, files(package)) if n}


def read_file(package: Path, path: str) -> str:
    if package.suffix == ".deb":
        return run("sh", "-c", f"dpkg-deb --fsys-tarfile '{package}' | tar -xO '.{path}'")
    return run("sh", "-c", f"rpm2cpio '{package}' | cpio -i --quiet --to-stdout '.{path}'")


def rpm_query(rpm: Path, *args: str) -> list[str]:
    return run("rpm", "-qp", *args, str(rpm)).splitlines()


# ----------------------------------------------------------------------------- every target

@pytest.mark.parametrize("target", TARGETS)
def test_the_build_prints_the_package_path_last_and_lints_clean(target: str) -> None:
    package = built(target)
    assert re.fullmatch(NAMES[family(target)], package.name), package.name
    assert package.parent == REPO / "packaging/out"
    assert own_files(package) >= EXPECTED, EXPECTED - own_files(package)
    carries = bool(table()["targets"][target]["carry"])
    arch = package.stem.rsplit("_" if family(target) == "deb" else ".", 1)[1]
    assert arch in ({"amd64", "x86_64"} if carries else {"all", "noarch"}), package.name


def satisfied_deb(target: str, dependency: str) -> bool:
    """One alternative of a Depends/Recommends entry, e.g. ``libc6 (>= 2.34)``."""
    archive = table()["targets"][target]["archive"]
    match = re.fullmatch(r"([\w.+-]+)(?::any)?(?: \((<<|<=|=|>=|>>) ([^)]+)\))?", dependency)
    assert match, dependency
    name, op, version = match.groups()
    if name not in archive:
        return False
    recorded = archive[name]["version"]
    if op is None or not recorded:
        return op is None or bool(recorded)  # a versioned need wants a recorded version
    relation = {"<<": "lt", "<=": "le", "=": "eq", ">=": "ge", ">>": "gt"}[op]
    return subprocess.run(["dpkg", "--compare-versions", recorded, relation, version]
                          ).returncode == 0


def provider(target: str, name: str) -> str | None:
    """The archive package providing an rpm requirement's name (package, path, soname)."""
    archive = table()["targets"][target]["archive"]
    if name in archive:
        return name
    for package, entry in archive.items():
        if name in entry.get("provides", ()):
            return package
    return None


def satisfied_rpm(target: str, requirement: str) -> bool:
    archive = table()["targets"][target]["archive"]
    soname = re.fullmatch(r"([\w.+-]+\.so[.\d]*)\(([^)]*)\)(\(64bit\))?", requirement)
    if soname:
        package = provider(target, soname[1])
        symbol = re.fullmatch(r"GLIBC_([\d.]+)", soname[2])
        if package and symbol:  # a glibc symbol version: no newer than the target's glibc
            have = [int(x) for x in archive["glibc"]["version"].split(".")]
            return [int(x) for x in symbol[1].split(".")] <= have
        return package is not None
    if requirement.startswith("(") and " or " in requirement:
        return any(satisfied_rpm(target, alt) for alt in requirement.strip("()").split(" or "))
    return provider(target, requirement) is not None


@pytest.mark.parametrize("target", TARGETS)
def test_every_dependency_resolves_from_the_targets_own_archive(target: str) -> None:
    package = built(target)
    unresolved = []
    if family(target) == "deb":
        fields = run("dpkg-deb", "-f", str(package), "Pre-Depends", "Depends", "Recommends")
        entries = [e.strip() for line in fields.splitlines()
                   for e in line.split(":", 1)[1].split(",") if e.strip()]
        for entry in entries:
            if not any(satisfied_deb(target, alt.strip()) for alt in entry.split("|")):
                unresolved.append(entry)
    else:
        for requirement in rpm_query(package, "--requires") + rpm_query(package, "--recommends"):
            if requirement.startswith(("rpmlib(", "config(nichealthd)")):
                continue  # rpm's own features; the package's own config files
            if not satisfied_rpm(target, requirement):
                unresolved.append(requirement)
        assert not any("dist(" in r for r in rpm_query(package, "--requires"))  # PyPI names
    assert unresolved == [], f"{target}: not in its archive (packaging/targets.toml)"


@pytest.mark.parametrize("target", TARGETS)
def test_bundled_lists_exactly_what_the_package_carries(target: str) -> None:
    package = built(target)
    spec = table()["targets"][target]
    bundled = read_file(package, "/usr/share/doc/nichealthd/BUNDLED")
    rows = {line.split()[0]: line.split()[1:3] for line in bundled.splitlines()
            if line and not line.startswith("#")}
    assert rows == {lib: [version, table()["licences"][lib].split()[0]]
                    for lib, version in spec["carry"].items()}, bundled
    carried = [f for f in files(package) if f.startswith(VENDOR)]
    marker = [f for f in files(package) if f.endswith("/nichealthd/carried-libraries")]
    if not spec["carry"]:
        assert carried == [] and marker == [] and "carries no libraries" in bundled
        return
    for lib, version in spec["carry"].items():
        dist_info = re.sub(r"[-_.]+", "_", lib) + f"-{version}.dist-info/METADATA"
        assert VENDOR + dist_info in carried, (lib, version)
    assert len(marker) == 1 and f"python={spec['python']}\n" in read_file(package, marker[0])
    if family(target) == "rpm":
        provides = [p for p in rpm_query(package, "--provides") if p.startswith("bundled(")]
        assert sorted(provides) == sorted(
            f"bundled(python3dist({lib})) = {version}" for lib, version in spec["carry"].items())
        assert not [p for p in rpm_query(package, "--provides") if ".so" in p]  # none leak
        licence = rpm_query(package, "--qf", "%{LICENSE}")[0]
        for lib in spec["carry"]:
            assert table()["licences"][lib].split()[0] in licence, (lib, licence)


@pytest.mark.parametrize("target", TARGETS)
def test_a_package_that_carries_wheels_needs_its_targets_cpython_minor(target: str) -> None:
    package = built(target)
    python = table()["targets"][target]["python"]
    major, minor = (int(x) for x in python.split("."))
    if family(target) == "deb":
        depends = run("dpkg-deb", "-f", str(package), "Depends")
        assert f"python3 (>= {python})" in depends
        if table()["targets"][target]["carry"]:
            assert f"python3 (<< {major}.{minor + 1})" in depends
    else:
        assert f"python(abi) = {python}" in rpm_query(package, "--requires")
    assert read_file(package, "/usr/bin/nichealthd").startswith("#!/usr/bin/python3\n")
    for name in files(package):
        tag = re.search(r"\.cpython-(\d+)", name)
        if tag:  # extension modules and bytecode: of the target's CPython only
            assert tag[1] == f"{major}{minor}", name


# ------------------------------------------------------------------------------- the .deb

def test_deb_contract_scripts_and_conffiles(tmp_path: Path) -> None:
    deb = built("debian12")
    info = run("dpkg-deb", "-f", str(deb), "Depends", "Recommends")
    depends = [d.strip() for d in re.search(r"^Depends: (.*)$", info, re.M)[1].split(",")]  # type: ignore[index]
    for dep in ("python3-dbus-fast | python3-dbus-next", "python3-grpcio", "python3-protobuf",
                "dbus", "systemd | systemd-standalone-sysusers"):
        assert dep in depends, dep
    assert "prometheus" not in info  # the metrics endpoint needs no client library
    assert "sdnotify" not in info  # spoken by nichealthd.runtime.notify itself
    assert "python3-tomli" not in info  # Python 3.11: tomllib
    run("dpkg-deb", "-e", str(deb), str(tmp_path))
    assert (tmp_path / "conffiles").read_text().split() == ["/etc/nichealthd/config.toml"]
    postinst = (tmp_path / "postinst").read_text()
    assert "systemd-sysusers" in postinst and "nichealthd.conf" in postinst
    assert "deb-systemd-helper enable 'nichealthd.service'" in postinst
    assert "_action=restart" in postinst  # restart on upgrade
    assert "deb-systemd-invoke stop 'nichealthd.service'" in (tmp_path / "prerm").read_text()
    postrm = (tmp_path / "postrm").read_text()
    assert re.search(r'"\$1" = "purge".*\n.*rm -rf .*/var/lib/nichealthd', postrm)


def _in_order(script: str, *needles: str) -> None:
    at = [script.index(n) for n in needles]
    assert at == sorted(at), (needles, at, script)


def test_the_user_exists_before_the_bus_reloads_its_policy_and_the_unit_starts(
        tmp_path: Path) -> None:
    """The policy names the user nichealthd: a bus that reloads it before the user exists
    drops those rules, and the daemon's first request for its name is refused (logged on
    every first install). So: the user (sysusers.d), then the bus reload (waited for), then
    the start. tests/e2e/test_e2e_deb.py checks the journal of a real first install."""
    run("dpkg-deb", "-e", str(built("debian12")), str(tmp_path))
    postinst = (tmp_path / "postinst").read_text()
    _in_order(postinst, "systemd-sysusers", "ReloadConfig", 'deb-systemd-invoke "$_action"')
    reload = postinst[postinst.rindex("dbus-send", 0, postinst.index("ReloadConfig")):]
    assert reload.startswith("dbus-send --system --print-reply"), reload[:80]
    scripts = run("rpm", "-qp", "--scripts", str(built("el9")))
    post = scripts[scripts.index("postinstall scriptlet"):scripts.index("preuninstall")]
    _in_order(post, "systemd-sysusers", "ReloadConfig", "systemctl")


def test_deb_units_under_usr_lib() -> None:
    """Debian 13's lintian: aliased-location for /lib/systemd/system (and purge warns that
    /lib/systemd/system is not empty); Debian 12's wants /usr/lib too."""
    listing = run("dpkg-deb", "-c", str(built("debian12")))
    assert " ./usr/lib/systemd/system/nichealthd.service\n" in listing
    assert " ./lib/" not in listing, listing


def test_deb_start_failure_is_one_line_not_apt_noise(tmp_path: Path) -> None:
    """A service that cannot start yet prints one line pointing to its status, never
    deb-systemd-invoke's "Could not execute systemctl", and never fails the installation."""
    run("dpkg-deb", "-e", str(built("debian12")), str(tmp_path))
    postinst = (tmp_path / "postinst").read_text()
    assert "_dh_action" not in postinst  # dh's start (stderr not redirected) is disabled
    start = postinst[postinst.index('deb-systemd-invoke "$_action"'):]
    assert start.startswith('deb-systemd-invoke "$_action" nichealthd.service >/dev/null 2>&1')
    assert "systemctl status nichealthd" in start
    assert 'if [ -n "$2" ]; then _action=restart; else _action=start; fi' in postinst


def test_carried_libraries_are_compiled_at_installation_by_the_targets_cpython(
        tmp_path: Path) -> None:
    """Debian ships no bytecode: py3compile makes it in the postinst, for the vendor
    directory with the CPython minor its wheels are built for."""
    run("dpkg-deb", "-e", str(built("ubuntu2204")), str(tmp_path))
    assert "py3compile -p nichealthd:amd64 /usr/lib/nichealthd/vendor -V 3.10" in \
        (tmp_path / "postinst").read_text()
    assert not [f for f in files(built("ubuntu2204")) if f.endswith(".pyc")]


# -------------------------------------------------------------------------------- the rpm

@pytest.mark.parametrize("target", ["el9", "el10", "fedora42"])
def test_rpm_layout_of_its_target(target: str) -> None:
    """RHEL's and Fedora's Python read /usr/lib/python3.X/site-packages only; bytecode of the
    target's CPython (pyenv's here) or none."""
    rpm = built(target)
    python = table()["targets"][target]["python"]
    sitelib = f"/usr/lib/python{python}/site-packages/"
    listing = rpm_query(rpm, "-l")
    assert sitelib + "nichealthd/runtime/daemon.py" in listing
    allowed = ("/etc/nichealthd", "/usr/bin/", sitelib, "/usr/lib/systemd/system/",
               "/usr/lib/systemd/catalog/nichealthd.catalog", "/usr/lib/sysusers.d/",
               "/usr/share/dbus-1/", "/usr/share/man/", "/usr/share/doc/nichealthd",
               "/usr/lib/nichealthd", "/usr/share/nichealthd",
               "/usr/share/bash-completion/completions/nichealthctl",
               "/usr/share/zsh/site-functions/_nichealthctl")  # fmt: skip
    for name in listing:
        assert name.startswith(allowed), name  # never dist-packages, /lib, /usr/local
        if name.endswith(".pyc"):
            assert re.search(rf"/__pycache__/[^/]+\.cpython-{python.replace('.', '')}"
                             rf"(\.opt-1)?\.pyc$", name), name
    assert "python3-systemd" in rpm_query(rpm, "--recommends")  # the journal reader: weak
    assert "python3-systemd" not in rpm_query(rpm, "--requires")


def test_rpm_scripts_and_config() -> None:
    rpm = built("el9")
    scripts = run("rpm", "-qp", "--scripts", str(rpm))
    assert "preset nichealthd.service" in scripts
    assert "disable --now nichealthd.service" in scripts
    assert "try-restart nichealthd.service" in scripts
    assert run("rpm", "-qpc", str(rpm)).split() == ["/etc/nichealthd/config.toml"]


def test_unknown_or_foreign_targets_are_refused() -> None:
    for script, target, message in (("build-rpm.sh", "rhel8", "unknown target 'rhel8'"),
                                    ("build-rpm.sh", "debian12", "is a deb target"),
                                    ("build-deb.sh", "el9", "is an rpm target")):
        res = subprocess.run([str(REPO / "packaging" / script), "--target", target],
                             capture_output=True, text=True)  # fmt: skip
        assert res.returncode == 2 and message in res.stderr, (script, target, res.stderr)


# ------------------------------------------------------------------------ all the packages

def test_every_package_has_the_same_files_of_its_own() -> None:
    reference = own_files(built("debian12"))
    assert reference >= EXPECTED
    for target in TARGETS:
        assert own_files(built(target)) == reference, target


def test_both_ship_the_kmsg_drop_in_as_an_example() -> None:
    """kernelLog = "kmsg" needs systemd/examples/kmsg.conf, which both packages install
    uncompressed at the path the daemon's message and nichealthd(8) name (/usr/share/doc is
    left out of the file comparison above: Debian's copyright and changelog live there)."""
    from nichealthd.sources.kernel_log import KMSG_DROPIN

    assert f" .{KMSG_DROPIN}\n" in run("dpkg-deb", "-c", str(built("debian12")))
    rpm = built("el9")
    assert KMSG_DROPIN in rpm_query(rpm, "-l")
    assert KMSG_DROPIN in rpm_query(rpm, "-d")  # marked as documentation
    slurm = KMSG_DROPIN.replace("kmsg.conf", "slurm.conf")  # slurmDrain's (nichealthd(8))
    assert f" .{slurm}\n" in run("dpkg-deb", "-c", str(built("debian12")))
    assert slurm in rpm_query(rpm, "-d")


@pytest.mark.parametrize("target", TARGETS)
def test_every_package_ships_the_fleet_rules_and_dashboard_as_in_the_source(
        target: str) -> None:
    """The Prometheus rules and the Grafana dashboard, byte for byte, where nichealthd(8)
    and the README say they are."""
    package = built(target)
    for path, source in (("/usr/share/nichealthd/prometheus/nichealthd-rules.yml",
                          "packaging/prometheus/nichealthd-rules.yml"),
                         ("/usr/share/nichealthd/grafana/nichealthd-dashboard.json",
                          "packaging/grafana/nichealthd-dashboard.json")):
        assert read_file(package, path) == (REPO / source).read_text(), (target, path)


def test_builds_from_release_tarball(tmp_path: Path) -> None:
    """`git archive` output (no .git) builds the same packages as the clone (README); the
    rpm on a machine without its target's CPython too (no pyenv, no /usr/bin/python3.9):
    without bytecode (rpm 4.18 refused the empty interpreter macro it was given)."""
    if not (REPO / ".git").exists():
        pytest.skip("this checkout is itself a release tarball")
    src = tmp_path / "nichealthd-release"
    unpack_release(src)
    assert not (src / ".git").exists()
    no_cpython = {"PYENV_ROOT": str(tmp_path / "no-pyenv")}  # interpreter() finds none
    for target in ("debian12", "el9"):
        package = path_printed(run_build(target, "--no-lintian" if family(target) == "deb"
                                         else "--no-rpmlint", repo=src,
                                         env=no_cpython if target == "el9" else None))
        assert package.parent == src / "packaging/out"
        assert sorted(without_bytecode(files(package))) == sorted(
            without_bytecode(files(built(target)))), target
    if not Path("/usr/bin/python3.9").exists():
        assert not [n for n in rpm_query(package, "-l") if n.endswith(".pyc")]


# ------------------------------------------------------------------------ packaging/README.md

SIZE = re.compile(r"`(nichealthd[^`]+)` \(([\d.]+) (KiB|MiB)(?:, ([\d.]+) MiB(?: installed)?)?\)")
UNITS = {"KiB": 1024, "MiB": 1024 * 1024}


def installed_size(package: Path) -> int:
    if package.suffix == ".deb":
        return int(run("dpkg-deb", "-f", str(package), "Installed-Size")) * 1024
    return int(run("rpm", "-qp", "--qf", "%{SIZE}", str(package)))


def close(stated: float, real: int) -> bool:
    """Within 5 %, or the rounding of the stated figure's last digit."""
    return abs(stated - real) <= max(0.05 * real, 0.06 * UNITS["MiB"] if real > 2**20 else 0)


@pytest.mark.parametrize("target", TARGETS)
def test_the_sizes_in_packaging_readme_are_the_built_packages(target: str) -> None:
    """The support matrix states each package's size (and, where it carries libraries, its
    installed size): they are the built package's, within 5 %. An rpm carries the bytecode
    of its target's CPython, compiled by it: without that interpreter here (a user who cannot
    read root's pyenv) the rpm is built without and is smaller than stated, so the test needs
    it."""
    if family(target) == "rpm":
        interpreter_or_skip(target)
    package = built(target)
    rows = {m.group(1): m for m in SIZE.finditer((REPO / "packaging/README.md").read_text())}
    assert package.name in rows, f"packaging/README.md states no size of {package.name}"
    found = rows[package.name]
    size = float(found.group(2)) * UNITS[found.group(3)]
    real = package.stat().st_size
    assert close(size, real), (package.name, found.group(0), f"{real / 2**20:.2f} MiB")
    if found.group(4):
        real_installed = installed_size(package)
        assert close(float(found.group(4)) * UNITS["MiB"], real_installed), (
            package.name, found.group(0), f"{real_installed / 2**20:.1f} MiB installed")
