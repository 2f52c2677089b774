"""A hostile local D-Bus client for the flood test and bench/dbus_flood.py.

Run as its own process (``python floodclient.py ADDRESS CALLS CONCURRENCY``), usually as
nobody. It connects, prints "ready", waits for a line on stdin, then sends CALLS method calls
to nichealthd, CONCURRENCY of them in flight at a time, cycling through every read-only
member (ListPorts, ListDevices, ListCounters, ListEvents, GetStatus, a property Get/GetAll,
Introspect), and prints one JSON line: how many calls were answered, refused with
LimitsExceeded, failed otherwise, and the seconds it took.
"""

from __future__ import annotations

import asyncio
import json
import sys
import time
from typing import Any

from dbus_fast import Message, MessageType
from dbus_fast.aio import MessageBus

BUS_NAME = "org.nichealthd.NicHealth1"
OBJECT_PATH = "/org/nichealthd/NicHealth1"
INTERFACE = "org.nichealthd.NicHealth1"
PROPS = "org.freedesktop.DBus.Properties"
LIMITED = "org.freedesktop.DBus.Error.LimitsExceeded"

CALLS: list[tuple[str, str, str, list[Any]]] = [
    (INTERFACE, "ListPorts", "", []),
    (INTERFACE, "ListCounters", "su", ["", 0]),
    (INTERFACE, "GetStatus", "", []),
    (INTERFACE, "ListDevices", "", []),
    (INTERFACE, "ListEvents", "u", [0]),
    (PROPS, "GetAll", "s", [INTERFACE]),
    (PROPS, "Get", "ss", [INTERFACE, "PollCount"]),
    ("org.freedesktop.DBus.Introspectable", "Introspect", "", []),
]


async def flood(address: str, calls: int, concurrency: int, wait_for_go: bool = True
                ) -> dict[str, Any]:
    bus = await MessageBus(bus_address=address).connect()
    # Connected and imported: wait for the go, so that 20 Python start-ups (CPU the daemon
    # cannot help sharing) are not part of the flood.
    if wait_for_go:
        print("ready", flush=True)
        await asyncio.get_running_loop().run_in_executor(None, sys.stdin.readline)
    counts = {"ok": 0, "limited": 0, "error": 0, "timeout": 0}
    errors: dict[str, int] = {}
    started = time.monotonic()
    sem = asyncio.Semaphore(concurrency)

    async def one(i: int) -> None:
        interface, member, signature, body = CALLS[i % len(CALLS)]
        async with sem:
            try:
                reply = await asyncio.wait_for(bus.call(Message(
                    destination=BUS_NAME, path=OBJECT_PATH, interface=interface,
                    member=member, signature=signature, body=body)), 60)
            except asyncio.TimeoutError:
                counts["timeout"] += 1
                return
        if reply.message_type == MessageType.METHOD_RETURN:
            counts["ok"] += 1
        elif reply.error_name == LIMITED:
            counts["limited"] += 1
        else:
            counts["error"] += 1
            errors[str(reply.error_name)] = errors.get(str(reply.error_name), 0) + 1

    try:
        await asyncio.gather(*(one(i) for i in range(calls)))
    finally:
        bus.disconnect()
    return dict(counts, seconds=time.monotonic() - started, errors=errors)


def main() -> int:
    address, calls, concurrency = sys.argv[1], int(sys.argv[2]), int(sys.argv[3])
    print(json.dumps(asyncio.run(flood(address, calls, concurrency))), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
