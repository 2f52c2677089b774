"""The kernel's ethtool answers for one netdev: driver statistics (ioctl) and FEC (netlink).

What ``ethtool -S`` and ``ethtool -I --show-fec`` print, asked without running ``ethtool``:

- driver statistics by the ``SIOCETHTOOL`` ioctl (``include/uapi/linux/sockios.h``: 0x8946)
  on an ``AF_INET`` datagram socket: ``ETHTOOL_GSSET_INFO`` (0x37; ``struct ethtool_sset_info``:
  cmd u32, reserved u32, sset_mask u64, data u32[]) for the count of the ``ETH_SS_STATS`` (1)
  set, ``ETHTOOL_GSTRINGS`` (0x1b; ``struct ethtool_gstrings``: cmd, string_set, len u32,
  then ``ETH_GSTRING_LEN`` = 32 bytes per name) once per count, ``ETHTOOL_GSTATS`` (0x1d;
  ``struct ethtool_stats``: cmd, n_stats u32, then u64 values). ``net/ethtool/ioctl.c``
  (``__dev_ethtool``) lets anyone make these three calls: no capability is needed.
- the active FEC mode and the FEC statistics by generic netlink (:mod:`.genetlink`):
  ``ETHTOOL_MSG_FEC_GET`` (29) with a header (``ETHTOOL_A_FEC_HEADER`` = 1: ``DEV_NAME`` = 2,
  ``FLAGS`` = 3 with ``ETHTOOL_FLAG_STATS`` = 4) answered by ``ETHTOOL_MSG_FEC_GET_REPLY``:
  ``ETHTOOL_A_FEC_ACTIVE`` (4, u32: the link-mode bit of the active FEC, ``FEC_NONE`` 49,
  ``FEC_RS`` 50, ``FEC_BASER`` 51, ``FEC_LLRS`` 74 in ``include/uapi/linux/ethtool.h``; absent
  when the driver reports none) and ``ETHTOOL_A_FEC_STATS`` (5, nested: ``CORRECTED`` 2,
  ``UNCORR`` 3, ``CORR_BITS`` 4, each u64s: the total, then one per lane;
  ``net/ethtool/fec.c``, ``fec_put_stats``; numbers from
  ``include/uapi/linux/ethtool_netlink_generated.h``). The op has no admin flag
  (``net/ethtool/netlink.c``): no capability is needed; a driver without ``get_fecparam``
  answers ``EOPNOTSUPP`` (veth, lo).

Every call raises ``OSError`` when the kernel refuses it; the caller decides what that means.
"""

from __future__ import annotations

import array
import fcntl
import socket
import struct
from dataclasses import dataclass
from typing import Optional

from . import genetlink as nl

SIOCETHTOOL = 0x8946
ETHTOOL_GSTRINGS = 0x1B
ETHTOOL_GSTATS = 0x1D
ETHTOOL_GSSET_INFO = 0x37
ETH_SS_STATS = 1
ETH_GSTRING_LEN = 32
IFNAMSIZ = 16
_IFREQ_SIZE = 40  # struct ifreq on 64-bit: the name, then a 24-byte union (ifr_data first)

ETHTOOL_GENL_NAME = "ethtool"
ETHTOOL_GENL_VERSION = 1
ETHTOOL_MSG_FEC_GET = 29
ETHTOOL_A_HEADER_DEV_NAME = 2
ETHTOOL_A_HEADER_FLAGS = 3
ETHTOOL_FLAG_STATS = 4
ETHTOOL_A_FEC_HEADER = 1
ETHTOOL_A_FEC_ACTIVE = 4
ETHTOOL_A_FEC_STATS = 5
ETHTOOL_A_FEC_STAT_CORRECTED = 2
ETHTOOL_A_FEC_STAT_UNCORR = 3
ETHTOOL_A_FEC_STAT_CORR_BITS = 4
FEC_MODES = {49: "off", 50: "RS", 51: "BASER", 74: "LLRS"}  # ETHTOOL_LINK_MODE_FEC_*_BIT


def parse_strings(data: bytes, count: int) -> list[str]:
    """The names of a ``ETHTOOL_GSTRINGS`` answer: ``count`` NUL-padded 32-byte slots."""
    names = []
    for index in range(count):
        slot = data[index * ETH_GSTRING_LEN:(index + 1) * ETH_GSTRING_LEN]
        names.append(slot.split(b"\0", 1)[0].decode("ascii", "replace"))
    return names


@dataclass(frozen=True)
class FecStats:
    """The kernel's FEC statistics (ethtool netlink FEC_GET with ETHTOOL_FLAG_STATS): each a
    tuple of the total then each lane, or () when the driver does not report it."""

    corrected_blocks: tuple[int, ...] = ()
    uncorrectable_blocks: tuple[int, ...] = ()
    corrected_bits: tuple[int, ...] = ()


def fec_request(netdev: str) -> bytes:
    """The attributes of FEC_GET for ``netdev`` with statistics."""
    return nl.nested(ETHTOOL_A_FEC_HEADER,
                     nl.attr_str(ETHTOOL_A_HEADER_DEV_NAME, netdev),
                     nl.attr_u32(ETHTOOL_A_HEADER_FLAGS, ETHTOOL_FLAG_STATS))


def parse_fec_reply(payload: bytes) -> tuple[Optional[str], Optional[FecStats]]:
    """(active FEC mode or None, statistics or None) of a FEC_GET_REPLY's attributes."""
    top = nl.attr_map(payload)
    active = nl.get_u32(top.get(ETHTOOL_A_FEC_ACTIVE))
    mode = FEC_MODES.get(active) if active is not None else None
    if active is not None and mode is None:
        mode = f"mode {active}"  # a FEC mode newer than this table: known by its bit
    nest = top.get(ETHTOOL_A_FEC_STATS)
    if nest is None:
        return mode, None
    stats = nl.attr_map(nest)
    return mode, FecStats(
        corrected_blocks=nl.get_u64_array(stats.get(ETHTOOL_A_FEC_STAT_CORRECTED)),
        uncorrectable_blocks=nl.get_u64_array(stats.get(ETHTOOL_A_FEC_STAT_UNCORR)),
        corrected_bits=nl.get_u64_array(stats.get(ETHTOOL_A_FEC_STAT_CORR_BITS)))


class EthtoolKernel:
    """The two kinds of call, each on its own socket opened at first use and kept."""

    def __init__(self) -> None:
        self._inet: Optional[socket.socket] = None
        self._genl: Optional[nl.GenlSocket] = None
        self._names: dict[str, list[str]] = {}  # netdev -> its statistics' names (by count)

    def close(self) -> None:
        for sock in (self._inet, self._genl):
            if sock is not None:
                sock.close()
        self._inet = self._genl = None

    def _ioctl(self, netdev: str, buffer: array.array[int]) -> None:
        if self._inet is None:
            self._inet = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
        name = netdev.encode()
        if not name or len(name) >= IFNAMSIZ:
            raise OSError(19, f"not a netdev name: {netdev!r}")  # ENODEV
        address, _ = buffer.buffer_info()
        ifreq = bytearray(struct.pack(f"{IFNAMSIZ}sP", name, address).ljust(_IFREQ_SIZE, b"\0"))
        fcntl.ioctl(self._inet.fileno(), SIOCETHTOOL, ifreq)

    def statistics(self, netdev: str) -> dict[str, int]:
        """Every driver statistic of ``netdev`` by name (``ethtool -S``)."""
        info = array.array("B", struct.pack("=IIQI", ETHTOOL_GSSET_INFO, 0, 1 << ETH_SS_STATS, 0))
        self._ioctl(netdev, info)
        _, _, mask, count = struct.unpack("=IIQI", info.tobytes())
        if not mask & (1 << ETH_SS_STATS) or count == 0:
            return {}
        names = self._names.get(netdev)
        if names is None or len(names) != count:
            strings = array.array("B", struct.pack("=III", ETHTOOL_GSTRINGS, ETH_SS_STATS, count)
                                  + bytes(count * ETH_GSTRING_LEN))
            self._ioctl(netdev, strings)
            names = parse_strings(strings.tobytes()[12:], count)
            self._names[netdev] = names
        values = array.array("B", struct.pack("=II", ETHTOOL_GSTATS, count) + bytes(count * 8))
        self._ioctl(netdev, values)
        raw = values.tobytes()
        answered = struct.unpack_from("=I", raw, 4)[0]
        if answered != count:  # the set changed between the calls: names again next time
            self._names.pop(netdev, None)
            return {}
        return dict(zip(names, struct.unpack_from(f"={count}Q", raw, 8)))

    def fec(self, netdev: str) -> tuple[Optional[str], Optional[FecStats]]:
        """The active FEC mode and statistics of ``netdev`` (FEC_GET with statistics)."""
        if self._genl is None:
            self._genl = nl.GenlSocket()
        family = self._genl.family_id(ETHTOOL_GENL_NAME)
        replies = self._genl.request(family, ETHTOOL_MSG_FEC_GET, ETHTOOL_GENL_VERSION,
                                     fec_request(netdev))
        if not replies:
            return None, None
        return parse_fec_reply(replies[0].payload)
