"""A built package's payload, unpacked and run as its target would run it, on this machine.

The target's CPython minor (pyenv's or /usr/bin's: packaging/targets.py ``interpreter``) runs
the payload's own scripts (``/usr/bin/nichealthd`` ...). Beside the payload's site directory
lies a directory holding only the distribution's versions (the archive entries' ``pypi``
pins of packaging/targets.toml) of the libraries the package does not carry; the package's
own marker puts its carried libraries first. Nothing else is on the path: no site
directory at all (``-S``: neither the interpreter's own site-packages nor, for /usr/bin's
python3.11, Debian's dist-packages), only a PYTHONPATH of exactly those two directories.
"""

from __future__ import annotations

import json
import os
import subprocess
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Optional

import pytest

from .builds import family, table, targets_module, wheel_cache

# Import names, for the probe of where each library was loaded from.
MODULES = {name: lib["module"] for name, lib in table()["libraries"].items()}


def unpack(package: Path, dest: Path) -> None:
    """The package's files under ``dest`` (no maintainer scripts run)."""
    dest.mkdir(parents=True, exist_ok=True)
    if package.suffix == ".deb":
        subprocess.run(["dpkg-deb", "-x", str(package), str(dest)], check=True)
    else:
        subprocess.run(f"rpm2cpio '{package}' | cpio -idm --quiet", shell=True, cwd=dest,
                       check=True)


@dataclass
class DistroSite:
    """The distribution's libraries beside the payload: what was installed, and what the
    archive has but no build for this CPython exists on PyPI (recorded, not installed)."""

    path: Path
    installed: dict[str, str] = field(default_factory=dict)  # library -> version
    unavailable: dict[str, str] = field(default_factory=dict)  # library -> archive version


def archive_libraries(target: str) -> dict[str, dict[str, Any]]:
    """library -> its archive entry, for the libraries the package takes from the archive."""
    spec = table()["targets"][target]
    tm = targets_module()
    kind = spec["family"]
    out = {}
    for name in tm.needed(table(), target):
        if name in spec["carry"]:
            continue
        package = table()["libraries"][name][kind]
        if package in spec["archive"]:
            out[name] = spec["archive"][package]
    return out


def distro_site(target: str, where: Path) -> DistroSite:
    """Unpack the wheels of the archive's versions for the target's CPython into ``where``."""
    spec = table()["targets"][target]
    tm = targets_module()
    site = DistroSite(where)
    where.mkdir(parents=True, exist_ok=True)
    todo = list(archive_libraries(target).items())
    while todo:
        name, entry = todo.pop(0)
        pin = entry.get("pypi")
        if not pin:
            site.unavailable[name] = entry["version"]
            continue
        lib, _, version = pin.partition("==")
        wheel = tm.fetch(lib, version, spec["python"], wheel_cache(),
                         sdist=lib == "systemd-python")  # no wheels of it on PyPI
        tm.unpack(wheel, where)
        site.installed[lib] = version
        todo += [(package, spec["archive"][package]) for package in entry.get("requires", ())]
    return site


@dataclass
class Payload:
    target: str
    root: Path  # the unpacked package
    python: str  # the target's CPython minor, on this machine
    site: DistroSite

    @property
    def sitelib(self) -> Path:
        if family(self.target) == "deb":
            return self.root / "usr/lib/python3/dist-packages"
        return self.root / f"usr/lib/python{table()['targets'][self.target]['python']}" \
            / "site-packages"

    @property
    def vendor(self) -> Path:
        return self.root / "usr/lib/nichealthd/vendor"

    def env(self, **extra: str) -> dict[str, str]:
        env = {"PATH": "/usr/sbin:/usr/bin:/sbin:/bin", "LANG": "C.UTF-8",
               "HOME": str(self.root), "PYTHONPATH": f"{self.sitelib}:{self.site.path}"}
        env.update(extra)
        return env

    def argv(self, program: str, *args: str) -> list[str]:
        return [self.python, "-S", str(self.root / "usr/bin" / program), *args]

    def run(self, program: str, *args: str, check: bool = True, timeout: float = 120,
            env: Optional[dict[str, str]] = None) -> subprocess.CompletedProcess[str]:
        result = subprocess.run(self.argv(program, *args), capture_output=True, text=True,
                                timeout=timeout, env=self.env(**(env or {})))
        if check:
            assert result.returncode == 0, (
                f"{program} {' '.join(args)} exited {result.returncode}:\n{result.stdout}\n"
                f"{result.stderr}")
        return result

    def origins(self) -> dict[str, str]:
        """library -> the file its module was imported from, as nichealthd sees them (after
        ``import nichealthd``); libraries that do not import are left out."""
        probe = ("import importlib, json, nichealthd\nout = {}\n"
                 f"for name, module in {MODULES!r}.items():\n"
                 "    try:\n        out[name] = importlib.import_module(module).__file__\n"
                 "    except ImportError:\n        pass\nprint(json.dumps(out))\n")
        result = subprocess.run([self.python, "-S", "-c", probe], capture_output=True,
                                text=True, timeout=60, env=self.env(), cwd=self.root)
        assert result.returncode == 0, result.stderr
        return json.loads(result.stdout)  # type: ignore[no-any-return]


def interpreter_or_skip(target: str) -> str:
    """The target's CPython on this machine; skips without it, unless
    NICHEALTHD_REQUIRE_TARGET_PYTHONS is set (.ci/run), where a target left untested fails."""
    python = table()["targets"][target]["python"]
    found: str = targets_module().interpreter(python)
    if not found:
        why = f"no CPython {python} here (/usr/bin/python{python} or pyenv)"
        if os.environ.get("NICHEALTHD_REQUIRE_TARGET_PYTHONS"):
            pytest.fail(f"{why}, and NICHEALTHD_REQUIRE_TARGET_PYTHONS is set")
        pytest.skip(why)
    return found
