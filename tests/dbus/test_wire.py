"""Prepared replies and the per-client call budget, without a bus."""

from __future__ import annotations

from pathlib import Path

from nichealthd.surfaces.dbus_common import Message, MessageType, Variant
from nichealthd.surfaces.dbus_wire import (
    LIMITS_EXCEEDED,
    OVER_SENDER,
    OVER_TOTAL,
    Budget,
    CallLimiter,
    Prepared,
    PreparedReply,
    limits_exceeded,
)

BODY = [[{"device": Variant("s", "mlx5_0"), "port": Variant("x", 1),
          "healthy": Variant("b", True)}]]


def _call(serial: int = 7, sender: str = ":1.42") -> Message:
    return Message(message_type=MessageType.METHOD_CALL, member="ListPorts", serial=serial,
                   sender=sender, path="/org/nichealthd/NicHealth1")


def test_prepared_reply_is_byte_identical_to_the_library_reply() -> None:
    prepared = Prepared.of("aa{sv}", BODY)
    for serial, sender, own_serial in ((7, ":1.42", 3), (123456, ":1.1000", 99)):
        call = _call(serial, sender)
        ours = PreparedReply(call, prepared)
        ours.serial = own_serial
        theirs = Message.new_method_return(call, "aa{sv}", BODY)
        theirs.serial = own_serial
        assert bytes(ours._marshall(False)) == bytes(theirs._marshall(False))


def test_the_body_is_marshalled_once_and_shared() -> None:
    prepared = Prepared.of("aa{sv}", BODY)
    first, second = PreparedReply(_call(1), prepared), PreparedReply(_call(2, ":1.9"), prepared)
    first.serial, second.serial = 10, 11
    a, b = bytes(first._marshall(False)), bytes(second._marshall(False))
    assert a.endswith(prepared.body) and b.endswith(prepared.body)
    assert a != b  # each caller gets its own header (reply serial, destination)


def test_a_sender_gets_its_burst_then_its_rate() -> None:
    now = [0.0]
    limiter = CallLimiter(Budget(10, 20), Budget(1000, 1000), clock=lambda: now[0])
    assert sum(limiter.allow(":1.5") for _ in range(100)) == 20
    assert limiter.allow(":1.6")  # another client is not affected
    now[0] += 1.0
    assert sum(limiter.allow(":1.5") for _ in range(100)) == 10


def test_all_senders_together_are_bounded() -> None:
    now = [0.0]
    limiter = CallLimiter(Budget(10, 20), Budget(50, 100), clock=lambda: now[0])
    # 1000 connections (unique names are free to make) get 100 answers in all, not 20000.
    allowed = sum(limiter.allow(f":1.{i}") for i in range(1000) for _ in range(20))
    assert allowed == 100
    now[0] += 1.0
    allowed = sum(limiter.allow(f":1.{i}") for i in range(1000) for _ in range(20))
    assert allowed == 50


def test_root_spends_only_from_its_own_budget() -> None:
    """A flood empties the budget all clients share: others are refused for it (their own
    tokens given back), root is not; root's own burst still bounds root."""
    now = [0.0]
    limiter = CallLimiter(Budget(10, 20), Budget(50, 100), clock=lambda: now[0])
    assert sum(limiter.allow(f":1.{i}") for i in range(100) for _ in range(20)) == 100
    assert limiter.take(":1.500") == OVER_TOTAL
    assert limiter.take(":1.501", privileged=True) == ""
    assert sum(limiter.allow(":1.501", privileged=True) for _ in range(100)) == 19
    assert limiter.take(":1.501", privileged=True) == OVER_SENDER


def test_the_sender_table_is_bounded() -> None:
    now = [0.0]
    limiter = CallLimiter(Budget(10, 20), max_senders=64, clock=lambda: now[0])
    for i in range(10000):
        now[0] += 0.001
        limiter.allow(f":1.{i}")
        assert limiter.senders() <= 64


def test_refusal_is_the_standard_error() -> None:
    reply = limits_exceeded(_call(), CallLimiter())
    assert reply.message_type == MessageType.ERROR
    assert reply.error_name == LIMITS_EXCEEDED and reply.reply_serial == 7
    assert "calls/s per client" in reply.body[0]


def test_big_answers_cost_more_but_always_fit() -> None:
    now = [0.0]
    limiter = CallLimiter(Budget(20, 60), Budget(200, 200), clock=lambda: now[0])
    mib = 1024 * 1024
    assert sum(limiter.allow(":1.5", mib) for _ in range(10)) == 3  # 17 tokens each
    now[0] += 60.0
    assert limiter.allow(":1.5", 100 * mib)  # costs a full burst, never more
    assert not limiter.allow(":1.5", 100 * mib)


def test_a_call_before_the_service_serves_goes_to_the_library(tmp_path: Path) -> None:
    """A call can arrive while request_name is being answered, before ``_connect`` has set
    ``bus``: the handler must pass it on to the library's dispatch (which answers it), never
    take it and send no reply (a client then waits for its timeout)."""
    from nichealthd.sources.config_file import load_config
    from nichealthd.storage.store import Journal
    from nichealthd.surfaces.connector.status import ConnectorStatus
    from nichealthd.surfaces.context import PollStats, ServiceContext
    from nichealthd.surfaces.dbus_api import DbusService

    (tmp_path / "c.toml").write_text(f'stateFile = "{tmp_path}/state.json"\n')
    config = load_config(str(tmp_path / "c.toml"))
    context = ServiceContext(
        journal=Journal(config.state_dir), config_path=str(tmp_path / "c.toml"),
        config=lambda: config, view=lambda: None,
        stats=lambda: PollStats(0, 0.0, None, None, "", {}, 0, 0), status=lambda: {},
        reload_error=lambda: "", request_reload=lambda: None,
        connector=ConnectorStatus)
    service = DbusService(context)
    assert service.bus is None
    assert service._on_call(_call()) is False
