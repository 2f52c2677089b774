"""The package targets of packaging/targets.toml: their dependencies and carried libraries.

    python3 packaging/targets.py shell TARGET
        shell assignments for the build scripts (target family python dist ... depends
        recommends bundled licence interpreter unmet: what this machine must install to
        build it, in one line); an unknown target exits 2
    python3 packaging/targets.py carry TARGET DESTDIR --sitelib DIR [--cache DIR]
        the libraries TARGET carries, from pinned wheels for its CPython minor, unpacked into
        DESTDIR/usr/lib/nichealthd/vendor; DESTDIR/usr/share/doc/nichealthd/BUNDLED (name,
        version, licence; written for every target, carrying or not); and, when it carries
        any, DESTDIR/SITELIB/nichealthd/carried-libraries, which makes nichealthd put the
        directory first on its import path (nichealthd/carried.py)

Wheels come from PyPI (``pip download --only-binary=:all: --python-version X.Y --platform
manylinux2014_x86_64``); a library listed in the target's ``sdist`` has no wheels there and
is built from its pinned sdist by the target's own interpreter (/usr/bin/pythonX.Y or
pyenv's). ``--cache DIR`` (default: $NICHEALTHD_WHEEL_CACHE, else a temporary directory)
keeps them between builds: CI points it into its own temporary directory.
"""

from __future__ import annotations

import argparse
import glob
import os
import re
import shlex
import shutil
import subprocess
import sys
import tempfile
import zipfile
from pathlib import Path
from typing import Any, Optional

try:
    import tomllib
except ImportError:  # Python < 3.11 (a build on RHEL 9 itself)
    import tomli as tomllib  # type: ignore[no-redef]

HERE = Path(__file__).resolve().parent
TABLE = HERE / "targets.toml"
VENDOR = "/usr/lib/nichealthd/vendor"
BUNDLED = "/usr/share/doc/nichealthd/BUNDLED"
MARKER = "carried-libraries"  # beside nichealthd/__init__.py, read by nichealthd/carried.py
# Wheels a target may take: built for CPython X.Y (or the stable ABI, or pure Python), for
# x86_64 with glibc 2.17 or older (manylinux2014: every target has a newer glibc).
PLATFORMS = ("manylinux2014_x86_64", "manylinux_2_17_x86_64", "manylinux_2_12_x86_64",
             "manylinux2010_x86_64", "manylinux_2_5_x86_64", "manylinux1_x86_64")


class TargetError(Exception):
    """An unknown target, or a table that contradicts itself."""


def load(path: Path = TABLE) -> dict[str, Any]:
    with open(path, "rb") as fh:
        return tomllib.load(fh)


def canonical(name: str, table: dict[str, Any]) -> str:
    """The target's own name for ``name`` or one of its aliases (rhel9 -> el9)."""
    for target, spec in table["targets"].items():
        if name == target or name in spec.get("aliases", ()):
            return str(target)
    names = []
    for target, spec in table["targets"].items():
        aliases = spec.get("aliases", ())
        names.append(target + (f" ({', '.join(aliases)})" if aliases else ""))
    raise TargetError(f"unknown target '{name}' (known: {', '.join(names)})")


def minor(version: str) -> tuple[int, ...]:
    return tuple(int(part) for part in re.findall(r"\d+", version)[:2])


def needed(table: dict[str, Any], target: str) -> list[str]:
    """The libraries nichealthd needs on ``target`` (PyPI names), alternatives left out."""
    spec = table["targets"][target]
    alternatives = {lib.get("alternative") for lib in table["libraries"].values()}
    out = []
    for name, lib in table["libraries"].items():
        if name in alternatives:
            continue
        below = lib.get("below_python")
        if below and minor(spec["python"]) >= minor(below):
            continue
        out.append(name)
    return out


def version_at_least(version: str, floor: str) -> bool:
    """Whether a recorded version meets ``floor``; an unrecorded one ("") is taken as
    meeting it (the archive has the package, its version was not measured)."""
    if not version:
        return True
    return tuple(int(x) for x in re.findall(r"\d+", version)) >= \
        tuple(int(x) for x in re.findall(r"\d+", floor))


def dependencies(table: dict[str, Any], target: str) -> tuple[list[str], list[str]]:
    """(hard, weak) dependencies on the target's packages of the libraries it does not
    carry, in the target family's syntax. A hard library neither carried nor in the
    archive is a contradiction of the table."""
    spec = table["targets"][target]
    family, archive, carry = spec["family"], spec["archive"], spec["carry"]
    hard: list[str] = []
    weak: list[str] = []
    if family == "deb":  # the rpm's python(abi) = X.Y is in the spec
        major, minor_ = minor(spec["python"])
        hard.append(f"python3 (>= {major}.{minor_})")
        if carry:  # wheels for this CPython minor only
            hard.append(f"python3 (<< {major}.{minor_ + 1})")
    for name in needed(table, target):
        lib = table["libraries"][name]
        if name in carry:
            continue
        choices = [lib[family]]
        alternative = lib.get("alternative")
        if alternative:
            choices.append(table["libraries"][alternative][family])
        present = [c for c in choices if c in archive and
                   version_at_least(archive[c]["version"], lib.get("minimum", "0"))]
        if not present:
            if lib.get("weak"):
                continue
            raise TargetError(f"{target}: {name} is neither carried nor in the archive")
        if family == "deb":
            entry = " | ".join(present)
        else:
            entry = present[0] if len(present) == 1 else f"({' or '.join(present)})"
        (weak if lib.get("weak") else hard).append(entry)
    return hard, weak


def bundled_provides(table: dict[str, Any], target: str) -> str:
    """The rpm's ``Provides: bundled(python3dist(NAME)) = VERSION`` list, comma-separated."""
    carry = table["targets"][target]["carry"]
    return ", ".join(f"bundled(python3dist({name})) = {version}"
                     for name, version in sorted(carry.items()))


def licence(table: dict[str, Any], target: str, own: str = "Apache-2.0") -> str:
    """nichealthd's licence and those of the libraries it carries, as one SPDX AND list."""
    parts = [own]
    for name in sorted(table["targets"][target]["carry"]):
        for part in table["licences"][name].split(" AND "):
            if part not in parts:
                parts.append(part)
    return " AND ".join(parts)


def interpreter(python: str) -> str:
    """The target's CPython minor on this machine: /usr/bin/pythonX.Y, else pyenv's, else
    "" (then no bytecode is made and no sdist can be built)."""
    system = f"/usr/bin/python{python}"
    if os.access(system, os.X_OK):
        return system
    root = os.environ.get("PYENV_ROOT") or os.path.join(os.environ.get("HOME") or "/root",
                                                         ".pyenv")
    found = sorted(glob.glob(os.path.join(root, "versions", f"{python}.*", "bin",
                                          f"python{python}")),
                   key=lambda p: [int(x) for x in re.findall(r"\d+", p.split("/")[-3])])
    return found[-1] if found else ""


def unmet(table: dict[str, Any], name: str, cache: Optional[Path] = None) -> str:
    """What this machine must install to build the target, in one line; "" when nothing.
    Only a library built from its sdist needs more than .ci/system-deps.sh installs: the
    target's own CPython minor (the wheel's ABI is that minor's), unless the wheel cache
    (``cache``, else $NICHEALTHD_WHEEL_CACHE) already holds its build."""
    target = canonical(name, table)
    spec = table["targets"][target]
    python = spec["python"]
    configured = cache or (Path(os.environ["NICHEALTHD_WHEEL_CACHE"])
                           if os.environ.get("NICHEALTHD_WHEEL_CACHE") else None)
    built = [lib for lib in spec.get("sdist", ())
             if not (configured and cached_wheel(configured, lib, spec["carry"][lib], python))]
    needs = [table["libraries"][lib].get("sdist_needs", {}) for lib in built]
    tools = " ".join(n["debian"] for n in needs if n and subprocess.run(
        n["check"], shell=True, capture_output=True).returncode != 0)
    missing = ([f"python{python} (pyenv install {python})"] if built and not interpreter(python)
               else []) + ([f"{tools} (apt-get install {tools})"] if tools else [])
    if not missing:
        return ""
    pins = ", ".join(f"{lib} {spec['carry'][lib]}" for lib in built)
    return (f"{target} builds {pins} from its sdist for CPython {python}, which needs "
            f"{' and '.join(missing)} here, or build on {spec['name']}")


def shell(table: dict[str, Any], name: str) -> str:
    """Shell assignments describing the target, for the build scripts."""
    target = canonical(name, table)
    spec = table["targets"][target]
    hard, weak = dependencies(table, target)
    values = {
        "target": target,
        "family": spec["family"],
        "distname": spec["name"],
        "python": spec["python"],
        "suite": spec.get("suite", ""),
        "version_suffix": spec.get("version_suffix", ""),
        "dist": spec.get("dist", ""),
        "carries": "yes" if spec["carry"] else "",
        "depends": ", ".join(hard),
        "recommends": ", ".join(weak),
        "bundled": bundled_provides(table, target),
        "licence": licence(table, target),
        "interpreter": interpreter(spec["python"]),
        "unmet": unmet(table, target),
    }
    return "".join(f"{k}={shlex.quote(v)}\n" for k, v in values.items())


# ----------------------------------------------------------------------- carried libraries

def normalise(name: str) -> str:
    return re.sub(r"[-_.]+", "_", name).lower()


def wheel_fits(filename: str, python: str) -> bool:
    """Whether a wheel file (name-version[-build]-python-abi-platform.whl) runs on CPython
    ``python`` on x86_64 Linux with glibc 2.17 or newer."""
    parts = filename[:-len(".whl")].split("-")
    pythons, abis, platforms = (set(p.split(".")) for p in parts[-3:])
    cp = "cp" + python.replace(".", "")
    if cp in abis:
        fits = cp in pythons
    elif "abi3" in abis:  # the stable ABI of the tagged CPython and every later one
        fits = any(p.startswith("cp3") and int(p[3:]) <= int(cp[3:]) for p in pythons)
    else:  # pure Python
        fits = "none" in abis and bool(pythons & {cp, "py3"})
    return fits and bool(platforms & {*PLATFORMS, "linux_x86_64", "any"})


def cached_wheel(cache: Path, name: str, version: str, python: str) -> Optional[Path]:
    for path in sorted(cache.glob(f"{normalise(name)}-{version}-*.whl")):
        if wheel_fits(path.name, python):
            return path
    return None


def fetch(name: str, version: str, python: str, cache: Path, sdist: bool) -> Path:
    """The wheel of ``name==version`` for CPython ``python``: from the cache, else from
    PyPI (a wheel), else built from the pinned sdist by the target's interpreter."""
    found = cached_wheel(cache, name, version, python)
    if found:
        return found
    pip = ["--disable-pip-version-check", "--no-cache-dir", "--quiet"]
    if sdist:
        exe = interpreter(python)
        if not exe:
            raise TargetError(f"{name} {version} is built from its sdist for CPython {python}, "
                              f"and there is no python{python} here (/usr/bin or pyenv)")
        cmd = [exe, "-m", "pip", "wheel", *pip, "--no-deps", "--use-pep517",
               "--no-binary", name, "--wheel-dir", str(cache), f"{name}=={version}"]
        # Linked as a distribution links its extensions: stripped, full RELRO, and without
        # the build interpreter's own library path (pyenv's RUNPATH).
        env = {**os.environ, "LDSHARED": "gcc -shared -Wl,-O1,-z,relro,-z,now -s",
               "CFLAGS": "-O2 -g0 -fstack-protector-strong -D_FORTIFY_SOURCE=2"}
    else:
        env = None
        cmd = [sys.executable, "-m", "pip", "download", *pip, "--no-deps",
               "--only-binary=:all:", "--python-version", python, "--implementation", "cp",
               *[a for p in PLATFORMS for a in ("--platform", p)],
               "--dest", str(cache), f"{name}=={version}"]
    result = subprocess.run(cmd, capture_output=True, text=True, env=env)
    found = cached_wheel(cache, name, version, python)
    if result.returncode != 0 or not found:
        raise TargetError(f"cannot get {name} {version} for CPython {python}:\n"
                          f"{' '.join(cmd)}\n{result.stderr.strip()[-2000:]}")
    return found


def unpack(wheel: Path, vendor: Path) -> None:
    """The wheel's files into ``vendor`` (purelib and platlib alike), without the RECORD
    of an installer: rpm and dpkg keep their own."""
    with zipfile.ZipFile(wheel) as archive:
        for info in archive.infolist():
            name = info.filename
            if info.is_dir():
                continue
            parts = name.split("/")
            if parts[0].endswith(".data"):
                if len(parts) < 3 or parts[1] not in ("purelib", "platlib"):
                    raise TargetError(f"{wheel.name}: {name} has no place in {VENDOR}")
                parts = parts[2:]
            if parts[0].endswith(".dist-info") and parts[-1] == "RECORD":
                continue
            dest = vendor.joinpath(*parts)
            dest.parent.mkdir(parents=True, exist_ok=True)
            with archive.open(info) as src, open(dest, "wb") as out:
                shutil.copyfileobj(src, out)
            dest.chmod(0o644)
    for installer in vendor.glob("*.dist-info/INSTALLER"):
        installer.write_text("nichealthd package build\n")
    strip = shutil.which("strip")
    if strip:  # as distributions ship extension modules (some wheels keep their symbols)
        for shared in vendor.rglob("*.so"):
            subprocess.run([strip, "--strip-unneeded", str(shared)], check=True)


def requirements(wheel: Path) -> list[str]:
    """The wheel's Requires-Dist lines (extras' left out)."""
    with zipfile.ZipFile(wheel) as archive:
        meta = next(n for n in archive.namelist()
                    if n.count("/") == 1 and n.endswith(".dist-info/METADATA"))
        text = archive.read(meta).decode("utf-8", "replace")
    lines = [line.split(":", 1)[1].strip() for line in text.split("\n\n", 1)[0].splitlines()
             if line.startswith("Requires-Dist:")]
    return [line for line in lines if "extra ==" not in line.replace("'", '"')]


def check_requirements(wheels: dict[str, Path], carried: dict[str, str], python: str) -> None:
    """Every requirement of a carried wheel that applies on CPython ``python`` is carried
    too, at a version it accepts: the system's copy, if any, is never what it gets."""
    try:
        from packaging.markers import Marker
        from packaging.requirements import Requirement
    except ImportError:  # pip's own copy (Debian's python3-pip has it)
        from pip._vendor.packaging.markers import Marker  # type: ignore[no-redef]
        from pip._vendor.packaging.requirements import Requirement  # type: ignore[no-redef]
    environment = {"python_version": python, "python_full_version": python + ".0",
                   "implementation_name": "cpython", "platform_python_implementation": "CPython",
                   "sys_platform": "linux", "platform_system": "Linux",
                   "platform_machine": "x86_64", "os_name": "posix"}
    names = {normalise(n): (n, v) for n, v in carried.items()}
    for lib, wheel in wheels.items():
        for line in requirements(wheel):
            req = Requirement(line)
            if req.marker is not None and not Marker(str(req.marker)).evaluate(environment):
                continue
            found = names.get(normalise(req.name))
            if found is None or not req.specifier.contains(found[1], prereleases=True):
                raise TargetError(f"{lib} requires {line}: carry it (packaging/targets.toml)")


def carry(table: dict[str, Any], name: str, destdir: Path, sitelib: str,
          cache: Optional[Path]) -> list[tuple[str, str, str, str]]:
    """Unpack the target's carried libraries, write BUNDLED and the marker; returns the
    (name, version, licence, wheel) rows of BUNDLED."""
    target = canonical(name, table)
    spec = table["targets"][target]
    python = spec["python"]
    rows = []
    with tempfile.TemporaryDirectory(prefix="nichealthd-wheels-") as scratch:
        cache = cache or Path(os.environ.get("NICHEALTHD_WHEEL_CACHE") or scratch)
        cache.mkdir(parents=True, exist_ok=True)
        vendor = destdir / VENDOR.lstrip("/")
        wheels = {lib: fetch(lib, version, python, cache, lib in spec.get("sdist", ()))
                  for lib, version in sorted(spec["carry"].items())}
        check_requirements(wheels, spec["carry"], python)
        for lib, wheel in wheels.items():
            vendor.mkdir(parents=True, exist_ok=True)
            unpack(wheel, vendor)
            origin = (f"built from the PyPI sdist: {wheel.name}" if lib in spec.get("sdist", ())
                      else f"PyPI wheel {wheel.name}")
            rows.append((lib, spec["carry"][lib], table["licences"][lib], origin))
    bundled = destdir / BUNDLED.lstrip("/")
    bundled.parent.mkdir(parents=True, exist_ok=True)
    bundled.write_text(bundled_text(spec, rows))
    if rows:
        marker = destdir / sitelib.lstrip("/") / "nichealthd" / MARKER
        marker.parent.mkdir(parents=True, exist_ok=True)
        relative = os.path.relpath(VENDOR, os.path.join(sitelib, "nichealthd"))
        marker.write_text(f"# Written by the package build for {target} (packaging/targets.py):"
                          f"\n# the libraries in BUNDLED, for this CPython only.\n"
                          f"python={python}\npath={relative}\n")
    return rows


def bundled_text(spec: dict[str, Any], rows: list[tuple[str, str, str, str]]) -> str:
    head = f"# nichealthd for {spec['name']}, CPython {spec['python']}.\n"
    if not rows:
        return head + ("# This package carries no libraries: every one it uses comes from "
                       "the distribution's archive.\n")
    width = max(len(r[0]) for r in rows) + 2
    lines = [head,
             f"# The libraries this package carries in {VENDOR}, first on the import path of\n"
             "# nichealthd, nichealthctl and nichealthd-sim only (the system's Python sees\n"
             "# none of them); their licence texts are in its *.dist-info directories.\n",
             f"# {'name'.ljust(width - 2)}version  licence  (from)\n"]
    for lib, version, licence_, origin in rows:
        lines.append(f"{lib.ljust(width)}{version}  {licence_}  ({origin})\n")
    return "".join(lines)


def main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    sub = parser.add_subparsers(dest="command", required=True)
    show = sub.add_parser("shell", help="shell assignments describing TARGET")
    show.add_argument("target")
    put = sub.add_parser("carry", help="unpack the carried libraries, write BUNDLED")
    put.add_argument("target")
    put.add_argument("destdir", type=Path)
    put.add_argument("--sitelib", required=True, help="where the package puts nichealthd/")
    put.add_argument("--cache", type=Path, default=None)
    args = parser.parse_args(argv)
    table = load()
    try:
        if args.command == "shell":
            sys.stdout.write(shell(table, args.target))
        else:
            for row in carry(table, args.target, args.destdir, args.sitelib, args.cache):
                print(f"carried: {row[0]} {row[1]} ({row[3]})")
    except TargetError as exc:
        print(f"targets: {exc}", file=sys.stderr)
        return 2
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
