"""The physical-layer counters and FEC of each monitored port's netdev: the ``phy`` source.

A Source on the seam (``sources/seam.py``), read only in a poll in which the link-BER family
is due. For every monitored port with a netdev it gives a :class:`~nichealthd.core.phy.PhyReading`:
the driver's physical-layer statistics (``ethtool -S``: ``rx_bits_phy``,
``rx_corrected_bits_phy``, ``rx_pcs_symbol_err_phy``, ``rx_err_lane_N_phy``,
``rx_crc_errors_phy``, ``link_down_events_phy``), the active FEC mode and the FEC statistics.

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

Every number goes through ``core/numbers.py`` as a 64-bit counter (a value out of range is not
available, like a missing one).
"""

from __future__ import annotations

import errno
import json
import logging
import math
import os
import re
import time
from typing import Any, Optional, Sequence

from ..core.config import Config
from ..core.model import HostSnapshot
from ..core.numbers import counter, value
from ..core.phy import FACT, FecStats, PhyReading, wanted
from .ethtool_kernel import EthtoolKernel
from .problems import ProblemLog
from .seam import Source

log = logging.getLogger(__name__)

COUNTER = counter(64)
STATS_FILE = "stats"
FEC_FILE = "fec"
_MAX_FILE = 1 << 20
# "name: 123" or "name: 100 +2.5e9/s @1764200000.25"
_LINE = re.compile(r"\s*([A-Za-z0-9_.\-]+):?\s+([0-9]+)"
                   r"(?:\s+\+([0-9.eE+\-]+)/s\s+@([0-9.eE+\-]+))?\s*")
# What makes a kernel fact "not available" rather than a failure of the read.
NOT_AVAILABLE = frozenset({errno.EOPNOTSUPP, errno.EPERM, errno.EACCES, errno.ENODEV,
                           errno.ENOENT, errno.EINVAL, errno.EAFNOSUPPORT,
                           errno.EPROTONOSUPPORT, errno.ENOTSUP})


def linear(base: int, rate: float, epoch: float, now: float) -> int:
    """A counter advancing at ``rate`` per second from ``base`` at ``epoch``, at ``now``."""
    return base + math.floor(rate * max(0.0, now - epoch))


def parse_stats(text: str, now: float) -> dict[str, int]:
    """The wanted counters of a ``stats`` file's text, evaluated at ``now``."""
    out: dict[str, int] = {}
    for line in text.splitlines():
        match = _LINE.fullmatch(line)
        if match is None or not wanted(match.group(1)):
            continue
        raw = match.group(2)
        if match.group(3) is not None:
            try:
                rate, epoch = float(match.group(3)), float(match.group(4))
            except ValueError:
                continue
            if not (math.isfinite(rate) and math.isfinite(epoch)) or rate < 0:
                continue
            raw = str(linear(int(raw), rate, epoch, now))
        number = value(raw, COUNTER)
        if number is not None:
            out[match.group(1)] = number
    return out


def _lanes(data: Any) -> tuple[int, ...]:
    if not isinstance(data, list):
        return ()
    out = []
    for item in data:
        number = value(str(item), COUNTER) if isinstance(item, int) else None
        if number is None:
            return ()
        out.append(number)
    return tuple(out)


def parse_fec(text: str) -> tuple[Optional[str], Optional[FecStats]]:
    """(active mode, statistics) of a ``fec`` file's JSON; (None, None) when not JSON."""
    try:
        data = json.loads(text)
    except ValueError:
        return None, None
    if not isinstance(data, dict):
        return None, None
    mode = data.get("active")
    keys = ("corrected_blocks", "uncorrectable_blocks", "corrected_bits")
    stats = None
    if any(data.get(key) is not None for key in keys):
        stats = FecStats(*(_lanes(data.get(key)) for key in keys))
    return (mode if isinstance(mode, str) and mode else None), stats


class Phy(Source):
    """Each monitored port's netdev: its physical-layer counters, FEC mode and statistics."""

    fact = FACT
    description = "the ports' physical-layer counters and FEC"

    def __init__(self, config: Config) -> None:
        super().__init__(config)
        self._kernel: Optional[EthtoolKernel] = None
        self._unavailable = ProblemLog(log)  # (netdev, what) told once

    def close(self) -> None:
        if self._kernel is not None:
            self._kernel.close()
            self._kernel = None

    def reconfigure(self, config: Config) -> None:
        super().reconfigure(config)
        self._unavailable = ProblemLog(log)

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
        mode, fec_stats = parse_fec(fec) if fec is not None else (None, None)
        return PhyReading(netdev, parse_stats(stats, now) if stats is not None else {},
                          mode, fec_stats)

    def _from_kernel(self, netdev: str) -> PhyReading:
        if self._kernel is None:
            self._kernel = EthtoolKernel()
        counters: dict[str, int] = {}
        try:
            every = self._kernel.statistics(netdev)
        except OSError as exc:
            self._not_available(netdev, "driver statistics", exc)
        else:
            for name, number in every.items():
                if wanted(name):
                    parsed = value(str(number), COUNTER)
                    if parsed is not None:
                        counters[name] = parsed
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
