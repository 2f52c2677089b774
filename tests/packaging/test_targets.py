"""packaging/targets.toml and packaging/targets.py, without building anything: the seven
targets of packaging/targets.toml, each library either taken from the target's own archive (never
EPEL) or carried, the dependencies the builds declare, and the checks of carried wheels."""

from __future__ import annotations

import copy
import zipfile
from pathlib import Path

import pytest

from .builds import table, targets_module

CONTRACT = {"deb": ["debian12", "debian13", "ubuntu2204", "ubuntu2404"],
            "rpm": ["el9", "el10", "fedora42"]}
tm = targets_module()


def test_the_targets_are_the_contracts() -> None:
    targets = table()["targets"]
    assert {t: spec["family"] for t, spec in targets.items()} == {
        t: family for family, names in CONTRACT.items() for t in names}
    assert tm.canonical("rhel9", table()) == "el9"  # today's names stay as aliases
    assert tm.canonical("fedora", table()) == "fedora42"
    with pytest.raises(tm.TargetError, match="unknown target 'rhel8'.*el9 \\(rhel9\\)"):
        tm.canonical("rhel8", table())


@pytest.mark.parametrize("target", list(table()["targets"]))
def test_every_dependency_comes_from_the_targets_own_archive(target: str) -> None:
    spec = table()["targets"][target]
    for package, entry in spec["archive"].items():
        repos = set(entry["repo"].split(" or "))
        assert repos <= set(spec["repos"]), (package, entry["repo"])
        assert "epel" not in entry["repo"].lower()
    hard, weak = tm.dependencies(table(), target)  # raises where a library has no source
    names = {name.strip("()") for dep in hard + weak
             for name in dep.replace(" or ", " | ").split(" | ")}
    names = {n.split(" (")[0] for n in names}
    assert names <= set(spec["archive"]), names - set(spec["archive"])


@pytest.mark.parametrize("target", list(table()["targets"]))
def test_each_library_is_taken_or_carried_and_tested_at_the_archives_version(
        target: str) -> None:
    """A library taken from the archive is installed at the archive's version beside the
    payload in tests/packaging/test_payloads.py (its `pypi` pin); the one exception is
    Debian 13's grpcio, which has no build for CPython 3.13 on PyPI and is exercised as
    Debian ships it in the trixie container (tests/e2e/test_e2e_deb.py)."""
    spec = table()["targets"][target]
    untested = []
    for name in tm.needed(table(), target):
        lib = table()["libraries"][name]
        if name in spec["carry"]:
            assert name in table()["licences"], name
            continue
        entry = spec["archive"].get(lib[spec["family"]])
        if entry is None:
            assert lib.get("weak"), f"{target}: {name} neither carried nor in the archive"
            continue
        if not entry.get("pypi") and not lib.get("weak") and not lib.get("minimum"):
            untested.append(name)
    assert untested == (["grpcio"] if target == "debian13" else []), untested


def test_what_each_target_carries() -> None:
    """The decisions of packaging/README.md, in one place."""
    carried = {t: sorted(spec["carry"]) for t, spec in table()["targets"].items()}
    assert carried == {
        "debian12": [], "debian13": [],
        "ubuntu2204": ["dbus-fast", "grpcio", "systemd-python", "typing-extensions"],
        "ubuntu2404": ["grpcio", "typing-extensions"],
        "el9": ["dbus-fast", "grpcio", "tomli", "typing-extensions"],
        "el10": ["dbus-fast", "grpcio", "protobuf", "typing-extensions"],
        "fedora42": ["grpcio", "typing-extensions"],
    }


def test_declared_dependencies() -> None:
    deps = {t: tm.dependencies(table(), t) for t in table()["targets"]}
    assert deps["debian12"] == (
        ["python3 (>= 3.11)", "python3-dbus-fast | python3-dbus-next", "python3-grpcio",
         "python3-protobuf"],
        ["python3-systemd", "python3-pystemd"])
    # A package with carried wheels runs one CPython minor only.
    assert deps["ubuntu2204"] == (
        ["python3 (>= 3.10)", "python3 (<< 3.11)", "python3-protobuf", "python3-tomli"], [])
    # Recommended where the archive has pystemd 0.11 or later: Ubuntu 24.04's universe too.
    assert deps["ubuntu2404"] == (
        ["python3 (>= 3.12)", "python3 (<< 3.13)", "python3-dbus-fast | python3-dbus-next",
         "python3-protobuf"],
        ["python3-systemd", "python3-pystemd"])
    assert deps["el9"] == (["python3-protobuf"], ["python3-systemd"])
    assert deps["el10"] == ([], ["python3-systemd"])
    assert deps["fedora42"] == (
        ["(python3-dbus-fast or python3-dbus-next)", "python3-protobuf"],
        ["python3-systemd", "python3-pystemd"])
    assert tm.licence(table(), "el9") == "Apache-2.0 AND MIT AND PSF-2.0"


@pytest.mark.parametrize(("name", "python", "fits"), [
    ("grpcio-1.85.3-cp312-cp312-manylinux2014_x86_64.manylinux_2_17_x86_64.whl", "3.12", True),
    ("grpcio-1.85.3-cp312-cp312-manylinux2014_x86_64.manylinux_2_17_x86_64.whl", "3.13", False),
    ("protobuf-7.36.2-cp310-abi3-manylinux2014_x86_64.whl", "3.12", True),
    ("protobuf-7.36.2-cp310-abi3-manylinux2014_x86_64.whl", "3.9", False),
    ("tomli-2.5.0-py3-none-any.whl", "3.9", True),
    ("systemd_python-235-cp310-cp310-linux_x86_64.whl", "3.10", True),
    ("x-1.0-cp310-cp310-manylinux_2_28_x86_64.whl", "3.10", False),  # only manylinux2014
    ("x-1.0-cp310-cp310-musllinux_1_1_x86_64.whl", "3.10", False),
])
def test_wheel_tags(name: str, python: str, fits: bool) -> None:
    assert tm.wheel_fits(name, python) is fits


def fake_wheel(path: Path, name: str, version: str, *requires: str) -> Path:
    wheel = path / f"{name}-{version}-py3-none-any.whl"
    meta = f"Metadata-Version: 2.1\nName: {name}\nVersion: {version}\n" + "".join(
        f"Requires-Dist: {r}\n" for r in requires) + "\nlong description\nRequires-Dist: x\n"
    with zipfile.ZipFile(wheel, "w") as archive:
        archive.writestr(f"{name}-{version}.dist-info/METADATA", meta)
        archive.writestr(f"{name}/__init__.py", "")
    return wheel


def test_a_carried_librarys_own_requirements_are_carried(tmp_path: Path) -> None:
    grpc = fake_wheel(tmp_path, "grpcio", "1.85.3", "typing-extensions~=4.12",
                      'protobuf; extra == "protobuf"', 'futures; python_version < "3.2"')
    tm.check_requirements({"grpcio": grpc}, {"grpcio": "1.85.3",
                                             "typing-extensions": "4.16.0"}, "3.9")
    with pytest.raises(tm.TargetError, match="grpcio requires typing-extensions~=4.12"):
        tm.check_requirements({"grpcio": grpc}, {"grpcio": "1.85.3"}, "3.9")
    with pytest.raises(tm.TargetError, match="typing-extensions~=4.12"):
        tm.check_requirements({"grpcio": grpc}, {"grpcio": "1.85.3",
                                                 "typing-extensions": "3.10.0"}, "3.9")


def test_unpacking_keeps_the_package_and_drops_the_installers_record(tmp_path: Path) -> None:
    wheel = fake_wheel(tmp_path, "lib", "1.0")
    with zipfile.ZipFile(wheel, "a") as archive:
        archive.writestr("lib-1.0.dist-info/RECORD", "")
        archive.writestr("lib-1.0.data/purelib/extra.py", "")
    vendor = tmp_path / "vendor"
    tm.unpack(wheel, vendor)
    assert sorted(str(p.relative_to(vendor)) for p in vendor.rglob("*") if p.is_file()) == [
        "extra.py", "lib-1.0.dist-info/METADATA", "lib/__init__.py"]


def test_what_a_target_needs_beyond_the_debian_12_tools_is_one_line(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Only a library built from its sdist needs more than .ci/system-deps.sh installs (the
    target's CPython); the build scripts stop with this line and the package tests skip with
    it (tests/packaging/builds.py). A wheel already built into the cache is enough."""
    if Path("/usr/bin/python3.10").exists():
        pytest.skip("this machine has /usr/bin/python3.10")
    monkeypatch.setenv("PYENV_ROOT", str(tmp_path / "pyenv"))  # no pyenv interpreter either
    cache = tmp_path / "cache"
    cache.mkdir()
    tools = copy.deepcopy(table())  # and the C tools of the build: here, as CI has them
    tools["libraries"]["systemd-python"]["sdist_needs"]["check"] = "true"
    assert {t: tm.unmet(tools, t, cache) for t in tools["targets"]
            if tm.unmet(tools, t, cache)} == {"ubuntu2204": (
                "ubuntu2204 builds systemd-python 235 from its sdist for CPython 3.10, which "
                "needs python3.10 (pyenv install 3.10) here, or build on Ubuntu 22.04 LTS "
                "(jammy)")}
    tools["libraries"]["systemd-python"]["sdist_needs"]["check"] = "false"  # none of them
    assert tm.unmet(tools, "ubuntu2204", cache).endswith(
        "which needs python3.10 (pyenv install 3.10) and gcc pkg-config libsystemd-dev "
        "(apt-get install gcc pkg-config libsystemd-dev) here, or build on Ubuntu 22.04 LTS "
        "(jammy)")
    (cache / "systemd_python-235-cp310-cp310-linux_x86_64.whl").write_bytes(b"")
    assert tm.unmet(tools, "ubuntu2204", cache) == ""
    # An rpm target builds without its CPython: without bytecode (test_packages.py).
    assert "unmet=''\n" in tm.shell(table(), "el9")
