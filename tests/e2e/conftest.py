"""Fixtures of the real-systemd tests: booted systemd-nspawn containers (see nspawn.py).

Also registers the markers ``e2e`` (needs root, debootstrap, systemd-nspawn; boots real
systemd) and ``packaging`` (builds .deb/.rpm with the distribution tools), so that
``pytest -m e2e`` / ``-m "not e2e and not packaging"`` work without a pytest.ini.
"""

from __future__ import annotations

import os
import sys
from pathlib import Path
from typing import Callable, Iterator, List

import pytest

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))

import nspawn  # noqa: E402

REPO = HERE.parent.parent


def pytest_configure(config: pytest.Config) -> None:
    config.addinivalue_line(
        "markers", "e2e: boots a Debian 12 rootfs under real systemd with systemd-nspawn (root)"
    )
    config.addinivalue_line(
        "markers", "packaging: builds and lints the .deb/.rpm with the distribution's tools"
    )


@pytest.fixture(scope="session")
def e2e_ready() -> None:
    reason = nspawn.unusable_reason()
    if reason:
        if os.environ.get("CI"):
            pytest.fail(f"e2e environment unusable in CI: {reason}")
        pytest.skip(reason)


@pytest.fixture
def boot(e2e_ready, tmp_path) -> Iterator[Callable[..., nspawn.Container]]:
    """Factory: boot(flavour) -> a running Container; all are powered off at teardown."""
    started: List[nspawn.Container] = []

    def _boot(flavour: str = "base", nspawn_args: tuple = ()) -> nspawn.Container:
        c = nspawn.Container(flavour, nspawn_args=nspawn_args)
        started.append(c)
        c.start()
        return c

    yield _boot
    for c in reversed(started):
        c.stop()
