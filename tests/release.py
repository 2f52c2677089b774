"""The clone's tracked files as a release tarball holds them (``git archive``, no .git),
made from the working tree without touching the clone's index or HEAD and without a git
identity.

``git stash create`` did that before, but it refreshes the clone's index (a lock another
test's git command may hold in a parallel run) and makes a commit (which needs
``user.name``, unset for a fresh user in a container). Here a private index
(``GIT_INDEX_FILE``) takes HEAD and the working tree's changes to tracked files, and
``git write-tree`` makes a tree from it: objects only, which any number of processes may
write at once.
"""

from __future__ import annotations

import os
import subprocess
import tempfile
from pathlib import Path

from .harness import REPO


def unpack_release(dest: Path) -> None:
    """Unpack into ``dest`` (made) what ``git archive`` of the working tree's tracked files
    gives."""
    with tempfile.TemporaryDirectory(prefix="nichealthd-index-") as work:
        env = dict(os.environ, GIT_INDEX_FILE=os.path.join(work, "index"))

        def git(*args: str) -> bytes:
            return subprocess.run(["git", *args], cwd=REPO, env=env, capture_output=True,
                                  check=True, timeout=300).stdout

        git("read-tree", "HEAD")
        git("add", "--update")  # tracked files as they are now; deleted ones gone
        tree = git("write-tree").decode().strip()
        archive = git("archive", "--format=tar", tree)
    dest.mkdir(parents=True, exist_ok=True)
    subprocess.run(["tar", "-x", "-C", str(dest)], input=archive, check=True, timeout=300)
