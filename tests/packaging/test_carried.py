"""nichealthd.carried: the marker a package writes puts its carried libraries first on the
import path of this CPython only (packaging/README.md); without it nothing changes."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from nichealthd import carried

HERE = f"{sys.version_info[0]}.{sys.version_info[1]}"


def package(tmp_path: Path, python: str = HERE, path: str = "../../../nichealthd/vendor",
            make_vendor: bool = True) -> Path:
    """A package layout: usr/lib/python3/dist-packages/nichealthd/carried-libraries and
    usr/lib/nichealthd/vendor; returns the marker."""
    marker = tmp_path / "usr/lib/python3/dist-packages/nichealthd/carried-libraries"
    marker.parent.mkdir(parents=True)
    marker.write_text(f"# written by the build\npython={python}\npath={path}\n")
    if make_vendor:
        (tmp_path / "usr/lib/nichealthd/vendor").mkdir(parents=True)
    return marker


def test_no_marker_no_change(tmp_path: Path) -> None:
    assert carried.carried_directory(str(tmp_path / "carried-libraries")) is None


def test_the_marker_names_the_vendor_directory_relative_to_the_package(tmp_path: Path) -> None:
    marker = package(tmp_path)
    assert carried.carried_directory(str(marker)) == str(tmp_path / "usr/lib/nichealthd/vendor")


@pytest.mark.parametrize("python", ["2.7", "3.99"])
def test_another_cpython_does_not_take_binaries_built_for_one(tmp_path: Path,
                                                              python: str) -> None:
    assert carried.carried_directory(str(package(tmp_path, python=python))) is None


def test_a_missing_directory_is_ignored(tmp_path: Path) -> None:
    assert carried.carried_directory(str(package(tmp_path, make_vendor=False))) is None


def test_the_directory_goes_first_once(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    marker = package(tmp_path)
    monkeypatch.setattr(sys, "path", ["/somewhere", *sys.path])
    carried.use_carried_libraries(str(marker))
    carried.use_carried_libraries(str(marker))
    vendor = str(tmp_path / "usr/lib/nichealthd/vendor")
    assert sys.path[0] == vendor and sys.path.count(vendor) == 1


def test_importing_nichealthd_puts_a_carried_library_before_the_systems(tmp_path: Path) -> None:
    """The whole path: a copy of the package with a marker, a carried module of the same name
    as one in a directory further on the path; the carried one wins."""
    site = tmp_path / "usr/lib/python3/dist-packages"
    source = Path(carried.__file__).parent
    (site / "nichealthd").mkdir(parents=True)
    for name in ("__init__.py", "carried.py"):
        (site / "nichealthd" / name).write_text((source / name).read_text())
    package_marker = site / "nichealthd/carried-libraries"
    package_marker.write_text(f"python={HERE}\npath=../../../nichealthd/vendor\n")
    vendor = tmp_path / "usr/lib/nichealthd/vendor"
    vendor.mkdir(parents=True)
    (vendor / "somelib.py").write_text("WHERE = 'carried'\n")
    system = tmp_path / "system"
    system.mkdir()
    (system / "somelib.py").write_text("WHERE = 'system'\n")
    probe = "import nichealthd, somelib; print(somelib.WHERE)"
    result = subprocess.run([sys.executable, "-S", "-c", probe], capture_output=True,
                            text=True, env={"PYTHONPATH": f"{site}:{system}"}, cwd=tmp_path)
    assert result.returncode == 0, result.stderr
    assert result.stdout.strip() == "carried"
