"""Parsers of a pluggable module's diagnostic pages (SFF-8636 and CMIS): bytes in, values out.

Pure: they get the raw bytes of the pages (``lower``: bytes 0-127 of page 00h; ``upper``:
page number -> the 128 bytes at offsets 128-255 of that page, bank 0), never a path or a
socket, and never raise on bad bytes: a page too short for a field, a monitor the module does
not implement, an impossible value or thresholds out of order are ``None`` (not available).

The offsets are the SFF-8636 and CMIS tables as ethtool implements them (``qsfp.h``,
``qsfp.c``, ``cmis.h``, ``cmis.c``, ``sff-common.h`` of ethtool 6.x), each checked there:

SFF-8636 (QSFP/QSFP+/QSFP28, identifiers 0x0C, 0x0D, 0x11; ethtool cites SFF-8636 rev 2.7):

- lower page: identifier byte 0; status byte 2 bit 2 "Flat_mem" (set: no page 03h, ethtool's
  ``SFF8636_STATUS_PAGE_3_PRESENT`` is that bit); temperature bytes 22-23 (signed, 1/256 °C);
  supply voltage 26-27 (100 µV); per lane 1-4 Rx power 34/36/38/40, Tx bias 42/44/46/48,
  Tx power 50/52/54/56 (0.1 µW and 2 µA units, big-endian 16 bits);
- upper page 00h byte 220 (``SFF8636_DIAG_TYPE_OFFSET``): bit 3 Rx power is average power
  (else OMA), bit 2 Tx power is measured; ethtool treats a temperature of 0x0000 or 0xFFFF as
  "no diagnostics at all", and so does this parser;
- upper page 03h thresholds (high alarm, low alarm, high warning, low warning, 2 bytes each):
  temperature 128, voltage 144, Rx power 176, Tx bias 184, Tx power 192.

CMIS (QSFP-DD/OSFP/DSFP and CMIS QSFP+/SFP, identifiers 0x18, 0x19, 0x1B, 0x1E, 0x1F, 0x20;
CMIS rev 4-5 as ethtool cites it):

- lower memory: identifier byte 0; byte 2 bit 7 flat memory (no pages 01h/02h/11h);
  temperature 14-15, supply voltage 16-17; byte 88 bits 3-0 the media lane count of the
  first application descriptor (from the CMIS application table; ethtool does not read it,
  so this one is not checked there; 0 or above 8 is taken as 8: bank 0's lanes). Without
  it a 4-lane module would show its 4 unused lanes as 0 mW, loss of signal;
- page 01h byte 160 (``CMIS_DIAG_CHAN_ADVER_OFFSET``): bit 0 Tx bias, bit 1 Tx power, bit 2
  Rx power monitors implemented; bits 4-3 the Tx bias scaling (00 x1, 01 x2, 10 x4, the
  mask and values of ethtool's ``CMIS_TX_BIAS_MUL_*``); ethtool's ``cmis_tx_bias_mul``
  shifts the raw value right by it, this parser multiplies the 2 µA unit by it (the field
  is a multiplier by its name); thresholds and readings scale alike, so no verdict depends
  on which is right, only the mA shown;
- page 02h thresholds (same order): temperature 128, voltage 136, Tx power 176, Tx bias 184,
  Rx power 192 (note: Tx power before Rx power, unlike SFF-8636);
- page 11h lane monitors, lanes 1-8 of bank 0: Tx power 154, Tx bias 170, Rx power 186.
"""

from __future__ import annotations

import struct
from typing import Mapping, Optional, Sequence

from ..core.modulefacts import (
    RX_POWER,
    TEMPERATURE,
    TX_BIAS,
    TX_POWER,
    VOLTAGE,
    ModuleDiagnostics,
    Thresholds,
)

PAGE = 128  # bytes of the lower memory and of each upper page
SFF8636 = "SFF-8636"
CMIS = "CMIS"
SFF8636_IDS = frozenset({0x0C, 0x0D, 0x11})  # SFF-8024: QSFP, QSFP+, QSFP28
CMIS_IDS = frozenset({0x18, 0x19, 0x1B, 0x1E, 0x1F, 0x20})  # QSFP-DD, OSFP, DSFP, CMIS forms

# SFF-8636
_S_STATUS, _S_FLAT_MEM = 2, 0x04
_S_TEMP, _S_VCC = 22, 26
_S_RX, _S_BIAS, _S_TX = 34, 42, 50
_S_DIAG_TYPE, _S_TX_PWR_SUPPORTED = 220, 0x04
_S_THRESHOLDS = {TEMPERATURE: 128, VOLTAGE: 144, RX_POWER: 176, TX_BIAS: 184, TX_POWER: 192}
SFF8636_LANES = 4

# CMIS
_C_MEMORY_MODEL, _C_FLAT = 2, 0x80
_C_TEMP, _C_VCC = 14, 16
_C_APP1_LANES = 88
_C_MON_ADVER = 160
_C_BIAS_MON, _C_TX_MON, _C_RX_MON, _C_BIAS_MUL = 0x01, 0x02, 0x04, 0x18
_C_THRESHOLDS = {TEMPERATURE: 128, VOLTAGE: 136, TX_POWER: 176, TX_BIAS: 184, RX_POWER: 192}
_C_LANE = {TX_POWER: 154, TX_BIAS: 170, RX_POWER: 186}
CMIS_LANES = 8

# Plausible ranges: what a working module can report; beyond them the bytes are garbage.
_PLAUSIBLE = {TEMPERATURE: (-50.0, 150.0), VOLTAGE: (0.5, 6.0)}
# Raw counts per unit: 1/256 °C, 100 µV (-> V), 0.1 µW (-> mW), 2 µA (-> mA).
_PER_UNIT = {TEMPERATURE: 256, VOLTAGE: 10000, RX_POWER: 10000, TX_POWER: 10000, TX_BIAS: 500}


def spec_of(lower: bytes) -> str:
    """``SFF-8636``, ``CMIS`` or ``""`` (no module, or one whose pages are not parsed here)."""
    if not lower:
        return ""
    if lower[0] in SFF8636_IDS:
        return SFF8636
    if lower[0] in CMIS_IDS:
        return CMIS
    return ""


def pages_needed(lower: bytes) -> tuple[int, ...]:
    """The upper pages (bank 0) to read after the lower memory: page 00h always; SFF-8636
    page 03h unless flat; CMIS pages 01h, 02h and 11h unless flat (ethtool's
    ``sff8636_memory_map_init_pages`` / ``cmis_memory_map_init_pages``)."""
    spec = spec_of(lower)
    if spec == SFF8636:
        flat = _byte(lower, _S_STATUS) is None or (lower[_S_STATUS] & _S_FLAT_MEM)
        return (0x00,) if flat else (0x00, 0x03)
    if spec == CMIS:
        flat = _byte(lower, _C_MEMORY_MODEL) is None or (lower[_C_MEMORY_MODEL] & _C_FLAT)
        return (0x00,) if flat else (0x00, 0x01, 0x02, 0x11)
    return ()


def parse(lower: bytes, upper: Mapping[int, bytes]) -> Optional[ModuleDiagnostics]:
    """The module's diagnostics, or None when ``lower`` is not a module parsed here."""
    spec = spec_of(lower)
    if spec == SFF8636:
        return _sff8636(lower, upper)
    if spec == CMIS:
        return _cmis(lower, upper)
    return None


def _sff8636(lower: bytes, upper: Mapping[int, bytes]) -> ModuleDiagnostics:
    raw_temp = _u16(lower, _S_TEMP)
    if raw_temp in (None, 0x0000, 0xFFFF):  # ethtool: no valid temperature, no diagnostics
        return ModuleDiagnostics(SFF8636, lower[0])
    page00 = upper.get(0x00, b"")
    diag_type = _byte(page00, _S_DIAG_TYPE - PAGE)
    lanes: dict[str, tuple[Optional[float], ...]] = {
        RX_POWER: _lanes(lower, _S_RX, SFF8636_LANES, RX_POWER),
        TX_BIAS: _lanes(lower, _S_BIAS, SFF8636_LANES, TX_BIAS),
    }
    if diag_type is not None and diag_type & _S_TX_PWR_SUPPORTED:
        lanes[TX_POWER] = _lanes(lower, _S_TX, SFF8636_LANES, TX_POWER)
    page03 = upper.get(0x03) if not lower[_S_STATUS] & _S_FLAT_MEM else None
    thresholds = _thresholds(page03, _S_THRESHOLDS, 1) if page03 is not None else {}
    if TX_POWER not in lanes:
        thresholds.pop(TX_POWER, None)
    return ModuleDiagnostics(SFF8636, lower[0], _value(lower, _S_TEMP, TEMPERATURE),
                             _value(lower, _S_VCC, VOLTAGE), lanes, thresholds)


def _cmis(lower: bytes, upper: Mapping[int, bytes]) -> ModuleDiagnostics:
    temperature = _value(lower, _C_TEMP, TEMPERATURE)
    voltage = _value(lower, _C_VCC, VOLTAGE)
    memory_model = _byte(lower, _C_MEMORY_MODEL)
    if memory_model is None or memory_model & _C_FLAT:
        return ModuleDiagnostics(CMIS, lower[0], temperature, voltage)
    adver = _byte(upper.get(0x01, b""), _C_MON_ADVER - PAGE)
    if adver is None:
        return ModuleDiagnostics(CMIS, lower[0], temperature, voltage)
    multiplier = {0x00: 1, 0x08: 2, 0x10: 4}.get(adver & _C_BIAS_MUL, 1)
    count = _byte(lower, _C_APP1_LANES)
    lane_count = count & 0x0F if count is not None and 0 < count & 0x0F <= CMIS_LANES \
        else CMIS_LANES
    page11 = upper.get(0x11, b"")
    implemented = {TX_BIAS: adver & _C_BIAS_MON, TX_POWER: adver & _C_TX_MON,
                   RX_POWER: adver & _C_RX_MON}
    lanes: dict[str, tuple[Optional[float], ...]] = {}
    for monitor, offset in _C_LANE.items():
        if implemented[monitor]:
            scale = multiplier if monitor == TX_BIAS else 1
            lanes[monitor] = _lanes(page11, offset - PAGE, lane_count, monitor, scale)
    page02 = upper.get(0x02)
    thresholds = _thresholds(page02, _C_THRESHOLDS, multiplier) if page02 is not None else {}
    for monitor in list(thresholds):
        if monitor in implemented and not implemented[monitor]:
            del thresholds[monitor]
    return ModuleDiagnostics(CMIS, lower[0], temperature, voltage, lanes, thresholds)


def _byte(data: bytes, offset: int) -> Optional[int]:
    return data[offset] if 0 <= offset < len(data) else None


def _u16(data: bytes, offset: int) -> Optional[int]:
    if offset < 0 or offset + 2 > len(data):
        return None
    value: int = struct.unpack_from(">H", data, offset)[0]
    return value


def _scaled(raw: Optional[int], monitor: str, scale: int = 1) -> Optional[float]:
    """A raw 16-bit count in the monitor's unit; temperature is signed; None if implausible."""
    if raw is None:
        return None
    if monitor == TEMPERATURE and raw >= 0x8000:
        raw -= 0x10000
    value = raw * scale / _PER_UNIT[monitor]
    low, high = _PLAUSIBLE.get(monitor, (0.0, float("inf")))
    return value if low <= value <= high else None


def _value(data: bytes, offset: int, monitor: str) -> Optional[float]:
    return _scaled(_u16(data, offset), monitor)


def _lanes(data: bytes, offset: int, count: int, monitor: str, scale: int = 1
           ) -> tuple[Optional[float], ...]:
    return tuple(_scaled(_u16(data, offset + 2 * lane), monitor, scale) for lane in range(count))


def _thresholds(page: bytes, table: Mapping[str, int], bias_scale: int
                ) -> dict[str, Thresholds]:
    """Each monitor's four limits (high alarm, low alarm, high warning, low warning) from an
    upper page; a monitor whose limits are unreadable, all zero (not set) or out of order is
    left out."""
    out: dict[str, Thresholds] = {}
    for monitor, offset in table.items():
        scale = bias_scale if monitor == TX_BIAS else 1
        raws = [_u16(page, offset - PAGE + 2 * i) for i in range(4)]
        if any(r is None for r in raws) or all(r == 0 for r in raws):
            continue
        values = [_scaled(r, monitor, scale) for r in raws]
        if any(v is None for v in values):
            continue
        high_alarm, low_alarm, high_warning, low_warning = _floats(values)
        if low_alarm <= low_warning <= high_warning <= high_alarm and low_alarm < high_alarm:
            out[monitor] = Thresholds(high_alarm, low_alarm, high_warning, low_warning)
    return out


def _floats(values: Sequence[Optional[float]]) -> tuple[float, float, float, float]:
    a, b, c, d = (float(v or 0.0) for v in values)
    return a, b, c, d
