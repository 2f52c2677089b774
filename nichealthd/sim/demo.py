"""``nichealthd-sim demo``: the daemon on a simulated host, seen through ``nichealthctl``.

Everything is private and temporary: a sim tree, a dbus-daemon of its own (session bus), the
real ``nichealthd`` and ``nichealthctl`` as subprocesses. It shows the ports, pulls a cable,
and shows what the daemon reported — the README's first command.
"""

from __future__ import annotations

import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Optional

from . import mutate, tree

FAULT_DEVICE, FAULT_PORT = "mlx5_3", 1


def _ctl(env: dict[str, str], *args: str, check: bool = False) -> int:
    cmd = [sys.executable, "-m", "nichealthd.cli.ctl", "--bus", "session", *args]
    return subprocess.run(cmd, env=env, check=check).returncode


def _banner(text: str) -> None:
    print(f"\n$ {text}", flush=True)


def run_demo(profile: str = "dgx-h100", root: Optional[str] = None) -> int:
    """Run the demo; returns 0 when the daemon saw the fault, 1 otherwise."""
    with tempfile.TemporaryDirectory(prefix="nichealthd-demo-") as scratch:
        host = Path(root) if root else Path(scratch) / "host"
        manifest = tree.create(host, profile,
                               force=bool(root) and (host / "sim.json").exists())
        names = [d["name"] for d in manifest["devices"]]
        # mlx5_3, or the fourth device where there is none (the EFA hosts)
        fault = FAULT_DEVICE if FAULT_DEVICE in names or len(names) < 4 else names[3]
        print(f"simulated {profile} host in {host}")
        try:
            bus = subprocess.run(
                ["dbus-daemon", "--session", "--fork", "--print-address=1", "--print-pid=1"],
                capture_output=True, text=True, check=True)
        except (OSError, subprocess.CalledProcessError) as exc:
            print(f"nichealthd-sim demo: cannot start a private dbus-daemon ({exc}); "
                  "install the 'dbus' package", file=sys.stderr)
            return 1
        address, pid = bus.stdout.split()[:2]
        env = dict(os.environ, DBUS_SESSION_BUS_ADDRESS=address)
        env.pop("NOTIFY_SOCKET", None)
        daemon = subprocess.Popen(
            [sys.executable, "-m", "nichealthd.runtime.daemon",
             "--config", str(host / "nichealthd.toml"),
             "--dbus", "session", "--polling-interval", "500ms", "--log-level", "warning"],
            env=env)
        try:
            deadline = time.monotonic() + 20
            while subprocess.run(
                    [sys.executable, "-m", "nichealthd.cli.ctl", "--bus", "session", "status"],
                    env=env, capture_output=True).returncode != 0:
                if time.monotonic() > deadline or daemon.poll() is not None:
                    print("nichealthd-sim demo: the daemon did not come up", file=sys.stderr)
                    return 1
                time.sleep(0.2)
            _banner("nichealthctl show ports")
            _ctl(env, "show", "ports")
            _banner(f"nichealthd-sim uncable {host} {fault} {FAULT_PORT}   "
                    "# pull a cable")
            mutate.uncable(host, fault, FAULT_PORT)
            time.sleep(1.5)
            _banner("nichealthctl show ports")
            _ctl(env, "show", "ports")
            _banner("nichealthctl events -n 3 --wide")  # --wide: whole messages
            _ctl(env, "events", "-n", "3", "--wide")
            _banner("nichealthctl check")
            code = _ctl(env, "check")
            return 0 if code == 2 else 1
        finally:
            daemon.terminate()
            try:
                daemon.wait(10)
            except subprocess.TimeoutExpired:
                daemon.kill()
            os.kill(int(pid), 15)
