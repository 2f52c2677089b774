"""Hostile neighbours: local users holding idle varlink connections lock out neither root nor
the monitor (the real daemon; each user a process run as its own uid with setpriv).

Before: four uids x 64 idle connections filled all 256 slots and every further connection was
refused, root's included; at ``ulimit -n 1024`` with 512 devices two uids' connections took
the last descriptors: the device listing failed, ``/healthz`` stopped answering and a port
DOWN was never reported. Now each non-root uid holds at most an eighth of the slots, root
keeps an eighth of its own, and the open-file plan counts every connection limit before it
keeps sysfs files open (nichealthd.runtime.fdplan).
"""

from __future__ import annotations

import json
import os
import re
import resource
import socket
import subprocess
import urllib.request
from pathlib import Path

import pytest
from vlhelpers import Holders, VarlinkDaemon, make_sim, uid_switch_problem

from nichealthd.sim import mutate
from nichealthd.surfaces.admission import Caps
from nichealthd.surfaces.varlink import MAX_CONNECTIONS
from tests.harness import ctl

UIDS = [1001, 1002, 1003, 1004]
EACH = 75  # 300 idle connections in all

pytestmark = pytest.mark.skipif(bool(uid_switch_problem()), reason=uid_switch_problem())


def root_status(daemon: VarlinkDaemon) -> subprocess.CompletedProcess[str]:
    """``nichealthctl --varlink=SOCKET status`` as this user (root)."""
    return ctl(daemon.socket, "status")


def test_four_users_holding_300_idle_connections_leave_root_its_status(start_daemon) -> None:
    daemon = start_daemon()
    caps = Caps.of(MAX_CONNECTIONS)
    with Holders(daemon.socket, UIDS, EACH) as users:
        assert users.held == {uid: caps.per_uid for uid in UIDS}  # 32 each, 128 in all
        status = root_status(daemon)
        assert status.returncode == 0, status.stdout + status.stderr
        assert "HEALTHY" in status.stdout
    log = daemon.log()
    assert "holds 32 connections, the most one user may" in log, log[-2000:]


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def _ulimit_1024() -> None:
    resource.setrlimit(resource.RLIMIT_NOFILE, (1024, 1024))


def _healthz(port: int) -> int:
    try:
        with urllib.request.urlopen(f"http://127.0.0.1:{port}/healthz",
                                    timeout=10) as answer:
            return int(answer.status)
    except OSError:
        return 0


def _fatal_events(path: Path, device: str) -> list[dict[str, object]]:
    if not path.exists():
        return []
    events = [json.loads(line) for line in path.read_text().splitlines() if line.strip()]
    return [e for e in events if e["isFatal"] and not e["isHealthy"]
            and {"entityType": "NIC", "entityValue": device} in e["entitiesImpacted"]]


LARGE = pytest.mark.skipif(
    not os.environ.get("NICHEALTHD_LARGE_HOSTS"),
    reason="a 512-device host is 86,000 files: set NICHEALTHD_LARGE_HOSTS=1 to run it (CI "
           "does; 257 devices, tests/sim/test_large.py's host, poll more files than the "
           "limit too, in every run)")


@pytest.mark.slow
@pytest.mark.parametrize("devices", [257, pytest.param(512, marks=LARGE)])
def test_a_port_down_is_reported_at_ulimit_1024_with_many_devices_and_those_users(
        start_daemon, devices: int) -> None:
    """At 257 devices as at 512 the host has more polled sysfs files than the whole limit:
    kept open, they alone would take every descriptor."""
    root = make_sim("synthetic", devices=devices)
    port = _free_port()
    events = root.parent / "events.jsonl"
    daemon = start_daemon(root, interval="1s", preexec_fn=_ulimit_1024, extra=[
        "--metrics-listen", f"127.0.0.1:{port}", "--event-log", str(events)])
    log = daemon.wait_log("open-file limit 1024: ")
    assert "connections at most metrics 64, varlink 256" in log, log[-3000:]
    budget = re.search(r"\d+ of (\d+) sysfs files are read without keeping them open",
                       daemon.wait_log("sysfs files are read without keeping them open"))
    assert budget is not None and int(budget[1]) > 1024, budget
    device = sorted(os.listdir(root / "sys/class/infiniband"))[devices * 300 // 512]
    with Holders(daemon.socket, UIDS, EACH) as users:
        assert sum(users.held.values()) == 4 * Caps.of(MAX_CONNECTIONS).per_uid
        assert _healthz(port) == 200
        assert root_status(daemon).returncode == 0
        mutate.uncable(root, device, 1)
        daemon.wait_until(lambda: bool(_fatal_events(events, device)),
                          f"the fatal event of {device} port 1 DOWN", timeout=60)
        assert _healthz(port) == 200
        fds = len(os.listdir(f"/proc/{daemon.proc.pid}/fd"))
        assert fds < 1024 - 64, fds  # the reserve is still there
    log = daemon.log()
    assert "Too many open files" not in log and "no InfiniBand/RoCE devices found" not in log
    assert "Traceback" not in log
