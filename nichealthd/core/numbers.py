"""Plausibility as data: every number read from the host has a kind, and one parser reads them.

ARCHITECTURE.md (sources): a reader turns every integer it reads from sysfs (and the kernel's other
text files) into a value through :func:`parse` with the :class:`Kind` of that number. A kind is
the range the kernel can really print for it, narrowed to what is physically plausible; a value
outside its kind is :class:`Unreadable`, exactly like a missing or garbled file: the readers log
it once per file and the families do not judge it. :func:`parse` never raises, whatever the
bytes (huge, negative, non-ASCII, non-numeric): a garbage value can neither fail a poll nor
become a fault.

The kinds and where their bounds come from:

- counters (:func:`counter`): non-negative and within their width. An IB PMA counter is
  masked to its width by the kernel (``drivers/infiniband/core/sysfs.c``, ``show_pma_counter``),
  an mlx5 Q counter is a ``be32`` and its congestion and PPCNT counters ``be64``
  (``drivers/infiniband/hw/mlx5/counters.c``); a value beyond the width cannot come from them.
- AER totals (:data:`AER_TOTAL`): the kernel's ``u64`` counts (``drivers/pci/pcie/aer.c``), that
  rise by less than :data:`AER_MAX_PER_SECOND` (a :class:`RateGate` holds them to it).
- temperatures (:data:`TEMPERATURE`, :data:`CRITICAL_TEMPERATURE`): mlx5's hwmon reports the
  MTMP register's unsigned 16-bit fields in 0.125 °C steps (``drivers/net/ethernet/mellanox/
  mlx5/core/hwmon.c``, ``mtmp_temp_to_mdeg``; ``include/linux/mlx5/mlx5_ifc.h``,
  ``mlx5_ifc_mtmp_reg_bits``): 0 to 8191.875 °C can be printed. A sensor reading is plausible
  from -40 °C (the lowest industrial operating temperature) to 150 °C (the highest junction
  temperature any silicon part is rated for); a reading above it is not a temperature but
  garbage, and taken as one it would be "above critical". A critical threshold is plausible
  from 60 °C (below the 70 °C top of the commercial class of pluggable modules, SFF-8472 and
  CMIS, the coolest parts on a NIC: an ASIC's is about 105 °C) to 150 °C; 0 is the register
  left unset (no threshold, not judged). A threshold of 1 m°C would make every working card
  "at or above critical".
- PCIe link widths (:data:`PCIE_WIDTH`): the Link Capabilities/Status encodings x1, x2, x4,
  x8, x12, x16, x32 (PCIe Base spec, Link Capabilities register), and 0 for a link that is
  down.
- NUMA nodes (:data:`NUMA_NODE`): -1 (NUMA_NO_NODE) to 1023 (``MAX_NUMNODES`` is
  ``1 << NODES_SHIFT``, at most 10 bits on x86-64 and arm64).
- port numbers, port states, LIDs, PCI IDs, flags, the kmsg sequence: their fields'
  widths.
- the physical layer's counters (:data:`PHY_COUNTER`): 64-bit (mlx5's PPCNT counters are
  ``be64``; the ethtool ``u64`` statistics and FEC counters), and never all ones: a register
  read that failed (a PCIe read of a function that is gone returns all ones), not a count;
  one such read taken as a count is a BER of 4.9e+07 or 1.8e19 FEC blocks in two seconds.

Some physical quantities are not integers: :class:`Measure` is their kind (a finite range),
:func:`measure` holds a computed value to it and :func:`parse_measure` reads one from text
(a decimal or an exponent, at most :data:`MEASURE_CHARS` characters), neither ever raising:

- a bit error ratio (:data:`BIT_ERROR_RATIO`) is a share of the bits: 0 to 1. A "BER" above
  1 (more bits corrected than the link carried) is not a ratio but a wrong count or rate;
- a port's line rate (:data:`LINE_RATE`, Gb/s): from 1 (below the slowest InfiniBand lane,
  SDR 2.5 Gb/s, and the slowest Ethernet that has FEC, 10 Gb/s) to 3200 (twice the fastest
  port there is, 1.6 Tb/s); a rate outside it carries no window's bits: no rate;
- a counter's rise per second (:data:`COUNTER_RATE`): at most 1e13, beyond any link's bits
  per second (1.6e12), the fastest any physical-layer counter can rise;
- a moment in Unix time (:data:`UNIX_TIME`): 0 to the end of year 9999.

PCIe link *speeds* are decimals (``"16.0 GT/s PCIe"``) and are held to the PCIe set by
:func:`nichealthd.sources.pci_facts.parse_speed`.
"""

from __future__ import annotations

import functools
import math
import time
from dataclasses import dataclass, field
from typing import AbstractSet, Callable, Optional, Union

U64 = 2**64 - 1
# The most an AER total can rise per second. Each error the kernel counts is one run of its
# AER interrupt handler (drivers/pci/pcie/aer.c: aer_isr -> aer_isr_one_error ->
# aer_print_error -> pci_dev_aer_stats_incr) that reads the error source and the device's AER
# status registers over PCIe configuration space (non-posted reads of about a microsecond
# each, several per error): a million per second is out of reach for any function, by a
# margin. Above it a total is not a count but garbage.
AER_MAX_PER_SECOND = 1_000_000


@dataclass(frozen=True)
class Unreadable:
    """Marker: the file exists but its value could not be used (I/O error, garbage…)."""

    reason: str

    def __bool__(self) -> bool:
        return False


@dataclass(frozen=True)
class Kind:
    """What a number is: its plausible range, and how the kernel prints it."""

    name: str  # for the log line: "AER total", "NUMA node"
    low: int
    high: int
    base: int = 10  # 16: hexadecimal, with or without 0x
    only: Optional[frozenset[int]] = None  # the only values it takes within [low, high]
    also: frozenset[int] = frozenset()  # values outside [low, high] that it may take
    max_rate: Optional[float] = None  # the most it rises per second (a RateGate holds it)
    digits: int = field(init=False, repr=False, compare=False)
    # Decimal digits the fast path of parse() takes (0: never, a hexadecimal kind).
    fast_digits: int = field(init=False, repr=False, compare=False)

    def __post_init__(self) -> None:
        widest = max(abs(self.low), abs(self.high), *(abs(v) for v in self.also))
        object.__setattr__(self, "digits", len(_in_base(widest, self.base)))
        object.__setattr__(self, "fast_digits", self.digits if self.base == 10 else 0)

    def holds(self, value: int) -> bool:
        if self.low <= value <= self.high:
            return self.only is None or value in self.only
        return value in self.also

    def describe(self) -> str:
        """``AER total (0 to 18446744073709551615)``."""
        if self.only is not None:
            values = sorted(self.only | self.also)
            return f"{self.name} ({', '.join(map(str, values))})"
        if self.base == 16:
            span = f"0x{self.low:x} to 0x{self.high:x}"
        else:
            span = f"{self.low} to {self.high}"
        also = "".join(f" or {v}" for v in sorted(self.also))
        return f"{self.name} ({span}{also})"


Number = Union[int, Unreadable]


def parse(raw: Union[bytes, str, None], kind: Kind) -> Number:
    """The first line of ``raw`` as a number of ``kind``, or :class:`Unreadable` saying why.

    Plain ASCII digits only (an optional ``-`` where the kind is signed, ``0x`` where it is
    hexadecimal): ``int()`` alone accepts underscores, spaces, ``+`` and non-ASCII digits that
    the kernel never prints, and raises on 5000 digits. Never raises.
    """
    if type(raw) is bytes:  # the common case, a counter read with pread: no str copy
        first = raw.split(b"\n", 1)[0].strip()
        if first.isdigit() and len(first) <= kind.fast_digits:  # bytes.isdigit: ASCII only
            number = int(first)
            if kind.low <= number <= kind.high and kind.only is None:
                return number
    elif isinstance(raw, str):
        return _parse_text(raw.split("\n", 1)[0].strip(), kind)
    if raw is None:
        return Unreadable("no value")
    first = raw.split(b"\n", 1)[0].strip()
    try:
        return _parse_text(first.decode("ascii"), kind)
    except UnicodeDecodeError:
        return Unreadable("not ASCII text")


def value(raw: Union[bytes, str, None], kind: Kind) -> Optional[int]:
    """:func:`parse` for what needs no reason: the number, or None."""
    number = parse(raw, kind)
    return None if isinstance(number, Unreadable) else number


def _parse_text(text: str, kind: Kind) -> Number:
    if not text:
        return Unreadable("empty")
    if not text.isascii():
        return Unreadable("not ASCII text")
    negative = text.startswith("-") and kind.low < 0
    body = text[1:] if negative else text
    if kind.base == 16 and body[:2].lower() == "0x":
        body = body[2:]
    digits = _DIGITS[kind.base]
    if not body or any(c not in digits for c in body):
        return Unreadable(f"not {_article(kind.name)} {kind.name}: {_short(text)}")
    if len(body) > kind.digits:  # before int(): 5000 digits would raise there
        return Unreadable(f"out of range for {_article(kind.name)} {kind.describe()}: "
                          f"{len(body)} digits")
    number = -int(body, kind.base) if negative else int(body, kind.base)
    if not kind.holds(number):
        return Unreadable(f"out of range for {_article(kind.name)} {kind.describe()}: "
                          f"{_short(text)}")
    return number


_DIGITS = {10: frozenset("0123456789"), 16: frozenset("0123456789abcdefABCDEF")}


def _in_base(number: int, base: int) -> str:
    return f"{number:x}" if base == 16 else str(number)


def _short(text: str) -> str:
    return repr(text if len(text) <= 40 else text[:40] + "…")


def _article(name: str) -> str:
    return "an" if name[:1].lower() in "aeiou8" else "a"  # an AER total, an 8-bit counter


@functools.cache
def counter(width: int) -> Kind:
    """A hardware counter of ``width`` bits: 0 to 2^width-1."""
    return Kind(f"{width}-bit counter", 0, (1 << width) - 1)


AER_TOTAL = Kind("AER total", 0, U64, max_rate=AER_MAX_PER_SECOND)
TEMPERATURE = Kind("temperature in m°C", -40_000, 150_000)
CRITICAL_TEMPERATURE = Kind("critical temperature in m°C", 60_000, 150_000,
                            also=frozenset({0}))
PCIE_WIDTH = Kind("PCIe link width", 0, 32, only=frozenset({0, 1, 2, 4, 8, 12, 16, 32}))
NUMA_NODE = Kind("NUMA node", -1, 1023)
PORT_NUMBER = Kind("port number", 0, 255)  # u8 (IBTA); 0 is a switch's management port
# PortInfo.PortState and PortPhysicalState are 4-bit fields (IBTA vol. 1, PortInfo).
PORT_STATE = Kind("port state number", 0, 15)
NETDEV_PORT = Kind("netdev port index", 0, 0xFFFF)  # dev_port: unsigned short
GID_INDEX = Kind("GID index", 0, 0xFFFF)
CARRIER = Kind("carrier", 0, 1)
LID = Kind("LID", 0, 0xFFFF, base=16)  # sm_lid: "0x%x" of a 16-bit LID
NETDEV_FLAGS = Kind("interface flags", 0, 0xFFFFFFFF, base=16)  # "0x%x" of unsigned int
ROUTE_FLAGS = Kind("route flags", 0, 0xFFFFFFFF, base=16)  # /proc/net/route "%04X"
PCI_VENDOR = Kind("PCI vendor ID", 0, 0xFFFF, base=16)  # "0x%04x"
PCI_CLASS = Kind("PCI class code", 0, 0xFFFFFF, base=16)  # "0x%06x"
KMSG_SEQUENCE = Kind("kmsg sequence number", 0, U64)  # u64 (printk_ringbuffer)
KMSG_USEC = Kind("kmsg timestamp in µs", 0, U64)
PHY_COUNTER = Kind("64-bit PHY counter (all ones is a failed read)", 0, U64 - 1)


@dataclass(frozen=True)
class Measure:
    """What a non-integer quantity is: its finite, plausible range (both ends included)."""

    name: str  # for the log line: "bit error ratio"
    low: float
    high: float

    def holds(self, value: float) -> bool:
        return math.isfinite(value) and self.low <= value <= self.high

    def describe(self) -> str:
        return f"{self.name} ({self.low:g} to {self.high:g})"


Quantity = Union[float, Unreadable]
MEASURE_CHARS = 40  # "1.7642000000000000e+09" and more: a longer text is not a measure
_MEASURE_CHARS = frozenset("0123456789.eE+-")


def measure(value: float, kind: Measure) -> Quantity:
    """``value`` when it is finite and within ``kind``, else :class:`Unreadable` saying why."""
    if kind.holds(value):
        return value
    return Unreadable(f"out of range for {_article(kind.name)} {kind.describe()}: {value!r}")


def parse_measure(text: str, kind: Measure) -> Quantity:
    """A decimal or exponent in ``text`` as a quantity of ``kind``; never raises (``float()``
    alone takes ``inf``, ``nan``, underscores and non-ASCII digits, and overflows to inf)."""
    body = text.strip()
    if not body:
        return Unreadable("empty")
    if len(body) > MEASURE_CHARS or not body.isascii() \
            or any(c not in _MEASURE_CHARS for c in body):
        return Unreadable(f"not {_article(kind.name)} {kind.name}: {_short(body)}")
    try:
        value = float(body)
    except ValueError:
        return Unreadable(f"not {_article(kind.name)} {kind.name}: {_short(body)}")
    return measure(value, kind)


BIT_ERROR_RATIO = Measure("bit error ratio", 0.0, 1.0)
LINE_RATE = Measure("line rate in Gb/s", 1.0, 3200.0)
COUNTER_RATE = Measure("counter rise per second", 0.0, 1e13)
UNIX_TIME = Measure("moment in Unix time", 0.0, 253402300799.0)  # 9999-12-31T23:59:59Z


def boottime() -> float:
    """Seconds since the host booted, suspend included (CLOCK_BOOTTIME; monotonic elsewhere)."""
    clock = getattr(time, "CLOCK_BOOTTIME", None)
    return time.clock_gettime(clock) if clock is not None else time.monotonic()


class RateGate:
    """Holds the counts of a kind with a ``max_rate`` to it, per file.

    A value that rose faster than the kind allows since the last one accepted is
    :class:`Unreadable`; the first one is held to the rate since boot (the kernel's counts start
    at zero when the device is enumerated), so 2^63 read a minute after a restart is not a
    baseline. A decrease is accepted: a reset (a device removed and found again) starts the
    count afresh, which the counter engine judges as a reset. The clock is injected.
    """

    def __init__(self, clock: Callable[[], float] = boottime) -> None:
        self.clock = clock
        self._last: dict[str, tuple[int, float]] = {}

    def check(self, key: str, number: int, kind: Kind, now: Optional[float] = None) -> Number:
        """``number`` or, past the kind's rate, Unreadable. ``now``: the clock's reading, for
        a caller that checks many files read at one moment (default: read it here)."""
        if kind.max_rate is None:
            return number
        if now is None:
            now = self.clock()
        last, at = self._last.get(key, (0, 0.0))
        rise = number - last
        allowed = kind.max_rate * max(0.0, now - at)
        if rise > allowed:
            return Unreadable(f"rose by {rise} in {max(0.0, now - at):.0f} s: more than "
                              f"{_article(kind.name)} {kind.name} can ({kind.max_rate:.0f} "
                              f"per second)")
        self._last[key] = (number, now)
        return number

    def retain(self, keys: AbstractSet[str]) -> None:
        """Forget the files not in ``keys`` (their devices are gone)."""
        self._last = {k: v for k, v in self._last.items() if k in keys}
