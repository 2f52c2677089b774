"""Which transport nichealthctl uses: D-Bus by default, varlink when asked or as the fallback.

Without ``--varlink`` a client whose system bus cannot be reached (a minimal host, a
container) tries the varlink socket before giving up (nichealthctl(1)). Its own module, above
both transports, because it is the one place that knows them both.
"""

from __future__ import annotations

import contextlib
import os
from typing import AsyncIterator, Optional

from .transport import DEFAULT_VARLINK_SOCKET, BusUnreachable, CtlError, Transport, VarlinkTransport


@contextlib.asynccontextmanager
async def connect(varlink: Optional[str], bus: str, timeout: float
                  ) -> AsyncIterator[Transport]:
    """The transport to use: varlink when asked, else D-Bus, falling back to the varlink
    socket when the bus itself cannot be reached (not when the daemon is not on it)."""
    transport: Transport
    if varlink:
        transport = VarlinkTransport(varlink, timeout)
        async with transport:
            yield transport
        return
    try:
        dbus = _dbus_transport(bus, timeout)
        await dbus.__aenter__()
        transport = dbus
    except BusUnreachable as bus_error:
        fallback = VarlinkTransport(default_varlink_socket(), timeout)
        try:
            await fallback.__aenter__()
        except CtlError as varlink_error:
            raise CtlError(f"{bus_error.message}; and {varlink_error.message}") from None
        transport = fallback
    try:
        yield transport
    finally:
        await transport.__aexit__(None, None, None)


def _dbus_transport(bus: str, timeout: float) -> Transport:
    """The D-Bus transport; :class:`BusUnreachable` when no D-Bus library is installed (then
    the varlink socket is tried, as for a bus that cannot be reached)."""
    try:
        from .dbus_transport import DbusTransport
    except ImportError as exc:
        if (exc.name or "").split(".")[0] not in ("dbus_fast", "dbus_next"):
            raise
        raise BusUnreachable("no D-Bus library for Python is installed (python3-dbus-fast or "
                             "python3-dbus-next; pip: dbus-fast), so the bus cannot be "
                             "used") from None
    return DbusTransport(bus, timeout)


def default_varlink_socket() -> str:
    """The daemon's default socket; NICHEALTHCTL_VARLINK_SOCKET names another."""
    return os.environ.get("NICHEALTHCTL_VARLINK_SOCKET") or DEFAULT_VARLINK_SOCKET
