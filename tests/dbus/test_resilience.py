"""The D-Bus API never costs monitoring: no bus, a taken name, a flooding client."""

from __future__ import annotations

import asyncio
import os
import tempfile
import time
from pathlib import Path
from typing import Any

from dbushelpers import POLL, BusClient, make_sim, run, wait_log
from testbus import start_bus

from nichealthd.surfaces.dbus_common import (
    BUS_NAME,
    INTERFACE,
    OBJECT_PATH,
    BusType,
    Message,
    MessageBus,
    NameFlag,
)
from tests.harness import wait_until_async

WINDOW = 1.0  # seconds of one quiet or flooded window


async def get_poll_count(client: BusClient) -> int:
    reply = await client.call("Get", "ss", [INTERFACE, "PollCount"],
                              interface="org.freedesktop.DBus.Properties")
    assert reply.message_type.name == "METHOD_RETURN", (reply.error_name, reply.body)
    return int(reply.body[0].value)


def test_no_bus_logs_one_error_keeps_monitoring_and_connects_later(start_daemon: Any,
                                                                  tmp_path: Path) -> None:
    bus_dir = Path(os.environ["DBUS_SYSTEM_BUS_ADDRESS"].split("path=")[1].split(",")[0]).parent
    missing = f"unix:path={bus_dir}/not-yet"
    root = make_sim()
    daemon = start_daemon(root=root, wait=False, address=missing, extra=["--log-level", "debug"])
    # At least two failed attempts: the first is logged as an error, the next at debug level.
    wait_log(daemon, "D-Bus API still unavailable")
    log = wait_log(daemon, "ready:")
    assert daemon.proc.poll() is None, log
    errors = [line for line in log.splitlines() if "D-Bus API unavailable" in line]
    assert len(errors) == 1, log
    assert "not-yet" in errors[0] and "monitoring continues" in errors[0]
    assert "ready:" in log  # polling went on
    # The events were committed without the bus (the sim config writes an event log).
    assert (root / "events.jsonl").stat().st_size > 0


def test_reconnects_when_the_bus_appears(start_daemon: Any) -> None:
    directory = tempfile.mkdtemp(prefix="nichealthd-latebus-")
    address = f"unix:path={directory}/system_bus_socket"
    daemon = start_daemon(wait=False, address=address)
    wait_log(daemon, "D-Bus API unavailable")  # it has failed at least once
    late = start_bus(directory=directory)
    try:
        wait_log(daemon, "D-Bus API serving")

        async def health() -> Any:
            bus = await MessageBus(bus_address=late.address).connect()
            try:
                return await bus.call(Message(
                    destination=BUS_NAME, path=OBJECT_PATH, member="Get", signature="ss",
                    interface="org.freedesktop.DBus.Properties", body=[INTERFACE, "Health"]))
            finally:
                bus.disconnect()

        reply = run(health())
        assert reply.body[0].value == "healthy", reply.body
    finally:
        daemon.stop()
        late.stop()


def test_name_taken_logs_one_error_keeps_polling_and_takes_over_later(
        start_daemon: Any) -> None:
    async def scenario() -> None:
        squatter = await MessageBus(bus_type=BusType.SYSTEM).connect()
        reply = await squatter.request_name(BUS_NAME, NameFlag.DO_NOT_QUEUE)
        assert reply.name == "PRIMARY_OWNER"
        daemon = start_daemon(wait=False, extra=["--log-level", "debug"])
        # Two failed attempts (the second logs at debug level), and polling went on.

        async def retried_and_polling() -> bool:
            assert daemon.proc.poll() is None, daemon.log()
            return all(n in daemon.log() for n in ("D-Bus API still unavailable", "ready:"))

        await wait_until_async(retried_and_polling, "a retry and polling", detail=daemon.log)
        log = daemon.log()
        assert daemon.proc.poll() is None
        errors = [line for line in log.splitlines() if "D-Bus API unavailable" in line]
        assert len(errors) == 1 and "already owned" in errors[0], log
        assert "ready:" in log
        squatter.disconnect()

        async def serving() -> bool:
            return "D-Bus API serving" in daemon.log()

        await wait_until_async(serving, "the take-over of the name", detail=daemon.log)

    run(scenario())


def test_polling_stays_on_schedule_while_a_client_floods_list_counters(daemon: Any) -> None:
    """A flood of large replies does not starve the poll loop. The polls of the flood's
    seconds are compared with those of quiet seconds interleaved with them, so a host whose
    load delays every poll (a loaded 2-core machine) delays both alike."""
    async def scenario() -> tuple[float, float, int]:
        async with BusClient() as flooder, BusClient() as observer:
            calls = 0
            rates: dict[bool, list[float]] = {False: [], True: []}

            async def window(flooding: bool) -> None:
                nonlocal calls
                before, started = await get_poll_count(observer), time.monotonic()
                while time.monotonic() - started < WINDOW:
                    if flooding:  # 32 calls in flight at a time, as fast as the bus takes them
                        await asyncio.gather(*(flooder.call("ListCounters", "su", ["", 0])
                                               for _ in range(32)))
                        calls += 32
                    else:
                        await asyncio.sleep(0.05)
                elapsed = time.monotonic() - started
                rates[flooding].append((await get_poll_count(observer) - before) / elapsed)

            for _ in range(3):
                await window(False)
                await window(True)
            return sum(rates[False]), sum(rates[True]), calls

    quiet, flooded, calls = run(scenario())
    # It really was a flood: more than its budget (60 tokens + 20/s, an 80 KB ListCounters
    # costing 2.2, surfaces/dbus_wire.py); the calls over it waited in its queue or came back
    # LimitsExceeded, which also counts as an answer.
    assert calls > 60, calls
    # Half the quiet seconds' rate: a loop starved by the flood falls far below it.
    assert quiet > 0 and flooded >= 0.5 * quiet, (quiet, flooded, calls, POLL)
    assert "lost the connection" not in daemon.log()
