#!/usr/bin/env python3
"""D-Bus flood: what 20 hostile local clients x 500 calls do to nichealthd.

Starts a private dbus-daemon (the test bus config, with the project's policy), builds a
``nichealthd-sim`` tree, runs nichealthd on it (``--dbus system``, polling every 100 ms,
metrics on a free localhost port) and, after a quiet window, starts ``--clients`` client
processes (as nobody when possible) that each send ``--calls`` calls, ``--concurrency`` in
flight, cycling through every read-only member. Prints the poll rate before, during and
after, the share of /healthz samples that said 200, the daemon's RSS and the calls/s it
answered. The poll rate and /healthz must not depend on the bus load. Run from the repo root:

    python bench/dbus_flood.py [--profile dgx-h100 | --devices 128] [--clients 20]
"""

from __future__ import annotations

import argparse
import os
import shutil
import socket
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path[:0] = [str(REPO), str(REPO / "tests" / "dbus")]

from floodrun import get, run_flood  # noqa: E402
from testbus import start_bus  # noqa: E402

from nichealthd.sim import tree  # noqa: E402


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--profile", default="dgx-h100")
    parser.add_argument("--devices", type=int, default=0,
                        help="a synthetic host of N devices instead of --profile")
    parser.add_argument("--clients", type=int, default=20)
    parser.add_argument("--calls", type=int, default=500)
    parser.add_argument("--concurrency", type=int, default=10)
    parser.add_argument("--interval", default="100ms")
    args = parser.parse_args()
    if shutil.which("dbus-daemon") is None:
        print("dbus-daemon is required", file=sys.stderr)
        return 1
    work = Path(tempfile.mkdtemp(prefix="nichealthd-bench-"))
    bus = start_bus()
    root = work / "host"
    if args.devices:
        tree.create(root, "synthetic", devices=args.devices)
    else:
        tree.create(root, args.profile)
    port = free_port()
    base = f"http://127.0.0.1:{port}"
    log_path = work / "daemon.log"
    log = open(log_path, "wb")  # noqa: SIM115
    daemon = subprocess.Popen(
        [sys.executable, "-m", "nichealthd.runtime.daemon",
         "--config", str(root / "nichealthd.toml"),
         "--dbus", "system", "--polling-interval", args.interval, "--metrics-listen",
         f"127.0.0.1:{port}", "--event-log", ""],
        cwd=REPO, env=dict(os.environ, PYTHONPATH=str(REPO), DBUS_SYSTEM_BUS_ADDRESS=bus.address),
        stdout=log, stderr=subprocess.STDOUT)
    try:
        deadline = time.monotonic() + 30
        while get(base + "/healthz")[0] != 200:
            if daemon.poll() is not None or time.monotonic() > deadline:
                print(log_path.read_text(), file=sys.stderr)
                return 1
            time.sleep(0.2)
        result = run_flood(daemon.pid, base, bus.address, args.clients, args.calls,
                           args.concurrency)
    finally:
        daemon.terminate()
        daemon.wait(15)
        log.close()
        bus.stop()
    text = log_path.read_text(errors="replace")
    shutil.rmtree(work, ignore_errors=True)
    host = f"synthetic {args.devices} devices" if args.devices else args.profile
    print(f"nichealthd on {host}, polling every {args.interval}")
    for line in result.lines():
        print(line)
    for bad in result.healthz_bad[:5]:
        print(f"  /healthz said: {bad}")
    for failed in result.failed_clients[:3]:
        print(f"  client failed: {failed}")
    print(f"  tracebacks in the daemon log: {text.count('Traceback')}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
