"""Fixtures of the packaging tests: the .deb and .rpm built once per session."""

from __future__ import annotations

import shutil
import subprocess
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parent.parent.parent
SYS_PATH = "/usr/sbin:/usr/bin:/sbin:/bin"


def pytest_configure(config: pytest.Config) -> None:
    config.addinivalue_line(
        "markers", "packaging: builds and lints the .deb/.rpm with the distribution's tools"
    )
    config.addinivalue_line(
        "markers", "e2e: boots a Debian 12 rootfs under real systemd with systemd-nspawn (root)"
    )


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
