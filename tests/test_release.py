"""tests/release.py: the release tree is made from the working tree without a git identity
and without touching the clone's index (a parallel run's other git commands hold its lock;
a fresh user in a container has no user.name)."""

from __future__ import annotations

import os
import subprocess
from pathlib import Path

import pytest

from .harness import REPO
from .release import unpack_release


def test_a_release_tree_needs_no_identity_and_leaves_the_index(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    if not (REPO / ".git").exists():
        pytest.skip("this checkout is itself a release tarball")
    index = Path(subprocess.run(["git", "rev-parse", "--git-path", "index"], cwd=REPO,
                                capture_output=True, text=True, check=True).stdout.strip())
    index = index if index.is_absolute() else REPO / index
    before = index.stat().st_mtime_ns
    home = tmp_path / "home"
    home.mkdir()
    monkeypatch.setenv("HOME", str(home))  # no ~/.gitconfig: no user.name, no user.email
    monkeypatch.setenv("GIT_CONFIG_NOSYSTEM", "1")
    for name in ("GIT_AUTHOR_NAME", "GIT_AUTHOR_EMAIL", "GIT_COMMITTER_NAME",
                 "GIT_COMMITTER_EMAIL", "EMAIL"):
        monkeypatch.delenv(name, raising=False)
    dest = tmp_path / "release"
    unpack_release(dest)
    assert not (dest / ".git").exists()
    assert (dest / "pyproject.toml").read_bytes() == (REPO / "pyproject.toml").read_bytes()
    assert (dest / "tests/harness.py").read_bytes() == (REPO / "tests/harness.py").read_bytes()
    assert index.stat().st_mtime_ns == before
    assert os.listdir(dest)
