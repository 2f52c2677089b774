"""How nichealthctl reaches the daemon: a :class:`Transport` over D-Bus or over varlink.

Both give the same records (those of :mod:`nichealthd.core.views`), so every command has one
body and one set of formatting code, whichever API it used; :mod:`nichealthd.cli.connect`
chooses one. Every failure is a :class:`CtlError`: one line and an exit status.
"""

from __future__ import annotations

import asyncio
import contextlib
from typing import AsyncIterator, Dict, List, Optional, Tuple

from ..core.jsontypes import JsonRecord
from ..surfaces.varlink_protocol import encode_call, parse_reply

EXIT_FAILURE, EXIT_UNREACHABLE, EXIT_USAGE = 1, 3, 3
DEFAULT_VARLINK_SOCKET = "/run/nichealthd/io.nichealthd.Monitor"
VARLINK_INTERFACE = "io.nichealthd.Monitor"
VARLINK_RECONNECT = 1.0  # seconds between tries while following a daemon that restarts
_VARLINK_READ_LIMIT = 1 << 30  # the daemon is trusted; a 4096-NIC ListCounters is large


# A record as the daemon answered it (those of nichealthd.core.views): read by key, each value
# narrowed by its reader (cli/format.py).
ClientRecord = Dict[str, object]
# What a follow yields: ("event", record), ("left", None) or ("back", None).
Note = Tuple[str, Optional[ClientRecord]]


class CtlError(Exception):
    """One line for the operator and the exit status that goes with it."""

    def __init__(self, message: str, code: int = EXIT_UNREACHABLE) -> None:
        super().__init__(message)
        self.message = message
        self.code = code


class BusUnreachable(CtlError):
    """The bus itself cannot be reached (not: the daemon is not on it)."""


def record_of(value: object, what: str) -> ClientRecord:
    """An answer's record; :class:`CtlError` when the daemon sent something else."""
    if isinstance(value, dict):
        return value
    raise CtlError(f"nichealthd answered {what} with {type(value).__name__}, not a record",
                   EXIT_FAILURE)


def records_of(value: object, what: str) -> List[ClientRecord]:
    """An answer's list of records; :class:`CtlError` when the daemon sent something else."""
    if not isinstance(value, list):
        raise CtlError(f"nichealthd answered {what} with {type(value).__name__}, not a list "
                       f"of records", EXIT_FAILURE)
    return [record_of(item, what) for item in value]


class Transport:
    """The calls nichealthctl makes; :class:`DbusTransport` and :class:`VarlinkTransport`."""

    kind = ""

    @property
    def address(self) -> str:
        raise NotImplementedError

    def describe(self) -> Dict[str, str]:
        """What ``status`` shows: which API answered, where."""
        return {"kind": self.kind, "address": self.address}

    async def __aenter__(self) -> Transport:
        raise NotImplementedError

    async def __aexit__(self, *exc: object) -> None:
        raise NotImplementedError

    async def status(self) -> ClientRecord:
        raise NotImplementedError

    async def list_ports(self) -> List[ClientRecord]:
        raise NotImplementedError

    async def list_devices(self) -> List[ClientRecord]:
        raise NotImplementedError

    async def list_counters(self, device: str, port: int) -> List[ClientRecord]:
        raise NotImplementedError

    async def list_events(self, limit: int) -> List[ClientRecord]:
        raise NotImplementedError

    async def reload(self) -> Tuple[bool, str]:
        raise NotImplementedError

    async def follow(self, history: Optional[int]
                     ) -> Tuple[List[ClientRecord], AsyncIterator[Note]]:
        """The last ``history`` events (none for None; all kept for 0), then every event
        committed after them, with none skipped between the two."""
        raise NotImplementedError


# ----------------------------------------------------------------------- D-Bus

class _Link:
    """One varlink connection: calls in order, replies NUL-framed."""

    def __init__(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        self.reader = reader
        self.writer = writer

    async def send(self, method: str, parameters: Optional[JsonRecord] = None,
                   more: bool = False) -> None:
        self.writer.write(encode_call(method, parameters, more=more))
        await self.writer.drain()

    async def reply(self) -> Tuple[Optional[str], ClientRecord, bool]:
        data = await self.reader.readuntil(b"\0")
        return parse_reply(data[:-1])

    def close(self) -> None:
        with contextlib.suppress(Exception):
            self.writer.close()


class VarlinkTransport(Transport):
    """Calls on ``io.nichealthd.Monitor`` at a unix socket (``--varlink[=SOCKET]``)."""

    kind = "varlink"

    def __init__(self, path: str, timeout: float) -> None:
        self.path = path
        self.timeout = timeout
        self.link: Optional[_Link] = None

    @property
    def address(self) -> str:
        return self.path

    async def _open(self) -> _Link:
        try:
            reader, writer = await asyncio.wait_for(asyncio.open_unix_connection(
                self.path, limit=_VARLINK_READ_LIMIT), self.timeout)
        except asyncio.TimeoutError:
            raise CtlError(f"nichealthd's varlink socket {self.path} did not accept the "
                           f"connection within {self.timeout:g} s") from None
        except OSError as exc:
            raise CtlError(self._unreachable_text(exc)) from None
        return _Link(reader, writer)

    def _unreachable_text(self, exc: OSError) -> str:
        reason = exc.strerror or str(exc) or type(exc).__name__
        hint = {FileNotFoundError: "is the daemon running with varlinkSocket set? Try: "
                                   "systemctl status nichealthd",
                ConnectionRefusedError: "nobody serves on it: is the daemon running? Try: "
                                        "systemctl status nichealthd",
                PermissionError: "this user may not connect to it"}
        return (f"cannot reach nichealthd at its varlink socket {self.path}: {reason} "
                f"({hint.get(type(exc), 'is the daemon running?')})")

    async def __aenter__(self) -> VarlinkTransport:
        self.link = await self._open()
        return self

    async def __aexit__(self, *exc: object) -> None:
        if self.link is not None:
            self.link.close()
            self.link = None

    async def call(self, method: str, parameters: Optional[JsonRecord] = None
                   ) -> ClientRecord:
        assert self.link is not None
        member = method.rpartition(".")[2]
        try:
            await self.link.send(method, parameters)
            error, answer, _ = await asyncio.wait_for(self.link.reply(), self.timeout)
        except asyncio.TimeoutError:
            raise CtlError(f"nichealthd did not answer {member} within {self.timeout:g} s on "
                           f"{self.path} (is it stuck? see journalctl -u nichealthd)") from None
        except (OSError, asyncio.IncompleteReadError, ValueError) as exc:
            raise CtlError(f"lost the connection to {self.path} while calling {member}: "
                           f"{exc or type(exc).__name__}") from None
        if error is not None:
            raise self._error(member, error, answer)
        return answer

    def _error(self, member: str, name: str, parameters: ClientRecord) -> CtlError:
        text = str(parameters.get("message") or "")
        prefix = VARLINK_INTERFACE + "."
        if name == prefix + "NotReady":
            return CtlError(f"{text}; try again in a moment")
        if name == prefix + "PermissionDenied":
            return CtlError(text or f"{member} is not allowed to this user", EXIT_FAILURE)
        if name == prefix + "ShuttingDown":
            return CtlError(f"nichealthd is stopping; {member} was not answered")
        if name.startswith(prefix) and text and name != prefix + "Failed":
            return CtlError(text, EXIT_USAGE)
        detail = text or ", ".join(f"{k}={v}" for k, v in parameters.items())
        return CtlError(f"{member} failed: {name}" + (f": {detail}" if detail else ""),
                        EXIT_FAILURE)

    def _method(self, member: str) -> str:
        return f"{VARLINK_INTERFACE}.{member}"

    async def status(self) -> ClientRecord:
        answer = await self.call(self._method("GetStatus"))
        return dict(record_of(answer.get("status"), "GetStatus"))

    async def list_ports(self) -> List[ClientRecord]:
        answer = await self.call(self._method("ListPorts"))
        return records_of(answer.get("ports"), "ListPorts")

    async def list_devices(self) -> List[ClientRecord]:
        answer = await self.call(self._method("ListDevices"))
        return records_of(answer.get("devices"), "ListDevices")

    async def list_counters(self, device: str, port: int) -> List[ClientRecord]:
        answer = await self.call(self._method("ListCounters"), {"device": device, "port": port})
        return records_of(answer.get("counters"), "ListCounters")

    async def list_events(self, limit: int) -> List[ClientRecord]:
        answer = await self.call(self._method("ListEvents"), {"limit": limit})
        return records_of(answer.get("events"), "ListEvents")

    async def reload(self) -> Tuple[bool, str]:
        # Reload waits for the daemon to apply the file (at most ~10 s, RELOAD_WAIT there)
        saved, self.timeout = self.timeout, max(self.timeout, 15.0)
        try:
            answer = await self.call(self._method("Reload"))
        finally:
            self.timeout = saved
        return bool(answer["accepted"]), str(answer["message"])

    async def follow(self, history: Optional[int]
                     ) -> Tuple[List[ClientRecord], AsyncIterator[Note]]:
        # On one connection, ListEvents then WatchEvents: the daemon starts the watch right
        # after the last event of the history answer, so nothing is missed between them.
        events = await self.list_events(history) if history is not None else []
        assert self.link is not None
        await self.link.send(self._method("WatchEvents"), more=True)
        return events, self._notes()

    async def _notes(self) -> AsyncIterator[Note]:
        while True:
            link = self.link
            assert link is not None
            try:
                error, answer, _ = await link.reply()
            except (OSError, asyncio.IncompleteReadError, ValueError):
                error, answer = "disconnected", {}
            if error is None:
                yield "event", record_of(answer.get("event") or {}, "WatchEvents")
                continue
            if error != VARLINK_INTERFACE + ".ShuttingDown" and error != "disconnected":
                raise self._error("WatchEvents", error, answer)
            link.close()
            yield "left", None
            self.link = await self._reconnect()
            await self.link.send(self._method("WatchEvents"), more=True)
            yield "back", None

    async def _reconnect(self) -> _Link:
        while True:
            with contextlib.suppress(CtlError):
                return await self._open()
            await asyncio.sleep(VARLINK_RECONNECT)
