"""tests/simtrees.py: a tree handed to the next test is exactly what was built."""

from __future__ import annotations

import os
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest

from nichealthd.sim import mutate, pcibus, tree

from . import simtrees
from .harness import REPO


def test_a_restored_tree_is_what_was_built(tmp_path: Path) -> None:
    """Everything a test and a daemon do to a tree is undone: contents, modes, removed,
    added and renamed files, directories and symlinks, even a directory left unreadable."""
    root = simtrees.take("dgx-h100")
    built = simtrees._known[str(root.parent)]
    before = simtrees.snapshot(built.slot)
    mutate.set_port(root, "mlx5_0", 1, state="DOWN", phys_state="Disabled")
    mutate.counter(root, "mlx5_1", 1, "link_downed", add=3)
    mutate.reboot(root)  # a new boot_id
    pcibus.pci_remove(root, "mlx5_2")  # a whole function, through the stash
    mutate.rename_device(root, "mlx5_4", "mlx5_40")  # its directories moved back
    (root / "nichealthd.toml").write_text("broken = [\n")
    (root / "var/lib/nichealthd/state.json").write_text("{}")
    (root.parent / "daemon.log").write_text("a log beside the tree\n")
    os.chmod(root / "sys/class/infiniband/mlx5_3/ports/1/state", 0o000)
    os.chmod(root / "var/lib", 0o000)
    (root / "gpu_metadata.json").unlink()
    (root / "gpu_metadata.json").mkdir()
    link = root / "sys/class/net" / os.listdir(root / "sys/class/net")[0]
    link.unlink()
    link.symlink_to("/elsewhere")
    built.restore()
    assert simtrees.snapshot(built.slot) == before
    assert built.rewritten > 0


def test_the_next_test_gets_the_same_trees_back_and_a_second_one_is_another() -> None:
    kind = {"metadata": True}  # the default, but a kind of tree no other test asks for
    trees = [simtrees.take("l40-dualport", **kind), simtrees.take("l40-dualport", **kind)]
    assert trees[0] != trees[1] and trees[1].is_dir()
    for root in trees:
        mutate.set_port(root, "mlx5_0", 1, state="DOWN", phys_state="Disabled")
    manifest = simtrees.manifest_of(trees[0])
    manifest["devices"].clear()  # the test's copy
    assert simtrees.manifest_of(trees[0])["devices"]
    simtrees.end_test()  # as at the end of the test
    simtrees.begin_test()
    built = simtrees.built
    again = simtrees.take("l40-dualport", **kind)
    assert again in trees and simtrees.built == built
    port = tree.port_dir(again, tree.device(tree.load(again), "mlx5_0"), 1)
    assert (port / "state").read_text() == "4: ACTIVE\n"


def test_a_tree_is_for_tests_only() -> None:
    simtrees.end_test()
    try:
        with pytest.raises(RuntimeError, match="outside a test"):
            simtrees.take("dgx-h100")
    finally:
        simtrees.begin_test()


def test_trees_are_world_readable_and_go_at_the_end_of_the_session(tmp_path: Path) -> None:
    """A pytest run of its own: the trees lie in one world-readable directory, gone after."""
    test = tmp_path / "test_inner.py"
    test.write_text(
        "import os, stat\n"
        "from tests import simtrees\n"
        "def test_it():\n"
        "    root = simtrees.take('cloud-vm')\n"
        "    for path in (root.parent, root.parent.parent):\n"
        "        assert stat.S_IMODE(os.stat(path).st_mode) == 0o755\n"
        "    print('BASE', root.parent.parent)\n")
    run = subprocess.run(
        [sys.executable, "-m", "pytest", "-q", "-s", "-p", "no:cacheprovider",
         "-p", "tests.conftest", "--rootdir", str(tmp_path), str(test)],
        cwd=REPO, capture_output=True, text=True, timeout=120,
        env={**{k: v for k, v in os.environ.items() if k != simtrees.SHARED},
             "PYTHONPATH": str(REPO)})
    assert run.returncode == 0, run.stdout + run.stderr
    base = next(line.split()[1] for line in run.stdout.splitlines() if line.startswith("BASE"))
    assert not Path(base).exists()


def test_past_the_budget_free_trees_go(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    """In a pool of its own: a budget of 0 in the run's pool would evict every free tree of
    the run, each built again by the next test that asks for it."""
    monkeypatch.setattr(simtrees, "_base", tmp_path)
    monkeypatch.setattr(simtrees, "BUDGET", 0)
    slot = str(simtrees.take("cloud-vm").parent)
    simtrees.end_test()  # as at the end of the test: now free, and past the budget
    simtrees.begin_test()
    assert not [path for path in (slot, slot + ".tree", slot + ".lock") if os.path.exists(path)]


@pytest.mark.parametrize("large", [True, False])
def test_a_tree_another_worker_holds_is_awaited_when_large_else_built_again(
        monkeypatch: pytest.MonkeyPatch, large: bool) -> None:
    """What a pytest-xdist worker does when the only tree of its kind is another's: a large
    one is awaited (here another worker's test ends after 0.5 s), a small one built again."""
    kind = {"metadata": False}  # a kind of tree no other test asks for
    slot = str(simtrees.take("cloud-vm", **kind).parent)
    simtrees.end_test()
    simtrees.begin_test()
    other = simtrees._lock(slot)  # another worker's test takes it
    assert other is not None
    monkeypatch.setattr(simtrees, "LARGE", 1 if large else 10**9)
    release = threading.Timer(0.5, os.close, [other])
    release.start()
    try:
        built, start = simtrees.built, time.monotonic()
        root = simtrees.take("cloud-vm", **kind)
    finally:
        release.join()
    if large:
        assert str(root.parent) == slot and simtrees.built == built
        assert time.monotonic() - start >= 0.5
    else:
        assert str(root.parent) != slot and simtrees.built == built + 1


def test_a_tree_after_driver_reloads_is_restored_as_built() -> None:
    """The driver drills (devices stashed, brought back under shifted names) are undone too:
    a device left behind would be one the next test's unload never takes."""
    root = simtrees.take("dgx-h100")
    built = simtrees._known[str(root.parent)]
    before = simtrees.snapshot(built.slot)
    mutate.unload_driver(root)
    mutate.load_driver(root, rename=True)
    mutate.unload_driver(root)
    built.restore()
    assert simtrees.snapshot(built.slot) == before
