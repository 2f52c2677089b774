"""Sim trees for tests: each kind built once, and put back as built for the next test.

A DGX-H100 tree is about 3,600 files and directories, and the suite asks for over 400 trees.
Building each one afresh wrote 1.8 million files: a container's /tmp or /dev/shm (a tmpfs of
400k inodes, or 64 MiB) ran out. Instead, :func:`take` builds a tree the first time a test
asks for that profile and those options, and hands it out again to the tests after, restored
to exactly what was built (:meth:`Tree.restore`): the files and directories a test changed,
chmod-ed or removed are put back (a changed file rewritten in place, a directory it renamed or
moved away moved back), what it added (state files, logs, sockets) is removed.
Contents are compared, not trusted: nothing a test or a daemon does leaks into the next test.
What two tests of one tree share is what no test looks at: its path, its random boot_id (a
reboot a test simulates is undone), the inodes and times of the files neither changed.

A tree is the test's until it ends (the autouse fixture in tests/conftest.py gives them all
back); a test that asks twice for the same kind gets two trees. pytest-xdist's workers share
the trees (a lock file per tree says whose it is): a small tree another worker holds is built
again, a large one (:data:`LARGE`) awaited. The trees kept between tests hold at most
:func:`budget` entries; past it, the least recently used go. Each tree is ``SLOT/host`` in a
world-readable SLOT of its own, where a daemon's sockets and logs may go (the D-Bus and
varlink tests' clients run as nobody): SLOT is restored too.
"""

from __future__ import annotations

import contextlib
import copy
import fcntl
import hashlib
import os
import pickle
import shutil
import stat
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Dict, List, Optional, Tuple, Union

from nichealthd.sim import tree

# relpath (from SLOT) -> ("d", mode) | ("f", mode, content) | ("l", target)
Entry = Tuple[Any, ...]


def snapshot(top: Path) -> Dict[str, Entry]:
    """Every entry under ``top`` (not following symlinks), parents before children."""
    entries: Dict[str, Entry] = {}

    def walk(path: Path, rel: str) -> None:
        with os.scandir(path) as it:
            children = sorted(it, key=lambda e: e.name)
        for child in children:
            name = f"{rel}{child.name}"
            st = child.stat(follow_symlinks=False)
            mode = stat.S_IMODE(st.st_mode)
            if stat.S_ISLNK(st.st_mode):
                entries[name] = ("l", os.readlink(child.path))
            elif stat.S_ISDIR(st.st_mode):
                entries[name] = ("d", mode)
                walk(Path(child.path), name + "/")
            elif stat.S_ISREG(st.st_mode):
                with open(child.path, "rb") as fh:
                    entries[name] = ("f", mode, fh.read())
            else:
                raise ValueError(f"{child.path}: not a file, directory or symlink")

    walk(top, "")
    return entries


def _kind(st: os.stat_result) -> str:
    if stat.S_ISLNK(st.st_mode):
        return "l"
    if stat.S_ISDIR(st.st_mode):
        return "d"
    return "f" if stat.S_ISREG(st.st_mode) else "?"


def _rmtree(path: str) -> None:
    """shutil.rmtree, each directory made writable and searchable first (a test may have
    chmod-ed one)."""
    def open_up(directory: str) -> None:
        os.chmod(directory, 0o700)
        with os.scandir(directory) as it:
            for entry in it:
                if entry.is_dir(follow_symlinks=False):
                    open_up(entry.path)

    open_up(path)
    shutil.rmtree(path)


def _remove(path: str, st: os.stat_result) -> None:
    if _kind(st) == "d":
        _rmtree(path)
    else:
        os.unlink(path)


def _create(path: str, entry: Entry) -> None:
    if entry[0] == "d":
        os.mkdir(path)
        os.chmod(path, entry[1])
    elif entry[0] == "l":
        os.symlink(entry[1], path)
    else:
        fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
        try:
            os.write(fd, entry[2])
        finally:
            os.close(fd)
        os.chmod(path, entry[1])


def _rewrite(path: str, entry: Entry) -> None:
    """A file's content put back in place: the same inode, no new file (no daemon holds it
    between two tests)."""
    os.chmod(path, 0o600)
    fd = os.open(path, os.O_WRONLY | os.O_TRUNC)
    try:
        os.write(fd, entry[2])
    finally:
        os.close(fd)
    os.chmod(path, entry[1])


@dataclass
class Tree:
    """One built tree: ``root`` is ``slot/host``."""

    slot: Path
    manifest: tree.Manifest
    entries: Dict[str, Entry] = field(default_factory=dict)
    mode: int = 0o755
    rewritten: int = 0  # entries put back by restore, over the tree's life (for the tests)
    _dirs: Optional[Dict[str, List[str]]] = None  # directory -> its subdirectories, as built

    @property
    def root(self) -> Path:
        return self.slot / "host"

    def restore(self) -> None:
        """Make the slot what :func:`snapshot` saw: fix, remove and recreate entries."""
        if not self.slot.is_dir():
            self.slot.mkdir()
        os.chmod(self.slot, self.mode)
        seen: set[str] = set()
        strays: List[str] = []
        self._fix(str(self.slot), "", seen, strays)
        # A directory the test moved elsewhere (a device the sim unloaded, removed or unbound
        # into its stash) is moved back and fixed there, not written again: found among the
        # stray directories by its name (another of that name is fixed just as well).
        moved: Dict[str, List[str]] = {}
        for stray in strays:
            moved.setdefault(os.path.basename(stray), []).append(stray)
            for directory, subdirs, _ in os.walk(stray):
                for sub in subdirs:  # symlinks to directories are listed too: not those
                    if not os.path.islink(os.path.join(directory, sub)):
                        moved.setdefault(sub, []).append(os.path.join(directory, sub))
        for rel, entry in self.entries.items():  # parents first: insertion order
            if rel in seen:
                continue
            path = os.path.join(self.slot, rel)
            if entry[0] == "d" and self._move_back(moved.get(os.path.basename(rel), []), path):
                os.chmod(path, entry[1])
                seen.add(rel)
                self._fix(path, rel + "/", seen, strays)
                self.rewritten += 1
                continue
            _create(path, entry)
            self.rewritten += 1
        for stray in strays:
            if os.path.lexists(stray):
                _rmtree(stray)

    @staticmethod
    def _move_back(candidates: List[str], path: str) -> bool:
        """Move the first candidate that is still where it was found to ``path``."""
        while candidates:
            try:
                os.rename(candidates.pop(0), path)
                return True
            except OSError:  # moved already, with a directory above it
                continue
        return False

    def _fix(self, path: str, rel: str, seen: set[str], strays: List[str]) -> None:
        """Fix the entries in ``path`` (``rel`` in the slot); directories that were not built
        go to ``strays`` (removed by :meth:`restore` unless it moves them back)."""
        with os.scandir(path) as it:
            children = [(child.name, child.stat(follow_symlinks=False)) for child in it]
        present = {name for name, _ in children}
        # Directories the test renamed (a device under another name): each is moved back to a
        # missing one's name and fixed there, a few files rewritten instead of a whole subtree.
        missing = [name for name in self._subdirs(rel) if name not in present]
        for child_name, st in children:
            child = os.path.join(path, child_name)
            name = f"{rel}{child_name}"
            want = self.entries.get(name)
            if want is None and missing and _kind(st) == "d":
                child_name = missing.pop(0)
                os.rename(child, os.path.join(path, child_name))
                child, name = os.path.join(path, child_name), f"{rel}{child_name}"
                want = self.entries[name]
                self.rewritten += 1
            if want is None and _kind(st) == "d":
                strays.append(child)
                continue
            if want is None or want[0] != _kind(st):
                _remove(child, st)
                self.rewritten += want is not None
                continue
            seen.add(name)
            if want[0] == "l":
                if os.readlink(child) != want[1]:
                    os.unlink(child)
                    os.symlink(want[1], child)
                    self.rewritten += 1
                continue
            if stat.S_IMODE(st.st_mode) != want[1]:
                os.chmod(child, want[1])
                self.rewritten += 1
            if want[0] == "d":
                self._fix(child, name + "/", seen, strays)
                continue
            with open(child, "rb") as fh:
                same = fh.read() == want[2]
            if not same:
                _rewrite(child, want)
                self.rewritten += 1

    def _subdirs(self, rel: str) -> List[str]:
        """The names of the directories directly in ``rel`` (``""``: the slot) as built."""
        if self._dirs is None:
            self._dirs = {}
            for entry_name, entry in self.entries.items():
                if entry[0] == "d":
                    parent, _, base = entry_name.rpartition("/")
                    self._dirs.setdefault(parent + "/" if parent else "", []).append(base)
        return self._dirs.get(rel, [])


# Entries kept between tests: one tree of every kind the suite asks for (about 120,000, the
# 257-device host's 44,000 among them) and the copies two workers' tests make of the common ones.
BUDGET = 200_000
LARGE = 5_000  # entries: a tree this large another worker holds is awaited, not built again
WAIT = 60.0  # seconds awaited at most (two tests may each hold the tree the other awaits)
BUILT_LOG = "built.log"  # in the pool: "PROFILE[,OPTION=VALUE] ENTRIES", a line per tree built
SHARED = "NICHEALTHD_SIMTREES"  # the pool's directory, for pytest-xdist's workers
_base: Optional[Path] = None
_made_here = False  # this process made the pool (and removes it)
_known: Dict[str, Tree] = {}  # slot path -> its snapshot, as loaded by this process
_taken: List[Tuple[Tree, int]] = []  # the running test's trees and their lock fds
_in_test = False
built = 0  # trees built by this process (for the tests of this module)


def open_pool(where: Optional[str] = None) -> None:
    """The pool of this run: a world-readable directory in ``where`` (None: TMPDIR) whose
    name goes to the environment, so that pytest-xdist's workers share it (tests/conftest.py
    calls this at the start; a process that finds it in the environment joins it)."""
    global _base, _made_here
    if _base is not None:
        return
    if os.environ.get(SHARED) and os.path.isdir(os.environ[SHARED]):
        _base = Path(os.environ[SHARED])
        return
    _base = Path(tempfile.mkdtemp(prefix="nichealthd-simtrees-", dir=where))
    os.chmod(_base, 0o755)  # clients run as nobody reach a daemon's sockets in a slot
    os.environ[SHARED] = str(_base)
    _made_here = True


def summary() -> Optional[str]:
    """What the pool's trees wrote in this run, every worker's (None before any was built)."""
    if _base is None or not (_base / BUILT_LOG).exists():
        return None
    counts: Dict[str, List[int]] = {}
    for line in (_base / BUILT_LOG).read_text().splitlines():
        label, size = line.split()
        counts.setdefault(label, []).append(int(size))
    sizes = [size for each in counts.values() for size in each]
    again = ", ".join(f"{label} x{len(each)}" for label, each in sorted(
        counts.items(), key=lambda item: -sum(item[1])) if len(each) > 1)
    if again:  # two workers' tests wanted the kind at once, or it was evicted
        again = f"; built more than once: {again}"
    return (f"sim trees (tests/simtrees.py): {len(sizes)} built, {sum(sizes):,} files and "
            f"directories written; kept up to {budget():,} between tests{again}")


def close_pool() -> None:
    """At the end of the run: the trees go (only where the pool was made)."""
    global _base, _made_here
    if _made_here and _base is not None and _base.is_dir():
        _rmtree(str(_base))
        os.environ.pop(SHARED, None)
    _base, _made_here = None, False
    _known.clear()


def _kind_id(profile: str, options: Dict[str, Any]) -> str:
    digest = hashlib.sha256(repr(sorted(options.items())).encode()).hexdigest()[:8]
    return f"{profile}-{digest}"


def _lock(slot: str, blocking: bool = False) -> Optional[int]:
    """The slot's lock fd, or None while another process holds it or the slot is gone."""
    try:
        fd = os.open(slot + ".lock", os.O_RDWR)
    except FileNotFoundError:
        return None
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | (0 if blocking else fcntl.LOCK_NB))
    except OSError:
        os.close(fd)
        return None
    if not os.path.exists(slot + ".tree"):  # evicted while we waited
        os.close(fd)
        return None
    return fd


def _size(slot: str) -> int:
    """The entries of a slot's tree, as its lock file says (0 when unknown)."""
    try:
        return int(Path(slot + ".lock").read_text() or 0)
    except (OSError, ValueError):
        return 0


def _load(slot: str) -> Tree:
    if slot not in _known:
        with open(slot + ".tree", "rb") as fh:
            manifest, entries = pickle.load(fh)
        _known[slot] = Tree(Path(slot), manifest, entries)
    return _known[slot]


def _build(kind: str, profile: str, options: Dict[str, Any]) -> Tuple[Tree, int]:
    global built
    assert _base is not None
    slot = tempfile.mkdtemp(prefix=f"{kind}.", dir=_base)
    os.chmod(slot, 0o755)
    fd = os.open(slot + ".lock", os.O_RDWR | os.O_CREAT, 0o644)
    fcntl.flock(fd, fcntl.LOCK_EX)
    manifest = tree.create(Path(slot) / "host", profile, **options)
    made = Tree(Path(slot), manifest, snapshot(Path(slot)))
    os.write(fd, str(len(made.entries)).encode())  # its size, for the budget
    with open(slot + ".tree.new", "wb") as fh:
        pickle.dump((manifest, made.entries), fh)
    os.replace(slot + ".tree.new", slot + ".tree")  # now other processes may take it
    _known[slot] = made
    built += 1
    with open(_base / BUILT_LOG, "a") as log:  # one line, appended at once: workers share it
        label = profile + "".join(f",{key}={value}" for key, value in sorted(options.items()))
        log.write(f"{label} {len(made.entries)}\n")
    return made, fd


def take(profile: str = "dgx-h100", **options: Any) -> Path:
    """ROOT of a tree as ``tree.create(ROOT, profile, **options)`` builds it, the running
    test's until it ends. Only from a test or a function-scoped fixture."""
    if not _in_test:
        raise RuntimeError("simtrees.take() outside a test: a module- or session-scoped "
                           "fixture must build its own tree (tree.create)")
    open_pool()
    assert _base is not None
    kind = _kind_id(profile, options)
    mine = {str(t.slot) for t, _ in _taken}
    deadline = time.monotonic() + WAIT
    while True:
        slots = [str(found)[:-len(".tree")] for found in sorted(_base.glob(f"{kind}.*.tree"))]
        slots = [slot for slot in slots if slot not in mine]
        fd, slot = next(((fd, slot) for slot in slots if (fd := _lock(slot)) is not None),
                        (None, ""))
        if fd is not None:
            chosen = _load(slot)
            chosen.restore()
            break
        # Every tree of the kind is another worker's: a small one is built again, a large
        # one awaited (a second copy would write its tens of thousands of files again).
        if not slots or _size(slots[0]) < LARGE or time.monotonic() > deadline:
            chosen, fd = _build(kind, profile, options)
            break
        time.sleep(0.1)
    assert fd is not None
    os.utime(fd)  # when last taken: the least recent go first
    _taken.append((chosen, fd))
    return chosen.root


def manifest_of(root: Union[str, Path]) -> tree.Manifest:
    """The manifest ``tree.create`` returned for a tree from :func:`take` (a copy)."""
    for t, _ in _taken:
        if t.root == Path(root):
            return copy.deepcopy(t.manifest)
    raise KeyError(f"{root} is not a tree taken by this test")


def pooled(root: Union[str, Path]) -> bool:
    """Whether ``root`` is a tree from :func:`take` (its slot is not the test's to remove)."""
    return _base is not None and Path(root).parent.parent == _base


def budget() -> int:
    """:data:`BUDGET`, or less on a small file system: half its inodes and half its bytes (an
    entry takes about 3 KiB on a tmpfs), the rest for the trees in use and the tests' own
    files. Each tree evicted is written again by the next test that asks for it."""
    assert _base is not None
    fs = os.statvfs(_base)
    room = [BUDGET, fs.f_blocks * fs.f_frsize // 2 // 3072]
    if fs.f_files:  # 0 where the file system has no inode limit
        room.append(fs.f_files // 2)
    return min(room)


def begin_test() -> None:
    global _in_test
    _in_test = True


def end_test() -> None:
    """Every tree the test took is free again (restored when next taken); past the budget,
    the least recently taken free trees of the pool go."""
    global _in_test
    _in_test = False
    for _, held in _taken:
        os.close(held)
    _taken.clear()
    if _base is None:
        return
    sizes = []
    for path in _base.glob("*.lock"):
        with contextlib.suppress(OSError, ValueError):
            sizes.append((path.stat().st_mtime_ns, int(path.read_text() or 0),
                          str(path)[:-len(".lock")]))
    kept = sum(size for _, size, _ in sizes)
    for _, size, slot in sorted(sizes):
        if kept <= budget():
            break
        lock = _lock(slot)
        if lock is None:  # another worker's test has it
            continue
        try:
            os.unlink(slot + ".tree")
            _rmtree(slot)
            os.unlink(slot + ".lock")
        finally:
            os.close(lock)
        _known.pop(slot, None)
        kept -= size
