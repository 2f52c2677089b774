"""The varlink wire protocol: NUL-framed JSON calls in, replies and errors out (no I/O).

A varlink message is one JSON object followed by a NUL byte (https://varlink.org). A call is
``{"method": "iface.Method", "parameters": {...}, "more": bool, "oneway": bool,
"upgrade": bool}``; a reply ``{"parameters": {...}}`` (``"continues": true`` while more
replies of a ``more`` call follow); an error ``{"error": "iface.Name", "parameters":
{...}}``. This module splits a byte stream into messages with a size limit, turns one into
a :class:`Call` or says why it is not one, and encodes the answers. Both the service
(:mod:`nichealthd.surfaces.varlink`) and nichealthctl's varlink transport use it.
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass, field
from typing import Dict, Iterator, List, Optional, Tuple

from ..core.jsontypes import JsonRecord

SERVICE_INTERFACE = "org.varlink.service"
INTERFACE_NOT_FOUND = SERVICE_INTERFACE + ".InterfaceNotFound"
METHOD_NOT_FOUND = SERVICE_INTERFACE + ".MethodNotFound"
METHOD_NOT_IMPLEMENTED = SERVICE_INTERFACE + ".MethodNotImplemented"
INVALID_PARAMETER = SERVICE_INTERFACE + ".InvalidParameter"
PERMISSION_DENIED = SERVICE_INTERFACE + ".PermissionDenied"
EXPECTED_MORE = SERVICE_INTERFACE + ".ExpectedMore"

# The standard interface every service implements, as varlink.org defines it (returned by
# GetInterfaceDescription("org.varlink.service"); varlinkctl introspect asks for it).
SERVICE_DESCRIPTION = """\
# The Varlink Service Interface is provided by every varlink service. It
# describes the service and the interfaces it implements.
interface org.varlink.service

# Get a list of all the interfaces a service provides and information
# about the implementation.
method GetInfo() -> (
  vendor: string,
  product: string,
  version: string,
  url: string,
  interfaces: []string
)

# Get the description of an interface that is implemented by this service.
method GetInterfaceDescription(interface: string) -> (description: string)

# The requested interface was not found.
error InterfaceNotFound (interface: string)

# The requested method was not found
error MethodNotFound (method: string)

# The interface defines the requested method, but the service does not
# implement it.
error MethodNotImplemented (method: string)

# One of the passed parameters is invalid.
error InvalidParameter (parameter: string)

# Client is denied access
error PermissionDenied ()

# Method is expected to be called with 'more' set to true, but wasn't
error ExpectedMore ()
"""

_INTERFACE_NAME = re.compile(
    r"^[A-Za-z](?:-*[A-Za-z0-9])*(?:\.[A-Za-z0-9](?:-*[A-Za-z0-9])*)+$")
_MEMBER_NAME = re.compile(r"^[A-Z][A-Za-z0-9]*$")
_METHOD_LINE = re.compile(r"^method\s+([A-Z][A-Za-z0-9]*)\s*\(", re.M)
_INTERFACE_LINE = re.compile(r"^interface\s+(\S+)\s*$", re.M)


class FrameTooLarge(Exception):
    """More than the limit arrived without a NUL: the peer is not speaking varlink."""


class NotACall(Exception):
    """A complete message that is not a varlink call (bad JSON, no method ...)."""


@dataclass(frozen=True)
class Call:
    """One decoded method call."""

    method: str  # fully qualified: io.nichealthd.Monitor.ListPorts
    # as decoded, unchecked: each method narrows its own (varlink.py ``_parameters``)
    parameters: Dict[str, object] = field(default_factory=dict)
    more: bool = False
    oneway: bool = False
    upgrade: bool = False

    @property
    def interface(self) -> str:
        return self.method.rpartition(".")[0]

    @property
    def member(self) -> str:
        return self.method.rpartition(".")[2]


class VarlinkError(Exception):
    """An error answer: its qualified name and parameters."""

    def __init__(self, name: str, parameters: Optional[JsonRecord] = None) -> None:
        super().__init__(name)
        self.name = name
        self.parameters: Dict[str, object] = dict(parameters or {})


class Framer:
    """Splits a byte stream at NUL bytes; at most ``limit`` bytes per message."""

    def __init__(self, limit: int) -> None:
        self.limit = limit
        self._buffer = bytearray()

    @property
    def pending(self) -> int:
        """Bytes received that do not yet form a complete message."""
        return len(self._buffer)

    def feed(self, data: bytes) -> None:
        self._buffer += data
        if self._buffer.find(b"\0") < 0 and len(self._buffer) > self.limit:
            raise FrameTooLarge(f"more than {self.limit} bytes without a message end (NUL)")

    def next(self) -> Optional[bytes]:
        """The next complete message (without its NUL), or None until more arrives."""
        end = self._buffer.find(b"\0")
        if end < 0:
            return None
        if end > self.limit:
            raise FrameTooLarge(f"a message of {end} bytes (at most {self.limit})")
        message = bytes(self._buffer[:end])
        del self._buffer[:end + 1]
        return message

    def messages(self) -> Iterator[bytes]:
        while True:
            message = self.next()
            if message is None:
                return
            yield message


def parse_call(data: bytes) -> Call:
    """A message as a call; :class:`NotACall` says why it is not one."""
    try:
        message: object = json.loads(data.decode("utf-8"))
    except (UnicodeDecodeError, ValueError, RecursionError) as exc:
        raise NotACall(f"not a JSON message ({type(exc).__name__})") from None
    if not isinstance(message, dict):
        raise NotACall("a message must be a JSON object")
    method = message.get("method")
    if not isinstance(method, str) or not method:
        raise NotACall("a call needs a \"method\" string")
    parameters = message.get("parameters")
    if parameters is None:
        parameters = {}
    if not isinstance(parameters, dict):
        raise NotACall("\"parameters\" must be an object")
    flags = {}
    for name in ("more", "oneway", "upgrade"):
        value = message.get(name, False)
        if value is None:
            value = False
        if not isinstance(value, bool):
            raise NotACall(f"\"{name}\" must be true or false")
        flags[name] = value
    return Call(method, parameters, **flags)


def valid_method_name(method: str) -> bool:
    interface, _, member = method.rpartition(".")
    return bool(_INTERFACE_NAME.match(interface) and _MEMBER_NAME.match(member))


def encode(message: JsonRecord) -> bytes:
    """One message on the wire: compact JSON (UTF-8, no NaN) and its NUL."""
    return json.dumps(message, separators=(",", ":"), ensure_ascii=False,
                      allow_nan=False).encode("utf-8") + b"\0"


def encode_reply(parameters: JsonRecord, continues: bool = False) -> bytes:
    message: Dict[str, object] = {"parameters": parameters}
    if continues:
        message["continues"] = True
    return encode(message)


def encode_error(name: str, parameters: Optional[JsonRecord] = None) -> bytes:
    return encode({"error": name, "parameters": dict(parameters or {})})


def encode_call(method: str, parameters: Optional[JsonRecord] = None,
                more: bool = False, oneway: bool = False) -> bytes:
    """A call as a client sends it (nichealthctl, the tests)."""
    message: Dict[str, object] = {"method": method}
    if parameters:
        message["parameters"] = dict(parameters)
    if more:
        message["more"] = True
    if oneway:
        message["oneway"] = True
    return encode(message)


def parse_reply(data: bytes) -> Tuple[Optional[str], Dict[str, object], bool]:
    """A reply as (error name or None, parameters, continues); ValueError if malformed.
    The parameters are as decoded: the caller narrows each one it reads."""
    message: object = json.loads(data.decode("utf-8"))
    if not isinstance(message, dict):
        raise ValueError("a reply must be a JSON object")
    error = message.get("error")
    parameters = message.get("parameters") or {}
    if error is not None and not isinstance(error, str):
        raise ValueError("\"error\" must be a string")
    if not isinstance(parameters, dict):
        raise ValueError("\"parameters\" must be an object")
    return error, parameters, bool(message.get("continues", False))


def interface_name(description: str) -> str:
    """The name a ``.varlink`` description declares (``interface io.nichealthd.Monitor``)."""
    found = _INTERFACE_LINE.search(description)
    if not found:
        raise ValueError("no 'interface' line in the description")
    return found.group(1)


def method_names(description: str) -> List[str]:
    """The methods a ``.varlink`` description declares, in order."""
    return _METHOD_LINE.findall(description)


__all__ = ["Call", "Framer", "FrameTooLarge", "NotACall", "VarlinkError", "encode_call",
           "encode_error", "encode_reply", "parse_call", "parse_reply"]
