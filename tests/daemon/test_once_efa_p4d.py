"""AWS EFA on a layout the first EFA tests never saw: the real daemon (``--once`` and
running) on a simulated p4d.24xlarge (four EFA of 100 Gb/s, each with its ENA on the root bus
it shares with two A100s; sim/profiles.py ``_p4d`` cites the real tree), with the topology
derived from that PCI tree (no GPU metadata file).

- an interface set down: one fatal EFAStateCheck; its return one recovery;
- ``no_completion_cmds`` +1: one fatal event;
- ``rx_drops`` rising slowly: nothing; fast: one degradation;
- a healthy busy host: no events;
- and the EFA corner cases through the daemon: a renamed EFA device keeps its latched breach;
  EFA counters configured one by one; a port never up whose peers come up is one card event.
"""

from __future__ import annotations

import json
import subprocess
import sys
from datetime import datetime, timedelta, timezone
from typing import Any, Callable

import pytest

from nichealthd.sim import mutate

from ..harness import NotifySocket
from .conftest import REPO, SimHost
from .test_service import Daemon, events, notify  # noqa: F401 (fixture)

DEV, ENA = "rdmap32s27", "ens65"


def unhealthy(run_events: list[dict[str, Any]]) -> list[tuple[str, bool, list[str], str]]:
    return [(e["checkName"], e["isFatal"], e["errorCode"], e["entitiesImpacted"][0]["entityValue"])
            for e in run_events if not e["isHealthy"]]


def sim(host: SimHost, *args: str) -> str:
    """The operator's drill: the ``nichealthd-sim`` command line."""
    proc = subprocess.run([sys.executable, "-m", "nichealthd.sim", args[0], str(host.root),
                           *args[1:]], cwd=REPO, capture_output=True, text=True, timeout=60)
    assert proc.returncode == 0, proc.stderr
    return proc.stdout


@pytest.fixture
def p4d(sim_host: Callable[..., SimHost]) -> SimHost:
    host = sim_host("p4d", metadata=False)  # the topology derived from the PCI tree
    first = host.once()
    assert first.returncode == 0, first.stderr
    assert unhealthy(first.events) == []  # a healthy host: baselines only
    assert "4 compute" in first.stderr  # EFA and GPUs meet at their root complex (PHB)
    return host


def test_a_healthy_busy_host_sends_nothing(p4d: SimHost) -> None:
    for name in ("tx_bytes", "rx_bytes", "send_wrs", "recv_wrs", "keep_alive_rcvd",
                 "submitted_cmds", "completed_cmds", "rdma_read_bytes", "rdma_write_bytes"):
        mutate.counter(p4d.root, DEV, 1, name, add=10**9)
    mutate.counter(p4d.root, DEV, 1, "rx_drops", add=3)
    mutate.counter(p4d.root, DEV, 1, "rdma_read_wr_err", add=1)  # a peer restarting
    assert p4d.once().events == []
    assert p4d.once().events == []


def test_an_interface_set_down_is_one_fatal_efa_state_event(p4d: SimHost) -> None:
    mutate.set_port(p4d.root, DEV, 1, operstate="down")
    run = p4d.once()
    assert unhealthy(run.events) == [("EFAStateCheck", True, ["port_state"], DEV)]
    assert run.events[0]["recommendedAction"] == "REPLACE_VM"
    assert f"netdev {ENA} operstate down" in run.events[0]["message"]
    assert p4d.once().events == []
    mutate.set_port(p4d.root, DEV, 1, operstate="up")
    assert [(e["checkName"], e["isHealthy"]) for e in p4d.once().events] == [
        ("EFAStateCheck", True)]


def test_carrier_loss_is_one_fatal_event(p4d: SimHost) -> None:
    mutate.carrier(p4d.root, DEV, 1, 0)
    assert unhealthy(p4d.once().events) == [("EFAStateCheck", True, ["port_state"], DEV)]
    assert p4d.once().events == []


def test_no_completion_cmds_plus_one_is_one_fatal_event(p4d: SimHost) -> None:
    mutate.counter(p4d.root, DEV, 1, "no_completion_cmds", add=1)
    run = p4d.once()
    assert unhealthy(run.events) == [("EFADegradationCheck", True, ["no_completion_cmds"], DEV)]
    assert run.events[0]["recommendedAction"] == "REPLACE_VM"
    assert p4d.once().events == []


def _age(host: SimHost, counter: str, seconds: float) -> None:
    """Move a velocity window's start ``seconds`` back (``--once`` polls are instants)."""
    state = json.loads(host.state_file.read_text())
    when = datetime.now(timezone.utc) - timedelta(seconds=seconds)
    state["efa_counter_snapshots"][f"{DEV}:1:{counter}"]["timestamp"] = when.strftime(
        "%Y-%m-%dT%H:%M:%SZ")
    host.state_file.write_text(json.dumps(state))


def test_rx_drops_slow_is_nothing_fast_is_one_degradation(p4d: SimHost) -> None:
    _age(p4d, "rx_drops", 10)
    mutate.counter(p4d.root, DEV, 1, "rx_drops", add=500)  # ~50/s: under 100/s
    assert p4d.once().events == []
    _age(p4d, "rx_drops", 10)
    mutate.counter(p4d.root, DEV, 1, "rx_drops", add=50_000)  # ~5000/s
    run = p4d.once()
    assert unhealthy(run.events) == [("EFADegradationCheck", False, ["rx_drops"], DEV)]
    assert run.events[0]["recommendedAction"] == "NONE"
    _age(p4d, "rx_drops", 10)
    mutate.counter(p4d.root, DEV, 1, "rx_drops", add=50_000)
    assert p4d.once().events == []  # latched


def test_a_configured_rx_drops_threshold_is_the_daemon_s(sim_host: Callable[..., SimHost]
                                                        ) -> None:
    """EFA rates through the daemon: rx_drops at 10000/s; 5000/s is nothing."""
    host = sim_host("p4d", metadata=False)
    with host.config.open("a") as config:
        config.write('\n[[counterDetection.efaCounters]]\nname = "rx_drops"\nthreshold = 10000\n')
    assert host.once().returncode == 0
    _age(host, "rx_drops", 10)
    mutate.counter(host.root, DEV, 1, "rx_drops", add=50_000)
    assert host.once().events == []
    _age(host, "rx_drops", 10)
    mutate.counter(host.root, DEV, 1, "rx_drops", add=500_000)
    assert unhealthy(host.once().events) == [("EFADegradationCheck", False, ["rx_drops"], DEV)]
    with host.config.open("a") as config:
        config.write('[[counterDetection.efaCounters]]\nname = "rx_drop"\n')
    bad = host.once()
    assert bad.returncode == 2
    assert "counterDetection.efaCounters[rx_drop].path" in bad.stderr


def test_running_daemon_on_p4d(sim_host: Callable[..., SimHost],
                               notify: NotifySocket) -> None:  # noqa: F811
    """From outside, at 200 ms polls: slow rx_drops nothing, fast one degradation; an
    interface set down through the sim's command line one fatal event, up one recovery;
    no_completion_cmds +1 one fatal event."""
    host = sim_host("p4d", metadata=False)
    daemon = Daemon(host, notify)
    try:
        ready = notify.wait_for("READY=1")
        assert "STATUS=4 ports: 4 healthy, 0 degraded, 0 fatal" in ready
        daemon.wait_polls(2)
        baseline = len(events(host))
        for _ in range(8):  # ~10 per 200 ms poll: ~50/s, under 100/s
            sim(host, "counter", DEV, "1", "rx_drops", "--add", "10")
            daemon.wait_polls(1)
        daemon.wait_polls(6)  # more than one full 1 s window
        assert unhealthy(events(host)[baseline:]) == []
        sim(host, "counter", DEV, "1", "rx_drops", "--add", "5000")
        daemon.wait_until(lambda: bool(unhealthy(events(host)[baseline:])), "rx_drops breach")
        sim(host, "port", "rdmap144s27", "1", "--operstate", "down")
        daemon.wait_until(lambda: len(unhealthy(events(host)[baseline:])) >= 2, "netdev down")
        sim(host, "counter", "rdmap160s27", "1", "no_completion_cmds", "--add", "1")
        daemon.wait_until(lambda: len(unhealthy(events(host)[baseline:])) >= 3, "no_completion")
        daemon.wait_polls(5)
        assert unhealthy(events(host)[baseline:]) == [
            ("EFADegradationCheck", False, ["rx_drops"], DEV),
            ("EFAStateCheck", True, ["port_state"], "rdmap144s27"),
            ("EFADegradationCheck", True, ["no_completion_cmds"], "rdmap160s27")]
        before = len(events(host))
        sim(host, "port", "rdmap144s27", "1", "--operstate", "up")
        daemon.wait_until(lambda: len(events(host)) > before, "the recovery")
        daemon.wait_polls(3)
        assert [(e["isHealthy"], e["errorCode"], e["entitiesImpacted"][0]["entityValue"])
                for e in events(host)[before:]] == [(True, ["port_state"], "rdmap144s27")]
    finally:
        code, err = daemon.stop()
    assert code == 0, err[-2000:]
    assert "Traceback" not in err


def test_a_renamed_efa_device_keeps_its_latched_breach(sim_host: Callable[..., SimHost],
                                                       notify: NotifySocket  # noqa: F811
                                                       ) -> None:
    """A rename for EFA, as tests/daemon/test_driver_reload.py does for mlx5: rx_drops breached
    on rdmap32s27; the kernel registers it again as efa_1 at the same PCI function: one log
    line, no event past the three polls that would declare it gone, the breach latched
    under the new name, and its reset the recovery of efa_1."""
    host = sim_host("p4d", metadata=False)
    daemon = Daemon(host, notify)
    try:
        notify.wait_for("READY=1")
        daemon.wait_polls(2)
        sim(host, "counter", DEV, "1", "rx_drops", "--add", "100000")
        daemon.wait_until(lambda: any(e["errorCode"] == ["rx_drops"] and not e["isHealthy"]
                                      for e in events(host)), "the rx_drops breach")
        before = len(events(host))
        sim(host, "rename", DEV, "efa_1")
        daemon.lines.wait_for(f"{DEV} is now efa_1", proc=daemon.proc)
        daemon.wait_polls(5)
        assert [e["message"] for e in events(host)[before:]] == []
        state = json.loads(host.state_file.read_text())
        flags = state["efa_breach_flags"]
        assert "efa_1:1:rx_drops" in flags and f"{DEV}:1:rx_drops" not in flags
        assert state["efa_device_identities"]["efa_1"]["renamed_from"] == DEV
        assert DEV not in state["efa_known_devices"]
        sim(host, "counter", "efa_1", "1", "rx_drops", "--set", "0")
        daemon.wait_until(lambda: len(events(host)) > before, "the recovery")
        daemon.wait_polls(2)
        assert [(e["isHealthy"], e["errorCode"], e["entitiesImpacted"][0]["entityValue"])
                for e in events(host)[before:]] == [(True, ["rx_drops"], "efa_1")]
    finally:
        code, err = daemon.stop()
    assert code == 0, err[-2000:]
