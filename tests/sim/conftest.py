"""Shared fixtures: fake hosts built with real files (fresh per test, or shared read-only)."""

from __future__ import annotations

from pathlib import Path
from typing import Callable, Dict

import pytest

from nichealthd.sim import tree


@pytest.fixture
def build(tmp_path: Path) -> Callable[..., Path]:
    """build(profile, **kw) -> ROOT of a new fake host the test may mutate."""

    def _build(profile: str = "dgx-h100", **kw: object) -> Path:
        root = tmp_path / profile
        tree.create(root, profile, **kw)  # type: ignore[arg-type]
        return root

    return _build


@pytest.fixture(scope="session")
def built(tmp_path_factory: pytest.TempPathFactory) -> Callable[[str], Path]:
    """built(profile) -> ROOT of a host shared by the session: tests must not mutate it."""
    cache: Dict[str, Path] = {}

    def _built(profile: str) -> Path:
        if profile not in cache:
            cache[profile] = tmp_path_factory.mktemp("shared") / profile
            tree.create(cache[profile], profile)
        return cache[profile]

    return _built
