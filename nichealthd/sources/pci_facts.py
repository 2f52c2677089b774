"""The slow PCI facts of a NIC: its PCIe link hops, AER tables and sensors.

The value types of the PCI source's facts (their keys ``PCIE`` / ``AER`` / ``HWMON`` are in
:mod:`nichealthd.sources.pcie`, whose readers and :mod:`nichealthd.sources.hwmon` build
them; the snapshot's ``pcie`` / ``aer`` / ``hwmon`` fields use them too), which the families of
:mod:`nichealthd.core.checks` judge, pure (ARCHITECTURE.md, the source seam), with the parsers
of the kernel's
text formats (pure: they get the text, never a path; every number in them goes through
:func:`nichealthd.core.numbers.parse` with its kind, and a speed must be one of the PCIe set):

- ``current_link_speed`` / ``max_link_speed`` (``drivers/pci/pci-sysfs.c``,
  ``pci_speed_string``): ``"16.0 GT/s PCIe"`` since Linux 5.x, ``"16 GT/s"`` before, and
  ``"Unknown"`` for a link that is down or a speed the kernel does not know; the widths are
  decimal (``0`` for a link that is down);
- ``aer_dev_correctable`` / ``aer_dev_nonfatal`` / ``aer_dev_fatal``
  (``Documentation/ABI/testing/sysfs-bus-pci-devices-aer``): one ``<ErrorName> <count>`` line
  per error type, ending with ``TOTAL_ERR_COR`` / ``TOTAL_ERR_NONFATAL`` /
  ``TOTAL_ERR_FATAL <n>``;
- ``aer_rootport_total_err_cor`` / ``_fatal`` / ``_nonfatal`` (same document,
  ``drivers/pci/pcie/aer.c``: ``sysfs_emit(buf, "%llu\n", ...)``): one decimal count each,
  the ERR_* messages the root port received from the whole hierarchy below it (itself, every
  switch, the NIC, a GPU on the same switch); the kernel shows them only on root ports (and
  root complex event collectors), so their presence is what tells a root port;
- hwmon ``temp*_input`` / ``_crit`` / ``_highest`` (millidegrees Celsius) and ``_label``.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Mapping, Optional, Union

from ..core.numbers import AER_TOTAL, Unreadable, parse

# The AER files of a function and the total line each one ends with.
AER_FILES = (("aer_dev_fatal", "TOTAL_ERR_FATAL"), ("aer_dev_nonfatal", "TOTAL_ERR_NONFATAL"),
             ("aer_dev_correctable", "TOTAL_ERR_COR"))
# A root port's totals of the hierarchy below it, each with the function file of the same
# severity (a NIC's own error shows in both: its ``aer_dev_*`` and its root port's total).
ROOTPORT_FILES = (("aer_rootport_total_err_fatal", "aer_dev_fatal"),
                  ("aer_rootport_total_err_nonfatal", "aer_dev_nonfatal"),
                  ("aer_rootport_total_err_cor", "aer_dev_correctable"))


@dataclass(frozen=True)
class LinkEnd:
    """One PCI function's link files as read (None: absent, unreadable or ``Unknown``)."""

    address: str
    current_speed: Optional[float] = None  # GT/s
    current_width: Optional[int] = None
    max_speed: Optional[float] = None
    max_width: Optional[int] = None


@dataclass(frozen=True)
class PcieHop:
    """One PCIe link: the port above (``upstream``) and the function below it.

    The link's trained speed and width are read at the function below (both ends of a link
    report the same link status); what the hop can do is the lower of both ends' maxima.
    """

    upstream: LinkEnd
    downstream: LinkEnd

    @property
    def name(self) -> str:
        """``0000:17:01.0 → 0000:19:00.0``."""
        return f"{self.upstream.address} → {self.downstream.address}"

    @property
    def capable_speed(self) -> Optional[float]:
        return _lower(self.upstream.max_speed, self.downstream.max_speed)

    @property
    def capable_width(self) -> Optional[int]:
        ends = (self.upstream.max_width, self.downstream.max_width)
        return None if None in ends else min(w for w in ends if w is not None)

    @property
    def degraded(self) -> Optional[bool]:
        """True when it runs below what both ends support; None when that cannot be told."""
        speed, width = self.downstream.current_speed, self.downstream.current_width
        capable_speed, capable_width = self.capable_speed, self.capable_width
        if None in (speed, width, capable_speed, capable_width):
            return None
        assert speed is not None and width is not None
        assert capable_speed is not None and capable_width is not None
        return speed + 1e-6 < capable_speed or width < capable_width

    def describe(self) -> str:
        """``runs x8 at 16.0 GT/s; both ends support x16 at 32.0 GT/s``."""
        return (f"runs {_link(self.downstream.current_width, self.downstream.current_speed)}; "
                f"both ends support {_link(self.capable_width, self.capable_speed)}")


@dataclass(frozen=True)
class AerTable:
    """The AER totals of one PCI function: file name (``aer_dev_fatal``) -> TOTAL_ERR_* value.

    A file that is absent (no AER capability, a VM) is not in ``totals``; one that could not
    be parsed is in ``unreadable``. A ``rootport`` table holds the root port's
    ``aer_rootport_total_err_*`` counts of the hierarchy below it (not its ``aer_dev_*``).
    """

    address: str
    totals: Mapping[str, int] = field(default_factory=dict)
    unreadable: tuple[str, ...] = ()
    upstream: bool = False  # the port above the NIC function, not the function itself
    rootport: bool = False  # the root port's totals of everything below it


@dataclass(frozen=True)
class Sensor:
    """One hwmon temperature channel, in millidegrees Celsius (None: absent or unreadable)."""

    name: str  # ``hwmon3/temp1``
    label: str = ""
    input: Optional[int] = None
    crit: Optional[int] = None
    highest: Optional[int] = None

    @property
    def title(self) -> str:
        """``asic (hwmon3/temp1)`` or just the channel."""
        return f"{self.label} ({self.name})" if self.label else self.name


# The PCIe signalling rates in GT/s, Gen1 to Gen7 (the kernel's pci_speed_string names the
# same set): a speed outside it is not a link speed.
PCIE_SPEEDS = frozenset({2.5, 5.0, 8.0, 16.0, 32.0, 64.0, 128.0})


def parse_speed(text: Optional[str]) -> Optional[float]:
    """``"16.0 GT/s PCIe"`` / ``"16 GT/s"`` -> 16.0; ``"Unknown"``, a rate outside the PCIe set
    and garbage -> None."""
    if not text or "GT/s" not in text:
        return None
    head = text.strip().split(" ", 1)[0]
    if not head.isascii() or not head.replace(".", "", 1).isdigit() or len(head) > 6:
        return None
    value = float(head)
    return value if value in PCIE_SPEEDS else None


def parse_aer_total(text: str, total: str) -> Union[int, Unreadable]:
    """The ``TOTAL_ERR_*`` count of one ``aer_dev_*`` table (an AER total: 64-bit), or
    :class:`Unreadable` saying why not (no such line, not a plausible total)."""
    for line in text.splitlines():
        name, _, count = line.strip().partition(" ")
        if name == total:
            return parse(count, AER_TOTAL)
    return Unreadable(f"no {total} line")


def degrees(millidegrees: Optional[int]) -> str:
    """``45000`` -> ``45.0 °C``."""
    return "unknown" if millidegrees is None else f"{millidegrees / 1000:.1f} °C"


def _lower(a: Optional[float], b: Optional[float]) -> Optional[float]:
    return None if a is None or b is None else min(a, b)


def _link(width: Optional[int], speed: Optional[float]) -> str:
    w = f"x{width}" if width else "x?"
    s = f"{speed:.1f} GT/s" if speed else "? GT/s"
    return f"{w} at {s}"
