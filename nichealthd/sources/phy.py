"""The physical-layer counters and FEC of each monitored port's netdev: the ``phy`` source.

A Source on the seam (``sources/seam.py``), read only in a poll in which the link-BER family
is due. For every monitored port with a netdev it gives a :class:`PhyReading` (fact
:data:`PHY`, its key and type owned here; the link-BER family imports them): the
driver's physical-layer statistics (``ethtool -S``: ``rx_bits_phy``, ``rx_corrected_bits_phy``,
``rx_pcs_symbol_err_phy``, ``rx_err_lane_N_phy``, ``rx_crc_errors_phy``,
``link_down_events_phy``), the active FEC mode and the FEC statistics.

Where they come from:

- the kernel (:mod:`.ethtool_kernel`: the ``SIOCETHTOOL`` ioctl and ethtool netlink
  ``FEC_GET``), when ``ethtoolPath`` is empty and ``sysfsRoot`` is ``/sys``. A call the kernel
  refuses or does not support for a netdev (``EOPNOTSUPP``, ``EPERM``, ``ENODEV``, a sandbox
  without ``AF_NETLINK``) makes that fact "not available" for the netdev: logged once, at
  info, never a fault and never an event;
- files, when ``ethtoolPath`` is set (the simulator writes them): ``<ethtoolPath>/<netdev>/stats``
  and ``<ethtoolPath>/<netdev>/fec``. A missing file is a fact not available.

  ``stats`` is ``ethtool -S``'s text: one ``name: value`` per line (``#`` comments and other
  lines are skipped). A value is a decimal, or a counter advancing at a constant rate,
  ``BASE +RATE/s @EPOCH``: ``BASE + floor(RATE × (now − EPOCH))`` at the time of the read
  (the simulator has no clock loop; ``nichealthd-sim set-ber`` writes this form).
  ``fec`` is JSON: ``{"active": "RS", "corrected_blocks": [total, lane0, ...],
  "uncorrectable_blocks": [...], "corrected_bits": [...]}``; an absent key or ``null`` is
  not available.

- neither with another ``sysfsRoot`` and no ``ethtoolPath`` (a simulated host read without
  its files): the host's own netdevs are not this tree's.

Every number goes through ``core/numbers.py``: a count as a 64-bit PHY counter (never all
ones, the kernel's ``ETHTOOL_STAT_NOT_SET`` and what a failed register read returns), a rate
per second and an epoch as measures of their kinds. A value that is none of these (garbage,
5000 digits, ``+1e308/s``, JSON nested deeper than the parser follows) is not available, like
a missing one, and logged once while it lasts: no reader here raises on a file's content.
"""

from __future__ import annotations

import errno
import json
import logging
import math
import os
import re
import time
from dataclasses import dataclass, field
from typing import Mapping, NamedTuple, Optional, Sequence, Union

from ..core.config import Config
from ..core.model import Fact, HostSnapshot
from ..core.numbers import (
    COUNTER_RATE,
    PHY_COUNTER,
    UNIX_TIME,
    Number,
    Unreadable,
    parse,
    parse_measure,
)
from .ethtool_kernel import EthtoolKernel
from .ethtool_kernel import FecStats as FecStats  # the PHY fact's FEC part (PhyReading.fec)
from .problems import ProblemLog
from .seam import Source

log = logging.getLogger(__name__)

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


STATS_FILE = "stats"
FEC_FILE = "fec"
_MAX_FILE = 1 << 20
# "name: 123" or "name: 100 +2.5e9/s @1764200000.25"
_LINE = re.compile(r"\s*([A-Za-z0-9_.\-]+):?\s+([0-9]+)"
                   r"(?:\s+\+([0-9.eE+\-]+)/s\s+@([0-9.eE+\-]+))?\s*")
# The kernel's names (sources/ethtool_kernel.py, FEC_MODES) and "mode N" for a newer one.
_FEC_MODE = re.compile(r"off|RS|BASER|LLRS|mode [0-9]{1,3}")
# What makes a kernel fact "not available" rather than a failure of the read.
NOT_AVAILABLE = frozenset({errno.EOPNOTSUPP, errno.EPERM, errno.EACCES, errno.ENODEV,
                           errno.ENOENT, errno.EINVAL, errno.EAFNOSUPPORT,
                           errno.EPROTONOSUPPORT, errno.ENOTSUP})


class StatsFile(NamedTuple):
    """A ``stats`` file read at one moment: the wanted counters, and why each wanted one that
    could not be used was not (its name -> the reason)."""

    values: dict[str, int]
    unreadable: dict[str, str]


def linear(base: int, rate: float, epoch: float, now: float) -> Number:
    """A counter advancing at ``rate`` per second from ``base`` at ``epoch``, at ``now``;
    Unreadable when that is no 64-bit count (``+1e308/s`` a century after its epoch)."""
    rise = rate * max(0.0, now - epoch)
    if not rise <= PHY_COUNTER.high - base:  # inf and nan fail too
        return Unreadable(f"{base} +{rate:g}/s @{epoch:.0f} is beyond a 64-bit counter at "
                          f"{now:.0f}")
    return base + math.floor(rise)


def _line_value(match: re.Match[str], now: float) -> Number:
    """The value of one ``name: VALUE`` or ``name: BASE +RATE/s @EPOCH`` line at ``now``."""
    base = parse(match.group(2), PHY_COUNTER)
    if isinstance(base, Unreadable) or match.group(3) is None:
        return base
    rate = parse_measure(match.group(3), COUNTER_RATE)
    if isinstance(rate, Unreadable):
        return rate
    epoch = parse_measure(match.group(4), UNIX_TIME)
    if isinstance(epoch, Unreadable):
        return epoch
    return linear(base, rate, epoch, now)


def read_stats(text: str, now: float) -> StatsFile:
    """The wanted counters of a ``stats`` file's text, evaluated at ``now``. Never raises:
    a value that is no 64-bit count (garbage, 5000 digits, all ones, a rate that overflows)
    is unreadable, like a missing one, and said why."""
    values: dict[str, int] = {}
    unreadable: dict[str, str] = {}
    for line in text.splitlines():
        match = _LINE.fullmatch(line)
        if match is None or not wanted(match.group(1)):
            continue
        number = _line_value(match, now)
        if isinstance(number, Unreadable):
            unreadable[match.group(1)] = number.reason
        else:
            values[match.group(1)] = number
    return StatsFile(values, unreadable)


def parse_stats(text: str, now: float) -> dict[str, int]:
    """The wanted counters of a ``stats`` file's text at ``now`` (:func:`read_stats`)."""
    return read_stats(text, now).values


class FecFile(NamedTuple):
    """A ``fec`` file: the active mode, the statistics, and what could not be used."""

    mode: Optional[str]
    stats: Optional[FecStats]
    unreadable: dict[str, str]


def _lanes(data: object) -> Union[tuple[int, ...], Unreadable]:
    """A list of counts (total, then each lane); one that is not a 64-bit count spoils it."""
    if not isinstance(data, list):
        return Unreadable(f"not a list of counts: {type(data).__name__}")
    out = []
    for item in data:
        if type(item) is not int:
            return Unreadable(f"not a count: {type(item).__name__}")
        number = parse(str(item), PHY_COUNTER) if item >= 0 else Unreadable("negative")
        if isinstance(number, Unreadable):
            return number
        out.append(number)
    return tuple(out)


def read_fec(text: str) -> FecFile:
    """The ``fec`` file's JSON. Never raises: text that is not JSON (or nests deeper than the
    parser can follow), a mode that is not one of the kernel's names, a count that is not a
    64-bit count: not available, and said why."""
    try:
        data = json.loads(text)
    except (ValueError, RecursionError) as exc:
        return FecFile(None, None, {FEC_FILE: f"not JSON ({type(exc).__name__})"})
    if not isinstance(data, dict):
        return FecFile(None, None, {FEC_FILE: "not a JSON object"})
    unreadable: dict[str, str] = {}
    mode = data.get("active")
    if mode is not None and not (isinstance(mode, str) and _FEC_MODE.fullmatch(mode)):
        unreadable["active"] = f"not a FEC mode: {str(mode)[:40]!r}"
        mode = None
    keys = ("corrected_blocks", "uncorrectable_blocks", "corrected_bits")
    stats = None
    if any(data.get(key) is not None for key in keys):
        lanes = []
        for key in keys:
            got = _lanes(data[key]) if data.get(key) is not None else ()
            if isinstance(got, Unreadable):
                unreadable[key] = got.reason
                got = ()
            lanes.append(got)
        stats = FecStats(*lanes)
    return FecFile(mode or None, stats, unreadable)


def parse_fec(text: str) -> tuple[Optional[str], Optional[FecStats]]:
    """(active mode, statistics) of a ``fec`` file's JSON; (None, None) when not JSON."""
    read = read_fec(text)
    return read.mode, read.stats


class Phy(Source):
    """Each monitored port's netdev: its physical-layer counters, FEC mode and statistics."""

    fact = PHY
    description = "the ports' physical-layer counters and FEC"

    def __init__(self, config: Config) -> None:
        super().__init__(config)
        self._kernel: Optional[EthtoolKernel] = None
        self._unavailable = ProblemLog(log)  # (netdev, what) told once
        self._unreadable = ProblemLog(log)  # (file, value) told once while it lasts
        self._told_names: dict[str, frozenset[str]] = {}  # file -> its values told

    def close(self) -> None:
        if self._kernel is not None:
            self._kernel.close()
            self._kernel = None

    def reconfigure(self, config: Config) -> None:
        super().reconfigure(config)
        self._unavailable = ProblemLog(log)
        self._unreadable = ProblemLog(log)
        self._told_names = {}

    def read(self, snapshot: HostSnapshot, devices: Sequence[str]) -> dict[str, PhyReading]:
        """Port key -> the reading of its netdev; ports without any fact are left out."""
        files = self.config.ethtool_path
        if not files and not self.config.host_sysfs:
            return {}
        wanted_devices = set(devices)
        out: dict[str, PhyReading] = {}
        now = time.time()
        for device in snapshot.devices:
            if device.name not in wanted_devices:
                continue
            for port in device.ports:
                if not port.netdev:
                    continue
                reading = (self._from_files(files, port.netdev, now) if files
                           else self._from_kernel(port.netdev))
                if not reading.empty:
                    out[port.key] = reading
        return out

    @staticmethod
    def _text(path: str) -> Optional[str]:
        try:
            with open(path, "rb") as file:
                return file.read(_MAX_FILE).decode("utf-8", "replace")
        except OSError:
            return None

    def _from_files(self, top: str, netdev: str, now: float) -> PhyReading:
        stats = self._text(os.path.join(top, netdev, STATS_FILE))
        fec = self._text(os.path.join(top, netdev, FEC_FILE))
        counters: dict[str, int] = {}
        if stats is not None:
            read = read_stats(stats, now)
            counters = read.values
            self._told(os.path.join(top, netdev, STATS_FILE), read.unreadable)
        mode: Optional[str] = None
        fec_stats: Optional[FecStats] = None
        if fec is not None:
            fec_read = read_fec(fec)
            mode, fec_stats = fec_read.mode, fec_read.stats
            self._told(os.path.join(top, netdev, FEC_FILE), fec_read.unreadable)
        return PhyReading(netdev, counters, mode, fec_stats)

    def _told(self, where: str, unreadable: Mapping[str, str]) -> None:
        """Each value of ``where`` that could not be used, once while it lasts (and its
        recovery): such a value is not available, never a fault (``ProblemLog``)."""
        for name, why in unreadable.items():
            self._unreadable.report(f"{where}: {name}", f"{where}: {name}: {why}; taken as "
                                    f"unreadable: no window of it is judged")
        for name in self._told_names.get(where, frozenset()) - unreadable.keys():
            self._unreadable.clear(f"{where}: {name}")
        if unreadable:
            self._told_names[where] = frozenset(unreadable)
        else:
            self._told_names.pop(where, None)

    def _from_kernel(self, netdev: str) -> PhyReading:
        if self._kernel is None:
            self._kernel = EthtoolKernel()
        counters: dict[str, int] = {}
        try:
            every = self._kernel.statistics(netdev)
        except OSError as exc:
            self._not_available(netdev, "driver statistics", exc)
        else:
            unreadable = {}
            for name, number in every.items():
                if wanted(name):
                    parsed = parse(str(number), PHY_COUNTER)
                    if isinstance(parsed, Unreadable):
                        unreadable[name] = parsed.reason
                    else:
                        counters[name] = parsed
            self._told(f"{netdev} driver statistics", unreadable)
        mode: Optional[str] = None
        fec: Optional[FecStats] = None
        try:
            mode, fec = self._kernel.fec(netdev)
        except OSError as exc:
            self._not_available(netdev, "FEC mode and statistics", exc)
        return PhyReading(netdev, counters, mode, fec)

    def _not_available(self, netdev: str, what: str, exc: OSError) -> None:
        """Once per netdev and fact while this process runs (a reload tells again)."""
        known = exc.errno in NOT_AVAILABLE
        self._unavailable.report(
            f"{netdev}: {what}", f"{netdev}: {what} not available from the kernel "
            f"({exc.strerror or exc}); asked again each read, told once",
            logging.INFO if known else logging.WARNING)


SOURCE = Phy
