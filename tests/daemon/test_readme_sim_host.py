"""The README's recipe for the installed service on a simulated host, as written, without
the service: its commands (read from README.md) build the host and copy its keys into a
config, then the real daemon (``--once``) runs on that config with what the service adds
(its own state file, no D-Bus, no sockets). Everything the checks read comes through the
copied keys: a module's Rx power falling (the optics check, ``ethtoolPath``), the pulled
cable and the one plugged back. The Debian containers of tests/e2e/test_e2e_deb.py run the
same recipe under the real service."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

from ..readme import SIM_HOST, recipe

SIM = "/srv/simhost"
CONFIG = "/etc/nichealthd/config.toml"
# What only the service has: its systemctl, and the client of its running daemon.
SERVICE_ONLY = ("systemctl ", "sleep ", "nichealthctl events")


def shell(command: str, root: Path, config: Path) -> str:
    """One README command on this tree and config, in this interpreter's environment."""
    command = command.replace(SIM, str(root)).replace(CONFIG, str(config))
    env = {**os.environ, "PATH": f"{Path(sys.executable).parent}:{os.environ['PATH']}"}
    proc = subprocess.run(command, shell=True, env=env, capture_output=True, text=True,
                          timeout=120)
    assert proc.returncode == 0, (command, proc.stdout, proc.stderr)
    return proc.stdout


def run_recipe_step(command: str, root: Path, config: Path) -> None:
    for part in command.split(" && "):
        if not part.startswith(SERVICE_ONLY):
            shell(part, root, config)


def once(config: Path, tmp: Path) -> list[dict[str, Any]]:
    """One poll of the daemon as the service runs it on ``config``; its new events."""
    log = tmp / "events.jsonl"
    seen = len(log.read_text().splitlines()) if log.exists() else 0
    proc = subprocess.run(
        [sys.executable, "-m", "nichealthd.runtime.daemon", "--config", str(config), "--once",
         "--state-file", str(tmp / "state/state.json"), "--event-log", str(log),
         "--dbus", "none", "--metrics-listen", "", "--varlink-socket", "",
         "--platform-connector-socket", ""], capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stderr
    return [json.loads(line) for line in log.read_text().splitlines()[seen:]]


def test_the_readme_recipe_gives_the_service_every_host_key(tmp_path: Path) -> None:
    commands = recipe(SIM_HOST)
    assert [c.split()[:2] for c in commands] == [
        ["nichealthd-sim", "create"], ["grep", "-E"], ["nichealthctl", "config"],
        ["nichealthd-sim", "uncable"], ["nichealthd-sim", "recable"]], commands
    root, config = tmp_path / "simhost", tmp_path / "config.toml"
    for command in commands[:3]:  # build, copy the host keys, check the config
        run_recipe_step(command, root, config)
    written = (root / "nichealthd.toml").read_text()
    copied = config.read_text()
    # Each key that points the daemon at the simulated host is in the service's config; the
    # others are the hand-run daemon's (its state, log, sockets), which the service has.
    host_keys = {line.split(" = ")[0] for line in written.splitlines()
                 if f'"{root}/' in line and "var/lib" not in line and "events" not in line}
    assert host_keys == {"sysfsRoot", "procRoot", "ethtoolPath", "metadataPath"}, written
    assert {line.split(" = ")[0] for line in copied.splitlines()} == host_keys | {"nodeName"}

    assert once(config, tmp_path)  # the baselines
    # The optics check reads the simulated modules through ethtoolPath.
    shell(f"nichealthd-sim set-optics {root} mlx5_1 1 --rx-power -11", root, config)
    events = once(config, tmp_path)
    assert [(e["errorCode"], e["entitiesImpacted"][0]["entityValue"]) for e in events] == [
        (["optics_rx_power"], "mlx5_1")], events

    run_recipe_step(commands[3], root, config)  # the cable pulled
    pulled = once(config, tmp_path)
    assert [(e["isFatal"], e["errorCode"], e["entitiesImpacted"][0]["entityValue"])
            for e in pulled] == [(True, ["port_state"], "mlx5_0")], pulled
    run_recipe_step(commands[4], root, config)  # and plugged back
    back = once(config, tmp_path)
    assert [(e["isHealthy"], e["errorCode"], e["entitiesImpacted"][0]["entityValue"])
            for e in back] == [(True, ["port_state"], "mlx5_0")], back
