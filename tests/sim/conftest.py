"""Shared fixtures: one freshly built fake host per test (real files under tmp_path)."""

from __future__ import annotations

from pathlib import Path
from typing import Callable

import pytest

from nichealthd.sim import tree


@pytest.fixture
def build(tmp_path: Path) -> Callable[..., Path]:
    """build(profile, **kw) -> ROOT of a new fake host."""

    def _build(profile: str = "dgx-h100", **kw: object) -> Path:
        root = tmp_path / profile
        tree.create(root, profile, **kw)  # type: ignore[arg-type]
        return root

    return _build
