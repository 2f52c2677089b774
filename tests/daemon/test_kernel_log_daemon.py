"""Kernel log: the real daemon (--once) reads a sim host's journal written by the sim."""

from __future__ import annotations

import json
import subprocess
import sys
from typing import Callable

import pytest

from .conftest import SimHost

pytestmark = pytest.mark.usefixtures("journal_reader")


def sim(*args: str) -> None:
    subprocess.run([sys.executable, "-m", "nichealthd.sim", *args], check=True,
                   capture_output=True, text=True)


def test_driver_faults_from_the_journal_once_each(sim_host: Callable[..., SimHost]) -> None:
    host = sim_host()
    with host.config.open("a") as fh:
        fh.write(f'\nkernelLogPath = "{host.root / "journal"}"\n')
    assert host.once().returncode == 0  # the baseline
    sim("kernel-log", str(host.root), "mlx5_0", "health_poll_failed")
    sim("kernel-log", str(host.root), "mlx5_0", "access_reg_failed", "--count", "50")
    sim("kernel-log", str(host.root), "mlx5_0", "unrelated")
    run = host.once()
    assert run.returncode == 0, run.stderr
    fatal = run.by_code("health_poll_failed")
    assert len(fatal) == 1 and fatal[0]["isFatal"]
    assert fatal[0]["checkName"] == "SysLogsNICDriverError"
    assert fatal[0]["recommendedAction"] == "REPLACE_VM"
    assert "poll_health" in fatal[0]["metadata"]["kernel_log_line"]
    assert len(run.by_code("access_reg_failed")) == 1  # 50 repeats in one 24 h window
    assert len(run.events) == 2
    again = host.once()  # a restart re-reads nothing
    assert again.returncode == 0 and again.events == []


def corrupt_cursor(host: SimHost, how: str) -> str:
    """Rewrite the committed cursor of the state file as a broken disk or a restored backup
    may leave it: ``future`` (this boot, a sequence number and time past the journal's end)
    or ``rejected`` (this boot's ID, fields the journal refuses)."""
    state = json.loads(host.state_file.read_text())
    cursor = state["kernel_log"]["cursor"]
    parts = dict(p.split("=", 1) for p in cursor.split(";"))
    if how == "future":
        parts["i"] = f"{int(parts['i'], 16) + 10**6:x}"
        parts["m"] = f"{int(parts['m'], 16) + 10**12:x}"
        bad = ";".join(f"{k}={v}" for k, v in parts.items())
    else:
        bad = f"s=not-a-seqnum-id;i=zz;b={parts['b']};m=?;t=?;x=?"
    state["kernel_log"]["cursor"] = bad
    host.state_file.write_text(json.dumps(state))
    return bad


@pytest.mark.parametrize("how", ["future", "rejected"])
def test_a_corrupt_cursor_heals_and_the_next_new_line_is_reported(
        sim_host: Callable[..., SimHost], how: str) -> None:
    """Before: a future cursor read no kernel line ever again, silently; a rejected one
    logged "Invalid cursor; trying again each poll" at every start, and read nothing."""
    host = sim_host()
    with host.config.open("a") as fh:
        fh.write(f'\nkernelLogPath = "{host.root / "journal"}"\n')
    sim("kernel-log", str(host.root), "mlx5_0", "unrelated")
    assert host.once().returncode == 0  # the baseline reads the line: a cursor is committed
    corrupt_cursor(host, how)
    healed = host.once()
    assert healed.returncode == 0 and healed.events == [], healed.stderr[-3000:]
    [warning] = [line for line in healed.stderr.splitlines() if "cannot be followed" in line]
    assert "resuming at the end of the journal: 1 kernel line(s) of this boot" in warning
    sim("kernel-log", str(host.root), "mlx5_0", "health_poll_failed")
    run = host.once()
    assert run.returncode == 0, run.stderr[-3000:]
    assert [(e["checkName"], e["isFatal"]) for e in run.by_code("health_poll_failed")] == [
        ("SysLogsNICDriverError", True)]
    assert "cannot be followed" not in run.stderr  # the healed cursor was committed
