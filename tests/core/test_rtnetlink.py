"""The rtnetlink parser on bytes laid out as the kernel's UAPI headers say, on a real dump
from this kernel, and the link watch's decision whether a message is a change worth a poll."""

from __future__ import annotations

import asyncio
import logging
import select
import socket
import struct
from typing import Optional

import pytest

from nichealthd.runtime.linkwake import EarlyPolls, LinkWake
from nichealthd.sources import rtnetlink as rt

NLM_F_REQUEST, NLM_F_DUMP = 0x1, 0x300


def rtattr(kind: int, value: bytes) -> bytes:
    """struct rtattr {u16 rta_len; u16 rta_type} + data, padded to 4 (RTA_ALIGN)."""
    raw = struct.pack("=HH", 4 + len(value), kind) + value
    return raw + b"\0" * (-len(raw) % 4)


def link_message(kind: int, index: int, flags: int, name: Optional[str] = "eth0",
                 operstate: Optional[int] = None, extra: bytes = b"") -> bytes:
    """struct nlmsghdr + struct ifinfomsg + attributes, as rtnetlink.h lays them out."""
    body = struct.pack("=BxHiII", socket.AF_UNSPEC, 1, index, flags, 0xFFFFFFFF) + extra
    if name is not None:
        body += rtattr(rt.IFLA_IFNAME, name.encode() + b"\0")
    if operstate is not None:
        body += rtattr(rt.IFLA_OPERSTATE, bytes([operstate]))
    return struct.pack("=IHHII", 16 + len(body), kind, 0, 0, 0) + body


UP = rt.IFF_UP | rt.IFF_RUNNING | rt.IFF_LOWER_UP | 0x1000  # IFF_MULTICAST is not a link flag
IF_OPER_DOWN, IF_OPER_UP = 2, 6


def test_new_and_deleted_links_with_their_name_operstate_and_flags() -> None:
    mtu = rtattr(4, struct.pack("=I", 9000))  # IFLA_MTU before the name: skipped
    data = (link_message(rt.RTM_NEWLINK, 7, UP, "enp36s0f0np0", IF_OPER_UP, extra=mtu)
            + link_message(rt.RTM_DELLINK, 8, 0, "ib0"))
    new, deleted = rt.parse(data)
    assert new == rt.LinkMessage(False, 7, "enp36s0f0np0", UP, IF_OPER_UP)
    assert new.link == (rt.IFF_UP | rt.IFF_RUNNING | rt.IFF_LOWER_UP, IF_OPER_UP)
    assert deleted == rt.LinkMessage(True, 8, "ib0", 0, None)


def test_other_messages_are_skipped_and_a_truncated_one_ends_the_parse() -> None:
    done = struct.pack("=IHHII", 20, rt.NLMSG_DONE, 0, 1, 0) + b"\0" * 4
    route = struct.pack("=IHHII", 28, 24, 0, 0, 0) + b"\0" * 12  # RTM_NEWROUTE
    good = link_message(rt.RTM_NEWLINK, 3, 0, "eth1", IF_OPER_DOWN)
    assert rt.parse(route + good + done) == [rt.LinkMessage(False, 3, "eth1", 0, IF_OPER_DOWN)]
    assert rt.parse(good + good[:-3]) == [rt.LinkMessage(False, 3, "eth1", 0, IF_OPER_DOWN)]
    assert rt.parse(b"") == [] and rt.parse(b"\xff" * 15) == []
    # a length shorter than the header, or an attribute longer than its message
    assert rt.parse(struct.pack("=IHHII", 8, rt.RTM_NEWLINK, 0, 0, 0)) == []
    bad_attr = link_message(rt.RTM_NEWLINK, 4, 0, None, extra=struct.pack("=HH", 200, 3))
    assert rt.parse(bad_attr) == [rt.LinkMessage(False, 4, None, 0, None)]


def test_a_dump_from_this_kernel_parses() -> None:
    """RTM_GETLINK answered by the running kernel: the loopback is there, up, as index 1."""
    with socket.socket(socket.AF_NETLINK, socket.SOCK_RAW, rt.NETLINK_ROUTE) as sock:
        sock.bind((0, 0))
        request = struct.pack("=BxHiII", socket.AF_UNSPEC, 0, 0, 0, 0)
        sock.send(struct.pack("=IHHII", 16 + len(request), 18, NLM_F_REQUEST | NLM_F_DUMP, 1,
                              0) + request)  # RTM_GETLINK
        links: list[rt.LinkMessage] = []
        while select.select([sock], [], [], 5)[0]:
            data = sock.recv(rt.RECV_BYTES)
            links += rt.parse(data)
            if struct.unpack_from("=H", data, 4)[0] == rt.NLMSG_DONE:  # the dump's last
                break
    lo = [link for link in links if link.name == "lo"]
    assert lo and lo[0].ifindex == 1 and lo[0].flags & rt.IFF_UP and not lo[0].deleted


def test_a_watched_link_that_changes_asks_for_a_poll_once_per_change() -> None:
    wakes: list[int] = []
    watch = LinkWake(lambda: wakes.append(1))
    watch.watch({"enp36s0f0np0"})
    down = link_message(rt.RTM_NEWLINK, 7, 0x1002, "enp36s0f0np0", IF_OPER_DOWN)
    assert watch.changed(down)  # first news of it: look
    assert not watch.changed(down)  # the same again (another attribute changed): no poll
    assert not watch.changed(link_message(rt.RTM_NEWLINK, 9, 0, "eth9", IF_OPER_DOWN))
    # admin up, then the carrier: both in one datagram are one change
    assert watch.changed(link_message(rt.RTM_NEWLINK, 7, 0x11003, "enp36s0f0np0", 3)
                         + link_message(rt.RTM_NEWLINK, 7, 0x11043, "enp36s0f0np0", IF_OPER_UP))
    assert watch.changed(link_message(rt.RTM_DELLINK, 7, 0, None))  # known by its index
    watch.watch(set())
    assert not watch.changed(down)


def test_a_socket_that_cannot_be_opened_is_one_warning(
        caplog: pytest.LogCaptureFixture) -> None:
    def refused() -> socket.socket:
        raise PermissionError(1, "Operation not permitted")

    watch = LinkWake(lambda: None, opener=refused)
    loop = asyncio.new_event_loop()
    try:
        with caplog.at_level(logging.WARNING, logger="nichealthd"):
            assert not watch.start(loop)
    finally:
        loop.close()
    assert not watch.listening
    assert [r.getMessage() for r in caplog.records] == [
        "cannot listen for link changes (rtnetlink: Operation not permitted); a port going "
        "down is seen at the next poll"]


def test_early_polls_come_five_at_once_then_two_a_second() -> None:
    budget = EarlyPolls()
    due = 100.0  # the next tick, far away
    assert [budget.take(10.0, due) for _ in range(5)] == [10.0] * 5
    assert budget.take(10.0, due) == 10.5  # the sixth waits for its token
    assert budget.take(10.0, due) == 11.0
    assert budget.take(20.0, due) == 20.0  # refilled (at most five)
    assert budget.take(20.0, None) is None  # the poll comes at once anyway: nothing spent
    assert budget.take(20.0, 20.0) is None  # the tick is now: that is the poll
    taken = [budget.take(20.0, due) for _ in range(5)]
    assert taken[:4] == [20.0] * 4 and taken[4] == 20.5
    assert budget.take(20.0, 20.6) is None  # the tick comes before the token
