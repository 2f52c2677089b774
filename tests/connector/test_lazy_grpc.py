"""gRPC is loaded only once the connector's socket exists (surfaces/connector/wire.py).

A host without NVSentinel never has the socket: the daemon there must not carry gRPC's
~26 MiB. Told from outside, by the real daemon's memory map: gRPC's C extension
(``cygrpc``) is not mapped while the socket is absent, and is once a real connector
appears, which then receives every event the daemon committed meanwhile.
"""

from __future__ import annotations

import subprocess
from pathlib import Path

from .connector_fixtures import FakeConnector, wait_for
from .test_daemon import event_log_ids, host, inject_round, procs, start_daemon  # noqa: F401


def grpc_mapped(pid: int) -> bool:
    return "cygrpc" in Path(f"/proc/{pid}/maps").read_text()


def test_grpc_is_loaded_only_when_the_connector_socket_appears(
        host: Path, connector: FakeConnector,  # noqa: F811
        procs: list[subprocess.Popen[bytes]]) -> None:  # noqa: F811
    daemon = start_daemon(host, connector.target)
    procs.append(daemon)
    wait_for(lambda: len(event_log_ids(host)) > 10, what="baseline events")
    inject_round(host, 0)
    assert not grpc_mapped(daemon.pid)
    connector.start()
    wait_for(lambda: connector.event_ids() == event_log_ids(host),
             what="every committed event delivered")
    assert grpc_mapped(daemon.pid)
