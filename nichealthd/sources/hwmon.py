"""Reading a NIC function's hwmon temperature sensors: ``hwmon/hwmon*/temp*_*``.

Under the PCI function the mlx5 driver registers one hwmon device (``hwmon/hwmonN``) whose
``temp<i>_input``, ``_crit`` and ``_highest`` are millidegrees Celsius and ``_label`` names the
sensor (``asic``, a module). Each value read is a firmware register access (MTMP) on real
hardware, so the sensors are read at the temperature family's cadence only, the channel list
and labels once per device, and a file whose read fails with EINVAL or EIO (a sensor the
firmware does not serve) is remembered and not read again for ``RETRY_SECONDS``. A value
outside what a NIC sensor can plausibly report (:data:`~nichealthd.core.numbers.TEMPERATURE`,
:data:`~nichealthd.core.numbers.CRITICAL_TEMPERATURE`: a critical threshold of 1 m°C would
make a working card "critical") is unreadable, logged once per file.
"""

from __future__ import annotations

import errno
import logging
import os
import time
from typing import Callable, Optional

from ..core.numbers import CRITICAL_TEMPERATURE, TEMPERATURE, Kind
from .pci_facts import Sensor
from .problems import ProblemLog

log = logging.getLogger("nichealthd.hwmon")

RETRY_SECONDS = 3600.0
_OPEN_FLAGS = os.O_RDONLY | os.O_CLOEXEC | os.O_NONBLOCK
_FAILED = (errno.EINVAL, errno.EIO)


class HwmonReader:
    """The sensors of each function directory, with failed files remembered."""

    def __init__(self, monotonic: Callable[[], float] = time.monotonic,
                 read: Optional[Callable[[str], bytes]] = None) -> None:
        self._monotonic = monotonic
        self._read_file = read or _read_bytes
        self._channels: dict[str, tuple[tuple[str, str, str], ...]] = {}
        self.failed: dict[str, float] = {}  # path -> when it failed (EINVAL/EIO)
        self.problems = ProblemLog(log)
        self.reads = 0

    def forget(self) -> None:
        self._channels.clear()
        self.failed.clear()

    def sensors(self, function_dir: str) -> tuple[Sensor, ...]:
        channels = self._channels.get(function_dir)
        if channels is None:
            channels = self._channels[function_dir] = self._list(function_dir)
        out = []
        for name, prefix, label in channels:
            out.append(Sensor(name, label, self._value(prefix + "_input", TEMPERATURE),
                              self._value(prefix + "_crit", CRITICAL_TEMPERATURE),
                              self._value(prefix + "_highest", TEMPERATURE)))
        return tuple(out)

    def _list(self, function_dir: str) -> tuple[tuple[str, str, str], ...]:
        """(``hwmon3/temp1``, path prefix, label) of every temperature channel."""
        found = []
        base = os.path.join(function_dir, "hwmon")
        try:
            hwmons = sorted(os.listdir(base))
        except OSError:
            return ()
        for hwmon in hwmons:
            try:
                files = os.listdir(os.path.join(base, hwmon))
            except OSError:
                continue
            for file in sorted(files):
                if file.startswith("temp") and file.endswith("_input"):
                    channel = file[:-len("_input")]
                    prefix = os.path.join(base, hwmon, channel)
                    label = (_read(prefix + "_label") or "").strip()
                    found.append((f"{hwmon}/{channel}", prefix, label))
        return tuple(found)

    def _value(self, path: str, kind: Kind) -> Optional[int]:
        failed = self.failed.get(path)
        now = self._monotonic()
        if failed is not None and now - failed < RETRY_SECONDS:
            return None
        self.reads += 1
        try:
            raw = self._read_file(path)
        except OSError as exc:
            if exc.errno in _FAILED:
                if failed is None:
                    log.warning("%s: read fails with %s; not read again for %d minutes "
                                "(each read is a firmware command)", path,
                                errno.errorcode.get(exc.errno or 0, exc.errno),
                                RETRY_SECONDS // 60)
                self.failed[path] = now
            return None
        self.failed.pop(path, None)
        return self.problems.number(path, raw, kind)


def _read_bytes(path: str) -> bytes:
    fd = os.open(path, _OPEN_FLAGS)
    try:
        return os.read(fd, 64)
    finally:
        os.close(fd)


def _read(path: str) -> Optional[str]:
    try:
        fd = os.open(path, _OPEN_FLAGS)
        try:
            return os.read(fd, 256).decode("ascii", errors="replace")
        finally:
            os.close(fd)
    except OSError:
        return None
