"""The ports' pluggable-module diagnostics: a source of fact ``optics`` (sources/seam.py).

Its key, :data:`PORT_OPTICS`, is here (the optics family imports it); the values' types are
:mod:`.optics_facts`, shared with the page parser.

For every port of a monitored physical function with a netdev, the module's pages are read
and parsed (:mod:`.module_pages`) into a :class:`~nichealthd.sources.optics_facts.PortOptics`:

- from the kernel: ``ETHTOOL_MSG_MODULE_EEPROM_GET`` of the ``ethtool`` generic-netlink family
  (:mod:`.genetlink`), one 128-byte read per page (``include/uapi/linux/ethtool_netlink.h``:
  message 31; attributes HEADER 1 (nest: DEV_NAME 2), OFFSET 2 (u32), LENGTH 3 (u32), PAGE 4
  (u8), BANK 5 (u8), I2C_ADDRESS 6 (u8; 0x50, the address of the paged memory in SFF-8636
  and CMIS), DATA 7 in the reply). The kernel marks the operation ``GENL_UNS_ADMIN_PERM``
  (``net/ethtool/netlink.c``): it needs CAP_NET_ADMIN in the user namespace that owns the
  network namespace, which the shipped unit does not grant (``PrivateUsers=yes``, an empty
  ``CapabilityBoundingSet=``); :data:`OPTICS_DROPIN` does. The socket needs ``AF_NETLINK`` in
  ``RestrictAddressFamilies=``;
- from files, when ``ethtoolPath`` is set (tests, the simulator): ``DIR/<netdev>/module/
  page-00-bank-0`` (the lower memory and upper page 00h, 256 bytes) and ``page-NN-bank-0``
  for each other page (its upper 128 bytes; a 256-byte file gives its upper half). No
  ``module`` directory is no module plugged in. With a ``sysfsRoot`` other than ``/sys`` (a
  simulated host) and no ``ethtoolPath``, the kernel is not asked.

A port whose module cannot be read (a refused or unsupported call: EPERM without the
capability, EOPNOTSUPP on veth and IPoIB, no module plugged in, pages that are no module
parsed here) gets the fact with no diagnostics and the reason; the reason is logged once per
port while it lasts (a refusal for want of CAP_NET_ADMIN once for the host, as a warning
naming the drop-in), and its end once. Never an exception for any of these.
"""

from __future__ import annotations

import errno
import logging
import os
from typing import Callable, Mapping, Optional, Sequence

from ..core.config import Config
from ..core.model import Fact, HostSnapshot
from . import genetlink, module_pages
from .optics_facts import PortOptics
from .problems import ProblemLog
from .seam import Source

log = logging.getLogger("nichealthd.optics")

OPTICS_DROPIN = "/usr/share/doc/nichealthd/examples/optics.conf"
OPTICS_DROPIN_TARGET = "/etc/systemd/system/nichealthd.service.d/optics.conf"

ETHTOOL_GENL_NAME = "ethtool"
ETHTOOL_GENL_VERSION = 1
ETHTOOL_MSG_MODULE_EEPROM_GET = 31
ETHTOOL_A_HEADER_DEV_NAME = 2
A_HEADER, A_OFFSET, A_LENGTH, A_PAGE, A_BANK, A_I2C_ADDRESS, A_DATA = 1, 2, 3, 4, 5, 6, 7
I2C_ADDRESS = 0x50
PAGE = module_pages.PAGE
MODULE_DIR = "module"
REFUSED = "the kernel refuses module reads without CAP_NET_ADMIN"

PORT_OPTICS: Fact[Mapping[str, PortOptics]] = Fact("optics")  # port key -> its module's fact

# Reads one page: (netdev, page, offset within it: 0 or 128) -> 128 bytes; raises OSError.
PageReader = Callable[[str, int, int], bytes]


def page_file(page: int, bank: int = 0) -> str:
    """The file name of a page under ``ethtoolPath/<netdev>/module/``."""
    return f"page-{page:02x}-bank-{bank}"


def module_request(netdev: str, page: int, offset: int, length: int = PAGE) -> bytes:
    """The attributes of one MODULE_EEPROM_GET request (bank 0, I2C address 0x50)."""
    return b"".join((
        genetlink.nested(A_HEADER, genetlink.attr_str(ETHTOOL_A_HEADER_DEV_NAME, netdev)),
        genetlink.attr_u32(A_OFFSET, offset),
        genetlink.attr_u32(A_LENGTH, length),
        genetlink.attr_u8(A_PAGE, page),
        genetlink.attr_u8(A_BANK, 0),
        genetlink.attr_u8(A_I2C_ADDRESS, I2C_ADDRESS),
    ))


def why(error: OSError) -> str:
    """What a refused read means, for the log and the views."""
    if error.errno == errno.EPERM or error.errno == errno.EACCES:
        return (f"{REFUSED} ({error.strerror}); install {OPTICS_DROPIN} as "
                f"{OPTICS_DROPIN_TARGET} to grant it")
    if error.errno == errno.EOPNOTSUPP:
        return "the driver does not read pluggable modules (EOPNOTSUPP)"
    if error.errno == errno.ENODEV:
        return f"no such netdev ({error.strerror})"
    if error.errno in (errno.ENOENT, errno.EIO):
        return f"no module plugged in, or it does not answer ({error.strerror})"
    return f"module pages not readable: {error.strerror or error}"


class KernelPages:
    """Pages by ETHTOOL_MSG_MODULE_EEPROM_GET on one generic-netlink socket, opened on first
    use and kept; a socket or family that cannot be had is an OSError of every read."""

    def __init__(self) -> None:
        self._socket: Optional[genetlink.GenlSocket] = None
        self._family = 0

    def __call__(self, netdev: str, page: int, offset: int) -> bytes:
        if self._socket is None:
            sock = genetlink.GenlSocket()
            try:
                self._family = sock.family_id(ETHTOOL_GENL_NAME)
            except OSError:
                sock.close()
                raise
            self._socket = sock
        replies = self._socket.request(self._family, ETHTOOL_MSG_MODULE_EEPROM_GET,
                                       ETHTOOL_GENL_VERSION,
                                       module_request(netdev, page, offset))
        for reply in replies:
            data = genetlink.attr_map(reply.payload).get(A_DATA)
            if data is not None:
                return data
        raise OSError(errno.EIO, "no module data in the reply")

    def close(self) -> None:
        if self._socket is not None:
            self._socket.close()
            self._socket = None


class FilePages:
    """Pages from files under ``ethtoolPath`` (the simulator's)."""

    def __init__(self, root: str) -> None:
        self.root = root

    def __call__(self, netdev: str, page: int, offset: int) -> bytes:
        folder = os.path.join(self.root, netdev, MODULE_DIR)
        if not os.path.isdir(folder):
            raise OSError(errno.ENOENT, "no module directory")
        with open(os.path.join(folder, page_file(page)), "rb") as file:
            data = file.read(2 * PAGE + 1)
        if page == 0 and offset == 0:
            return data[:PAGE]
        return data[PAGE:2 * PAGE] if len(data) > PAGE else data


def read_port(read: PageReader, netdev: str) -> PortOptics:
    """One port's fact: the lower memory, then the upper pages its module has; a page
    beyond page 00h that cannot be read is left out (its values are then not available)."""
    try:
        lower = read(netdev, 0, 0)
    except OSError as error:
        return PortOptics(netdev, reason=why(error))
    needed = module_pages.pages_needed(lower)
    if not needed:
        shown = f"0x{lower[0]:02x}" if lower else "none"
        return PortOptics(netdev, reason=f"no SFF-8636 or CMIS module (identifier {shown})")
    upper: dict[int, bytes] = {}
    for page in needed:
        try:
            upper[page] = read(netdev, page, PAGE)
        except OSError:
            continue
    diagnostics = module_pages.parse(lower, upper)
    if diagnostics is None:  # pragma: no cover - pages_needed said it is one
        return PortOptics(netdev, reason="module pages not parsed")
    return PortOptics(netdev, diagnostics)


class Optics(Source):
    """The module diagnostics of each monitored port with a netdev."""

    fact = PORT_OPTICS
    description = "the ports' pluggable module diagnostics"

    def __init__(self, config: Config) -> None:
        super().__init__(config)
        self._kernel: Optional[KernelPages] = None
        self._problems = ProblemLog(log)

    def _reader(self) -> Optional[PageReader]:
        if self.config.ethtool_path:
            return FilePages(self.config.ethtool_path)
        if not self.config.host_sysfs:
            return None  # a simulated host without ethtoolPath: the kernel has no such netdevs
        if self._kernel is None:
            self._kernel = KernelPages()
        return self._kernel

    def read(self, snapshot: HostSnapshot, devices: Sequence[str]) -> dict[str, PortOptics]:
        """Port key -> its fact, for the ports with a netdev of the wanted physical
        functions (a VF's netdev has no module of its own)."""
        wanted = set(devices)
        reader = self._reader()
        out: dict[str, PortOptics] = {}
        for device in snapshot.devices:
            if device.name not in wanted or device.is_vf:
                continue
            for port in device.ports:
                if not port.netdev:
                    continue
                if reader is None:
                    fact = PortOptics(port.netdev, reason="not asked: a simulated host "
                                                          "without ethtoolPath")
                else:
                    fact = read_port(reader, port.netdev)
                self._tell(port.key, fact)
                out[port.key] = fact
        return out

    def _tell(self, key: str, fact: PortOptics) -> None:
        """Log a port's reason once while it lasts (no module, no driver support: INFO, a
        normal state); a refusal for want of CAP_NET_ADMIN is the host's, one WARNING with
        what to do for every port."""
        if fact.diagnostics is None and fact.reason.startswith(REFUSED):
            self._problems.report(REFUSED, f"module diagnostics not available on any port: "
                                           f"{fact.reason}")
        elif fact.diagnostics is None:
            self._problems.report(key, f"{key} ({fact.netdev}): module diagnostics not "
                                       f"available: {fact.reason}", logging.INFO)
        else:
            self._problems.clear(REFUSED, "module diagnostics readable again")
            self._problems.clear(key, f"{key} ({fact.netdev}): module diagnostics available")

    def reconfigure(self, config: Config) -> None:
        self.config = config
        self.close()

    def close(self) -> None:
        if self._kernel is not None:
            self._kernel.close()
            self._kernel = None


SOURCE = Optics
