"""The README's first command: ``nichealthd-sim demo`` runs the daemon and nichealthctl."""

from __future__ import annotations

import shutil
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]


@pytest.mark.skipif(shutil.which("dbus-daemon") is None, reason="dbus-daemon not installed")
def test_demo_shows_ports_and_the_pulled_cable(tmp_path: Path) -> None:
    proc = subprocess.run([sys.executable, "-m", "nichealthd.sim", "demo",
                           "--root", str(tmp_path / "host")],
                          cwd=REPO, capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert proc.stdout.count("$ nichealthctl show ports") == 2
    # The tables before and after the pulled cable have the same columns.
    headers = [line for line in proc.stdout.splitlines() if line.startswith("PORT ")]
    assert len(headers) == 2 and headers[0].split() == headers[1].split(), headers
    assert "mlx5_3/1   IB    compute   DOWN    Polling" in proc.stdout
    assert "Port mlx5_3 port 1: state DOWN, phys_state Polling" in proc.stdout
    assert "NICHEALTH CRITICAL" in proc.stdout


@pytest.mark.skipif(shutil.which("dbus-daemon") is None, reason="dbus-daemon not installed")
def test_demo_on_an_aws_p4d_pulls_an_efa_interface(tmp_path: Path) -> None:
    """On p4d the ENA of each EFA shares its root bus, so its carrier is the EFA's."""
    proc = subprocess.run([sys.executable, "-m", "nichealthd.sim", "demo", "--profile", "p4d",
                           "--root", str(tmp_path / "host")],
                          cwd=REPO, capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert "EFA port rdmap160s27 port 1: netdev ens161" in proc.stdout
    assert "NICHEALTH CRITICAL" in proc.stdout
