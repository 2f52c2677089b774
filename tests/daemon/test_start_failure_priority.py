"""Why the daemon cannot start is logged at ERROR priority.

Under systemd (JOURNAL_STREAM set) the line carries journald's ``<3>`` prefix, so the reason is
in ``systemctl status`` and ``journalctl -p warning``; printed plainly it was an info entry.
On a terminal the line says ERROR.
"""

from __future__ import annotations

import os
import subprocess
import sys
from typing import Callable

import pytest

from nichealthd.runtime.daemon import EXIT_STARTUP, EXIT_USAGE

from .conftest import REPO, SimHost


def start(host: SimHost, *args: str, journal: bool) -> subprocess.CompletedProcess[str]:
    env = {k: v for k, v in os.environ.items() if k not in ("INVOCATION_ID", "JOURNAL_STREAM")}
    if journal:
        env["JOURNAL_STREAM"] = "8:12345"  # what systemd sets when stderr is the journal
    return subprocess.run(
        [sys.executable, "-m", "nichealthd.runtime.daemon", "--config", str(host.config), *args],
        cwd=REPO, env=env, capture_output=True, text=True, timeout=60)


def failure_lines(run: subprocess.CompletedProcess[str]) -> list[str]:
    return [line for line in run.stderr.splitlines() if "nichealthd: " in line]


@pytest.mark.parametrize("journal", [True, False])
def test_missing_metadata_file_is_logged_at_error(sim_host: Callable[..., SimHost],
                                                  journal: bool) -> None:
    host = sim_host()
    (host.root / "gpu_metadata.json").unlink()
    # The metadata file is required with topologySource = metadata (link-state-detection §12.2).
    run = start(host, "--topology-source", "metadata", journal=journal)
    assert run.returncode == EXIT_STARTUP
    lines = failure_lines(run)
    assert len(lines) == 1 and "gpu_metadata.json does not exist" in lines[0], run.stderr
    if journal:
        assert lines[0].startswith("<3>nichealthd: cannot start: "), lines[0]
    else:
        assert " ERROR " in lines[0] and "nichealthd: cannot start: " in lines[0], lines[0]


def test_unusable_state_directory_is_logged_at_error(sim_host: Callable[..., SimHost]) -> None:
    host = sim_host()
    blocker = host.root / "not-a-directory"
    blocker.write_text("")  # works as root too: no directory can be made below a file
    run = start(host, "--state-file", str(blocker / "state.json"), journal=True)
    assert run.returncode == EXIT_STARTUP
    lines = failure_lines(run)
    assert len(lines) == 1 and lines[0].startswith("<3>nichealthd: cannot start: "), run.stderr
    assert "cannot create the state directory" in lines[0]


def test_invalid_config_and_bad_flag_are_logged_at_error(
        sim_host: Callable[..., SimHost]) -> None:
    host = sim_host()
    host.config.write_text(host.config.read_text() + 'pollingInterval = "soon"\n')
    run = start(host, journal=True)
    assert run.returncode == EXIT_USAGE
    lines = failure_lines(run)
    assert len(lines) == 1, run.stderr
    assert lines[0].startswith("<3>nichealthd: invalid configuration: ")
    assert "pollingInterval" in lines[0] and str(host.config) in lines[0]
    bad = start(host, "--no-such-flag", journal=True)
    assert bad.returncode == EXIT_USAGE
    assert "<3>nichealthd: invalid command line: " in bad.stderr, bad.stderr
