"""Shared fixtures: fake hosts built with real files, restored between tests (tests/simtrees.py)."""

from __future__ import annotations

from pathlib import Path
from typing import Callable

import pytest

from tests import simtrees


@pytest.fixture
def build() -> Callable[..., Path]:
    """build(profile, **kw) -> ROOT of a fake host the test may mutate."""
    return simtrees.take


@pytest.fixture
def built() -> Callable[[str], Path]:
    """built(profile) -> ROOT of a fake host (the tests that only read it ask for this one)."""
    return simtrees.take
