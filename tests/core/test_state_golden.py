"""State files written by main at a406b84 (tests/core/golden_state.py) load and are written back
byte for byte: every family's section, every kind of record it holds."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest

from nichealthd.core.checks import families
from nichealthd.storage.store import load_state, save_state

from .golden_state import FAMILIES_SINCE, GOLDEN, GOLDEN_DRIVER, as_recorded


@pytest.mark.parametrize("golden", [GOLDEN, GOLDEN_DRIVER], ids=["held", "driver-events"])
def test_a_state_file_of_main_loads_and_is_written_back_byte_for_byte(
        golden: Path, tmp_path: Path) -> None:
    path = tmp_path / "state.json"
    shutil.copy(golden, path)  # load_state moves a file it cannot use aside
    loaded = load_state(str(path))
    assert (loaded.fresh, loaded.problem, loaded.notes) == (False, None, ())
    save_state(str(path), loaded.state)
    # written as the daemon writes it (save_state), less the sections of families added since
    written = as_recorded(json.loads(path.read_bytes()))
    assert json.dumps(written, indent=1).encode() + b"\n" == golden.read_bytes()


def test_the_files_hold_every_family_section() -> None:
    """What makes them a test of every section: no family's keys are all empty."""
    for golden in (GOLDEN, GOLDEN_DRIVER):
        data = json.loads(golden.read_text())
        for family in families():
            if family.id in FAMILIES_SINCE:
                continue
            assert any(data.get(key) for key in family.keys), (golden.name, family.id)
