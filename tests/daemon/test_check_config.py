"""``nichealthd --check-config``: what the unit's ExecReload= runs before the reload signal
(tests/test_systemd_unit.py holds the unit to it; tests/e2e/test_e2e_daemon.py runs it under
real systemd). It validates what a reload would apply — the file with the flags, and the
topology it chooses — and exits 2 (invalid) or 1 (unusable) with the reason at error
priority, so that ``systemctl reload`` fails and says why instead of exiting 0."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

from .conftest import REPO


def check(config: Path, *flags: str, journal: bool = False) -> subprocess.CompletedProcess[str]:
    env = {"PATH": "/usr/bin:/bin", **({"JOURNAL_STREAM": "8:1"} if journal else {})}
    return subprocess.run([sys.executable, "-m", "nichealthd.runtime.daemon", "--config",
                           str(config), *flags, "--check-config"], cwd=REPO, env=env,
                          capture_output=True, text=True, timeout=60)


def test_a_valid_config_is_ok_and_nothing_is_started(tmp_path: Path) -> None:
    config = tmp_path / "config.toml"
    config.write_text('pollingInterval = "2s"\nstateFile = "/nonexistent/dir/state.json"\n')
    done = check(config)
    assert (done.returncode, done.stdout) == (0, f"{config}: OK\n"), done.stderr
    assert not Path("/nonexistent/dir").exists()  # nothing prepared, nothing polled
    assert check(tmp_path / "absent.toml").returncode == 0  # built-in defaults, as at start


def test_an_invalid_config_exits_2_naming_file_line_and_key(tmp_path: Path) -> None:
    config = tmp_path / "config.toml"
    config.write_text('pollingInterval = "1s"\npolingInterval = "2s"\n')
    done = check(config, journal=True)
    assert done.returncode == 2 and done.stdout == ""
    lines = done.stderr.splitlines()
    # At error priority (<3>): in `systemctl status` and `journalctl -p err`.
    assert lines[0].startswith(f"<3>nichealthd: invalid configuration: {config}:2: "
                               f"polingInterval: "), lines
    assert "did you mean" in lines[0]
    assert lines[-1] == (f"<3>nichealthd: {config} is not valid: a reload keeps the running "
                         f"configuration")
    # A flag is validated with the file, as the daemon applies both.
    config.write_text("")
    assert check(config, "--polling-interval", "soon").returncode == 2


def test_a_topology_a_reload_could_not_choose_exits_1(tmp_path: Path) -> None:
    config = tmp_path / "config.toml"
    config.write_text(f'topologySource = "metadata"\nmetadataPath = "{tmp_path}/none.json"\n')
    done = check(config)
    assert done.returncode == 1 and "configuration not usable: " in done.stderr, done.stderr
    assert "none.json" in done.stderr
