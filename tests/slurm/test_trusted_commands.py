"""The config and the commands it names are obeyed only when nobody but root or the daemon's
own user can change them (sources/trust.py: sudo's rule, OpenSSH's StrictModes): refused with
the file and the fix, at start, at a reload (tests/daemon/test_trusted_config.py) and by
``nichealthctl config check``, which all load the config the same way."""

from __future__ import annotations

import grp
import os
import pwd
import stat
import subprocess
import sys
from pathlib import Path

import pytest

from nichealthd.core.config_errors import ConfigError
from nichealthd.sources import trust
from nichealthd.sources.config_file import load_config
from nichealthd.surfaces.slurm import command
from nichealthd.surfaces.slurm.settings import SlurmSettings

from ..harness import REPO

SLURM_ON = 'slurmDrain = true\nstateFile = "{state}"\n'


def config(tmp_path: Path, text: str = "", mode: int = 0o644) -> Path:
    path = tmp_path / "config.toml"
    path.write_text(SLURM_ON.format(state=tmp_path / "state.json") + text)
    path.chmod(mode)
    return path


def open_dir_program(tmp_path: Path) -> Path:
    """An executable in a directory everyone may write (as /tmp is, sticky or not)."""
    directory = tmp_path / "open"
    directory.mkdir()
    directory.chmod(0o777)
    program = directory / "scontrol"
    program.write_text("#!/bin/sh\nexit 0\n")
    program.chmod(0o755)
    return program


def refusal(path: Path) -> ConfigError:
    with pytest.raises(ConfigError) as caught:
        load_config(str(path))
    return caught.value


def test_a_config_writable_by_others_is_refused_with_the_fix(tmp_path: Path) -> None:
    path = config(tmp_path, mode=0o666)
    error = refusal(path)
    assert str(error) == (f"{path}: refused: the file is writable by others (mode 0666); it "
                          f"names the commands nichealthd runs, so whoever can write it "
                          f"chooses them: chmod go-w {path}")
    path.chmod(0o644)
    assert load_config(str(path)).settings(SlurmSettings).drain


def test_a_config_writable_by_a_shared_group_is_refused(tmp_path: Path) -> None:
    if os.geteuid() != 0:
        pytest.skip("giving a file to another group needs root")
    path = config(tmp_path, mode=0o664)
    os.chown(path, 0, 1)  # group daemon: other users have it
    assert "is writable by its group daemon (mode 0664)" in str(refusal(path))


def test_a_config_owned_by_another_user_is_refused(tmp_path: Path) -> None:
    if os.geteuid() != 0:
        pytest.skip("giving a file to another user needs root")
    path = config(tmp_path)
    os.chown(path, 54321, 54321)
    message = str(refusal(path))
    assert message.startswith(f"{path}: refused: the file is owned by uid 54321, not by "
                              f"root (uid 0)") and message.endswith(f"chown root {path}")


def test_a_command_in_a_writable_place_is_refused_naming_the_key(tmp_path: Path) -> None:
    program = open_dir_program(tmp_path)
    path = config(tmp_path, f'slurmDrainCommand = "{program} update NodeName={{node}}"\n')
    error = refusal(path)
    assert error.key == "slurmDrainCommand" and error.line == 3
    assert str(error).startswith(f"{path}:3: slurmDrainCommand: refused: ")
    assert "writable by others" in str(error) and "chooses what nichealthd runs" in str(error)
    # The same command with slurmDrain off is never run, so not refused.
    path.write_text(path.read_text().replace("slurmDrain = true", "slurmDrain = false"))
    assert not load_config(str(path)).settings(SlurmSettings).drain


def test_a_writable_program_is_refused(tmp_path: Path) -> None:
    program = open_dir_program(tmp_path)
    assert trust.command_problem(str(program), trust.owners()) is not None
    program.chmod(0o777)
    info = program.stat()
    assert trust.problem(info, trust.owners()) == "is writable by others (mode 0777)"
    assert trust.fix(info, str(program), trust.owners()) == f"chmod go-w {program}"


def test_a_relative_command_is_refused(tmp_path: Path) -> None:
    path = config(tmp_path, 'slurmReasonCommand = "bin/sinfo -n {node}"\n')
    assert "bin/sinfo is not an absolute path" in str(refusal(path))


def decoy_in_path(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, name: str) -> Path:
    """An executable ``name`` in a directory put first in PATH."""
    decoy = tmp_path / name
    decoy.write_text("#!/bin/sh\necho decoy\n")
    decoy.chmod(0o755)
    monkeypatch.setenv("PATH", f"{tmp_path}:{os.environ.get('PATH', '')}")
    return decoy


def test_a_bare_name_is_found_in_the_trusted_directories_never_in_path(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    decoy_in_path(tmp_path, monkeypatch, "sh")
    found = trust.resolve("sh")
    assert os.path.dirname(found) in trust.TRUSTED_PATH
    assert command.run(("sh", "-c", "echo real"), 30.0).output == "real\n"
    path = config(tmp_path, 'slurmResumeCommand = "sh -c true"\n')
    assert load_config(str(path)).settings(SlurmSettings).resume_command == ("sh", "-c", "true")


def test_a_bare_name_in_no_trusted_directory_is_missing_even_if_path_has_it(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    decoy = decoy_in_path(tmp_path, monkeypatch, "nichealthd-no-such-scontrol")
    outcome = command.run((decoy.name, "update"), 30.0)
    assert outcome.error.startswith(f"{decoy.name} not found: install Slurm's client commands")
    assert outcome.output == "" and not outcome.retry


def test_a_missing_program_in_a_trusted_place_is_not_refused(tmp_path: Path) -> None:
    """A host without Slurm's client commands yet: the consumer says what to install."""
    path = config(tmp_path, 'slurmReasonCommand = "/nonexistent/sinfo -n {node}"\n')
    assert load_config(str(path)).settings(SlurmSettings).reason_command[0] == "/nonexistent/sinfo"


def test_a_program_made_untrusted_after_the_check_is_refused_when_run(tmp_path: Path) -> None:
    program = open_dir_program(tmp_path)
    outcome = command.run((str(program), "update"), 30.0)
    assert outcome.error.startswith(f"refused to run {program}: ") and not outcome.retry


def test_config_check_says_the_same(tmp_path: Path) -> None:
    path = config(tmp_path, mode=0o666)
    done = subprocess.run([sys.executable, "-m", "nichealthd.cli.ctl", "config", "check",
                           str(path)], cwd=REPO, capture_output=True, text=True, timeout=60)
    assert done.returncode == 2
    assert done.stderr.strip() == str(refusal(path))
    path.chmod(0o644)
    program = open_dir_program(tmp_path)
    path.write_text(path.read_text() + f'slurmResumeCommand = "{program}"\n')
    done = subprocess.run([sys.executable, "-m", "nichealthd.cli.ctl", "config", "check",
                           str(path)], cwd=REPO, capture_output=True, text=True, timeout=60)
    assert done.returncode == 2 and "slurmResumeCommand: refused: " in done.stderr
    assert stat.S_IMODE(path.stat().st_mode) == 0o644


def test_writable_by_the_owners_private_group_is_accepted(tmp_path: Path) -> None:
    """``umask 002`` with a group of one's own (Debian's OpenSSH rule): nobody else is in
    the group, so nobody else can write the file."""
    if os.geteuid() != 0:
        pytest.skip("giving a file to root's group needs root")
    others = [u.pw_name for u in pwd.getpwall() if u.pw_gid == 0 and u.pw_uid != 0]
    if others or grp.getgrgid(0).gr_mem not in ([], ["root"]):
        pytest.skip("root's group has other members on this host")
    path = config(tmp_path, mode=0o664)
    os.chown(path, 0, 0)
    assert load_config(str(path)).settings(SlurmSettings).drain
