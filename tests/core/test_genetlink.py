"""The generic-netlink codec on bytes: attributes, nests, messages, error replies."""

from __future__ import annotations

import errno
import struct

from nichealthd.sources import genetlink as g


def test_attribute_is_padded_to_four_bytes() -> None:
    packed = g.attr_u8(3, 7)
    assert packed == struct.pack("=HHB", 5, 3, 7) + b"\0\0\0"
    assert g.attr_str(2, "eth0") == struct.pack("=HH", 9, 2) + b"eth0\0" + b"\0\0\0"


def test_nested_attributes_round_trip() -> None:
    header = g.nested(1, g.attr_str(2, "enp1s0f0"), g.attr_u32(3, 4))
    (kind, payload), = g.attrs(header)
    assert kind == 1  # the NLA_F_NESTED flag is masked off
    assert struct.unpack_from("=H", header, 2)[0] == 1 | g.NLA_F_NESTED
    inner = g.attr_map(payload)
    assert g.get_str(inner[2]) == "enp1s0f0"
    assert g.get_u32(inner[3]) == 4


def test_repeats_kept_in_order_and_truncated_tail_dropped() -> None:
    stream = g.attr_u16(5, 1) + g.attr_u16(5, 2) + g.attr_u64(6, 1 << 40)
    assert [(k, g.get_u16(p)) for k, p in g.attrs(stream)[:2]] == [(5, 1), (5, 2)]
    assert g.get_u64(g.attr_map(stream)[6]) == 1 << 40
    assert g.attrs(stream + struct.pack("=HH", 64, 7) + b"xx") == g.attrs(stream)
    assert g.attrs(struct.pack("=HH", 2, 1)) == []  # a length below the header


def test_getters_refuse_short_payloads() -> None:
    assert g.get_u32(b"\1\0") is None
    assert g.get_u64(None) is None
    assert g.get_str(b"\xff\xfe\0") is None
    assert g.get_u64_array(struct.pack("=3Q", 10, 4, 6) + b"\1") == (10, 4, 6)
    assert g.get_u64_array(b"") == ()


def test_request_header() -> None:
    body = g.attr_str(g.CTRL_ATTR_FAMILY_NAME, "ethtool")
    packed = g.pack_request(g.GENL_ID_CTRL, g.CTRL_CMD_GETFAMILY, 2, body, seq=9)
    length, kind, flags, seq, port = struct.unpack_from("=IHHII", packed)
    assert (length, kind, seq, port) == (len(packed), 0x10, 9, 0)
    assert flags == g.NLM_F_REQUEST | g.NLM_F_ACK
    assert packed[16:20] == bytes([3, 2, 0, 0])
    dump = g.pack_request(21, 29, 1, b"", seq=1, dump=True)
    assert struct.unpack_from("=H", dump, 6)[0] == g.NLM_F_REQUEST | g.NLM_F_DUMP


def _message(kind: int, flags: int, seq: int, payload: bytes) -> bytes:
    raw = struct.pack("=IHHII", 16 + len(payload), kind, flags, seq, 0) + payload
    return raw + b"\0" * (-len(raw) % 4)


def test_messages_of_a_datagram() -> None:
    reply = bytes([30, 1, 0, 0]) + g.attr_u32(4, 50)
    data = _message(21, g.NLM_F_MULTI, 4, reply) + _message(g.NLMSG_DONE, 0, 4, b"\0\0\0\0")
    first, done = g.messages(data)
    assert (first.type, first.seq) == (21, 4)
    parsed = g.genl_reply(first)
    assert parsed is not None and (parsed.cmd, parsed.version) == (30, 1)
    assert g.get_u32(g.attr_map(parsed.payload)[4]) == 50
    assert g.error_of(done) == (0, "")
    assert g.messages(data[:-3]) == [first]


def test_error_with_extended_ack_text() -> None:
    echoed = struct.pack("=IHHII", 40, 21, 5, 4, 0)
    payload = struct.pack("=i", -errno.ENODEV) + echoed + g.attr_str(
        g.NLMSGERR_ATTR_MSG, "no device matches name")
    message, = g.messages(_message(g.NLMSG_ERROR, g.NLM_F_CAPPED | g.NLM_F_ACK_TLVS, 4,
                                   payload))
    assert g.error_of(message) == (errno.ENODEV, "no device matches name")
    plain, = g.messages(_message(g.NLMSG_ERROR, 0, 4,
                                 struct.pack("=i", -errno.EOPNOTSUPP) + echoed))
    assert g.error_of(plain) == (errno.EOPNOTSUPP, "")
