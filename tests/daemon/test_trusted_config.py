"""A config others may write is refused at start (exit 2) and at a reload (the running
configuration stays), with the file and the fix; so is a Slurm command in a place others
may write (sources/trust.py)."""

from __future__ import annotations

import signal
import subprocess
import sys
from pathlib import Path
from typing import Callable, Iterator

import pytest

from ..harness import NotifySocket
from ..slurm.test_trusted_commands import open_dir_program
from .conftest import REPO, SimHost
from .test_service import Daemon


@pytest.fixture
def notify(tmp_path: Path) -> Iterator[NotifySocket]:
    sock = NotifySocket(tmp_path / "notify.sock")
    yield sock
    sock.close()


def test_a_config_writable_by_others_stops_the_start(sim_host: Callable[..., SimHost]) -> None:
    host = sim_host()
    host.config.chmod(0o666)
    try:
        done = subprocess.run([sys.executable, "-m", "nichealthd.runtime.daemon", "--config",
                               str(host.config), "--once"], cwd=REPO, capture_output=True,
                              text=True, timeout=120)
    finally:
        host.config.chmod(0o644)
    assert done.returncode == 2, done.stderr
    assert (f"{host.config}: refused: the file is writable by others (mode 0666)"
            in done.stderr) and f"chmod go-w {host.config}" in done.stderr


def test_a_reload_of_an_untrusted_config_or_command_is_rejected(
        sim_host: Callable[..., SimHost], notify: NotifySocket, tmp_path: Path) -> None:
    host = sim_host()
    original = host.config.read_text()
    program = open_dir_program(tmp_path)
    daemon = Daemon(host, notify)
    try:
        notify.wait_for("READY=1")
        host.config.chmod(0o666)
        daemon.proc.send_signal(signal.SIGHUP)
        notify.wait_for("RELOADING=1")
        status = notify.wait_for("READY=1")
        assert (f"reload rejected: {host.config}: refused: the file is writable by others "
                f"(mode 0666)") in status, status
        host.config.chmod(0o644)
        host.config.write_text(original + f'slurmDrain = true\nslurmDrainCommand = '
                               f'"{program} update NodeName={{node}} State=DRAIN"\n')
        daemon.proc.send_signal(signal.SIGHUP)
        notify.wait_for("RELOADING=1")
        status = notify.wait_for("READY=1")
        assert f"reload rejected: {host.config}:" in status and \
            "slurmDrainCommand: refused: " in status, status
        host.config.write_text(original)
        daemon.proc.send_signal(signal.SIGHUP)
        notify.wait_for("RELOADING=1")
        assert "reload rejected" not in notify.wait_for("READY=1")
    finally:
        host.config.chmod(0o644)
        host.config.write_text(original)
        code, err = daemon.stop()
    assert code == 0, err
    assert err.count("reload rejected, keeping the running configuration") == 2
