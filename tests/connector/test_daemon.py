"""The connector inside the real daemon, against a fake host (nichealthd-sim) and a real gRPC
server: outages across polls, SIGKILL during an outage, a hung connector versus the poll
schedule and the watchdog (a real NOTIFY_SOCKET), and ``--once``."""

from __future__ import annotations

import asyncio
import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import Any, Iterator

import pytest

from nichealthd.runtime import daemon as daemon_cli
from nichealthd.runtime.service import Daemon
from nichealthd.sim import mutate
from nichealthd.surfaces.seam import STOP_SECONDS

from .. import simtrees
from ..harness import DEADLINE, NotifySocket
from .connector_fixtures import FakeConnector, wait_for

ROOT = Path(__file__).resolve().parents[2]
POLL = 0.2


@pytest.fixture
def host() -> Path:
    """A DGX-H100-like fake host whose config polls every 200 ms."""
    root = simtrees.take("dgx-h100")
    with open(root / "nichealthd.toml", "a") as handle:
        handle.write('pollingInterval = "200ms"\nconnectorTimeout = "1s"\n'
                     'connectorBatchInterval = "500ms"\n')
    return root


def event_log_ids(root: Path) -> list[str]:
    """The ids of the lines the running daemon has finished writing: a read can overlap an
    append of a batch, and a line without its newline yet is read at the next look."""
    path = root / "events.jsonl"
    if not path.exists():
        return []
    complete = path.read_text().split("\n")[:-1]
    return [json.loads(line)["metadata"]["nichealthd.event_id"]
            for line in complete if line.strip()]


def inject_round(root: Path, round_no: int) -> None:
    """Inject a round of faults and wait until the daemon committed its port event (the
    last fault of the round), so that rounds are seen by separate polls."""
    before = len(event_log_ids(root))
    inject_faults(root, round_no)
    healthy = round_no % 2 == 1  # DOWN on even rounds, back to ACTIVE on odd ones

    def committed() -> bool:
        lines = (root / "events.jsonl").read_text().splitlines()[before:]
        return any("mlx5_2 port 1" in e["message"] and e["isHealthy"] == healthy
                   for e in map(json.loads, lines))

    wait_for(committed, what=f"the port event of round {round_no}")


def dedupe(ids: list[str]) -> list[str]:
    return list(dict.fromkeys(ids))


def start_daemon(root: Path, target: str, *extra: str) -> subprocess.Popen[bytes]:
    log = open(root / "daemon.log", "ab")  # noqa: SIM115 - closed with the process
    return subprocess.Popen(
        [sys.executable, "-m", "nichealthd.runtime.daemon",
         "--config", str(root / "nichealthd.toml"),
         "--platform-connector-socket", target, *extra],
        cwd=ROOT, stdout=log, stderr=log, env={**os.environ, "PYTHONPATH": str(ROOT)})


def inject_faults(root: Path, round_no: int) -> None:
    """Every kind of event: fatal counter, degradation burst, port down and back up."""
    mutate.counter(root, "mlx5_0", 1, "link_downed", add=1)
    mutate.counter(root, "mlx5_1", 1, "symbol_error", add=5000)
    state = "DOWN" if round_no % 2 == 0 else "ACTIVE"
    phys = "Disabled" if round_no % 2 == 0 else "LinkUp"
    mutate.set_port(root, "mlx5_2", 1, state=state, phys_state=phys)


@pytest.fixture
def procs() -> Iterator[list[subprocess.Popen[bytes]]]:
    started: list[subprocess.Popen[bytes]] = []
    yield started
    for proc in started:
        if proc.poll() is None:
            proc.kill()
            proc.wait(10)


def test_outage_then_sigkill_then_restart_delivers_every_event_once_in_order(
        host: Path, connector: FakeConnector, procs: list[subprocess.Popen[bytes]]) -> None:
    # Phase 1: the connector is absent for many polls while faults are injected.
    first = start_daemon(host, connector.target)
    procs.append(first)
    wait_for(lambda: len(event_log_ids(host)) > 100, what="baseline events")
    for round_no in range(4):
        inject_round(host, round_no)
    committed_phase1 = len(event_log_ids(host))
    assert connector.received == []
    # ... then it comes up: everything so far arrives, in commit order.
    connector.start()
    wait_for(lambda: set(event_log_ids(host)) <= set(connector.event_ids()), timeout=20,
             what="phase-1 delivery")
    assert dedupe(connector.event_ids()) == event_log_ids(host)[:len(dedupe(
        connector.event_ids()))]
    assert len(dedupe(connector.event_ids())) >= committed_phase1
    # Phase 2: the connector goes away again, more faults, then SIGKILL during the outage.
    connector.stop()
    before_kill = len(event_log_ids(host))
    for round_no in range(4, 8):
        inject_round(host, round_no)
    wait_for(lambda: len(event_log_ids(host)) > before_kill, what="outage events")
    first.send_signal(signal.SIGKILL)
    first.wait(10)
    pending_at_kill = [i for i in event_log_ids(host) if i not in set(connector.event_ids())]
    assert pending_at_kill, "the outage produced no undelivered events"
    # Phase 3: restart with the connector up: the pending events are delivered.
    connector.start()
    second = start_daemon(host, connector.target)
    procs.append(second)
    wait_for(lambda: set(event_log_ids(host)) <= set(connector.event_ids()), timeout=20,
             what="delivery after restart")
    second.send_signal(signal.SIGTERM)
    assert second.wait(15) == 0
    # Exactly once after de-duplication by id, in commit order, nothing missing.
    assert dedupe(connector.event_ids()) == event_log_ids(host)
    for request in connector.accepted:
        for event in request.message.events:
            assert event.agent == "nic-health-monitor" and event.nodeName == "dgx-h100-sim"
    assert any(e.recommendedAction == 25 for e in connector.events())  # REPLACE_VM
    assert any(list(e.errorCode) == ["link_downed"] for e in connector.events())


def test_once_delivers_when_the_connector_is_up(host: Path, connector: FakeConnector) -> None:
    connector.start()
    result = subprocess.run(
        [sys.executable, "-m", "nichealthd.runtime.daemon",
         "--config", str(host / "nichealthd.toml"),
         "--platform-connector-socket", connector.target, "--once"],
        cwd=ROOT, capture_output=True, text=True, timeout=60,
        env={**os.environ, "PYTHONPATH": str(ROOT)})
    assert result.returncode == 0, result.stderr
    ids = event_log_ids(host)
    assert ids and connector.event_ids() == ids


def gaps_across(times: list[float], begin: float, end: float) -> list[float]:
    """The gaps from ``begin`` through the ``times`` inside to the first one after ``end``: one
    gap as long as the whole window if nothing happened inside it."""
    span = [begin, *(t for t in times if begin < t < end), *[t for t in times if t >= end][:1]]
    return [b - a for a, b in zip(span, span[1:])]


def test_hung_connector_keeps_the_poll_schedule_and_the_watchdog(
        host: Path, connector: FakeConnector, sockdir: Path,
        monkeypatch: pytest.MonkeyPatch) -> None:
    # A hung call lasts connectorTimeout: 3 s here, many poll intervals (200 ms) and watchdog
    # ticks (200 ms), and far above what a loaded 2-core machine delays a single one.
    hang = 3.0
    config = host / "nichealthd.toml"
    config.write_text(config.read_text().replace('connectorTimeout = "1s"',
                                                 f'connectorTimeout = "{hang:.0f}s"'))
    connector.start()
    connector.default = "hang"
    notify = NotifySocket(sockdir / "notify")
    monkeypatch.setenv("NOTIFY_SOCKET", str(notify.path))
    monkeypatch.setenv("WATCHDOG_USEC", "400000")
    monkeypatch.delenv("WATCHDOG_PID", raising=False)
    args = daemon_cli.build_parser().parse_args(
        ["--config", str(config), "--platform-connector-socket", connector.target])
    startup = daemon_cli.start(args)
    starts: list[float] = []  # when each poll started
    result: dict[str, Any] = {}

    def on_poll(outcome: Any) -> None:
        starts.append(time.monotonic() - outcome.duration)

    def keepalives() -> list[float]:
        return [t for t, m in list(notify.messages) if "WATCHDOG=1" in m]

    async def main() -> None:
        service = Daemon(startup, args)
        service.add_poll_listener(on_poll)
        task = asyncio.ensure_future(service.run())

        def seen() -> bool:
            """The first hung call has run its whole course, a poll and a keepalive came after
            it, and the daemon reports the connector down."""
            if not connector.hung_at:
                return False
            end = connector.hung_at[0] + hang
            return (bool(starts) and starts[-1] > end and bool(keepalives())
                    and keepalives()[-1] > end
                    and service.status()["connector_state"] == "down"
                    and any("DEADLINE_EXCEEDED" in m for m in notify.statuses))

        deadline = time.monotonic() + DEADLINE + 2 * hang
        round_no = 0
        while not seen() and time.monotonic() < deadline:
            inject_faults(host, round_no)  # new events for the hung connector every poll
            round_no += 1
            await asyncio.sleep(POLL)  # the cadence of the load; the wait is on seen()
        result["seen"] = seen()
        result["status"] = service.status()
        stop_at = time.monotonic()
        service.request_stop()
        await task
        result["stop_seconds"] = time.monotonic() - stop_at

    try:
        asyncio.run(main())
    finally:
        connector.release.set()
        notify.close()
    assert result["seen"], (connector.hung_at, starts[-3:], result["status"], notify.statuses)
    # Within each hung call that ran its course: a loop or poll thread that waited for it
    # would start no poll and send no keepalive until the call timed out, a gap of the whole
    # hang (less the call's way to the server); the daemon keeps both going, 200 ms apart.
    # Half the hang (1.5 s) leaves room on both sides even on a loaded 2-core machine. Only
    # the absence of such a gap is asserted, not a count of polls per second (that measures
    # the machine); the drift-free grid itself is held by tests/daemon/test_service.py.
    watchdogs = keepalives()
    windows = [(a, a + hang) for a in connector.hung_at if a + hang < min(starts[-1],
                                                                         watchdogs[-1])]
    poll_gaps = [g for a, b in windows for g in gaps_across(starts, a, b)]
    wd_gaps = [g for a, b in windows for g in gaps_across(watchdogs, a, b)]
    print(f"{len(windows)} hung call(s) of {hang:.0f} s: {len(poll_gaps) - len(windows)} poll "
          f"start(s) within them, longest gap {max(poll_gaps) * 1000:.0f} ms (interval "
          f"{POLL * 1000:.0f} ms); {len(wd_gaps) - len(windows)} WATCHDOG=1 within them, "
          f"longest gap {max(wd_gaps) * 1000:.0f} ms (WATCHDOG_USEC 400 ms); stop took "
          f"{result['stop_seconds']:.2f} s")
    assert windows
    assert max(poll_gaps) < hang / 2, poll_gaps
    assert max(wd_gaps) < hang / 2, wd_gaps
    assert result["status"]["connector_state"] == "down"
    assert result["status"]["outbox_depth"] > 0
    listed = next(s for s in result["status"]["surfaces"] if s["name"] == "connector")
    assert (listed["state"], listed["pending"]) == (
        "down", result["status"]["outbox_depth"])  # its keys and its channel agree
    assert any("connector down since" in m and "DEADLINE_EXCEEDED" in m
               for m in notify.statuses)
    # The stop delivers for a bounded time (the service's stop deadline, each call bounded
    # by connectorTimeout), never for as long as the connector hangs (60 s in the fake).
    assert result["stop_seconds"] < STOP_SECONDS + 2 * hang, result["stop_seconds"]


def test_empty_target_disables_forwarding(host: Path) -> None:
    args = daemon_cli.build_parser().parse_args(
        ["--config", str(host / "nichealthd.toml"), "--platform-connector-socket", ""])
    startup = daemon_cli.start(args)
    service = Daemon(startup, args)
    services = service._make_services()
    assert not any(s.name == "platform connector" for s in services)
    assert service.connector.state == "disabled"
    assert "connector disabled" in service.status_line()
    startup.monitor.close()
