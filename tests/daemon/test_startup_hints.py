"""A start-up failure under systemd says how to recover, and a path under /tmp that the
service cannot see (PrivateTmp=yes) is named as such instead of only "does not exist"; so is
one under /home or /root (ProtectHome=yes), and a sysfs root that shows nothing at all makes
the host degraded, not healthy."""

from __future__ import annotations

import os
import subprocess
import sys
import uuid
from typing import Callable

from nichealthd.runtime.daemon import EXIT_STARTUP

from ..harness import NotifySocket, ctl
from .conftest import REPO, SimHost
from .test_service import Daemon, notify  # noqa: F401 (fixture)


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


def test_a_sim_tree_the_sandbox_hides_is_named_at_start_and_is_not_healthy(
        sim_host: Callable[..., SimHost], notify: NotifySocket) -> None:  # noqa: F811
    """The README's trap: a tree under /tmp given to the installed service, which sees an empty
    private /tmp. Each configured path it cannot see is named at start with the setting and
    what to do; the host is DEGRADED with the reason (``check`` 1), not OK / HEALTHY."""
    host = sim_host()
    hidden = f"/tmp/nichealthd-absent-{uuid.uuid4().hex}"
    socket = host.root.parent / "varlink.sock"
    daemon = Daemon(host, notify, "--sysfs-root", f"{hidden}/sys", "--proc-root",
                    f"{hidden}/proc", "--metadata-path", f"{hidden}/gpu_metadata.json",
                    "--varlink-socket", str(socket))
    try:
        ready = notify.wait_for("READY=1")
        assert f"no ports monitored (sysfs root {hidden}/sys has no class directory" in ready
        assert "PrivateTmp=yes" in ready and "point sysfsRoot there" in ready
        check = ctl(socket, "check")
        assert check.returncode == 1, check.stdout + check.stderr
        assert check.stdout.startswith("NICHEALTH WARNING") and "PrivateTmp=yes" in check.stdout
    finally:
        code, err = daemon.stop()
    assert code == 0, err
    for key in ("procRoot", "metadataPath"):
        line = next(x for x in err.splitlines() if f"WARNING nichealthd: {key} {hidden}" in x)
        assert "PrivateTmp=yes" in line and f"point {key} there" in line, line
    assert "InfiniBand/RoCE devices found" not in err.split("ready:")[1].splitlines()[0]


def test_a_tree_under_home_names_protect_home(sim_host: Callable[..., SimHost]) -> None:
    host = sim_host()
    hidden = f"/home/nichealthd-absent-{uuid.uuid4().hex}"
    run = start(host, "--once", "--sysfs-root", f"{hidden}/sys", "--proc-root",
                f"{hidden}/proc")
    assert run.returncode == 0, run.stderr
    assert f"procRoot {hidden}/proc" in run.stderr
    assert f"sysfs root {hidden}/sys has no class directory" in run.stderr
    assert run.stderr.count("ProtectHome=yes") == 2 and "PrivateTmp" not in run.stderr
