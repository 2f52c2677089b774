"""The diagnostics of a pluggable module (QSFP, QSFP-DD, OSFP): plain values, in SI units.

Filled by :mod:`nichealthd.sources.module_pages` from the module's raw pages and judged by the
optics family (:mod:`nichealthd.core.checks.optics`). Every reading and every threshold is
``None`` where the module does not implement it or the bytes were not plausible ("not
available", never a guess); a lane's values are in lane order from lane 1.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Mapping, Optional

# The monitors, by the names the family, the views and the metrics use.
TEMPERATURE = "temperature"  # °C
VOLTAGE = "voltage"  # V
RX_POWER = "rx_power"  # mW (shown in dBm)
TX_POWER = "tx_power"  # mW (shown in dBm)
TX_BIAS = "tx_bias"  # mA
MODULE_MONITORS = (TEMPERATURE, VOLTAGE)
LANE_MONITORS = (RX_POWER, TX_POWER, TX_BIAS)
UNITS = {TEMPERATURE: "°C", VOLTAGE: "V", RX_POWER: "dBm", TX_POWER: "dBm", TX_BIAS: "mA"}
# dBm shown for a reading of 0 mW (no light at all): the monitors' resolution is 0.1 µW, -40 dBm.
DBM_FLOOR = -40.0


def dbm(milliwatts: float) -> float:
    """``10·log10(mW)``, at least :data:`DBM_FLOOR` (0 mW is no light, not -infinity)."""
    if milliwatts <= 0:
        return DBM_FLOOR
    return max(DBM_FLOOR, 10.0 * math.log10(milliwatts))


def milliwatts(dbm_value: float) -> float:
    """The inverse of :func:`dbm`."""
    return float(10.0 ** (dbm_value / 10.0))


@dataclass(frozen=True)
class Thresholds:
    """The module's own limits of one monitor, in the monitor's unit (low ≤ warn ≤ high)."""

    high_alarm: float
    low_alarm: float
    high_warning: float
    low_warning: float


@dataclass(frozen=True)
class ModuleDiagnostics:
    """What one module says about itself.

    ``spec`` is ``SFF-8636`` or ``CMIS``; ``identifier`` the SFF-8024 identifier byte.
    ``lanes`` maps each lane monitor to its per-lane readings (an absent key: not
    implemented); ``thresholds`` maps each monitor to the module's limits (absent: the
    module publishes none, or not plausible ones).
    """

    spec: str
    identifier: int
    temperature: Optional[float] = None
    voltage: Optional[float] = None
    lanes: Mapping[str, tuple[Optional[float], ...]] = field(default_factory=dict)
    thresholds: Mapping[str, Thresholds] = field(default_factory=dict)

    def module_value(self, monitor: str) -> Optional[float]:
        return self.temperature if monitor == TEMPERATURE else self.voltage


@dataclass(frozen=True)
class PortOptics:
    """The optics fact of one port: its netdev and the module's diagnostics, or why there
    are none (``reason``: no module, the kernel refused or does not support the call, the
    pages could not be parsed)."""

    netdev: str
    diagnostics: Optional[ModuleDiagnostics] = None
    reason: str = ""
