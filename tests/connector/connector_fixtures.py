"""Helpers of the connector tests. The platform connector here is real: a gRPC server on a unix
socket, written from the proto, that records the raw bytes it receives and can accept, refuse
with any status code, delay, hang or disappear. No part of gRPC is mocked."""

from __future__ import annotations

import contextlib
import os
import shutil
import tempfile
import threading
import time
from concurrent import futures
from dataclasses import dataclass, replace
from datetime import datetime, timedelta, timezone
from pathlib import Path
from typing import Any, Callable, Iterator, Optional

import grpc
import pytest

from nichealthd.core.config import Config
from nichealthd.core.events import HealthEvent, make_event, port_entities
from nichealthd.storage.store import Journal, JournalEntry
from nichealthd.surfaces.connector import health_event_pb2 as pb
from nichealthd.surfaces.connector.outbox import CONSUMER
from nichealthd.surfaces.connector.sender import PACE, Sender
from nichealthd.surfaces.connector.settings import ConnectorSettings, settings_of

from ..harness import DEADLINE, wait_until

SERVICE = "datamodels.PlatformConnector"
METHOD = "HealthEventOccurredV1"
T0 = datetime(2026, 1, 2, 3, 4, 5, 678901, tzinfo=timezone.utc)


@dataclass
class Received:
    raw: bytes
    metadata: dict[str, str]
    at: float
    accepted: bool

    @property
    def message(self) -> pb.HealthEvents:
        return pb.HealthEvents.FromString(self.raw)


class FakeConnector:
    """``script`` holds the answers to the next calls ("ok", "hang", ("delay", s), a
    grpc.StatusCode to refuse with, or ("exit",) to close the server mid-call); ``default``
    answers the rest."""

    def __init__(self, path: str) -> None:
        self.path = path
        self.target = "unix://" + path
        self.script: list[Any] = []
        self.default: Any = "ok"
        self.received: list[Received] = []
        self.calls = 0  # every call, including hung ones
        self.hung_at: list[float] = []  # time.monotonic() when each hung call arrived
        self.release = threading.Event()
        self._lock = threading.Lock()
        self._server: Optional[grpc.Server] = None

    def start(self) -> FakeConnector:
        self.release.clear()
        server = grpc.server(futures.ThreadPoolExecutor(max_workers=8))
        handler = grpc.method_handlers_generic_handler(SERVICE, {
            METHOD: grpc.unary_unary_rpc_method_handler(self._handle)})  # raw bytes in/out
        server.add_generic_rpc_handlers((handler,))
        server.add_insecure_port(self.target)
        server.start()
        self._server = server
        return self

    def stop(self) -> None:
        """Disappear: stop serving and remove the socket, like the real connector at exit."""
        self.release.set()
        if self._server is not None:
            self._server.stop(0).wait(5)
            self._server = None
        with contextlib.suppress(FileNotFoundError):
            os.unlink(self.path)

    def _handle(self, raw: bytes, context: grpc.ServicerContext) -> bytes:
        with self._lock:
            action = self.script.pop(0) if self.script else self.default
            self.calls += 1
        metadata = {k: v for k, v in context.invocation_metadata()
                    if isinstance(v, str)}
        if action == "hang":
            with self._lock:
                self.hung_at.append(time.monotonic())
            self.release.wait(60)
            context.abort(grpc.StatusCode.UNAVAILABLE, "hung")
        if isinstance(action, tuple) and action[0] == "delay":
            time.sleep(action[1])
        if isinstance(action, grpc.StatusCode):
            with self._lock:
                self.received.append(Received(raw, metadata, time.monotonic(), False))
            context.abort(action, f"refused by the test with {action.name}")
        with self._lock:
            self.received.append(Received(raw, metadata, time.monotonic(), True))
        return b""  # google.protobuf.Empty

    @property
    def accepted(self) -> list[Received]:
        with self._lock:
            return [r for r in self.received if r.accepted]

    def events(self) -> list[pb.HealthEvent]:
        return [e for r in self.accepted for e in r.message.events]

    def event_ids(self) -> list[str]:
        return [e.metadata["nichealthd.event_id"] for e in self.events()]


@pytest.fixture
def sockdir() -> Iterator[Path]:
    """A short directory for sockets (sun_path is limited to 108 bytes)."""
    path = tempfile.mkdtemp(prefix="nhc")
    yield Path(path)
    shutil.rmtree(path, ignore_errors=True)


@pytest.fixture
def connector(sockdir: Path) -> Iterator[FakeConnector]:
    """A connector that is NOT started yet (call .start())."""
    fake = FakeConnector(str(sockdir / "nvsentinel.sock"))
    yield fake
    fake.stop()


# The connector's keys as the tests name them -> its settings' fields (declared beside it).
CONNECTOR_FIELDS = {"platform_connector_socket": "socket",
                    "platform_connector_token_path": "token_path",
                    "connector_batch_interval": "batch_interval", "connector_timeout": "timeout"}


def with_connector(config: Config, **changes: Any) -> Config:
    """``config`` with its connector settings changed (surfaces/connector/settings.py)."""
    settings = replace(settings_of(config), **changes)
    others = tuple(s for s in config.family_settings if not isinstance(s, ConnectorSettings))
    return replace(config, family_settings=(*others, settings))


def make_config(tmp_path: Path, target: str, **kw: Any) -> Config:
    values: dict[str, Any] = dict(state_file=str(tmp_path / "state" / "state.json"),
                                  node_name="node-a")
    connector: dict[str, Any] = dict(socket=target, batch_interval=0.3, timeout=1.0)
    for name, value in kw.items():
        if name in CONNECTOR_FIELDS:
            connector[CONNECTOR_FIELDS[name]] = value
        else:
            values[name] = value
    os.makedirs(os.path.dirname(values["state_file"]), exist_ok=True)
    return with_connector(replace(Config(), **values), **connector)


def fatal(i: int = 0, at: datetime = T0, device: str = "mlx5_0") -> HealthEvent:
    return make_event("InfiniBandStateCheck", fatal=True, healthy=False,
                      message=f"Port {device} port 1: link_downed #{i}", error_code="link_downed",
                      entities=port_entities(device, 1), at=at)


def degraded(i: int = 0, at: datetime = T0, device: str = "mlx5_0") -> HealthEvent:
    return make_event("InfiniBandDegradationCheck", fatal=False, healthy=False,
                      message=f"Port {device} port 1: symbol_error #{i}",
                      error_code="symbol_error", entities=port_entities(device, 1), at=at)


def healthy(i: int = 0, at: datetime = T0, device: str = "mlx5_0") -> HealthEvent:
    return make_event("InfiniBandStateCheck", fatal=False, healthy=True,
                      message=f"Port {device} port 1: recovered #{i}", error_code="link_downed",
                      entities=port_entities(device, 1), at=at)


class Outbox:
    """A journal with the connector registered, committed like Monitor._commit does."""

    def __init__(self, config: Config) -> None:
        self.config = config
        self.journal = Journal(config.state_dir)
        self.journal.recover(None)
        self.journal.register([CONSUMER])

    def commit(self, events: list[HealthEvent]) -> list[JournalEntry]:
        entries = self.journal.stamp(events, self.journal.last_seq + 1, "node-a",
                                     "EXECUTE_REMEDIATION")
        self.journal.append(entries)
        return self.journal.committed()


@contextlib.contextmanager
def running(sender: Sender) -> Iterator[threading.Thread]:
    thread = threading.Thread(target=sender.run, args=(2.0,), daemon=True)
    thread.start()
    try:
        yield thread
    finally:
        sender.request_stop()
        thread.join(10)


# Every sender a test makes: one used through drain() (not run()) keeps its gRPC channel
# (an epoll fd and an eventfd) until closed, so close_senders closes them after each test.
_senders: list[Sender] = []


@pytest.fixture(autouse=True)
def close_senders() -> Iterator[None]:
    yield
    while _senders:
        _senders.pop().link.close()


def fast_sender(config: Config, journal: Journal, **pace: Any) -> Sender:
    """A sender with fast backoff; ``pace`` replaces fields of its Pace."""
    pace = {"backoff_base": 0.02, "backoff_cap": 0.2, "pause": 0.1, **pace}
    sender = Sender(config, journal, pace=replace(PACE, **pace))
    _senders.append(sender)
    return sender


def wait_for(predicate: Callable[[], Any], timeout: float = DEADLINE, what: str = "") -> Any:
    """tests.harness.wait_until that also returns the predicate's (true) value."""
    value: list[Any] = [None]

    def holds() -> bool:
        value[0] = predicate()
        return bool(value[0])

    wait_until(holds, what or repr(predicate), timeout)
    return value[0]


def ago(seconds: float) -> datetime:
    return datetime.now(timezone.utc) - timedelta(seconds=seconds)
