"""nichealthctl over D-Bus: the :class:`~nichealthd.cli.transport.Transport` of the system bus.

Its own module because it needs a D-Bus library (dbus-fast or dbus-next), which a host may
lack (RHEL 9 has none for Python): :func:`nichealthd.cli.connect.connect` imports it only
when it tries the bus, and without the library goes to the varlink socket.
"""

from __future__ import annotations

import asyncio
import contextlib
from typing import AsyncIterator, List, Optional, Sequence, Tuple

from ..surfaces.dbus_common import (
    BUS_NAME,
    ERROR_PREFIX,
    INTERFACE,
    OBJECT_PATH,
    POLICY_FILE,
    Message,
    MessageBus,
    MessageType,
    bus_address,
    bus_type,
    from_variants,
    harden_writer,
)
from .transport import (
    EXIT_FAILURE,
    EXIT_USAGE,
    BusUnreachable,
    ClientRecord,
    CtlError,
    Note,
    Transport,
    record_of,
    records_of,
)

_UNREACHABLE_ERRORS = {
    "org.freedesktop.DBus.Error.ServiceUnknown",
    "org.freedesktop.DBus.Error.NameHasNoOwner",
    "org.freedesktop.DBus.Error.UnknownObject",
    "org.freedesktop.DBus.Error.Disconnected",
}
_TIMEOUT_ERRORS = {"org.freedesktop.DBus.Error.NoReply", "org.freedesktop.DBus.Error.Timeout"}


class DbusTransport(Transport):
    """Calls on the nichealthd object on the system (or session) bus."""

    kind = "dbus"

    def __init__(self, bus: str, timeout: float) -> None:
        self.bus_kind = bus
        self.timeout = timeout
        self.bus: Optional[MessageBus] = None

    @property
    def address(self) -> str:
        return f"{self.bus_kind} bus {bus_address(self.bus_kind)}"

    async def __aenter__(self) -> DbusTransport:
        try:
            self.bus = await asyncio.wait_for(
                MessageBus(bus_type=bus_type(self.bus_kind)).connect(), self.timeout)
            harden_writer(self.bus)
        except asyncio.TimeoutError:
            raise BusUnreachable(f"the {self.bus_kind} bus at {bus_address(self.bus_kind)} "
                                 f"did not answer within {self.timeout:g} s") from None
        except Exception as exc:
            reason = getattr(exc, "strerror", None) or str(exc) or type(exc).__name__
            raise BusUnreachable(f"cannot reach the {self.bus_kind} bus at "
                                 f"{bus_address(self.bus_kind)}: {reason} (is dbus running?)"
                                 ) from None
        return self

    async def __aexit__(self, *exc: object) -> None:
        if self.bus is not None:
            with contextlib.suppress(Exception):
                self.bus.disconnect()

    def unreachable(self) -> CtlError:
        return CtlError(f"cannot reach nichealthd on the {self.bus_kind} bus ({BUS_NAME}): "
                        f"is the daemon running? Try: systemctl status nichealthd")

    async def call(self, member: str, signature: str = "", body: Sequence[object] = (),
                   interface: str = INTERFACE, destination: str = BUS_NAME,
                   path: str = OBJECT_PATH) -> List[object]:
        assert self.bus is not None
        message = Message(destination=destination, path=path, interface=interface,
                          member=member, signature=signature, body=list(body))
        try:
            reply = await asyncio.wait_for(self.bus.call(message), self.timeout)
        except asyncio.TimeoutError:
            raise CtlError(f"nichealthd did not answer {member} within {self.timeout:g} s on "
                           f"the {self.bus_kind} bus (is it stuck? see journalctl -u "
                           f"nichealthd)") from None
        except Exception as exc:
            raise CtlError(f"lost the {self.bus_kind} bus while calling {member}: {exc}"
                           ) from None
        if reply is None:
            raise self.unreachable()
        if reply.message_type == MessageType.ERROR:
            raise self._error(member, reply.error_name or "", reply.body)
        return list(reply.body)

    def _error(self, member: str, name: str, body: Sequence[object]) -> CtlError:
        text = str(body[0]) if body else name
        if name in _UNREACHABLE_ERRORS:
            return self.unreachable()
        if name in _TIMEOUT_ERRORS:
            return CtlError(f"nichealthd did not answer {member} in time: {text}")
        if name.endswith(".AccessDenied"):
            return CtlError(f"the {self.bus_kind} bus denied {member} to this user ({text}); "
                            f"check the D-Bus policy {POLICY_FILE}")
        if name == ERROR_PREFIX + "NotReady":
            return CtlError(f"{text}; try again in a moment")
        if name.startswith(ERROR_PREFIX):
            return CtlError(text, EXIT_USAGE)
        return CtlError(f"{member} failed: {name}: {text}", EXIT_FAILURE)

    async def records(self, member: str, signature: str = "",
                      body: Sequence[object] = ()) -> List[ClientRecord]:
        reply = await self.call(member, signature, body)
        return [from_variants(r) for r in records_of(reply[0], member)]

    async def status(self) -> ClientRecord:
        reply = await self.call("GetStatus")
        return from_variants(record_of(reply[0], "GetStatus"))

    async def list_ports(self) -> List[ClientRecord]:
        return await self.records("ListPorts")

    async def list_devices(self) -> List[ClientRecord]:
        return await self.records("ListDevices")

    async def list_counters(self, device: str, port: int) -> List[ClientRecord]:
        return await self.records("ListCounters", "su", [device, port])

    async def list_events(self, limit: int) -> List[ClientRecord]:
        return await self.records("ListEvents", "u", [limit])

    async def reload(self) -> Tuple[bool, str]:
        accepted, message = await self.call("Reload")
        return bool(accepted), str(message)

    async def follow(self, history: Optional[int]
                     ) -> Tuple[List[ClientRecord], AsyncIterator[Note]]:
        queue: asyncio.Queue[Note] = asyncio.Queue()
        await self._subscribe(queue)  # before the history: nothing is missed between
        events = await self.list_events(history) if history is not None else []
        return events, self._notes(queue)

    async def _subscribe(self, queue: asyncio.Queue[Note]) -> None:
        """Events through the EventEmitted signal, and the daemon leaving/returning."""
        assert self.bus is not None
        rules = (
            f"type='signal',sender='{BUS_NAME}',path='{OBJECT_PATH}',interface='{INTERFACE}',"
            f"member='EventEmitted'",
            f"type='signal',sender='org.freedesktop.DBus',interface='org.freedesktop.DBus',"
            f"member='NameOwnerChanged',arg0='{BUS_NAME}'",
        )

        def handler(message: Message) -> None:
            if message.message_type != MessageType.SIGNAL:
                return
            if message.member == "EventEmitted" and message.interface == INTERFACE:
                queue.put_nowait(("event", from_variants(message.body[0])))
            elif message.member == "NameOwnerChanged" and message.body[0] == BUS_NAME:
                queue.put_nowait(("back" if message.body[2] else "left", None))

        self.bus.add_message_handler(handler)
        for rule in rules:
            await self.call("AddMatch", "s", [rule], interface="org.freedesktop.DBus",
                            destination="org.freedesktop.DBus", path="/org/freedesktop/DBus")
        # Fail now (exit 3), not silently wait, when the daemon is not there.
        await self.call("Ping", interface="org.freedesktop.DBus.Peer")

    async def _notes(self, queue: asyncio.Queue[Note]) -> AsyncIterator[Note]:
        assert self.bus is not None
        # (dbus-fast leaves wait_for_disconnect unannotated)
        disconnected = asyncio.ensure_future(
            self.bus.wait_for_disconnect())  # type: ignore[no-untyped-call]
        try:
            while True:
                getter = asyncio.ensure_future(queue.get())
                done, _ = await asyncio.wait({getter, disconnected},
                                             return_when=asyncio.FIRST_COMPLETED)
                if getter not in done:
                    getter.cancel()
                    raise CtlError(f"lost the connection to the {self.bus_kind} bus")
                yield getter.result()
        finally:
            disconnected.cancel()


# --------------------------------------------------------------------- varlink
