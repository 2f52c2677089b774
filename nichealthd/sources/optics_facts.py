"""The diagnostics of a pluggable module (QSFP, QSFP-DD, OSFP): plain values, in SI units.

The value types of the optics fact (its key, :data:`~nichealthd.sources.optics.PORT_OPTICS`,
is its source's), pure (the families of the core import them; ARCHITECTURE.md, the source
seam), in a module of their own because the page parser below the source,
:mod:`nichealthd.sources.module_pages`, builds them too. Judged by the optics family
(:mod:`nichealthd.core.checks.optics`). Every reading and every threshold is
``None`` where the module does not implement it or the bytes were not plausible ("not
available", never a guess); a lane's values are in lane order from lane 1 (a lane the
module does not use is ``None`` there).

What a module is decides what it measures: a copper cable has no laser and no photodiode, so
its optical monitors are not available whatever its bytes read (``media``); a flat-memory
module has no monitor pages; and each module's own latched flags (``flags``: the level it
raised itself, per monitor and lane) stand beside its thresholds.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field, replace
from typing import Mapping, Optional, Sequence

# The monitors, by the names the family, the views and the metrics use.
TEMPERATURE = "temperature"  # °C
VOLTAGE = "voltage"  # V
RX_POWER = "rx_power"  # mW (shown in dBm)
TX_POWER = "tx_power"  # mW (shown in dBm)
TX_BIAS = "tx_bias"  # mA
MODULE_MONITORS = (TEMPERATURE, VOLTAGE)
LANE_MONITORS = (RX_POWER, TX_POWER, TX_BIAS)
UNITS = {TEMPERATURE: "°C", VOLTAGE: "V", RX_POWER: "dBm", TX_POWER: "dBm", TX_BIAS: "mA"}
# What carries the signal (SFF-8636 transmitter technology, CMIS media type / media interface
# technology): a copper cable has no optical monitors.
OPTICAL, PASSIVE_COPPER, ACTIVE_COPPER, UNKNOWN_MEDIA = (
    "optical", "passive copper", "active copper", "unknown")
COPPER = frozenset({PASSIVE_COPPER, ACTIVE_COPPER})  # no laser, no photodiode
# The levels a reading or a module's own flag can be at (the module's flag names: SFF-8636
# bytes 6-14, CMIS byte 9 and page 11h bytes 139-152).
OK = "ok"
HIGH_ALARM, LOW_ALARM = "high alarm", "low alarm"
HIGH_WARNING, LOW_WARNING = "high warning", "low warning"
RANK = {OK: 0, LOW_WARNING: 1, HIGH_WARNING: 1, LOW_ALARM: 2, HIGH_ALARM: 2}
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
    media: str = UNKNOWN_MEDIA
    flat: bool = False
    identity: tuple[str, str, str] = ("", "", "")  # vendor name, part number, serial number
    flags: Mapping[str, tuple[str, ...]] = field(default_factory=dict)
    rx_los: tuple[Optional[bool], ...] = ()
    data_paths: tuple[tuple[int, ...], ...] = ()

    def module_value(self, monitor: str) -> Optional[float]:
        return self.temperature if monitor == TEMPERATURE else self.voltage

    def paths(self) -> tuple[tuple[int, ...], ...]:
        """The lanes of each data path (one path of every lane read when none is known)."""
        if self.data_paths:
            return self.data_paths
        count = max((len(v) for v in self.lanes.values()), default=0)
        return (tuple(range(count)),) if count else ()


@dataclass(frozen=True)
class PortOptics:
    """The optics fact of one port: its netdev and the module's diagnostics, or why there
    are none (``reason``: no module, the kernel refused or does not support the call, the
    pages could not be parsed)."""

    netdev: str
    diagnostics: Optional[ModuleDiagnostics] = None
    reason: str = ""
    # The lanes (0-based) of the module that serve this port: all of them unless the module
    # is shared by several ports (a twin-port module, :func:`share`).
    served: Optional[tuple[int, ...]] = None

    def lanes_served(self) -> tuple[int, ...]:
        diag = self.diagnostics
        if diag is None:
            return ()
        if self.served is not None:
            return self.served
        return tuple(lane for path in diag.paths() for lane in path)


def share(facts: Mapping[str, PortOptics], order: Sequence[tuple[str, str]]
          ) -> dict[str, PortOptics]:
    """Each port's own lanes of a module that several ports read (a twin-port module: both
    host ports' netdevs answer with the same pages): the ports reading one module take its
    data paths in ``order`` (port key and PCI slot, ``0000:47:00``, in PCI function order),
    one each, so every live lane is judged once, for the port it serves. One module is the
    same vendor, part and serial number; a module without a serial number is one module
    only on the functions of one PCI slot (one card). Ports whose count differs from the
    module's data paths keep every lane (nothing is left unjudged)."""
    groups: dict[tuple[str, ...], list[str]] = {}
    for key, slot in order:
        fact = facts.get(key)
        diag = fact.diagnostics if fact is not None else None
        if diag is None or len(diag.paths()) < 2 or not any(diag.identity):
            continue
        group = diag.identity if diag.identity[2] else (*diag.identity, slot)
        groups.setdefault(group, []).append(key)
    out = dict(facts)
    for keys in groups.values():
        paths = facts[keys[0]].diagnostics.paths()  # type: ignore[union-attr]
        if len(keys) < 2 or len(keys) != len(paths):
            continue
        for key, path in zip(keys, paths):
            out[key] = replace(facts[key], served=path)
    return out
