"""The pluggable modules of a simulated host: their diagnostic pages as real bytes.

Each RoCE/Ethernet port with a netdev gets a module whose raw pages are written under
``ROOT/ethtool/<netdev>/module/`` (the daemon's ``ethtoolPath``, read instead of the kernel's
ETHTOOL_MSG_MODULE_EEPROM_GET): ``page-00-bank-0`` holds the lower memory and upper page 00h
(256 bytes), every other page its upper 128 bytes (``page-03-bank-0``, ...). A port below
400 Gb/s gets an SFF-8636 QSFP28 (4 lanes), a faster one a CMIS OSFP (4 media lanes), both
in the byte layouts of SFF-8636 and CMIS (offsets as ethtool's qsfp.h and cmis.h
give them), so the daemon's parser (``sources/module_pages.py``) runs end to end. InfiniBand
ports get none: their IPoIB netdevs do not answer the module call (the module of an IB port
is read through the RDMA device, not ethtool), so a simulated IB host shows what a real one
does: no optics fact.

The healthy module is typical of a short-reach optic: 40 °C, 3.3 V, Rx -2 dBm, Tx -1 dBm,
7.5 mA bias per lane; its own thresholds are high alarm / low alarm / high warning / low
warning: temperature 75 / -5 / 70 / 0 °C, voltage 3.63 / 2.97 / 3.465 / 3.135 V, Rx power
+5 / -13 / +2 / -10 dBm, Tx power +5 / -10 / +3 / -8 dBm, bias 15 / 2 / 13 / 3 mA.
``set-optics`` rewrites a port's readings (all lanes).
"""

from __future__ import annotations

import math
import os
import struct
from pathlib import Path
from typing import Any, Dict, List, Optional, Sequence, Tuple

from .fsio import PathLike, PortId, SimError

ETHTOOL_DIR = "ethtool"
MODULE_DIR = "module"
SFF8636_ID, OSFP_ID = 0x11, 0x19  # SFF-8024: QSFP28, OSFP (CMIS)
LANES = 4

HEALTHY = {"temperature": 40.0, "voltage": 3.3, "rx_power": -2.0, "tx_power": -1.0,
           "tx_bias": 7.5}
# high alarm, low alarm, high warning, low warning
THRESHOLDS = {
    "temperature": (75.0, -5.0, 70.0, 0.0),
    "voltage": (3.63, 2.97, 3.465, 3.135),
    "rx_power": (5.0, -13.0, 2.0, -10.0),  # dBm
    "tx_power": (5.0, -10.0, 3.0, -8.0),  # dBm
    "tx_bias": (15.0, 2.0, 13.0, 3.0),
}


def page_name(page: int, bank: int = 0) -> str:
    return f"page-{page:02x}-bank-{bank}"


def module_dir(root: PathLike, netdev: str) -> Path:
    return Path(root) / ETHTOOL_DIR / netdev / MODULE_DIR


def _raw(monitor: str, value: float) -> int:
    """The 16-bit count of a value: 1/256 °C (signed), 100 µV, 0.1 µW (from dBm), 2 µA."""
    if monitor == "temperature":
        return int(round(value * 256)) & 0xFFFF
    if monitor == "voltage":
        return _clamp(round(value * 10000))
    if monitor in ("rx_power", "tx_power"):
        return _clamp(round(10 ** (value / 10) * 10000))
    return _clamp(round(value * 500))


def _clamp(count: float) -> int:
    return int(min(max(count, 0), 0xFFFF))


def _put(page: bytearray, offset: int, monitor: str, value: float) -> None:
    struct.pack_into(">H", page, offset, _raw(monitor, value))


def _thresholds(page: bytearray, offsets: Dict[str, int]) -> None:
    for monitor, base in offsets.items():
        for index, value in enumerate(THRESHOLDS[monitor]):
            _put(page, base + 2 * index, monitor, value)


def sff8636_pages(readings: Dict[str, float]) -> Dict[int, bytes]:
    """Page 00h (lower + upper, 256 bytes) and upper page 03h of a QSFP28 (SFF-8636)."""
    page0 = bytearray(256)
    page0[0] = page0[128] = SFF8636_ID
    page0[2] = 0x00  # paged memory: page 03h present
    _put(page0, 22, "temperature", readings["temperature"])
    _put(page0, 26, "voltage", readings["voltage"])
    for lane in range(LANES):
        _put(page0, 34 + 2 * lane, "rx_power", readings["rx_power"])
        _put(page0, 42 + 2 * lane, "tx_bias", readings["tx_bias"])
        _put(page0, 50 + 2 * lane, "tx_power", readings["tx_power"])
    page0[220] = 0x0C  # Rx power is average power, Tx power measured
    page3 = bytearray(256)
    _thresholds(page3, {"temperature": 128, "voltage": 144, "rx_power": 176, "tx_bias": 184,
                        "tx_power": 192})
    return {0x00: bytes(page0), 0x03: bytes(page3[128:])}


def cmis_pages(readings: Dict[str, float]) -> Dict[int, bytes]:
    """Page 00h (lower + upper) and upper pages 01h, 02h, 11h of an OSFP (CMIS)."""
    page0 = bytearray(256)
    page0[0] = page0[128] = OSFP_ID
    page0[2] = 0x00  # paged memory
    _put(page0, 14, "temperature", readings["temperature"])
    _put(page0, 16, "voltage", readings["voltage"])
    page0[88] = 0x44  # application 1: 4 host lanes, 4 media lanes
    page1 = bytearray(256)
    page1[160] = 0x07  # Tx bias, Tx power and Rx power monitors, bias multiplier x1
    page2 = bytearray(256)
    _thresholds(page2, {"temperature": 128, "voltage": 136, "tx_power": 176, "tx_bias": 184,
                        "rx_power": 192})
    page11 = bytearray(256)
    for lane in range(LANES):
        _put(page11, 154 + 2 * lane, "tx_power", readings["tx_power"])
        _put(page11, 170 + 2 * lane, "tx_bias", readings["tx_bias"])
        _put(page11, 186 + 2 * lane, "rx_power", readings["rx_power"])
    return {0x00: bytes(page0), 0x01: bytes(page1[128:]), 0x02: bytes(page2[128:]),
            0x11: bytes(page11[128:])}


def _cmis(rate: str) -> bool:
    """400 Gb/s and above is a CMIS module (OSFP, QSFP-DD, QSFP112); below, SFF-8636."""
    try:
        return float(rate.split()[0]) >= 400
    except (ValueError, IndexError):
        return False


def write_module(root: PathLike, netdev: str, rate: str,
                 readings: Optional[Dict[str, float]] = None) -> None:
    """The module pages of ``netdev`` with ``readings`` (default: healthy)."""
    values = dict(HEALTHY, **(readings or {}))
    pages = cmis_pages(values) if _cmis(rate) else sff8636_pages(values)
    folder = module_dir(root, netdev)
    folder.mkdir(parents=True, exist_ok=True)
    for page, data in pages.items():
        _write(folder / page_name(page), data)


def _write(path: Path, data: bytes) -> None:
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
    try:
        os.write(fd, data)
    finally:
        os.close(fd)


def build(root: PathLike, devices: Sequence[Dict[str, Any]]) -> int:
    """Healthy modules for every Ethernet port with a netdev of an mlx5 PF; returns how many."""
    written = 0
    for dev in devices:
        if dev.get("kind") != "pf" or dev.get("link_layer") != "Ethernet" \
                or dev.get("adapter", "mlx5") != "mlx5":
            continue
        for port in dev["ports"].values():
            if port.get("netdev"):
                write_module(root, port["netdev"], port.get("rate") or "")
                written += 1
    return written


def readings_of(folder: Path) -> Tuple[str, Dict[str, float]]:
    """The rate class and current readings of a written module (lane 1), to change some."""
    try:
        page0 = (folder / page_name(0)).read_bytes()
    except OSError:
        raise SimError(f"{folder} holds no module pages") from None
    if len(page0) < 256:
        raise SimError(f"{folder / page_name(0)} is not a module page")

    def u16(data: bytes, offset: int) -> int:
        value: int = struct.unpack_from(">H", data, offset)[0]
        return value

    def signed(raw: int) -> int:
        return raw - 0x10000 if raw >= 0x8000 else raw

    def dbm(raw: int) -> float:
        return 10 * math.log10(raw / 10000) if raw else -40.0

    if page0[0] == OSFP_ID:
        page11 = (folder / page_name(0x11)).read_bytes()
        return "400", {"temperature": signed(u16(page0, 14)) / 256,
                       "voltage": u16(page0, 16) / 10000,
                       "tx_power": dbm(u16(page11, 154 - 128)),
                       "tx_bias": u16(page11, 170 - 128) / 500,
                       "rx_power": dbm(u16(page11, 186 - 128))}
    return "100", {"temperature": signed(u16(page0, 22)) / 256,
                   "voltage": u16(page0, 26) / 10000, "rx_power": dbm(u16(page0, 34)),
                   "tx_bias": u16(page0, 42) / 500, "tx_power": dbm(u16(page0, 50))}


def set_optics(root: PathLike, dev: Dict[str, Any], port: PortId, *,
               rx_power: Optional[float] = None, temperature: Optional[float] = None
               ) -> List[str]:
    """Rewrite a port's module readings (every lane); returns what changed, for the CLI."""
    if rx_power is None and temperature is None:
        raise SimError("give --rx-power and/or --temperature")
    record = dev["ports"].get(str(port))
    if record is None:
        raise SimError(f"{dev['name']} has no port {port}")
    netdev = record.get("netdev")
    folder = module_dir(root, netdev) if netdev else None
    if folder is None or not folder.is_dir():
        raise SimError(f"{dev['name']} port {port} has no module (only Ethernet ports with a "
                       f"netdev have one)")
    if rx_power is not None and not -40.0 <= rx_power <= 8.0:
        raise SimError(f"--rx-power must be between -40 and 8 dBm, got {rx_power}")
    if temperature is not None and not -40.0 <= temperature <= 125.0:
        raise SimError(f"--temperature must be between -40 and 125 °C, got {temperature}")
    rate, readings = readings_of(folder)
    changed = []
    if rx_power is not None:
        readings["rx_power"] = rx_power
        changed.append(f"Rx power {rx_power:g} dBm")
    if temperature is not None:
        readings["temperature"] = temperature
        changed.append(f"temperature {temperature:g} °C")
    write_module(root, netdev or "", rate + " Gb/sec", readings)
    return changed
