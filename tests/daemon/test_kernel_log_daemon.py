"""#17 from outside: the real daemon (--once) reads a sim host's journal written by the sim."""

from __future__ import annotations

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
