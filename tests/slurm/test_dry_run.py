"""slurmDrain with slurmDryRun through the real daemon on a simulated host, on any machine
(no Slurm needed: a dry run runs nothing), switched on by a reload: the fault and its
recovery are logged as the commands that would run, and ``nichealthctl status`` (varlink)
and ``/metrics`` say so."""

from __future__ import annotations

import json
import shutil
import signal
import subprocess
import sys
from pathlib import Path
from typing import Any

from nichealthd.cli.format import Style, status_lines

from .. import simtrees
from ..harness import REPO, ctl_output
from ..metrics.conftest import RunningDaemon, parse, value

REASON = "nichealthd: mlx5_0 1: state DOWN, phys_state Polling - no connectivity"


def sim(*args: str) -> None:
    subprocess.run([sys.executable, "-m", "nichealthd.sim", *args], cwd=REPO, check=True,
                   capture_output=True, timeout=60)


def status(sock: Path) -> dict[str, Any]:
    return json.loads(ctl_output(sock, "--json", "status"))  # type: ignore[no-any-return]


def test_dry_run_logs_and_reports_what_it_would_run() -> None:
    sim_root = simtrees.take()
    sock = sim_root.parent / "nh.sock"
    config = sim_root / "nichealthd.toml"
    config.write_text(config.read_text().replace('varlinkSocket = ""', f'varlinkSocket = "{sock}"'))
    running = RunningDaemon(sim_root)
    try:
        assert status(sock)["slurm_mode"] == "off"
        # Switched on by a reload (SIGHUP), as an operator trying it on a running host would.
        config.write_text(config.read_text()
                          + "slurmDrain = true\nslurmResume = true\nslurmDryRun = true\n")
        running.proc.send_signal(signal.SIGHUP)
        running.wait_for(lambda: status(sock)["slurm_mode"] == "dry-run", what="dry-run mode")
        check(running, sim_root, sock)
    finally:
        running.stop()


def check(running: RunningDaemon, sim_root: Path, sock: Path) -> None:
    sim("uncable", str(sim_root), "mlx5_0", "1")

    def actions(result: str, action: str) -> float:
        key = ("nichealthd_slurm_actions_total",
               frozenset({"action": action, "result": result}.items()))
        return parse(running.text()).get(key, 0.0)
    running.wait_for(lambda: actions("dry_run", "drain") == 1, what="a dry-run drain")
    now = status(sock)
    assert now["slurm_drained_for"] == ["InfiniBandStateCheck mlx5_0/1 port_state"]
    assert now["slurm_last_action"].startswith("drain dry_run at ")
    assert now["slurm_last_action"].endswith(
        f"would run: scontrol update NodeName=dgx-h100-sim State=DRAIN Reason={REASON}")
    assert value(parse(running.text()), "nichealthd_slurm_drained") == 1
    promtool = shutil.which("promtool")  # the Slurm series lint clean, as every other does
    if promtool:  # (tests/metrics/test_promtool.py; CI installs it)
        done = subprocess.run([promtool, "check", "metrics"], input=running.text(),
                              capture_output=True, text=True, timeout=60)
        assert done.returncode == 0 and not (done.stdout + done.stderr).strip(), done.stdout
    sim("port", str(sim_root), "mlx5_0", "1", "--state", "ACTIVE", "--phys-state", "LinkUp",
        "--operstate", "up")
    running.wait_for(lambda: actions("dry_run", "resume") == 1, what="a dry-run resume")
    after = status(sock)
    assert after["slurm_drained_for"] == [] and after["slurm_last_error"] == ""
    assert value(parse(running.text()), "nichealthd_slurm_drained") == 0
    log = (sim_root / "daemon.log").read_text()
    assert "Slurm dry run: would run scontrol update NodeName=dgx-h100-sim State=RESUME" in log
    text = "\n".join(status_lines(now, {}, Style(False), None, 10_000))
    assert "slurm      dry-run; drained for 1: InfiniBandStateCheck mlx5_0/1 port_state" in text
    assert "last action: drain dry_run at" in text
