"""A small generic-netlink client on ``socket`` and ``struct``: the ethtool netlink calls.

The physical-layer sources ask the kernel's ``ethtool`` generic-netlink family (FEC_GET,
MODULE_EEPROM_GET) without a new dependency and without running ``ethtool``. The layouts are
the kernel's UAPI: ``include/uapi/linux/netlink.h`` (``struct nlmsghdr``: length u32, type
u16, flags u16, seq u32, port id u32; ``struct nlattr``: length u16, type u16, payload padded
to 4 bytes; ``NLA_F_NESTED`` = 1 << 15, ``NLA_F_NET_BYTEORDER`` = 1 << 14; ``NLMSG_ERROR`` = 2,
``NLMSG_DONE`` = 3; ``NETLINK_CAP_ACK`` = 10, ``NETLINK_EXT_ACK`` = 11 at ``SOL_NETLINK`` =
270) and ``include/uapi/linux/genetlink.h`` (``struct genlmsghdr``: cmd u8, version u8,
reserved u16; the controller at ``GENL_ID_CTRL`` = 16 answers ``CTRL_CMD_GETFAMILY`` = 3 with
``CTRL_ATTR_FAMILY_ID`` = 1 (u16) for ``CTRL_ATTR_FAMILY_NAME`` = 2).

The API, kept stable (later needs add to it, never rename):

- attributes as pure functions on bytes: :func:`attr` (any payload), :func:`attr_u8` ..
  :func:`attr_u64`, :func:`attr_str`, :func:`nested`; :func:`attrs` (an attribute stream ->
  list of (type, payload), nesting flags masked, repeats kept), :func:`attr_map` (-> dict,
  the last of a type wins), :func:`get_u8` .. :func:`get_u64`, :func:`get_str`,
  :func:`get_u64_array`;
- messages as pure functions: :func:`pack_request` (one generic-netlink request),
  :func:`messages` (a datagram -> :class:`Message` list), :func:`error_of` (an
  ``NLMSG_ERROR`` payload -> errno and the kernel's extended-ack text);
- :class:`GenlSocket`: ``family_id(name)`` (cached), ``request(family, cmd, version,
  payload, dump=False)`` -> the replies' :class:`GenlReply` list (multi-part replies read to
  ``NLMSG_DONE``); an error reply raises :class:`NetlinkError` (an ``OSError`` with the
  errno: ``EOPNOTSUPP``, ``EPERM``, ``ENODEV``, ...). Nothing here retries or logs: the
  caller decides what a refusal means.
"""

from __future__ import annotations

import errno as errno_codes
import os
import socket
import struct
from dataclasses import dataclass
from typing import Optional

NETLINK_GENERIC = 16
SOL_NETLINK = 270
NETLINK_CAP_ACK = 10
NETLINK_EXT_ACK = 11

NLM_F_REQUEST = 0x01
NLM_F_MULTI = 0x02
NLM_F_ACK = 0x04
NLM_F_DUMP = 0x300  # NLM_F_ROOT | NLM_F_MATCH
NLM_F_CAPPED = 0x100  # on an NLMSG_ERROR: the request echoed is its header only
NLM_F_ACK_TLVS = 0x200  # on an NLMSG_ERROR: extended-ack attributes follow

NLMSG_NOOP = 1
NLMSG_ERROR = 2
NLMSG_DONE = 3
NLMSG_OVERRUN = 4

NLA_F_NESTED = 1 << 15
NLA_F_NET_BYTEORDER = 1 << 14
NLA_TYPE_MASK = ~(NLA_F_NESTED | NLA_F_NET_BYTEORDER) & 0xFFFF
NLMSGERR_ATTR_MSG = 1

GENL_ID_CTRL = 0x10
CTRL_CMD_GETFAMILY = 3
CTRL_VERSION = 2
CTRL_ATTR_FAMILY_ID = 1
CTRL_ATTR_FAMILY_NAME = 2

_NLMSGHDR = struct.Struct("=IHHII")
_GENLMSGHDR = struct.Struct("=BBH")
_NLATTR = struct.Struct("=HH")
_RECV_SIZE = 65536  # a netlink dump part fits a page-sized skb; 64 KiB is ample


class NetlinkError(OSError):
    """An ``NLMSG_ERROR`` reply: ``errno`` is the kernel's (positive), ``strerror`` its text,
    with the extended-ack message when the kernel gave one."""


@dataclass(frozen=True)
class Message:
    """One netlink message of a datagram: header fields and its payload."""

    type: int
    flags: int
    seq: int
    port: int
    payload: bytes


@dataclass(frozen=True)
class GenlReply:
    """One generic-netlink reply: command, version and its attribute stream (``attrs()``)."""

    cmd: int
    version: int
    payload: bytes


def _align(length: int) -> int:
    return (length + 3) & ~3


# --- attributes -------------------------------------------------------------------------


def attr(kind: int, payload: bytes) -> bytes:
    """One attribute: header, payload, padded to 4 bytes."""
    length = _NLATTR.size + len(payload)
    return _NLATTR.pack(length, kind) + payload + b"\0" * (_align(length) - length)


def attr_u8(kind: int, value: int) -> bytes:
    return attr(kind, struct.pack("=B", value))


def attr_u16(kind: int, value: int) -> bytes:
    return attr(kind, struct.pack("=H", value))


def attr_u32(kind: int, value: int) -> bytes:
    return attr(kind, struct.pack("=I", value))


def attr_u64(kind: int, value: int) -> bytes:
    return attr(kind, struct.pack("=Q", value))


def attr_str(kind: int, value: str) -> bytes:
    """A NUL-terminated string attribute (``NLA_NUL_STRING``/``NLA_STRING`` both accept it)."""
    return attr(kind, value.encode() + b"\0")


def nested(kind: int, *children: bytes) -> bytes:
    """A nest of already packed attributes, flagged ``NLA_F_NESTED`` (required by the strict
    policies of the ethtool family)."""
    return attr(kind | NLA_F_NESTED, b"".join(children))


def attrs(data: bytes) -> list[tuple[int, bytes]]:
    """The attributes of a stream, in order, as (type without the flag bits, payload); a
    truncated or malformed tail ends the list (the kernel's own ``nla_for_each_attr``)."""
    out: list[tuple[int, bytes]] = []
    offset = 0
    while offset + _NLATTR.size <= len(data):
        length, kind = _NLATTR.unpack_from(data, offset)
        if length < _NLATTR.size or offset + length > len(data):
            break
        out.append((kind & NLA_TYPE_MASK, bytes(data[offset + _NLATTR.size:offset + length])))
        offset += _align(length)
    return out


def attr_map(data: bytes) -> dict[int, bytes]:
    """The attributes of a stream by type (a repeated type: the last one)."""
    return dict(attrs(data))


def _fixed(payload: Optional[bytes], fmt: str) -> Optional[int]:
    if payload is None or len(payload) < struct.calcsize(fmt):
        return None
    value: int = struct.unpack_from(fmt, payload)[0]
    return value


def get_u8(payload: Optional[bytes]) -> Optional[int]:
    return _fixed(payload, "=B")


def get_u16(payload: Optional[bytes]) -> Optional[int]:
    return _fixed(payload, "=H")


def get_u32(payload: Optional[bytes]) -> Optional[int]:
    return _fixed(payload, "=I")


def get_u64(payload: Optional[bytes]) -> Optional[int]:
    return _fixed(payload, "=Q")


def get_str(payload: Optional[bytes]) -> Optional[str]:
    """A string attribute up to its NUL; None when absent or not text."""
    if payload is None:
        return None
    try:
        return payload.split(b"\0", 1)[0].decode()
    except UnicodeDecodeError:
        return None


def get_u64_array(payload: Optional[bytes]) -> tuple[int, ...]:
    """A payload of native u64s (the ethtool FEC statistics: the total, then each lane)."""
    if payload is None:
        return ()
    count = len(payload) // 8
    return tuple(struct.unpack_from(f"={count}Q", payload)) if count else ()


# --- messages ---------------------------------------------------------------------------


def pack_request(family: int, cmd: int, version: int, payload: bytes, *, seq: int,
                 dump: bool = False) -> bytes:
    """One generic-netlink request; a non-dump request asks for an ACK, so its end is
    always marked (the reply, then ``NLMSG_ERROR`` 0)."""
    flags = NLM_F_REQUEST | (NLM_F_DUMP if dump else NLM_F_ACK)
    body = _GENLMSGHDR.pack(cmd, version, 0) + payload
    return _NLMSGHDR.pack(_NLMSGHDR.size + len(body), family, flags, seq, 0) + body


def messages(data: bytes) -> list[Message]:
    """The messages of one datagram; a truncated tail ends the list."""
    out: list[Message] = []
    offset = 0
    while offset + _NLMSGHDR.size <= len(data):
        length, kind, flags, seq, port = _NLMSGHDR.unpack_from(data, offset)
        if length < _NLMSGHDR.size or offset + length > len(data):
            break
        out.append(Message(kind, flags, seq, port,
                           bytes(data[offset + _NLMSGHDR.size:offset + length])))
        offset += _align(length)
    return out


def error_of(message: Message) -> tuple[int, str]:
    """An ``NLMSG_ERROR`` (or ``NLMSG_DONE``) payload: (positive errno, 0 for an ACK;
    the extended-ack text or "")."""
    if len(message.payload) < 4:
        return errno_codes.EPROTO, "short netlink error message"
    code = -struct.unpack_from("=i", message.payload)[0]
    text = ""
    if message.type == NLMSG_ERROR and message.flags & NLM_F_ACK_TLVS:
        echoed = _NLMSGHDR.size
        if not message.flags & NLM_F_CAPPED and len(message.payload) >= 4 + _NLMSGHDR.size:
            echoed = _NLMSGHDR.unpack_from(message.payload, 4)[0]
        text = get_str(attr_map(message.payload[4 + _align(echoed):]).get(
            NLMSGERR_ATTR_MSG)) or ""
    return code, text


def genl_reply(message: Message) -> Optional[GenlReply]:
    """The generic-netlink header and attributes of a reply message; None when too short."""
    if len(message.payload) < _GENLMSGHDR.size:
        return None
    cmd, version, _ = _GENLMSGHDR.unpack_from(message.payload)
    return GenlReply(cmd, version, message.payload[_GENLMSGHDR.size:])


# --- the socket -------------------------------------------------------------------------


class GenlSocket:
    """One ``AF_NETLINK``/``NETLINK_GENERIC`` socket; requests are answered in turn.

    Opening it needs no privilege and the unit's ``RestrictAddressFamilies`` must list
    ``AF_NETLINK``; whether a command needs ``CAP_NET_ADMIN`` is the family's business (the
    ethtool GET commands used here do not). ``timeout`` bounds each receive: a kernel that
    does not answer makes :meth:`request` raise ``TimeoutError`` (an ``OSError``).
    """

    def __init__(self, timeout: float = 2.0) -> None:
        self._sock = socket.socket(socket.AF_NETLINK, socket.SOCK_RAW, NETLINK_GENERIC)
        try:
            self._sock.settimeout(timeout)
            for option in (NETLINK_CAP_ACK, NETLINK_EXT_ACK):
                try:
                    self._sock.setsockopt(SOL_NETLINK, option, 1)
                except OSError:
                    pass  # an old kernel: full echoes and no text, parsed all the same
            self._sock.bind((0, 0))
        except BaseException:
            self._sock.close()
            raise
        self._seq = int.from_bytes(os.urandom(2), "little")
        self._families: dict[str, int] = {}

    def __enter__(self) -> GenlSocket:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def close(self) -> None:
        self._sock.close()

    def family_id(self, name: str) -> int:
        """The id of generic-netlink family ``name`` (``CTRL_CMD_GETFAMILY``), cached; a family
        the kernel lacks raises :class:`NetlinkError` with ``ENOENT``."""
        if name not in self._families:
            replies = self.request(GENL_ID_CTRL, CTRL_CMD_GETFAMILY, CTRL_VERSION,
                                   attr_str(CTRL_ATTR_FAMILY_NAME, name))
            for reply in replies:
                family = get_u16(attr_map(reply.payload).get(CTRL_ATTR_FAMILY_ID))
                if family is not None:
                    self._families[name] = family
                    break
            else:
                raise NetlinkError(errno_codes.ENOENT, f"no generic netlink family {name}")
        return self._families[name]

    def request(self, family: int, cmd: int, version: int, payload: bytes, *,
                dump: bool = False) -> list[GenlReply]:
        """Send one request and read every reply to its end (the ACK, or ``NLMSG_DONE`` of a
        dump); an error reply raises :class:`NetlinkError`."""
        self._seq = (self._seq + 1) & 0xFFFFFFFF
        seq = self._seq
        self._sock.send(pack_request(family, cmd, version, payload, seq=seq, dump=dump))
        replies: list[GenlReply] = []
        while True:
            data = self._sock.recv(_RECV_SIZE)
            for message in messages(data):
                if message.seq != seq:
                    continue  # a late answer to an earlier, abandoned request
                if message.type in (NLMSG_ERROR, NLMSG_DONE):
                    code, text = error_of(message)
                    if code:
                        raise NetlinkError(code, _describe(code, text))
                    if message.type == NLMSG_DONE or not dump:
                        return replies
                elif message.type == NLMSG_OVERRUN:
                    raise NetlinkError(errno_codes.ENOBUFS, "netlink overrun")
                elif message.type != NLMSG_NOOP:
                    reply = genl_reply(message)
                    if reply is not None:
                        replies.append(reply)


def _describe(code: int, text: str) -> str:
    plain = os.strerror(code)
    return f"{plain}: {text}" if text else plain
