"""sources.sandbox: which configured paths the unit's PrivateTmp=/ProtectHome= hide, and the
hint; a path that exists (a daemon run by hand on a tree under /tmp) gets none."""

from __future__ import annotations

import uuid
from pathlib import Path

from nichealthd.sources.sandbox import hidden_by, hidden_paths, sandbox_hint, sysfs_root_problem


def test_the_hidden_prefixes_and_their_settings() -> None:
    assert hidden_by("/tmp/simhost/sys") == hidden_by("/var/tmp/x") == "PrivateTmp=yes"
    assert hidden_by("/home/op/simhost") == hidden_by("/root/simhost") == "ProtectHome=yes"
    assert hidden_by("/run/user/1000/x") == "ProtectHome=yes"
    for visible in ("/srv/simhost/sys", "/sys", "/tmpfoo/x", "/var/lib/nvsentinel/x.json", ""):
        assert hidden_by(visible) == "", visible


def test_only_what_does_not_exist_gets_a_hint(tmp_path: Path) -> None:
    absent = f"/tmp/nichealthd-absent-{uuid.uuid4().hex}"
    assert "PrivateTmp=yes" in sandbox_hint(absent, "sysfsRoot")
    assert "point sysfsRoot there" in sandbox_hint(absent, "sysfsRoot")
    assert sandbox_hint(str(tmp_path)) == ""  # exists: run by hand, nothing hidden
    assert sandbox_hint(f"/srv/nichealthd-absent-{uuid.uuid4().hex}") == ""  # just missing


def test_hidden_paths_checks_directories_of_files(tmp_path: Path) -> None:
    absent = f"/root/nichealthd-absent-{uuid.uuid4().hex}"
    warnings = hidden_paths({"procRoot": f"{absent}/proc", "bootIdPath": "",
                             "metadataPath": f"{absent}/gpu_metadata.json"})
    assert [w.split(" ", 1)[0] for w in warnings] == ["procRoot", "metadataPath"]
    assert all("ProtectHome=yes" in w for w in warnings)
    # A tree made without GPU metadata: the file is absent on purpose, its directory is there.
    assert hidden_paths({"metadataPath": str(tmp_path / "gpu_metadata.json"),
                         "procRoot": str(tmp_path)}) == []


def test_a_sysfs_root_without_a_class_directory_is_blind(tmp_path: Path) -> None:
    assert sysfs_root_problem("/sys") == ""
    (tmp_path / "class").mkdir()
    assert sysfs_root_problem(str(tmp_path)) == ""  # no class/infiniband: a host without RDMA
    empty = tmp_path / "empty"
    empty.mkdir()
    assert "has no class directory" in sysfs_root_problem(str(empty))
