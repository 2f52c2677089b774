"""The sender against a real gRPC server on a unix socket: delivery, routing, outages,
dead letters, tokens, hangs and ``--once`` delivery."""

from __future__ import annotations

import json
import logging
import os
import time
from datetime import timedelta
from pathlib import Path

import grpc
import pytest

from nichealthd.core.events import make_event
from nichealthd.storage.store import Journal
from nichealthd.surfaces.connector import health_event_pb2 as pb
from nichealthd.surfaces.connector.outbox import CONSUMER
from nichealthd.surfaces.connector.sender import (
    DEADLETTER_NAME,
    cut_batch,
    deliver_pending_once,
    socket_path,
)
from nichealthd.surfaces.connector.settings import ConnectorSettings, settings_of

from ..harness import DEADLINE
from .connector_fixtures import (
    FakeConnector,
    Outbox,
    ago,
    degraded,
    fast_sender,
    fatal,
    healthy,
    make_config,
    running,
    wait_for,
    with_connector,
)


def test_socket_path() -> None:
    assert socket_path("unix:///run/nvsentinel/nvsentinel.sock") == \
        "/run/nvsentinel/nvsentinel.sock"
    assert socket_path("unix:relative/x.sock") == "relative/x.sock"
    assert socket_path("unix:/abs/x.sock") == "/abs/x.sock"
    assert socket_path("localhost:50051") is None


def test_delivery_and_decoding(tmp_path: Path, connector: FakeConnector) -> None:
    connector.start()
    config = make_config(tmp_path, connector.target)
    outbox = Outbox(config)
    entries = outbox.commit([fatal(1), degraded(2), healthy(3)])
    sender = fast_sender(config, outbox.journal)
    with running(sender):
        wait_for(lambda: len(connector.events()) == 3, what="3 events")
    (request,) = connector.accepted
    message = request.message
    assert message.version == 1
    first = message.events[0]
    assert first.agent == "nic-health-monitor"
    assert first.componentClass == "NIC"
    assert first.checkName == "InfiniBandStateCheck"
    assert first.isFatal and not first.isHealthy
    assert first.recommendedAction == pb.REPLACE_VM
    assert list(first.errorCode) == ["link_downed"]
    assert [(e.entityType, e.entityValue) for e in first.entitiesImpacted] == [
        ("NIC", "mlx5_0"), ("NICPort", "1")]
    assert first.metadata["nichealthd.event_id"] == entries[0].event.event_id
    assert first.generatedTimestamp.ToDatetime().replace(
        tzinfo=entries[0].event.generated_at.tzinfo) == entries[0].event.generated_at
    assert first.nodeName == "node-a"
    assert first.processingStrategy == pb.EXECUTE_REMEDIATION
    assert [e.recommendedAction for e in message.events] == [pb.REPLACE_VM, pb.NONE, pb.NONE]
    assert "authorization" not in request.metadata
    assert connector.event_ids() == [e.event.event_id for e in entries]
    assert outbox.journal.depth(CONSUMER) == 0
    assert sender.status.state == "connected"
    assert sender.status.sent == 3


def test_absent_connector_then_present_delivers_everything_in_order(
        tmp_path: Path, connector: FakeConnector) -> None:
    config = make_config(tmp_path, connector.target)
    outbox = Outbox(config)
    sender = fast_sender(config, outbox.journal)
    committed = []
    with running(sender):
        for i in range(40):  # 40 "polls" with the connector absent
            committed += outbox.commit([fatal(i), degraded(i), healthy(i)])
            sender.wake()
            time.sleep(0.01)
        assert connector.received == []
        assert sender.link.connects == 0  # a missing socket costs no connect attempt
        # Never there since start: a host without NVSentinel, not a connector that is down.
        assert sender.status.state == "not installed"
        assert "does not exist" in sender.status.last_error
        assert sender.status.outbox_depth == 120
        connector.start()
        wait_for(lambda: len(connector.events()) == 120, what="120 events")
    assert connector.event_ids() == [e.event.event_id for e in committed]
    assert outbox.journal.depth(CONSUMER) == 0


def test_never_installed_is_one_info_line_and_the_outbox_keeps_its_bound(
        tmp_path: Path, connector: FakeConnector, caplog: pytest.LogCaptureFixture) -> None:
    """A host without NVSentinel (README): its socket never existed since start, so the
    state is "not installed", said once at INFO, never a "down" warning; the bound holds."""
    config = make_config(tmp_path, connector.target, outbox_max_events=10)
    outbox = Outbox(config)
    sender = fast_sender(config, outbox.journal)
    assert sender.status.state == "not installed"
    with caplog.at_level(logging.INFO, logger="nichealthd.connector"):
        for i in range(30):
            outbox.commit([degraded(i)])
            sender.step()
    assert sender.status.state == "not installed" and sender.link.connects == 0
    assert outbox.journal.depth(CONSUMER) == 10  # the oldest degraded events went first
    told = [r.getMessage() for r in caplog.records if r.levelno >= logging.INFO]
    assert len([m for m in told if m.startswith("platform connector not installed")]) == 1
    assert len([m for m in told if m.startswith("outbox over its bound")]) == 1, told
    assert not [r for r in caplog.records if r.levelno >= logging.WARNING], told


def test_connector_disappears_mid_run_and_comes_back(
        tmp_path: Path, connector: FakeConnector) -> None:
    connector.start()
    config = make_config(tmp_path, connector.target)
    outbox = Outbox(config)
    sender = fast_sender(config, outbox.journal)
    committed = []
    with running(sender):
        committed += outbox.commit([fatal(0)])
        sender.wake()
        wait_for(lambda: len(connector.events()) == 1)
        connector.stop()
        for i in range(1, 20):
            committed += outbox.commit([fatal(i), degraded(i)])
            sender.wake()
            time.sleep(0.01)
        wait_for(lambda: sender.status.state == "down", what="down")
        connector.start()
        wait_for(lambda: len(connector.events()) == 39, what="all events")
    ids = connector.event_ids()
    assert sorted(set(ids), key=ids.index) == [e.event.event_id for e in committed]


def test_server_closing_mid_call_is_retried(tmp_path: Path, connector: FakeConnector) -> None:
    """UNAVAILABLE / reset / EOF: the batch stays and is sent again."""
    connector.start()
    connector.script = [grpc.StatusCode.UNAVAILABLE, grpc.StatusCode.UNKNOWN,
                        grpc.StatusCode.INTERNAL]
    config = make_config(tmp_path, connector.target)
    outbox = Outbox(config)
    entries = outbox.commit([fatal(1), healthy(2)])
    sender = fast_sender(config, outbox.journal)
    with running(sender):
        wait_for(lambda: connector.accepted, what="acceptance")
    assert len(connector.received) == 4
    assert connector.event_ids() == [e.event.event_id for e in entries]
    assert sender.status.errors == 3
    assert sender.status.dead_letters == 0


def test_invalid_argument_batch_is_dead_lettered_and_later_batches_arrive(
        tmp_path: Path, connector: FakeConnector) -> None:
    connector.start()
    connector.script = [grpc.StatusCode.INVALID_ARGUMENT]
    config = make_config(tmp_path, connector.target)
    outbox = Outbox(config)
    refused = outbox.commit([fatal(1), degraded(1)])
    sender = fast_sender(config, outbox.journal)
    with running(sender):
        wait_for(lambda: sender.status.dead_letters == 2, what="dead letter")
        later = outbox.commit([fatal(2)]) + outbox.commit([healthy(3)])
        sender.wake()
        wait_for(lambda: len(connector.events()) == 2, what="later batches")
    assert connector.event_ids() == [e.event.event_id for e in later]
    lines = [json.loads(line) for line in
             (Path(config.state_dir) / DEADLETTER_NAME).read_text().splitlines()]
    assert [line["event"]["metadata"]["nichealthd.event_id"] for line in lines] == [
        e.event.event_id for e in refused]
    assert {line["code"] for line in lines} == {"INVALID_ARGUMENT"}
    assert "refused by the test" in lines[0]["error"]
    assert outbox.journal.depth(CONSUMER) == 0
    assert sender.status.state == "connected"
    assert "INVALID_ARGUMENT" in sender.status.last_error
    # A new sender (a restart) counts the dead letters already on disk.
    assert fast_sender(config, outbox.journal).status.dead_letters == 2


@pytest.mark.parametrize("code", [grpc.StatusCode.PERMISSION_DENIED,
                                  grpc.StatusCode.UNAUTHENTICATED,
                                  grpc.StatusCode.UNIMPLEMENTED,
                                  grpc.StatusCode.FAILED_PRECONDITION])
def test_permanent_codes_never_block(tmp_path: Path, connector: FakeConnector,
                                     code: grpc.StatusCode) -> None:
    connector.start()
    connector.script = [code]
    config = make_config(tmp_path, connector.target)
    outbox = Outbox(config)
    outbox.commit([fatal(1)])
    sender = fast_sender(config, outbox.journal)
    assert sender.drain(sender.pace.clock() + 5) == 0
    later = outbox.commit([fatal(2)])
    assert sender.drain(sender.pace.clock() + 5) == 1
    assert connector.event_ids() == [later[0].event.event_id]
    assert sender.status.dead_letters == 1


def test_routing_degraded_waits_for_batch_interval_fatal_goes_at_once(
        tmp_path: Path, connector: FakeConnector) -> None:
    connector.start()
    config = make_config(tmp_path, connector.target, connector_batch_interval=0.6)
    outbox = Outbox(config)
    sender = fast_sender(config, outbox.journal)
    with running(sender):
        wait_for(lambda: sender.status.state == "connected", what="probe")
        started = time.monotonic()
        first = outbox.commit([degraded(1, at=ago(0))])
        sender.wake()
        second = outbox.commit([degraded(2, at=ago(0))])  # arrives while the first is held
        sender.wake()
        wait_for(lambda: connector.accepted, what="degraded batch")
        held = connector.accepted[0].at - started
        assert 0.5 <= held < 3.0, held  # held for the batch interval (0.6 s), then sent
        assert len(connector.accepted) == 1  # both degraded events in one batch
        assert connector.event_ids() == [first[0].event.event_id, second[0].event.event_id]
        # From here a degraded event would be held for longer than any wait below, so "at
        # once" is told from "held" by that, not by a bound on the machine's speed.
        hold = 2 * DEADLINE
        sender.reconfigure(with_connector(config, batch_interval=hold))
        # a degraded event followed by a fatal one: both go at once, in order
        started = time.monotonic()
        third = outbox.commit([degraded(3, at=ago(0))]) + outbox.commit([fatal(4, at=ago(0))])
        sender.wake()
        wait_for(lambda: len(connector.accepted) == 2, what="fatal batch")
        assert connector.accepted[1].at - started < hold  # at once, not held
        assert connector.event_ids()[2:] == [e.event.event_id for e in third]
        started = time.monotonic()
        outbox.commit([healthy(5, at=ago(0))])
        sender.wake()
        wait_for(lambda: len(connector.accepted) == 3, what="healthy batch")
        assert connector.accepted[2].at - started < hold  # at once, not held


def test_batches_are_bounded(tmp_path: Path, connector: FakeConnector) -> None:
    connector.start()
    config = make_config(tmp_path, connector.target)
    outbox = Outbox(config)
    entries = outbox.commit([fatal(i) for i in range(1200)])
    sender = fast_sender(config, outbox.journal)
    assert sender.drain(sender.pace.clock() + 10) == 1200
    assert [len(r.message.events) for r in connector.accepted] == [500, 500, 200]
    assert connector.event_ids() == [e.event.event_id for e in entries]


def test_cut_batch_keeps_clear_all_strictly_older(tmp_path: Path) -> None:
    config = make_config(tmp_path, "unix:/nonexistent")
    outbox = Outbox(config)
    t = ago(10)
    clear = make_event("InfiniBandStateCheck", fatal=False, healthy=True, message="clear",
                       error_code="reboot_clear", entities=(), at=t)
    other_clear = make_event("EthernetStateCheck", fatal=False, healthy=True, message="clear",
                             error_code="reboot_clear", entities=(), at=t)
    entries = outbox.commit([fatal(0, at=t - timedelta(seconds=1)), clear, other_clear,
                             healthy(1, at=t), healthy(2, at=t + timedelta(milliseconds=1))])
    # the same-check baseline at the clear's timestamp starts a new batch
    assert cut_batch(entries) == entries[:3]
    assert cut_batch(entries[3:]) == entries[3:]
    # a clock step back ends a batch
    back = outbox.commit([fatal(3, at=t), fatal(4, at=t - timedelta(seconds=5))])
    assert cut_batch(back) == back[:1]


def test_token_is_sent_and_reread_for_every_call(tmp_path: Path,
                                                 connector: FakeConnector) -> None:
    connector.start()
    token = tmp_path / "token"
    token.write_text("first-token\n")
    config = make_config(tmp_path, connector.target, platform_connector_token_path=str(token))
    outbox = Outbox(config)
    sender = fast_sender(config, outbox.journal)
    outbox.commit([fatal(1)])
    sender.drain(sender.pace.clock() + 5)
    token.write_text("second-token")
    outbox.commit([fatal(2)])
    sender.drain(sender.pace.clock() + 5)
    assert [r.metadata.get("authorization") for r in connector.accepted] == [
        "Bearer first-token", "Bearer second-token"]


def test_unreadable_token_is_transient(tmp_path: Path, connector: FakeConnector,
                                       caplog: pytest.LogCaptureFixture) -> None:
    connector.start()
    token = tmp_path / "token"
    config = make_config(tmp_path, connector.target, platform_connector_token_path=str(token))
    outbox = Outbox(config)
    entries = outbox.commit([fatal(1)])
    sender = fast_sender(config, outbox.journal)
    with running(sender):
        wait_for(lambda: sender.status.errors >= 5, what="retries")
        assert connector.received == []
        assert sender.status.state == "down"
        assert "token" in sender.status.last_error
        staged = tmp_path / "token.new"  # a private token, in place at once (nichealthd.toml(5):
        staged.write_text("late")  # a readable one would add its own warning line)
        staged.chmod(0o600)
        staged.rename(token)
        wait_for(lambda: connector.accepted, what="delivery")
    assert connector.event_ids() == [entries[0].event.event_id]
    assert sender.status.dead_letters == 0
    token_lines = [r for r in caplog.records if "token" in r.getMessage()]
    assert len(token_lines) == 1  # logged once, not per retry


def test_hanging_connector_times_out_and_retries(tmp_path: Path,
                                                 connector: FakeConnector) -> None:
    connector.start()
    connector.script = ["hang"]
    config = make_config(tmp_path, connector.target, connector_timeout=0.3)
    outbox = Outbox(config)
    entries = outbox.commit([fatal(1)])
    sender = fast_sender(config, outbox.journal)
    with running(sender):
        wait_for(lambda: "DEADLINE_EXCEEDED" in sender.status.last_error, what="timeout")
        wait_for(lambda: connector.accepted, what="retry accepted")
    assert connector.event_ids() == [entries[0].event.event_id]


def test_deliver_pending_once(tmp_path: Path, connector: FakeConnector) -> None:
    config = make_config(tmp_path, connector.target, connector_timeout=0.5)
    outbox = Outbox(config)
    entries = outbox.commit([degraded(1, at=ago(0)), fatal(2)])
    assert deliver_pending_once(config, outbox.journal) == 0  # no socket: nothing tried
    connector.start()
    connector.script = ["hang"]
    started = time.monotonic()
    assert deliver_pending_once(config, outbox.journal) == 0
    assert time.monotonic() - started < 1.5  # bounded by connector_timeout
    assert deliver_pending_once(config, outbox.journal) == 2  # degraded is not held
    assert connector.event_ids() == [e.event.event_id for e in entries]
    reloaded = Journal(config.state_dir)
    reloaded.recover(None)
    assert reloaded.depth(CONSUMER) == 0  # the cursor is persisted


@pytest.mark.root  # CI runs it in its root stage
def test_default_socket_path(tmp_path: Path) -> None:
    """The default target unix:///run/nvsentinel/nvsentinel.sock (only where it is free)."""
    path = "/run/nvsentinel/nvsentinel.sock"
    if os.path.exists(path) or os.geteuid() != 0:
        pytest.skip("needs root and a free /run/nvsentinel/nvsentinel.sock")
    made_dir = not os.path.isdir("/run/nvsentinel")
    os.makedirs("/run/nvsentinel", exist_ok=True)
    fake = FakeConnector(path).start()
    try:
        config = make_config(tmp_path, "unix:///run/nvsentinel/nvsentinel.sock")
        assert settings_of(config).socket == ConnectorSettings().socket
        outbox = Outbox(config)
        entries = outbox.commit([fatal(1)])
        assert deliver_pending_once(config, outbox.journal) == 1
        assert fake.event_ids() == [entries[0].event.event_id]
    finally:
        fake.stop()
        if made_dir:
            os.rmdir("/run/nvsentinel")


def test_throughput(tmp_path: Path, connector: FakeConnector) -> None:
    """Measured: events per second delivered from a 20 000-event backlog."""
    connector.start()
    config = make_config(tmp_path, connector.target)
    outbox = Outbox(config)
    for chunk in range(20):
        outbox.commit([degraded(chunk * 1000 + i) for i in range(1000)])
    sender = fast_sender(config, outbox.journal)
    started = time.monotonic()
    assert sender.drain(sender.pace.clock() + 60) == 20000
    elapsed = time.monotonic() - started
    print(f"delivered 20000 events in {elapsed:.2f} s: {20000 / elapsed:.0f} events/s")
    assert len(set(connector.event_ids())) == 20000


def test_reload_to_a_new_target(tmp_path: Path, sockdir: Path) -> None:
    """SIGHUP with a new --platform-connector-socket: later events go to the new one."""
    old = FakeConnector(str(sockdir / "old.sock")).start()
    new = FakeConnector(str(sockdir / "new.sock")).start()
    try:
        config = make_config(tmp_path, old.target)
        outbox = Outbox(config)
        sender = fast_sender(config, outbox.journal)
        first = outbox.commit([fatal(1)])
        sender.drain(sender.pace.clock() + 5)
        sender.reconfigure(make_config(tmp_path, new.target))
        second = outbox.commit([fatal(2)])
        sender.drain(sender.pace.clock() + 5)
        assert old.event_ids() == [first[0].event.event_id]
        assert new.event_ids() == [second[0].event.event_id]
        assert sender.status.target == new.target
    finally:
        old.stop()
        new.stop()


def test_an_absent_socket_is_looked_for_every_probe_cap_without_jitter(tmp_path: Path) -> None:
    """The socket file is looked for with a stat: exponential up to probe_cap and not
    jittered (a host without NVSentinel wakes every probe_cap, not every probe_cap / 2 on
    average); a connector that answers badly is still retried with full jitter."""
    config = make_config(tmp_path, "unix://" + str(tmp_path / "absent.sock"))
    now = [100.0]
    sender = fast_sender(config, Outbox(config).journal, backoff_base=0.5, pause=5.0,
                         jitter=lambda: 0.25, clock=lambda: now[0])
    delays = []
    for _ in range(6):
        delays.append(sender.step())
        now[0] += delays[-1]
    assert delays == [0.5, 1.0, 2.0, 4.0, 5.0, 5.0]
    assert sender.status.state == "not installed"
    assert sender.backoff(8.0) == 8.0 * 0.25  # the other retries keep their jitter
