"""Every surface tells the same health for every port (README).

One real nichealthd on a sim DGX-H100 host, with a private dbus-daemon, metrics on a free
port and a real NOTIFY_SOCKET. For each kind of condition (port DOWN, port INIT, a latched
fatal counter breach on an ACTIVE port, a non-fatal velocity breach, a card short at the first
poll, a device missing) the test mutates the host with nichealthd-sim, waits until D-Bus shows
the condition, then compares ``show ports`` (table and --json), D-Bus ListPorts, the
``nichealthd_port_health`` metric, STATUS=, ``status`` and ``check`` port by port.
"""

from __future__ import annotations

import asyncio
import json
import re
import urllib.request
from pathlib import Path
from typing import Any, Iterator

import pytest
from dbushelpers import BusClient, DaemonProcess, ctl, make_sim
from prometheus_client.parser import text_string_to_metric_families

from nichealthd.sim import mutate, pcibus
from nichealthd.surfaces.dbus_common import from_variants
from tests.harness import NotifySocket, wait_until
from tests.netports import free_port

METRIC_VALUE = {"healthy": 0, "uncabled": 0, "degraded": 1, "fatal": 2}
CHECK_EXIT = {"healthy": 0, "degraded": 1, "fatal": 2}


@pytest.fixture
def notify(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[NotifySocket]:
    sock = NotifySocket(tmp_path / "notify.sock")
    monkeypatch.setenv("NOTIFY_SOCKET", str(sock.path))
    yield sock
    sock.close()



async def _list_ports() -> list[dict[str, Any]]:
    async with BusClient() as client:
        reply = await client.call("ListPorts")
        assert reply.message_type.name == "METHOD_RETURN", reply.body
        return [from_variants(r) for r in reply.body[0]]


def dbus_ports() -> dict[str, dict[str, Any]]:
    return {f"{p['device']}/{p['port']}": p for p in asyncio.run(_list_ports())
            if p["monitored"]}


def metric_health(port: int) -> tuple[dict[str, float], float]:
    """(``nichealthd_port_health`` by port, ``nichealthd_health``)."""
    with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=5) as response:
        text = response.read().decode()
    samples = [s for family in text_string_to_metric_families(text) for s in family.samples]
    overall = [s.value for s in samples if s.name == "nichealthd_health"]
    assert len(overall) == 1
    return ({f"{s.labels['device']}/{s.labels['port']}": s.value
             for s in samples if s.name == "nichealthd_port_health"}, overall[0])


def table_health(text: str) -> dict[str, tuple[str, str]]:
    """PORT -> (HEALTH, REASON) of the human ``show ports`` table (--wide: nothing cut);
    SUSPECT, between them, is there when a port has one."""
    lines = text.splitlines()
    header = lines[0]
    health_at, reason_at = header.index("HEALTH"), header.index("REASON")
    health_end = header.find("SUSPECT") if "SUSPECT" in header else reason_at
    out = {}
    for line in lines[1:]:
        if not line.strip() or line.startswith(("Not monitored", " ")):
            if line.startswith("Not monitored"):
                break
            continue
        out[line.split()[0]] = (line[health_at:health_end].strip(), line[reason_at:].strip())
    return out


def assert_surfaces_agree(daemon: DaemonProcess, metrics_port: int, notify: NotifySocket,
                          port: str, health: str, reason: str) -> None:
    """``port`` is ``health`` with ``reason`` among its reasons, on every surface alike."""
    wait_until(lambda: dbus_ports().get(port, {}).get("health") == health,
               f"{port} {health} on D-Bus")
    ports = dbus_ports()
    assert reason in ports[port]["reasons"], ports[port]
    expected = {name: p["health"] for name, p in ports.items()}
    fatal = sorted(name for name, h in expected.items() if h == "fatal")
    degraded = sorted(name for name, h in expected.items() if h == "degraded")
    for p in ports.values():
        assert p["fatal"] is (p["health"] == "fatal"), p
        assert p["healthy"] is (p["health"] == "healthy"), p

    as_json = {f"{p['device']}/{p['port']}": p
               for p in json.loads(ctl("show", "ports", "--json").stdout) if p["monitored"]}
    assert {n: p["health"] for n, p in as_json.items()} == expected
    assert {n: p["reasons"] for n, p in as_json.items()} == \
        {n: p["reasons"] for n, p in ports.items()}
    assert all(p["fatal"] is (p["health"] == "fatal") for p in as_json.values())

    human = ctl("show", "ports")
    assert human.returncode == 0 and all(len(line) <= 80 for line in human.stdout.splitlines())
    wide = table_health(ctl("show", "ports", "--wide").stdout)
    assert {n: h for n, (h, _) in wide.items() if h != "-"} == expected
    assert reason in wide[port][1]
    assert as_json[port]["suspect"] in ("nic", "module", "cable-or-far-end", "link", "fabric",
                                        "unknown")  # every unhealthy port names one

    overall = "fatal" if fatal else "degraded" if degraded else "healthy"
    metrics, host_metric = metric_health(metrics_port)
    assert metrics == {n: float(METRIC_VALUE[h]) for n, h in expected.items()}
    assert host_metric == METRIC_VALUE[overall]
    wanted = f"{len(fatal)} fatal"
    wait_until(lambda: bool(notify.statuses) and wanted in notify.statuses[-1]
               and f"{len(degraded)} degraded" in notify.statuses[-1], f"STATUS= {wanted}")
    line = notify.statuses[-1]
    assert f"{len(expected)} ports:" in line, line
    for name in fatal + degraded:
        assert name in line, line

    status = json.loads(ctl("status", "--json").stdout)
    assert status["health"] == overall
    assert sorted(status["fatal_ports"]) == fatal
    assert sorted(status["degraded_ports"]) == degraded
    assert (status["ports_fatal"], status["ports_degraded"]) == (len(fatal), len(degraded))
    text = ctl("status", "--wide").stdout
    for name in fatal:
        assert re.search(rf"^\s+{re.escape(name)} .*", text, re.M), text
    assert all(len(line) <= 80 for line in ctl("status").stdout.splitlines())

    check = ctl("check")
    assert check.returncode == CHECK_EXIT[overall], check.stdout
    assert f"{len(fatal)} fatal, {len(degraded)} degraded of {len(expected)} ports" \
        in check.stdout or overall == "healthy"
    assert f"{port} " in check.stdout and reason in check.stdout
    data = json.loads(ctl("check", "--json").stdout)
    assert data["exit"] == check.returncode and sorted(data["fatal_ports"]) == fatal


def test_every_surface_shows_the_same_health_for_each_kind_of_condition(
        system_bus: Any, notify: NotifySocket) -> None:
    root = make_sim()
    # A card short at the first poll: mlx5_4's only port is INIT with its link still
    # training (degraded by itself); its card has 0 active ports where every compute card
    # has 1, so the port is fatal at once. (INIT with the link up, waiting for the subnet
    # manager, would be held cardVerdictHoldTime: nichealthd(8).)
    mutate.set_port(root, "mlx5_4", 1, state="INIT", phys_state="Polling")
    metrics_port = free_port()
    daemon = DaemonProcess(root, system_bus.address,
                           extra=["--metrics-listen", f"127.0.0.1:{metrics_port}"])
    try:
        daemon.wait_for_name()
        assert_surfaces_agree(daemon, metrics_port, notify, "mlx5_4/1", "fatal",
                              "card 0000:4f:00 has 0 of 1 ports active")
        assert "INIT/Polling" in dbus_ports()["mlx5_4/1"]["reasons"]
        mutate.set_port(root, "mlx5_4", 1, state="ACTIVE", phys_state="LinkUp")
        wait_until(lambda: dbus_ports()["mlx5_4/1"]["health"] == "healthy", "card released")

        mutate.set_port(root, "mlx5_0", 1, state="DOWN", phys_state="Disabled")
        assert_surfaces_agree(daemon, metrics_port, notify, "mlx5_0/1", "fatal",
                              "DOWN/Disabled")
        mutate.set_port(root, "mlx5_0", 1, state="ACTIVE", phys_state="LinkUp")

        mutate.set_port(root, "mlx5_3", 1, state="INIT", phys_state="LinkUp")
        assert_surfaces_agree(daemon, metrics_port, notify, "mlx5_3/1", "degraded",
                              "INIT/LinkUp")
        mutate.set_port(root, "mlx5_3", 1, state="ACTIVE", phys_state="LinkUp")
        wait_until(lambda: dbus_ports()["mlx5_3/1"]["health"] == "healthy", "mlx5_3 back")

        # The case: the port stays ACTIVE/LinkUp, link_downed +1 is a fatal breach.
        mutate.counter(root, "mlx5_5", 1, "link_downed", add=1)
        assert_surfaces_agree(daemon, metrics_port, notify, "mlx5_5/1", "fatal",
                              "link_downed breached")
        assert dbus_ports()["mlx5_5/1"]["state"] == "ACTIVE"

        # A non-fatal velocity breach (port_rcv_errors > 10/s) beside the fatal one.
        mutate.counter(root, "mlx5_6", 1, "port_rcv_errors", add=60000)  # within its 16 bits
        assert_surfaces_agree(daemon, metrics_port, notify, "mlx5_6/1", "degraded",
                              "port_rcv_errors breached")

        pcibus.pci_remove(root, "mlx5_9")  # off the bus: gone, not a driver event
        assert_surfaces_agree(daemon, metrics_port, notify, "mlx5_9/1", "fatal",
                              "mlx5_9 missing")
        gone = [p for p in json.loads(ctl("show", "ports", "--json").stdout)
                if p["device"] == "mlx5_9"]
        assert [(p["present"], p["fatal"]) for p in gone] == [(False, True)]
    finally:
        daemon.stop()
