"""File primitives for the fake host: in-place writes and the ROOT/.removed stash.

The daemon keeps sysfs files open and re-reads them with pread, like it would on a real host,
so a mutation must change the bytes of the same inode (pwrite at 0, then ftruncate) and never
replace the file by a rename.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Union

PathLike = Union[str, "os.PathLike[str]"]
PortId = Union[int, str]  # a port number as int or as its sysfs directory name

STASH = ".removed"


class SimError(Exception):
    """A bad argument or a tree state that makes the request impossible (CLI exit 2)."""


def write_new(path: Path, text: str) -> None:
    """Create (or overwrite) a file while building the tree, parents included.

    Parents are made only when the open fails: a host has thousands of small files and
    benchmarks build hosts with hundreds of devices.
    """
    flags = os.O_WRONLY | os.O_CREAT | os.O_TRUNC
    try:
        fd = os.open(path, flags, 0o644)
    except FileNotFoundError:
        os.makedirs(path.parent, exist_ok=True)
        fd = os.open(path, flags, 0o644)
    try:
        os.write(fd, text.encode())
    finally:
        os.close(fd)


def write_in_place(path: Path, text: str) -> None:
    """Overwrite an existing file's content without changing its inode."""
    data = text.encode()
    try:
        fd = os.open(path, os.O_WRONLY)
    except IsADirectoryError:
        raise SimError(f"{path} is a directory (made unreadable?)") from None
    except FileNotFoundError:
        raise SimError(f"{path} does not exist") from None
    try:
        os.pwrite(fd, data, 0)
        os.ftruncate(fd, len(data))
    finally:
        os.close(fd)


def symlink(link: Path, target: Path) -> None:
    """Create `link` pointing at `target` with a relative path, as sysfs does."""
    link.parent.mkdir(parents=True, exist_ok=True)
    os.symlink(os.path.relpath(target, link.parent), link)


def inside(root: Path, rel: PathLike) -> Path:
    """ROOT/rel, refusing absolute paths and '..' so a mutation never leaves the tree."""
    relpath = Path(rel)
    if relpath.is_absolute() or ".." in relpath.parts or not relpath.parts:
        raise SimError(f"path must be relative to ROOT without '..': {rel}")
    return root / relpath


def stash_key(root: Path, path: Path) -> Path:
    """Canonical ROOT-relative location of `path`: its parent with symlinks resolved.

    The same file reached through sys/class/... or sys/devices/... gets one key, so it can be
    removed through one spelling and restored through the other.
    """
    parent = Path(os.path.realpath(path.parent))
    real_root = Path(os.path.realpath(root))
    try:
        rel = parent.relative_to(real_root)
    except ValueError:
        raise SimError(f"{path} resolves outside ROOT") from None
    return rel / path.name


def stash(root: Path, path: Path) -> Path:
    """Move `path` (file, dir or symlink) to ROOT/.removed/<key>; return the stash location."""
    if not os.path.lexists(path):
        raise SimError(f"{path} does not exist (already removed?)")
    dest = root / STASH / stash_key(root, path)
    if os.path.lexists(dest):
        raise SimError(f"{dest} already holds a removed copy; restore it first")
    dest.parent.mkdir(parents=True, exist_ok=True)
    os.rename(path, dest)
    return dest


def unstash(root: Path, path: Path) -> None:
    """Move ROOT/.removed/<key> back to `path`."""
    if not path.parent.exists():
        raise SimError(f"parent of {path} does not exist (restore its device first?)")
    src = root / STASH / stash_key(root, path)
    if not os.path.lexists(src):
        raise SimError(f"nothing removed at {path}")
    if os.path.lexists(path):
        raise SimError(f"{path} exists; refusing to overwrite it")
    os.rename(src, path)
    _drop_empty_parents(root, src)


def discard(root: Path, path: Path) -> None:
    """Forget the removed copy of `path` (it never comes back under that name)."""
    src = root / STASH / stash_key(root, path)
    if not os.path.lexists(src):
        raise SimError(f"nothing removed at {path}")
    os.unlink(src)
    _drop_empty_parents(root, src)


def _drop_empty_parents(root: Path, src: Path) -> None:
    """Drop the stash's now empty parents of `src`: they would block stashing an ancestor
    later (remove-port, restore-port, then remove-device of the same device)."""
    top = root / STASH
    parent = src.parent
    while parent != top and top in parent.parents:
        try:
            parent.rmdir()
        except OSError:
            break
        parent = parent.parent
