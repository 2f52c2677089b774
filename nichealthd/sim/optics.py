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
``set-optics`` rewrites a port's readings (all lanes, or ``--lanes``: Rx power, Tx bias
and Tx power; the module's temperature) and can plug another kind of module (``--module``).
A Tx bias of 0 mA is a laser that died (the local module's fault: its low alarm flags
latch), an Rx power of -40 dBm with the Tx untouched is the far end gone dark (Rx LOS):
the faults the suspect table (core/suspect.py) tells apart. The kinds:

- ``optical`` (the default above; a CMIS one says which lanes its data path uses in the
  active control set of page 11h, lanes 1-4, and has lanes 5-8 deactivated);
- ``passive-dac``: a passive copper cable: below 400 Gb/s an SFF-8636 QSFP28 with paged
  memory and thresholds on page 03h but 0 mW Rx power, 0 mA bias and a temperature of 0,
  transmitter technology (byte 147) "copper cable unequalized"; from 400 Gb/s a flat CMIS
  cable of media type passive copper;
- ``flat``: a flat-memory CMIS module (no pages 01h, 02h, 11h; its temperature bytes read 0);
- ``lane-count-0``, ``lane-count-15``, ``lane-count-255``: a 4-lane CMIS OSFP whose
  application 1 lane count byte (88) reads 0x40, 0x4F or 0xFF and whose active control set
  is empty: lanes 5-8 read 0 mW, their data paths deactivated;
- ``twin-port``: a 2x400G CMIS OSFP serving two host ports: lanes 1-4 one data path, 5-8
  the other; ``--twin DEV[/PORT]`` names the other host port, whose netdev gets the same
  module (the same serial number), as both netdevs of a real twin-port module answer.

Each module's own flags (Rx LOS, the alarm and warning flags) are set from its readings
against its thresholds, as a module latches them. The simulator keeps what it wrote in
``ROOT/ethtool/<netdev>/sim-module.json`` (kind, per-lane readings, serial) to change it
later.
"""

from __future__ import annotations

import json
import math
import os
import struct
import zlib
from pathlib import Path
from typing import Any, Dict, List, NamedTuple, Optional, Sequence, Tuple

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


KINDS = ("optical", "passive-dac", "flat", "lane-count-0", "lane-count-15", "lane-count-255",
         "twin-port")
LANE_BYTE = {"lane-count-0": 0x40, "lane-count-15": 0x4F, "lane-count-255": 0xFF}
RECORD = "sim-module.json"
VENDOR, PART = "NICHEALTHD-SIM", "SIM-OPTIC"
# flag bits of the four levels: high alarm, low alarm, high warning, low warning
_SFF_BITS = (8, 4, 2, 1)


def _level(monitor: str, value: float) -> int:
    """The index of the level a reading is at (0-3 as above), -1 within its thresholds."""
    high_alarm, low_alarm, high_warning, low_warning = THRESHOLDS[monitor]
    for index, beyond in enumerate((value > high_alarm, value < low_alarm,
                                    value > high_warning, value < low_warning)):
        if beyond:
            return index
    return -1


def _text(page: bytearray, offset: int, size: int, text: str) -> None:
    page[offset:offset + size] = text.encode("ascii")[:size].ljust(size)


Lanes = List[Dict[str, float]]


def sff8636_pages(readings: Dict[str, float], lanes: Optional[Lanes] = None,
                  serial: str = "SIM0000", copper: bool = False) -> Dict[int, bytes]:
    """Page 00h (lower + upper, 256 bytes) and upper page 03h of a QSFP28 (SFF-8636): an
    optic, or a passive copper cable (no monitors: all 0, transmitter technology copper)."""
    per_lane = lanes or [dict(readings) for _ in range(LANES)]
    page0 = bytearray(256)
    page0[0] = page0[128] = SFF8636_ID
    page0[1] = 0x08  # revision 2.8: byte 220 says which monitors are implemented
    page0[2] = 0x00  # paged memory: page 03h present
    if not copper:
        _put(page0, 22, "temperature", readings["temperature"])
        _put(page0, 26, "voltage", readings["voltage"])
        for offset, monitor in ((6, "temperature"), (7, "voltage")):
            found = _level(monitor, readings[monitor])
            page0[offset] = _SFF_BITS[found] << 4 if found >= 0 else 0
        for lane, values in enumerate(per_lane[:LANES]):
            _put(page0, 34 + 2 * lane, "rx_power", values["rx_power"])
            _put(page0, 42 + 2 * lane, "tx_bias", values["tx_bias"])
            _put(page0, 50 + 2 * lane, "tx_power", values["tx_power"])
            if values["rx_power"] <= -40.0:
                page0[3] |= 1 << lane  # Rx LOS
            for offset, monitor in ((9, "rx_power"), (11, "tx_bias"), (13, "tx_power")):
                found = _level(monitor, values[monitor])
                if found >= 0:
                    page0[offset + lane // 2] |= _SFF_BITS[found] << (4 if lane % 2 == 0 else 0)
        page0[220] = 0x3C  # temperature and Vcc monitored, Rx average power, Tx power measured
    page0[131] = 0x80 if copper else 0x00  # extended compliance (byte 192)
    page0[147] = 0xA0 if copper else 0x00  # copper cable unequalized / 850 nm VCSEL
    page0[192] = 0x0B if copper else 0x02  # 100GBASE-CR4 / 100GBASE-SR4
    _text(page0, 148, 16, VENDOR)
    _text(page0, 168, 16, "SIM-DAC" if copper else PART)
    _text(page0, 196, 16, serial)
    page3 = bytearray(256)
    _thresholds(page3, {"temperature": 128, "voltage": 144, "rx_power": 176, "tx_bias": 184,
                        "tx_power": 192})
    return {0x00: bytes(page0), 0x03: bytes(page3[128:])}


def cmis_pages(readings: Dict[str, float], lanes: Optional[Lanes] = None,
               serial: str = "SIM0000", kind: str = "optical") -> Dict[int, bytes]:
    """Page 00h (lower + upper) and upper pages 01h, 02h, 11h of an OSFP (CMIS) of ``kind``
    (only page 00h for a flat-memory module or a passive copper cable)."""
    count = 8 if kind == "twin-port" else LANES
    per_lane = (lanes or [dict(readings) for _ in range(count)])[:count]
    page0 = bytearray(256)
    page0[0] = page0[128] = OSFP_ID
    _text(page0, 129, 16, VENDOR)
    _text(page0, 148, 16, "SIM-DAC" if kind == "passive-dac" else PART)
    _text(page0, 166, 16, serial)
    if kind in ("flat", "passive-dac"):
        page0[2] = 0x80  # flat memory: no monitor pages; temperature bytes left at 0
        page0[85] = 0x03 if kind == "passive-dac" else 0x02  # passive copper / SMF
        page0[88] = 0x88 if kind == "passive-dac" else 0x44
        page0[212] = 0x0A if kind == "passive-dac" else 0x06  # copper unequalized / EML
        return {0x00: bytes(page0)}
    page0[2] = 0x00  # paged memory
    page0[85], page0[212] = 0x02, 0x06  # single-mode fibre, 1310 nm EML
    _put(page0, 14, "temperature", readings["temperature"])
    _put(page0, 16, "voltage", readings["voltage"])
    for shift, monitor in ((0, "temperature"), (4, "voltage")):
        found = _level(monitor, readings[monitor])
        if found >= 0:
            page0[9] |= 1 << (found + shift)
    page0[86:90] = bytes((0x11, 0x1C, 0x44, 0x11))  # 400GAUI-4 / 400GBASE-DR4, lanes 1 or 5
    page0[88] = LANE_BYTE.get(kind, 0x44)
    page1 = bytearray(256)
    page1[158] = 0x02  # Rx LOS flag implemented
    page1[160] = 0x07  # Tx bias, Tx power and Rx power monitors, bias multiplier x1
    page2 = bytearray(256)
    _thresholds(page2, {"temperature": 128, "voltage": 136, "tx_power": 176, "tx_bias": 184,
                        "rx_power": 192})
    page11 = bytearray(256)
    for lane in range(8):
        live = lane < len(per_lane)
        state = 0x4 if live else 0x1  # data path activated / deactivated
        page11[128 + lane // 2] |= state << (4 if lane % 2 else 0)
        if live and kind not in LANE_BYTE:  # the active control set: application 1
            page11[206 + lane] = 0x10 | (lane // 4 * 4) << 1
    for lane, values in enumerate(per_lane):
        _put(page11, 154 + 2 * lane, "tx_power", values["tx_power"])
        _put(page11, 170 + 2 * lane, "tx_bias", values["tx_bias"])
        _put(page11, 186 + 2 * lane, "rx_power", values["rx_power"])
        if values["rx_power"] <= -40.0:
            page11[147] |= 1 << lane
        for base, monitor in ((139, "tx_power"), (143, "tx_bias"), (149, "rx_power")):
            found = _level(monitor, values[monitor])
            if found >= 0:
                page11[base + found] |= 1 << lane
    return {0x00: bytes(page0), 0x01: bytes(page1[128:]), 0x02: bytes(page2[128:]),
            0x11: bytes(page11[128:])}


def _cmis(rate: str) -> bool:
    """400 Gb/s and above is a CMIS module (OSFP, QSFP-DD, QSFP112); below, SFF-8636."""
    try:
        return float(rate.split()[0]) >= 400
    except (ValueError, IndexError):
        return False


class Plugged(NamedTuple):
    """The module plugged in a port, as its record beside the pages keeps it: its readings
    (module-wide; default healthy) or per-lane ``lanes``, its kind (:data:`KINDS`), its
    serial (default: one derived from the netdev) and, for a twin-port module, the other
    host port's netdev."""

    readings: Optional[Dict[str, float]] = None
    kind: str = "optical"
    lanes: Optional[Lanes] = None
    serial: str = ""
    twin: str = ""


HEALTHY_MODULE = Plugged()  # an optical module with healthy readings


def write_module(root: PathLike, netdev: str, rate: str, plugged: Plugged = HEALTHY_MODULE
                 ) -> None:
    """The module pages of ``netdev`` at ``rate`` for the module ``plugged``; its record
    beside them."""
    readings, kind, lanes, serial, twin = plugged
    values = dict(HEALTHY, **(readings or {}))
    serial = serial or f"SIM{zlib.crc32(netdev.encode()) % 10**8:08d}"
    if kind in ("optical", "passive-dac") and not _cmis(rate):
        pages = sff8636_pages(values, lanes, serial, copper=kind == "passive-dac")
    else:
        pages = cmis_pages(values, lanes, serial, kind)
    folder = module_dir(root, netdev)  # pages another kind had stay: the daemon reads only
    folder.mkdir(parents=True, exist_ok=True)  # those the new lower memory calls for
    for page, data in pages.items():
        _write(folder / page_name(page), data)
    count = 8 if kind == "twin-port" else LANES
    record = {"kind": kind, "rate": rate, "serial": serial, "module": values,
              "lanes": lanes or [dict(values) for _ in range(count)], "twin": twin}
    _write(folder.parent / RECORD, (json.dumps(record, indent=1) + "\n").encode())


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


def _netdev_folder(root: PathLike, dev: Dict[str, Any], port: PortId) -> Tuple[str, Path]:
    record = dev["ports"].get(str(port))
    if record is None:
        raise SimError(f"{dev['name']} has no port {port}")
    netdev = record.get("netdev")
    folder = module_dir(root, netdev) if netdev else None
    if not netdev or folder is None or not folder.is_dir():
        raise SimError(f"{dev['name']} port {port} has no module (only Ethernet ports with a "
                       f"netdev have one)")
    return netdev, folder


def lanes_of(text: str) -> List[int]:
    """``--lanes``: ``5-8`` or ``1,3`` -> 1-based lane numbers."""
    out: List[int] = []
    try:
        for part in text.split(","):
            first, _, last = part.partition("-")
            out.extend(range(int(first), int(last or first) + 1))
    except ValueError:
        raise SimError(f"--lanes: {text!r} is not like 5-8 or 1,3") from None
    if not out or min(out) < 1 or max(out) > 8:
        raise SimError(f"--lanes must name lanes 1 to 8, got {text!r}")
    return out


def _record(folder: Path) -> Dict[str, Any]:
    """What the simulator wrote for a module (a module written before records: read back)."""
    try:
        loaded: Dict[str, Any] = json.loads((folder.parent / RECORD).read_text())
        return loaded
    except (OSError, ValueError):
        rate, readings = readings_of(folder)
        return {"kind": "optical", "rate": rate + " Gb/sec", "serial": "",
                "module": readings, "lanes": [dict(readings) for _ in range(LANES)]}


def set_optics(root: PathLike, dev: Dict[str, Any], port: PortId, *,
               rx_power: Optional[float] = None, temperature: Optional[float] = None,
               tx_bias: Optional[float] = None, tx_power: Optional[float] = None,
               module: Optional[str] = None, lanes: Optional[str] = None,
               twin: Optional[Tuple[Dict[str, Any], PortId]] = None) -> List[str]:
    """Rewrite a port's module readings (every lane, or ``lanes``) or plug a module of
    another kind; returns what changed, for the CLI."""
    if all(v is None for v in (rx_power, temperature, tx_bias, tx_power, module)):
        raise SimError("give --rx-power, --tx-bias, --tx-power, --temperature and/or --module")
    if module is not None and module not in KINDS:
        raise SimError(f"--module must be one of {', '.join(KINDS)}, got {module!r}")
    if (module == "twin-port") != (twin is not None):
        raise SimError("--module twin-port needs --twin DEV[/PORT] (the other host port), "
                       "and --twin needs it")
    netdev, folder = _netdev_folder(root, dev, port)
    if rx_power is not None and not -40.0 <= rx_power <= 8.0:
        raise SimError(f"--rx-power must be between -40 and 8 dBm, got {rx_power}")
    if tx_power is not None and not -40.0 <= tx_power <= 8.0:
        raise SimError(f"--tx-power must be between -40 and 8 dBm, got {tx_power}")
    if tx_bias is not None and not 0.0 <= tx_bias <= 131.0:
        raise SimError(f"--tx-bias must be between 0 and 131 mA, got {tx_bias}")
    if temperature is not None and not -40.0 <= temperature <= 125.0:
        raise SimError(f"--temperature must be between -40 and 125 °C, got {temperature}")
    record = _record(folder)
    changed = []
    if module is not None:
        count = 8 if module == "twin-port" else LANES
        healthy = dict(HEALTHY)
        plugged = f"SIM{zlib.crc32((record['serial'] or netdev).encode()) % 10**8:08d}"
        record = {"kind": module, "rate": record["rate"], "serial": plugged, "module": healthy,
                  "lanes": [dict(healthy) for _ in range(count)]}
        changed.append(f"a {module} module (serial {plugged})")
    chosen = lanes_of(lanes) if lanes else range(1, len(record["lanes"]) + 1)
    if lanes and max(chosen) > len(record["lanes"]):
        raise SimError(f"the module has {len(record['lanes'])} lanes, --lanes {lanes}")
    if rx_power is not None:
        for lane in chosen:
            record["lanes"][lane - 1]["rx_power"] = rx_power
        where = f" on lane {lanes}" if lanes else ""
        changed.append(f"Rx power {rx_power:g} dBm{where}")
    for monitor, value, unit in (("tx_bias", tx_bias, "mA"), ("tx_power", tx_power, "dBm")):
        if value is not None:
            for lane in chosen:
                record["lanes"][lane - 1][monitor] = value
            where = f" on lane {lanes}" if lanes else ""
            changed.append(f"{monitor.replace('_', ' ').capitalize()} {value:g} {unit}{where}")
    if temperature is not None:
        record["module"]["temperature"] = temperature
        changed.append(f"temperature {temperature:g} °C")
    if record["kind"] == "passive-dac":  # a copper cable measures nothing
        record["module"] = dict(record["module"], temperature=0.0, voltage=0.0)
        record["lanes"] = [dict(v, rx_power=-40.0, tx_bias=0.0, tx_power=-40.0)
                           for v in record["lanes"]]
    peer = record.get("twin", "")
    if twin is not None:
        peer, _ = _netdev_folder(root, twin[0], twin[1])
        changed.append(f"shared with {twin[0]['name']} port {twin[1]} ({peer})")
    write_module(root, netdev, record["rate"], Plugged(
        record["module"], record["kind"], record["lanes"], record["serial"], twin=peer))
    if peer:  # one module answering on both host ports: the same pages, the same serial
        write_module(root, peer, record["rate"], Plugged(
            record["module"], record["kind"], record["lanes"], _record(folder)["serial"],
            twin=netdev))
    return changed
