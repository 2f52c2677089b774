"""Names, the D-Bus library import and record <-> variant mapping shared by daemon and client.

Records on the bus are ``a{sv}`` so fields can be added without breaking clients.
The mapping from the plain dicts of :mod:`nichealthd.core.views` is fixed here, once:

==========================  =========  ==========================================
Python value                signature  note
==========================  =========  ==========================================
``str``                     ``s``
``bool``                    ``b``      (checked before int: bool is an int)
``int``                     ``x``      every integer is int64, ports included
``float``                   ``d``
``None``                    —          the key is omitted (e.g. ``value`` of a
                                       counter whose file is missing)
``list[str]``               ``as``
``dict[str, str]``          ``a{ss}``  event ``metadata``
``list[dict[str, str]]``    ``aa{ss}`` event ``entitiesImpacted``
``list[dict]`` (typed)      ``aa{sv}`` status ``surfaces``: records of their own,
                                       each mapped as this table says
==========================  =========  ==========================================

Event records are event JSON object (health_event.proto) flattened this way (``entitiesImpacted`` as
``aa{ss}`` of ``entityType``/``entityValue``, ``metadata`` as ``a{ss}``), plus ``seq`` (the
journal sequence number, ``x``) and ``severity`` (healthy|degraded|fatal), so
``nichealthctl events --json`` can print exactly the event-log JSON.
"""

from __future__ import annotations

import os
import socket
from typing import Any, Dict, List, Mapping, Sequence, Union

from ..core.jsontypes import JsonRecord

try:  # dbus-fast is the maintained fork; dbus-next has the same API (Debian, older distros)
    from dbus_fast import (
        BusType,
        DBusError,
        Message,
        MessageType,
        NameFlag,
        RequestNameReply,
        Variant,
    )
    from dbus_fast import introspection as intr
    from dbus_fast.aio import MessageBus
    from dbus_fast.constants import PropertyAccess
    from dbus_fast.service import (
        ServiceInterface,
        dbus_property,
        method,
        signal,
    )
    DBUS_LIBRARY = "dbus-fast"
except ImportError:  # pragma: no cover - exercised only where dbus-fast is missing
    from dbus_next import (  # type: ignore[no-redef]
        BusType,
        DBusError,
        Message,
        MessageType,
        NameFlag,
        RequestNameReply,
        Variant,
    )
    from dbus_next import introspection as intr  # type: ignore[no-redef]
    from dbus_next.aio import MessageBus  # type: ignore[no-redef]
    from dbus_next.constants import PropertyAccess  # type: ignore[no-redef]
    from dbus_next.service import (  # type: ignore[no-redef]
        ServiceInterface,
        dbus_property,
        method,
        signal,
    )
    DBUS_LIBRARY = "dbus-next"

__all__ = [
    "BUS_NAME", "OBJECT_PATH", "INTERFACE", "POLICY_FILE", "DBUS_LIBRARY", "BusType",
    "DBusError", "Message", "MessageType", "MessageBus", "NameFlag", "RequestNameReply",
    "Variant", "intr", "PropertyAccess", "ServiceInterface", "dbus_property", "method",
    "signal", "bus_address", "to_variants", "from_variants", "harden_writer", "VariantRecord",
]

BUS_NAME = "org.nichealthd.NicHealth1"
OBJECT_PATH = "/org/nichealthd/NicHealth1"
INTERFACE = "org.nichealthd.NicHealth1"
# Packages install it to /usr/share/dbus-1/system.d/, local installs to /etc/dbus-1/system.d/.
POLICY_FILE = ("org.nichealthd.NicHealth1.conf in /usr/share/dbus-1/system.d/ or "
               "/etc/dbus-1/system.d/")
ERROR_PREFIX = INTERFACE + ".Error."

SYSTEM_BUS_DEFAULT = "unix:path=/var/run/dbus/system_bus_socket"

# Keys whose container type cannot be guessed from an empty value.
_FIXED_SIGNATURES = {
    "entitiesImpacted": "aa{ss}",
    "metadata": "a{ss}",
    "errorCode": "as",
    "surfaces": "aa{sv}",  # GetStatus: each surface's status (surfaces/status.py)
}


class _RetryingSendSocket:
    """The bus socket as the library's writer sees it, with EAGAIN meaning "0 bytes sent".

    dbus-fast (5.2 here) and dbus-next let a ``BlockingIOError`` from the non-blocking
    ``send`` of their asyncio writer escape, and then drop the whole connection
    (dbus-next #153; the same code is in dbus-fast's ``_MessageWriter.write_callback``). A
    few large replies in flight (``ListCounters`` on a busy bus) fill the socket buffer, so one
    eager client would take the D-Bus API down. Reporting 0 bytes makes the writer wait
    for the socket to become writable and continue, which is what it does for short writes.
    """

    def __init__(self, sock: socket.socket) -> None:
        self._sock = sock

    def send(self, data: Union[bytes, bytearray, memoryview], *flags: int) -> int:
        try:
            return int(self._sock.send(data, *flags))
        except (BlockingIOError, InterruptedError):
            return 0

    def __getattr__(self, name: str) -> object:  # the rest is the socket's, for the library
        return getattr(self._sock, name)


def harden_writer(bus: object) -> bool:
    """Apply :class:`_RetryingSendSocket` to a connected asyncio bus; False if the library's
    writer is not shaped as expected (then nothing is changed)."""
    writer = getattr(bus, "_writer", None)
    sock = getattr(writer, "sock", None)
    if writer is None or sock is None or not hasattr(sock, "send"):
        return False
    if not isinstance(sock, _RetryingSendSocket):
        writer.sock = _RetryingSendSocket(sock)
    return True


def bus_type(name: str) -> BusType:
    """``system`` or ``session`` as the library's BusType."""
    return BusType.SESSION if name == "session" else BusType.SYSTEM


def bus_address(name: str) -> str:
    """The address the library will connect to, for messages (it reads the same variables)."""
    if name == "session":
        return os.environ.get("DBUS_SESSION_BUS_ADDRESS", "(DBUS_SESSION_BUS_ADDRESS unset)")
    return os.environ.get("DBUS_SYSTEM_BUS_ADDRESS", SYSTEM_BUS_DEFAULT)


def signature_of(key: str, value: object) -> str:
    """The D-Bus signature a record field is sent as (see the module table)."""
    fixed = _FIXED_SIGNATURES.get(key)
    if fixed:
        return fixed
    if isinstance(value, bool):
        return "b"
    if isinstance(value, int):
        return "x"
    if isinstance(value, float):
        return "d"
    if isinstance(value, str):
        return "s"
    if isinstance(value, (list, tuple)):
        if value and isinstance(value[0], Mapping):
            return "aa{ss}"
        return "as"
    if isinstance(value, Mapping):
        return "a{ss}"
    raise TypeError(f"field {key!r}: no D-Bus mapping for {type(value).__name__}")


Plain = Union[str, int, float, List[str], Dict[str, str], List[Dict[str, str]],
              List[Dict[str, Variant]]]


def _plain(key: str, signature: str, value: object) -> Plain:
    """``value`` as the library marshals ``signature`` (see the module table)."""
    if signature == "as":
        return [str(v) for v in _items(key, value)]
    if signature == "a{ss}":
        return _pairs(key, value)
    if signature == "aa{ss}":
        return [_pairs(key, item) for item in _items(key, value)]
    if signature == "aa{sv}":
        return [to_variants(_record(key, item)) for item in _items(key, value)]
    if signature == "d" and isinstance(value, (int, float)):
        return float(value)
    if isinstance(value, (str, int)):  # "s", "b" and "x" (bool is an int)
        return value
    raise TypeError(f"field {key!r}: {type(value).__name__} is not {signature}")


def _items(key: str, value: object) -> Sequence[object]:
    if isinstance(value, (list, tuple)):
        return value
    raise TypeError(f"field {key!r}: {type(value).__name__} is not a list")


def _pairs(key: str, value: object) -> Dict[str, str]:
    if isinstance(value, Mapping):
        return {str(k): str(v) for k, v in value.items()}
    raise TypeError(f"field {key!r}: {type(value).__name__} is not a mapping")


def _record(key: str, value: object) -> JsonRecord:
    if isinstance(value, Mapping):
        return value
    raise TypeError(f"field {key!r}: {type(value).__name__} is not a record")


# A record as the bus carries it (``a{sv}``).
VariantRecord = Dict[str, Variant]


def to_variants(record: JsonRecord) -> VariantRecord:
    """A plain record as ``a{sv}`` (None values are left out)."""
    out = {}
    for key, value in record.items():
        if value is None:
            continue
        sig = signature_of(key, value)
        out[key] = Variant(sig, _plain(key, sig, value))
    return out


# The values are the library's ``Variant.value``, which dbus-fast leaves untyped (whatever
# the signature held; the tests compare them as they are); nichealthctl reads them as
# ``object`` and narrows each one (cli/transport.py ClientRecord, cli/format.py).
def from_variants(record: Mapping[str, object]) -> Dict[str, Any]:
    """``a{sv}`` as received back into plain Python values (an ``aa{sv}`` field's records
    too)."""
    return {key: _plain_back(value.value if isinstance(value, Variant) else value)
            for key, value in record.items()}


def _plain_back(value: object) -> object:
    if isinstance(value, list) and value and isinstance(value[0], Mapping) and any(
            isinstance(v, Variant) for v in value[0].values()):
        return [from_variants(item) for item in value]
    return value
