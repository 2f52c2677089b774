"""AWS EFA end to end: the real daemon (``--once`` and running) on a simulated p5.

On the real p5 layout no ENA shares an EFA's bus (sim/profiles.py ``_p5``): an EFA is paired
with the ENA whose MAC its link-local GID was made from (sources/sysfs.py). The same rules on
p4d, paired by the bus: tests/daemon/test_once_efa_p4d.py."""

from __future__ import annotations

import json
import subprocess
import sys
from datetime import datetime, timedelta, timezone
from typing import Callable

import pytest

from nichealthd.sim import mutate

from ..harness import NotifySocket
from .conftest import REPO, SimHost
from .test_service import Daemon, events, notify  # noqa: F401 (fixture)

DEV = "rdmap80s0"


def unhealthy(events: list[dict]) -> list[tuple[str, bool, list[str], str]]:
    return [(e["checkName"], e["isFatal"], e["errorCode"], e["entitiesImpacted"][0]["entityValue"])
            for e in events if not e["isHealthy"]]


@pytest.fixture
def p5(sim_host: Callable[..., SimHost]) -> SimHost:
    host = sim_host("p5", metadata=False)  # the topology derived from the PCI tree
    first = host.once()
    assert first.returncode == 0, first.stderr
    assert unhealthy(first.events) == []  # a healthy host: baselines only
    assert "32 compute" in first.stderr
    return host


def test_a_healthy_busy_host_sends_nothing(p5: SimHost) -> None:
    for name in ("tx_bytes", "rx_bytes", "send_wrs", "recv_wrs", "keep_alive_rcvd",
                 "submitted_cmds", "completed_cmds", "rdma_read_bytes"):
        mutate.counter(p5.root, DEV, 1, name, add=10**9)
    mutate.counter(p5.root, DEV, 1, "rx_drops", add=3)
    assert p5.once().events == []


def test_its_interface_set_down_is_one_fatal_event(p5: SimHost) -> None:
    """The ENA is on a bus of its own: it is found by the MAC of the EFA's GID."""
    netdev = next(d["ports"]["1"]["netdev"] for d in p5.manifest["devices"]
                  if d["name"] == DEV)
    mutate.set_port(p5.root, DEV, 1, operstate="down")
    run = p5.once()
    assert unhealthy(run.events) == [("EFAStateCheck", True, ["port_state"], DEV)]
    assert run.events[0]["recommendedAction"] == "REPLACE_VM"
    assert f"netdev {netdev} operstate down" in run.events[0]["message"]
    assert p5.once().events == []
    mutate.set_port(p5.root, DEV, 1, operstate="up")
    assert [(e["checkName"], e["isHealthy"]) for e in p5.once().events] == [
        ("EFAStateCheck", True)]


def test_an_efa_only_interface_is_watched_for_presence_only(
        sim_host: Callable[..., SimHost]) -> None:
    """No ENA, no netdev: nothing says the EFA's link is down, so nothing is invented."""
    host = sim_host("p5-efa-only", metadata=False)
    assert host.once().returncode == 0
    efa = [d for d in host.manifest["devices"] if d.get("adapter") == "efa"]
    only = next(d["name"] for d in efa if not d["ports"]["1"]["netdev"])
    paired = next(d["name"] for d in efa if d["ports"]["1"]["netdev"])
    assert host.once().events == []
    ports = json.loads(host.state_file.read_text()).get("efa_ports", {})
    assert f"{paired}_1" in ports and f"{only}_1" not in ports


def test_no_completion_cmds_plus_one_is_one_fatal_event(p5: SimHost) -> None:
    mutate.counter(p5.root, DEV, 1, "no_completion_cmds", add=1)
    run = p5.once()
    assert unhealthy(run.events) == [("EFADegradationCheck", True, ["no_completion_cmds"], DEV)]
    assert p5.once().events == []


def _age_rx_drops(host: SimHost, seconds: float) -> None:
    """Move the rx_drops window's start ``seconds`` back (``--once`` polls are instants)."""
    state = json.loads(host.state_file.read_text())
    when = datetime.now(timezone.utc) - timedelta(seconds=seconds)
    state["efa_counter_snapshots"][f"{DEV}:1:rx_drops"]["timestamp"] = when.strftime(
        "%Y-%m-%dT%H:%M:%SZ")
    host.state_file.write_text(json.dumps(state))


def test_rx_drops_slow_is_nothing_fast_is_one_degradation(p5: SimHost) -> None:
    _age_rx_drops(p5, 10)
    mutate.counter(p5.root, DEV, 1, "rx_drops", add=500)  # ~50/s: under 100/s
    assert p5.once().events == []
    _age_rx_drops(p5, 10)
    mutate.counter(p5.root, DEV, 1, "rx_drops", add=50_000)  # ~5000/s
    assert unhealthy(p5.once().events) == [("EFADegradationCheck", False, ["rx_drops"], DEV)]


def test_efa_only_cards_are_watched_for_presence(sim_host: Callable[..., SimHost]) -> None:
    host = sim_host("p5-efa-only")
    assert unhealthy(host.once().events) == []
    mutate.remove_device(host.root, "rdmap81s0")
    for _ in range(2):
        assert host.once().events == []
    assert unhealthy(host.once().events) == [
        ("EFAStateCheck", True, ["device_missing"], "rdmap81s0")]


def test_running_daemon_on_p5(sim_host: Callable[..., SimHost],
                              notify: NotifySocket) -> None:  # noqa: F811
    """The real daemon at 200 ms polls: slow rx_drops nothing, fast one degradation, a
    device removed through the sim's command line one fatal event at its third miss."""
    host = sim_host("p5")
    daemon = Daemon(host, notify)
    try:
        ready = notify.wait_for("READY=1")
        assert "STATUS=32 ports: 32 healthy, 0 degraded, 0 fatal" in ready
        baseline = len(events(host))
        for _ in range(8):  # ~10 per 200 ms poll: ~50/s, under 100/s
            mutate.counter(host.root, DEV, 1, "rx_drops", add=10)
            daemon.wait_polls(1)
        daemon.wait_polls(6)  # more than one full 1 s window
        assert unhealthy(events(host)[baseline:]) == []
        mutate.counter(host.root, DEV, 1, "rx_drops", add=5000)
        daemon.wait_until(lambda: bool(unhealthy(events(host)[baseline:])), "rx_drops breach")
        proc = subprocess.run([sys.executable, "-m", "nichealthd.sim", "remove-device",
                               str(host.root), "rdmap81s0"],
                              cwd=REPO, capture_output=True, text=True, timeout=60)
        assert proc.returncode == 0, proc.stderr
        daemon.wait_until(lambda: len(unhealthy(events(host)[baseline:])) >= 2, "gone")
        daemon.wait_polls(5)
        assert unhealthy(events(host)[baseline:]) == [
            ("EFADegradationCheck", False, ["rx_drops"], DEV),
            ("EFAStateCheck", True, ["device_missing"], "rdmap81s0")]
    finally:
        code, err = daemon.stop()
    assert code == 0, err[-2000:]
