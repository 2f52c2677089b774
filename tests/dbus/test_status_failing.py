"""Failing commits over the real bus: while commits fail, ``nichealthctl status`` (and
GetStatus's ``poll_error``) say what fails and since when; the field empties once they work.

(Its own module: tests/dbus/test_ctl.py is being reworked on other branches.)
"""

from __future__ import annotations

import json
from typing import Any

from dbushelpers import ctl

from nichealthd.sim import mutate
from tests.harness import wait_until


def test_status_says_commits_fail_while_the_state_path_is_a_directory(daemon: Any) -> None:
    """``nichealthctl status`` (and GetStatus's ``poll_error``) say that
    commits fail, and why, until they work again."""
    state = daemon.root / "var/lib/nichealthd/state.json"
    state.unlink()
    state.mkdir()  # the next commit's rename onto it fails with EISDIR
    try:
        mutate.counter(daemon.root, "mlx5_0", 1, "link_downed", add=1)  # something to commit
        wait_until(lambda: bool(json.loads(ctl("status", "--json").stdout).get("poll_error")),
                   "poll_error in nichealthctl status --json")
        data = json.loads(ctl("status", "--json").stdout)
        assert "commits failing since" in data["poll_error"], data
        assert "Is a directory" in data["poll_error"], data
        out = ctl("status")
        assert out.returncode == 0, out.stderr
        failing = [line for line in out.stdout.splitlines() if line.strip().startswith("failing")]
        assert len(failing) == 1 and "commits failing" in failing[0], out.stdout
    finally:
        state.rmdir()
    wait_until(lambda: not json.loads(ctl("status", "--json").stdout).get("poll_error"),
               "poll_error emptied once the state is writable")
    assert "failing" not in ctl("status").stdout
