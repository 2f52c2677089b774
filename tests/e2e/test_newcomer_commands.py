"""The README's "Try it" commands, as tests/e2e/newcomer.py reads them for CI's rehearsal in
fresh containers (which .ci/run runs as a stage of its own): ``./run demo`` and
``./run tests``, and what ``./run`` says when asked for anything else."""

from __future__ import annotations

import os
import subprocess

import newcomer
from nspawn import FLAVOURS, NEWCOMER_INCLUDE, is_newcomer

REPO = newcomer.HERE.parent.parent


def test_the_readme_opens_with_the_two_commands() -> None:
    assert newcomer.readme_commands(REPO / "README.md") == ["./run demo", "./run tests"]


def test_the_newcomer_containers_have_only_what_the_readme_asks_for() -> None:
    readme = (REPO / "README.md").read_text()
    try_it = readme[readme.index("## Try it"):readme.index("\n## ", readme.index("## Try it"))]
    for package in ("python3", "python3-venv", "dbus"):
        assert f"`{package}`" in try_it and package in NEWCOMER_INCLUDE
    assert sorted(NEWCOMER_INCLUDE) == ["dbus", "git", "python3", "python3-venv"]
    assert {f for f in FLAVOURS if is_newcomer(f)} == set(newcomer.FLAVOURS)


def test_run_without_a_known_command_says_how_and_touches_nothing(tmp_path) -> None:
    for args in ([], ["bogus"]):
        done = subprocess.run([str(REPO / "run"), *args], capture_output=True, text=True,
                              cwd=tmp_path, timeout=30)
        assert done.returncode == 2 and "usage: ./run demo" in done.stderr, done
    assert os.access(REPO / "run", os.X_OK)


def test_each_command_runs_literally_as_the_unprivileged_user() -> None:
    text = newcomer.script(["./run demo", "./run tests"])
    for command in ("./run demo", "./run tests"):
        assert f"--reuid={newcomer.USER} --regid={newcomer.USER} --init-groups env -i " \
               f"HOME=/home/{newcomer.USER} " in text
        assert f"bash -c 'cd ~/nichealthd && {command}'" in text
    assert "PIP_CERT" not in text  # only where the host's pip names a CA bundle
    assert f"PIP_CERT={newcomer.CA_INSIDE}" in newcomer.script(["./run demo"], ca=True)
