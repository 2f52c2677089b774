"""The physical-layer facts of one netdev as plain data: what the PHY source gives the families.

The fact module of ``sources/phy.py``: its key :data:`PHY` and its types, pure (the families
of the core import them; ARCHITECTURE.md, the source seam). ``sources/phy.py`` reads them (the
kernel's ethtool calls, or the simulator's files) and the link-BER family judges them; neither
knows how the other works. A fact the kernel refused or
does not support for a netdev is absent (None, or a name missing from ``counters``), never an
error: the families judge what is there.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Mapping, Optional

from ..core.model import Fact

PHY: Fact[Mapping[str, PhyReading]] = Fact("phy")  # port key -> its netdev's reading

# The driver statistics (``ethtool -S``) the families use: the PPCNT physical-layer group of
# mlx5 (drivers/net/ethernet/mellanox/mlx5/core/en_stats.c, pport_phy_statistical_stats_desc,
# pport_phy_statistical_err_lanes_stats_desc, and "link_down_events_phy"), and the RFC 2819
# group's CRC errors. Lanes: rx_err_lane_<N>_phy.
# rx_bits_phy: bits received at the PHY, the denominator of a BER; mlx5 documents it but
# prints it only from 2026 ("net/mlx5e: Expose physical received bits counters to ethtool"),
# ionic has it: without it the denominator is the port's rate times the window.
RX_BITS = "rx_bits_phy"
CORRECTED_BITS = "rx_corrected_bits_phy"  # bits FEC corrected: the numerator of pre-FEC BER
SYMBOL_ERRORS = "rx_pcs_symbol_err_phy"  # errors FEC could not correct (or with FEC off)
CRC_ERRORS = "rx_crc_errors_phy"
LINK_DOWN_EVENTS = "link_down_events_phy"
LANE_PREFIX, LANE_SUFFIX = "rx_err_lane_", "_phy"
WANTED = frozenset({RX_BITS, CORRECTED_BITS, SYMBOL_ERRORS, CRC_ERRORS, LINK_DOWN_EVENTS})


def wanted(name: str) -> bool:
    """Whether a driver statistic is one of the physical-layer counters kept."""
    if name in WANTED:
        return True
    lane = name[len(LANE_PREFIX):-len(LANE_SUFFIX)]
    # A port has at most 8 lanes (ETHTOOL_MAX_LANES): a file of a million lane names is not
    # a million counters.
    return (name.startswith(LANE_PREFIX) and name.endswith(LANE_SUFFIX) and lane.isascii()
            and lane.isdigit() and len(lane) <= 2)


@dataclass(frozen=True)
class FecStats:
    """The kernel's FEC statistics (ethtool netlink FEC_GET with ETHTOOL_FLAG_STATS): each a
    tuple of the total then each lane, or () when the driver does not report it."""

    corrected_blocks: tuple[int, ...] = ()
    uncorrectable_blocks: tuple[int, ...] = ()
    corrected_bits: tuple[int, ...] = ()


@dataclass(frozen=True)
class PhyReading:
    """One netdev's physical-layer facts of one read.

    ``counters``: the wanted driver statistics the netdev has (absent: not available).
    ``fec_mode``: the active FEC ("off", "RS", "BASER", "LLRS"), None when not available.
    ``fec``: its statistics, None when not available.
    """

    netdev: str
    counters: Mapping[str, int] = field(default_factory=dict)
    fec_mode: Optional[str] = None
    fec: Optional[FecStats] = None

    @property
    def empty(self) -> bool:
        return not self.counters and self.fec_mode is None and self.fec is None
