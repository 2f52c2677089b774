"""The varlink API under real systemd 257 in a Debian 13 container, with varlinkctl.

nichealthd is installed from source (the wheel, the unit with RuntimeDirectory=, Debian 13's
own python3 packages from apt's pre-fetched cache) and started with systemctl on a
nichealthd-sim DGX-H100 host. Then systemd's own client checks the service from outside:
``varlinkctl info``, ``list-interfaces``, ``introspect``, ``call … ListPorts`` (as root and
as nobody), ``call --more … WatchEvents`` (a port set DOWN arrives as one reply), Reload
refused to nobody, ``validate-idl`` on the installed interface file; nichealthctl uses the
socket with ``--varlink`` and on its own when the bus is unreachable; stop removes it.
"""

from __future__ import annotations

import json

import pytest
from install import start_on_sim_host

from tests.harness import NOBODY

pytestmark = pytest.mark.e2e

UNIT = "nichealthd.service"
SOCKET = "/run/nichealthd/io.nichealthd.Monitor"
IFACE = "io.nichealthd.Monitor"
IDL = "/usr/lib/python3/dist-packages/nichealthd/surfaces/io.nichealthd.Monitor.varlink"


def varlinkctl(c, *args: str, user=None, check: bool = True, timeout: float = 60):
    return c.run([*(user or []), "varlinkctl", *args], check=check, timeout=timeout)


def poll_count(c) -> int:
    out = c.run(["nichealthctl", "--varlink", "status", "--json"], check=False, timeout=30)
    return int(json.loads(out.stdout).get("poll_count") or 0) if out.returncode == 0 else 0


def seq_records(text: str) -> list:
    """varlinkctl --more prints JSON-SEQ (RS before each object); plain lines otherwise."""
    return [json.loads(part) for part in text.replace("\x1e", "\n").splitlines()
            if part.strip()]


def test_varlinkctl_against_the_installed_daemon(boot):
    c = boot("trixie")
    root = start_on_sim_host(c, UNIT)
    assert c.show(UNIT, "ActiveState") == "active"
    assert "varlink API serving io.nichealthd.Monitor on " + SOCKET in c.journal(UNIT)
    modes = c.run(["stat", "-c", "%a %F", SOCKET, "/run/nichealthd"]).stdout.splitlines()
    assert modes == ["666 socket", "755 directory"], modes

    info = varlinkctl(c, "info", SOCKET).stdout
    assert "Vendor: nichealthd" in info and IFACE in info, info
    assert varlinkctl(c, "list-interfaces", SOCKET).stdout.split() == [
        IFACE, "org.varlink.service"]
    introspected = varlinkctl(c, "introspect", SOCKET, IFACE).stdout
    for line in ("interface io.nichealthd.Monitor", "method ListPorts", "method WatchEvents",
                 "error PermissionDenied"):
        assert line in introspected, line
    varlinkctl(c, "introspect", SOCKET)  # every interface, org.varlink.service too
    checked = varlinkctl(c, "validate-idl", IDL)
    assert checked.returncode == 0, checked.stderr

    for user in (None, NOBODY):
        ports = json.loads(varlinkctl(c, "call", SOCKET, IFACE + ".ListPorts", "{}",
                                      user=user).stdout)["ports"]
        assert ports and all({"device", "port", "state", "healthy", "role"} <= set(p)
                             for p in ports)
        assert all(p["healthy"] for p in ports if p["monitored"])
    refused = varlinkctl(c, "call", SOCKET, IFACE + ".Reload", "{}", user=NOBODY, check=False)
    assert refused.returncode != 0 and IFACE + ".PermissionDenied" in refused.stderr, refused
    reloaded = json.loads(varlinkctl(c, "call", SOCKET, IFACE + ".Reload", "{}").stdout)
    assert reloaded["accepted"] is True, reloaded
    missing = varlinkctl(c, "call", SOCKET, IFACE + ".ListCounters", '{"device": "mlx5_99"}',
                         check=False)
    assert missing.returncode != 0 and IFACE + ".UnknownDevice" in missing.stderr

    # call --more: one reply per committed event
    c.sh(f"timeout 50 varlinkctl call --more {SOCKET} {IFACE}.WatchEvents '{{}}' "
         f"> /root/watch.out 2> /root/watch.err &")
    start = c.wait_for(lambda: poll_count(c), 60, what="the daemon answering")
    c.wait_for(lambda: poll_count(c) >= start + 2, 60, what="two polls (the watch is set)")
    c.run(["nichealthd-sim", "port", root, "mlx5_5", "1", "--state", "DOWN",
           "--phys-state", "Disabled"])

    def watched() -> list:
        return [r for r in seq_records(c.path("/root/watch.out").read_text())
                if "mlx5_5" in r.get("event", {}).get("message", "")]

    event = c.wait_for(watched, 30, what="the DOWN event from varlinkctl --more")[0]["event"]
    assert event["isHealthy"] is False and event["isFatal"] is True
    assert event["recommendedAction"] == "REPLACE_VM"

    # nichealthctl: over varlink, and on its own when the bus cannot be reached
    shown = json.loads(c.run(["nichealthctl", "--varlink", "show", "ports", "--json"]).stdout)
    assert next(p for p in shown if p["device"] == "mlx5_5")["healthy"] is False
    status = json.loads(c.run(["env", "DBUS_SYSTEM_BUS_ADDRESS=unix:path=/nonexistent",
                               "nichealthctl", "status", "--json"]).stdout)
    assert status["transport"] == {"kind": "varlink", "address": SOCKET}
    assert status["health"] == "fatal"

    c.run(["systemctl", "stop", UNIT], timeout=60)
    assert not c.path(SOCKET).exists()
