"""Issue 24: a start-up failure under systemd says how to recover, and a path under /tmp that the
service cannot see (PrivateTmp=yes) is named as such instead of only "does not exist"."""

from __future__ import annotations

import os
import subprocess
import sys
import uuid
from typing import Callable

from nichealthd.runtime.daemon import EXIT_STARTUP

from .conftest import REPO, SimHost


def start(host: SimHost, *args: str, **env: str) -> subprocess.CompletedProcess[str]:
    """The long-running daemon (no --once), as systemd starts it when env has INVOCATION_ID."""
    full = {k: v for k, v in os.environ.items() if k != "INVOCATION_ID"}
    full.update(env)
    return subprocess.run(
        [sys.executable, "-m", "nichealthd.runtime.daemon", "--config", str(host.config), *args],
        cwd=REPO, env=full, capture_output=True, text=True, timeout=60)


def test_under_systemd_a_startup_failure_says_to_fix_and_restart(
        sim_host: Callable[..., SimHost]) -> None:
    host = sim_host()
    (host.root / "gpu_metadata.json").unlink()
    run = start(host, "--topology-source", "metadata", INVOCATION_ID="0123456789abcdef")
    assert run.returncode == EXIT_STARTUP
    assert "gpu_metadata.json does not exist" in run.stderr
    assert "fix it, then run `systemctl restart nichealthd`" in run.stderr
    assert "Traceback" not in run.stderr and run.stderr.count("\n") == 1
    outside = start(host, "--topology-source", "metadata")  # not under systemd: no systemctl hint
    assert outside.returncode == EXIT_STARTUP and "systemctl" not in outside.stderr


def test_a_missing_path_under_tmp_hints_at_private_tmp(
        sim_host: Callable[..., SimHost]) -> None:
    host = sim_host()
    absent = f"/tmp/nichealthd-absent-{uuid.uuid4().hex}/gpu_metadata.json"
    run = start(host, "--topology-source", "metadata", "--metadata-path", absent)
    assert run.returncode == EXIT_STARTUP
    assert f"{absent} does not exist" in run.stderr
    assert "PrivateTmp=yes" in run.stderr and "/srv/nichealthd-sim" in run.stderr
    # A path elsewhere that does not exist gets no such hint.
    elsewhere = start(host, "--topology-source", "metadata", "--metadata-path",
                      f"/nonexistent-{uuid.uuid4().hex}/gpu.json")
    assert elsewhere.returncode == EXIT_STARTUP and "PrivateTmp" not in elsewhere.stderr
