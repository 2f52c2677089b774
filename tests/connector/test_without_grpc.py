"""Without the gRPC library the connector's events wait in the outbox; none is lost.

RHEL 9 ships grpcio only in EPEL. The daemon runs without it (tests/without.py) against a
real gRPC server that stays up all along: nothing is sent, the status says ``unavailable``
with the outbox depth, and the first run with the library (``--once``) delivers every event
the first one committed, in order (runtime/libraries.py, surfaces/connector/held.py).
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
from pathlib import Path

from ..harness import ctl_output
from ..without import command
from .connector_fixtures import FakeConnector, wait_for
from .test_daemon import ROOT, event_log_ids, host, inject_round, procs  # noqa: F401

WITHOUT_GRPC = "grpc,google.protobuf"


def test_events_wait_in_the_outbox_and_the_next_run_with_grpc_sends_them(
        host: Path, connector: FakeConnector,  # noqa: F811
        procs: list[subprocess.Popen[bytes]]) -> None:  # noqa: F811
    connector.start()
    varlink = host / "io.nichealthd.Monitor"
    log = open(host / "daemon.log", "ab")  # noqa: SIM115 - closed below
    daemon = subprocess.Popen(
        command(WITHOUT_GRPC, "nichealthd.runtime.daemon", "--config",
                str(host / "nichealthd.toml"), "--platform-connector-socket",
                connector.target, "--varlink-socket", str(varlink)),
        cwd=ROOT, stdout=log, stderr=log, env={**os.environ, "PYTHONPATH": str(ROOT)})
    procs.append(daemon)
    wait_for(lambda: len(event_log_ids(host)) > 10, what="baseline events")
    inject_round(host, 0)
    status = json.loads(ctl_output(varlink, "status", "--json"))
    assert status["connector_state"] == "unavailable"
    assert "grpcio" in status["connector_last_error"]
    # the outbox holds every event: asked again while a poll commits between the two reads
    wait_for(lambda: json.loads(ctl_output(varlink, "status", "--json"))["outbox_depth"]
             == len(event_log_ids(host)), what="the outbox depth equal to the event log")
    daemon.send_signal(signal.SIGTERM)
    assert daemon.wait(30) == 0
    log.close()
    assert connector.received == []
    text = (host / "daemon.log").read_text()
    assert text.count("forwarding to the platform connector is off") == 1, text
    assert "Traceback" not in text
    sent = subprocess.run(
        [sys.executable, "-m", "nichealthd.runtime.daemon", "--config",
         str(host / "nichealthd.toml"), "--platform-connector-socket", connector.target,
         "--once"], cwd=ROOT, capture_output=True, text=True, timeout=60,
        env={**os.environ, "PYTHONPATH": str(ROOT)})
    assert sent.returncode == 0, sent.stderr
    assert connector.event_ids() == event_log_ids(host)  # every one, in commit order
