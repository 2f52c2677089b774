"""Link notifications from the kernel: an rtnetlink socket subscribed to RTMGRP_LINK, and a
parser of the RTM_NEWLINK / RTM_DELLINK messages it receives, with :mod:`struct` only.

The layouts are the kernel's UAPI (``include/uapi/linux/netlink.h``, ``rtnetlink.h``,
``if_link.h``, ``if.h``): a datagram holds one or more messages, each a ``struct nlmsghdr``
(u32 length, u16 type, u16 flags, u32 seq, u32 pid) padded to 4 bytes; a link message's
payload is a ``struct ifinfomsg`` (u8 family, u8 pad, u16 type, s32 index, u32 flags, u32
change) followed by ``struct rtattr`` attributes (u16 length, u16 type, data, padded to 4).
Only what says whether a link changed is kept: the index, ``IFLA_IFNAME`` (NUL-terminated),
``IFLA_OPERSTATE`` (u8, RFC 2863: ``IF_OPER_*``) and the ``IFF_*`` flags.

The notifications only say *when* to look: the poll reads sysfs and stays the source of
truth (runtime/linkwake.py).
"""

from __future__ import annotations

import socket
import struct
from typing import NamedTuple, Optional

from .genetlink import attr_map, get_str, messages

NETLINK_ROUTE = 0
RTMGRP_LINK = 0x1
# nlmsghdr types (netlink.h, rtnetlink.h)
NLMSG_NOOP, NLMSG_ERROR, NLMSG_DONE = 1, 2, 3
RTM_NEWLINK, RTM_DELLINK = 16, 17
# rtattr types of a link (if_link.h)
IFLA_IFNAME = 3
IFLA_OPERSTATE = 16
# net_device flags (if.h) that say whether a link carries traffic
IFF_UP = 1 << 0
IFF_RUNNING = 1 << 6
IFF_LOWER_UP = 1 << 16
LINK_FLAGS = IFF_UP | IFF_RUNNING | IFF_LOWER_UP

_IFINFOMSG = struct.Struct("=BxHiII")  # 16 bytes
RECV_BYTES = 65536


class LinkMessage(NamedTuple):
    """One RTM_NEWLINK or RTM_DELLINK: which link, and what says whether it is up."""

    deleted: bool
    ifindex: int
    name: Optional[str]
    flags: int
    operstate: Optional[int]

    @property
    def link(self) -> tuple[int, Optional[int]]:
        """What a change of the link is judged on: its up/running/lower-up flags and operstate."""
        return self.flags & LINK_FLAGS, self.operstate


def parse(data: bytes) -> list[LinkMessage]:
    """The link messages of one datagram, in order; other message types are skipped and a
    truncated or malformed message ends the parse (what came before it is kept). The framing
    and the attributes (``struct rtattr`` is laid out as ``struct nlattr``) are netlink's,
    read by :mod:`.genetlink`."""
    return [_link(m.payload, m.type == RTM_DELLINK) for m in messages(data)
            if m.type in (RTM_NEWLINK, RTM_DELLINK) and len(m.payload) >= _IFINFOMSG.size]


def _link(payload: bytes, deleted: bool) -> LinkMessage:
    _family, _type, index, flags, _change = _IFINFOMSG.unpack_from(payload)
    found = attr_map(payload[_IFINFOMSG.size:])
    operstate = found.get(IFLA_OPERSTATE)
    return LinkMessage(deleted, index, get_str(found.get(IFLA_IFNAME)), flags,
                       operstate[0] if operstate else None)


def open_link_socket() -> socket.socket:
    """A non-blocking rtnetlink socket that receives every link change of this network
    namespace. Raises OSError where netlink is not allowed (a sandbox: EAFNOSUPPORT, EPERM)."""
    sock = socket.socket(socket.AF_NETLINK, socket.SOCK_RAW | socket.SOCK_CLOEXEC,
                         NETLINK_ROUTE)
    try:
        sock.bind((0, RTMGRP_LINK))
        sock.setblocking(False)
    except OSError:
        sock.close()
        raise
    return sock
