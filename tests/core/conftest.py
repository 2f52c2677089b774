"""Fixtures shared by the sysfs reader tests: a simulated host and readers that are closed."""

from __future__ import annotations

from pathlib import Path
from types import ModuleType
from typing import Iterator, Optional

import pytest

from nichealthd.sources.attribute import AttributeFiles
from nichealthd.sources.config_file import load_config
from nichealthd.sources.sysfs import SysfsReader

from .. import simtrees


@pytest.fixture
def host() -> Path:
    """A DGX-H100 tree the test may change (tests/simtrees.py)."""
    return simtrees.take("dgx-h100")


# Every reader a test makes: each holds one fd per polled file until closed (a DGX-H100 tree
# is ~200), so the autouse fixture below closes them after each test.
open_readers: list[SysfsReader] = []


@pytest.fixture(autouse=True)
def _close_readers() -> Iterator[None]:
    yield
    while open_readers:
        open_readers.pop().close()


def reader_for(root: Path, files: AttributeFiles | None = None) -> SysfsReader:
    reader = SysfsReader(load_config(str(root / "nichealthd.toml")), files=files)
    open_readers.append(reader)
    return reader


def listings(monkeypatch: pytest.MonkeyPatch, module: ModuleType, name: str) -> list[str]:
    """The directories ``module.name`` (its listdir) lists from now on, in order."""
    listed: list[str] = []
    listdir = getattr(module, name)

    def counted(path: str) -> Optional[list[str]]:
        listed.append(path)
        return listdir(path)  # type: ignore[no-any-return]

    monkeypatch.setattr(module, name, counted)
    return listed
