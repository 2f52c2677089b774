"""The package of every target (packaging/targets.toml), built once per test session.

``built(target)`` runs packaging/build-deb.sh or packaging/build-rpm.sh with the target and
its linter, as a release would, and returns the path the script printed as the last line of
its standard output (packaging/README.md). The wheels the packages carry are fetched once per
session: into $NICHEALTHD_WHEEL_CACHE when set (CI sets it inside its own temporary
directory), else into a temporary directory removed at exit.
"""

from __future__ import annotations

import atexit
import functools
import importlib.util
import os
import shutil
import subprocess
import tempfile
from pathlib import Path
from types import ModuleType
from typing import Any, Optional

import pytest

REPO = Path(__file__).resolve().parents[2]
SYS_PATH = "/usr/sbin:/usr/bin:/sbin:/bin"
TOOLS = {"deb": ["dpkg-buildpackage", "dh", "lintian"], "rpm": ["rpmbuild", "rpmlint"]}
SCRIPTS = {"deb": "build-deb.sh", "rpm": "build-rpm.sh"}


@functools.cache
def targets_module() -> ModuleType:
    """packaging/targets.py (not a package of its own: loaded from its path)."""
    spec = importlib.util.spec_from_file_location("nichealthd_targets",
                                                  REPO / "packaging" / "targets.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


@functools.cache
def table() -> dict[str, Any]:
    return targets_module().load()  # type: ignore[no-any-return]


TARGETS = list(table()["targets"])


@functools.cache
def wheel_cache() -> Path:
    """Where carried and test wheels are kept for this session (see the module docstring)."""
    configured = os.environ.get("NICHEALTHD_WHEEL_CACHE")
    if configured:
        path = Path(configured)
        path.mkdir(parents=True, exist_ok=True)
        return path
    path = Path(tempfile.mkdtemp(prefix="nichealthd-wheels-"))
    atexit.register(shutil.rmtree, path, True)
    os.environ["NICHEALTHD_WHEEL_CACHE"] = str(path)  # for the build scripts
    return path


def family(target: str) -> str:
    return str(table()["targets"][target]["family"])


def _env() -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "VIRTUAL_ENV")}
    env["NICHEALTHD_WHEEL_CACHE"] = str(wheel_cache())
    return env


def run_build(target: str, *args: str, repo: Path = REPO,
              env: Optional[dict[str, str]] = None) -> subprocess.CompletedProcess[str]:
    """The target's build script as an operator runs it (``env``: more variables); skips
    without its tools."""
    kind = family(target)
    missing = [t for t in TOOLS[kind] if shutil.which(t, path=SYS_PATH) is None]
    if missing:
        pytest.skip(f"missing {', '.join(missing)} (.ci/system-deps.sh installs them)")
    unmet = targets_module().unmet(table(), target, wheel_cache())
    if unmet:  # the script would stop with this line (CONTRIBUTING: such tests skip)
        pytest.skip(unmet)
    return subprocess.run([str(repo / "packaging" / SCRIPTS[kind]), "--target", target, *args],
                          capture_output=True, text=True, timeout=900,
                          env={**_env(), **(env or {})})


def path_printed(result: subprocess.CompletedProcess[str]) -> Path:
    """The package: the last line of the build's standard output, a file that exists."""
    assert result.returncode == 0, f"build failed:\n{result.stdout}\n{result.stderr}"
    last = result.stdout.rstrip("\n").splitlines()[-1]
    path = Path(last)
    assert path.is_absolute() and path.is_file(), f"last line is not the package: {last!r}"
    return path


@functools.cache
def built(target: str) -> Path:
    """The target's package, built and linted once per session."""
    return path_printed(run_build(target))
