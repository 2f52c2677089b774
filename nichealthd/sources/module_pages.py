"""Parsers of a pluggable module's diagnostic pages (SFF-8636 and CMIS): bytes in, values out.

Pure: they get the raw bytes of the pages (``lower``: bytes 0-127 of page 00h; ``upper``:
page number -> the 128 bytes at offsets 128-255 of that page, bank 0), never a path or a
socket, and never raise on bad bytes: a page too short for a field, a monitor the module does
not implement, an impossible value or thresholds out of order are ``None`` (not available).

The offsets are the SFF-8636 and CMIS tables as ethtool implements them (``qsfp.h``,
``qsfp.c``, ``cmis.h``, ``cmis.c``, ``sff-common.h`` of ethtool 6.x), each checked there:

SFF-8636 (QSFP/QSFP+/QSFP28, identifiers 0x0C, 0x0D, 0x11; ethtool cites SFF-8636 rev 2.7):

- lower page: identifier byte 0; revision compliance byte 1; status byte 2 bit 2 "Flat_mem"
  (set: no page 03h, ethtool's ``SFF8636_STATUS_PAGE_3_PRESENT`` is that bit); the latched
  flags (ethtool's qsfp.h): byte 3 bits 0-3 Rx LOS of lanes 1-4, byte 6 temperature and
  byte 7 Vcc (bit 7 high alarm, 6 low alarm, 5 high warning, 4 low warning), bytes 9-10 Rx
  power, 11-12 Tx bias, 13-14 Tx power (two lanes a byte, lane 1 in bits 7-4 of the first,
  in that order); temperature bytes 22-23 (signed, 1/256 °C);
  supply voltage 26-27 (100 µV); per lane 1-4 Rx power 34/36/38/40, Tx bias 42/44/46/48,
  Tx power 50/52/54/56 (0.1 µW and 2 µA units, big-endian 16 bits);
- upper page 00h: byte 131 the 10/40G compliance codes (bit 3 40GBASE-CR4), byte 147 bits
  7-4 the transmitter technology (0x0A-0x0F copper cable), vendor name 148-163, part number
  168-183, serial number 196-211, byte 192 the extended specification compliance code; byte
  220 (``SFF8636_DIAG_TYPE_OFFSET``): bit 5 temperature and bit 4 supply voltage monitoring
  implemented (revision 2.8 to 2.10, byte 1 = 8; with another revision code they are
  assumed, as SONiC's ``Sff8636Api`` does), bit 3 Rx power is average power (else OMA),
  bit 2 Tx power is measured; ethtool treats a temperature of 0x0000 or 0xFFFF as "no
  diagnostics at all", and so does this parser;
- upper page 03h thresholds (high alarm, low alarm, high warning, low warning, 2 bytes each):
  temperature 128, voltage 144, Rx power 176, Tx bias 184, Tx power 192.

CMIS (QSFP-DD/OSFP/DSFP and CMIS QSFP+/SFP, identifiers 0x18, 0x19, 0x1B, 0x1E, 0x1F, 0x20;
CMIS rev 4-5 as ethtool cites it):

- lower memory: identifier byte 0; byte 2 bit 7 flat memory (no pages 01h/02h/11h: no
  monitors advertised, so temperature and voltage are not available either, as SONiC's
  ``sonic_xcvr`` CmisApi has it); byte 9 the module's temperature (bits 0-3: high alarm, low
  alarm, high warning, low warning) and supply voltage (bits 4-7) flags; temperature 14-15,
  supply voltage 16-17; byte 85 the media type (3 passive copper, 4 active cable); bytes
  86-117 the application descriptors 1-8 (host interface, media interface, host lane count
  << 4 | media lane count, host lane assignment options);
- page 00h byte 212 the media interface technology (the SFF-8636 transmitter technology
  codes: 0x0A-0x0F copper; CMIS adds 0x12-0x14, copper with linear active equalizers);
  vendor name 129-144, part number 148-163, serial number 166-181;
- page 01h byte 158 bit 1 Rx LOS flag implemented; byte 160 (``CMIS_DIAG_CHAN_ADVER_OFFSET``):
  bit 0 Tx bias, bit 1 Tx power, bit 2 Rx power monitors implemented; bits 4-3 the Tx bias
  scaling (00 x1, 01 x2, 10 x4, the mask and values of ethtool's ``CMIS_TX_BIAS_MUL_*``);
  ethtool's ``cmis_tx_bias_mul`` shifts the raw value right by it, SONiC and this parser
  multiply the 2 µA unit by it (the field is a multiplier by its name);
- page 02h thresholds (same order): temperature 128, voltage 136, Tx power 176, Tx bias 184,
  Rx power 192 (note: Tx power before Rx power, unlike SFF-8636);
- page 11h, lanes 1-8 of bank 0: the data path state of each lane (bytes 128-131, a
  nibble each, 1 = deactivated); the lane flags (bit n-1 for lane n): Tx power high alarm,
  low alarm, high warning, low warning 139-142, Tx bias 143-146, Rx LOS 147, Rx
  power 149-152; the lane monitors Tx power 154, Tx bias 170, Rx power 186; the active
  control set's application of each lane (bytes 206-213: bits 7-4 the application, bits 3-1
  the data path's first host lane).

Which lanes are read (a lane the module does not use reads 0: it must not be judged as
having no light): the lanes of each data path in use (the active control set: the lanes of
one data path share its application and first lane; where the application gives host and
media lane counts that fit the module, each instance of it in the path feeds its media
lanes in the same proportion: an 800G ZR's eight host lanes feed one media lane, four
100G-FR1 instances of two host lanes each feed media lanes 1-4; otherwise the media lanes
are the host lanes); with no active control set, the media lane count of application 1
when it is 1..N (N: the lanes of the form factor, 8 for QSFP-DD and OSFP, 4 for CMIS QSFP,
2 for DSFP and SFP-DD, 1 for SFP), otherwise those of the form factor's N lanes that do not
read 0 on all three lane monitors (a lane of a link that is up never does); a lane whose
data path is deactivated is not read. A twin-port module (2x400G) has two data paths, one
per host port (``ModuleDiagnostics.data_paths``).

Copper (SFF-8636 transmitter technology 0x0A-0x0F, or the compliance codes SONiC's
``Sff8636Api.is_copper`` takes: byte 131 = 40GBASE-CR4, byte 192 a CR, ACC or copper code;
CMIS media type 3, or media type 4 with a copper media interface technology) has no laser
and no photodiode: its Rx power, Tx power and Tx bias are not available whatever the bytes
read, and an SFF-8636 copper cable has no temperature or voltage either (SONiC shows N/A).
"""

from __future__ import annotations

import struct
from typing import Mapping, Optional, Sequence

from .optics_facts import (
    ACTIVE_COPPER,
    COPPER,
    HIGH_ALARM,
    HIGH_WARNING,
    LOW_ALARM,
    LOW_WARNING,
    OK,
    OPTICAL,
    PASSIVE_COPPER,
    RX_POWER,
    TEMPERATURE,
    TX_BIAS,
    TX_POWER,
    UNKNOWN_MEDIA,
    VOLTAGE,
    ModuleDiagnostics,
    Thresholds,
)

PAGE = 128  # bytes of the lower memory and of each upper page
SFF8636 = "SFF-8636"
CMIS = "CMIS"
SFF8636_IDS = frozenset({0x0C, 0x0D, 0x11})  # SFF-8024: QSFP, QSFP+, QSFP28
# SFF-8024 identifiers of CMIS modules -> the lanes of their form factor
CMIS_FORM_LANES = {0x18: 8, 0x19: 8, 0x1B: 2, 0x1E: 4, 0x1F: 2, 0x20: 1}
CMIS_IDS = frozenset(CMIS_FORM_LANES)  # QSFP-DD, OSFP, DSFP, QSFP+/SFP-DD/SFP+ with CMIS
# A module's flag bits, in the order of the levels they raise
_LEVELS = (HIGH_ALARM, LOW_ALARM, HIGH_WARNING, LOW_WARNING)

# SFF-8636
_S_REVISION, _S_REV_2_8 = 1, 0x08
_S_STATUS, _S_FLAT_MEM = 2, 0x04
_S_RX_LOS = 3
_S_FLAGS = {TEMPERATURE: 6, VOLTAGE: 7}
_S_LANE_FLAGS = {RX_POWER: 9, TX_BIAS: 11, TX_POWER: 13}
_S_TEMP, _S_VCC = 22, 26
_S_RX, _S_BIAS, _S_TX = 34, 42, 50
_S_COMPLIANCE, _S_CR4 = 131, 0x08
_S_TECHNOLOGY = 147
_S_EXT_COMPLIANCE = 192
# SFF-8024 extended compliance codes whose names carry CR, ACC or copper (SONiC's rule)
_S_COPPER_EXT = frozenset({8, 11, 12, 13, 25, 48, 50, 63, 64})
_S_IDENTITY = ((148, 16), (168, 16), (196, 16))
_S_DIAG_TYPE, _S_TEMP_MON, _S_VCC_MON, _S_TX_PWR_SUPPORTED = 220, 0x20, 0x10, 0x04
_S_THRESHOLDS = {TEMPERATURE: 128, VOLTAGE: 144, RX_POWER: 176, TX_BIAS: 184, TX_POWER: 192}
SFF8636_LANES = 4

# CMIS
_C_MEMORY_MODEL, _C_FLAT = 2, 0x80
_C_MODULE_FLAGS = 9
_C_TEMP, _C_VCC = 14, 16
_C_MEDIA_TYPE, _C_PASSIVE_COPPER, _C_ACTIVE_CABLE = 85, 0x03, 0x04
_C_APPS = 86  # application descriptors 1-8, four bytes each
_C_APP1_LANES = 88
_C_TECHNOLOGY = 212
_C_IDENTITY = ((129, 16), (148, 16), (166, 16))
_C_RX_FLAGS_ADVER, _C_RX_LOS_SUPPORTED = 158, 0x02
_C_MON_ADVER = 160
_C_BIAS_MON, _C_TX_MON, _C_RX_MON, _C_BIAS_MUL = 0x01, 0x02, 0x04, 0x18
_C_THRESHOLDS = {TEMPERATURE: 128, VOLTAGE: 136, TX_POWER: 176, TX_BIAS: 184, RX_POWER: 192}
_C_DP_STATE, _C_DP_DEACTIVATED = 128, 0x1
_C_RX_LOS = 147
_C_LANE_FLAGS = {TX_POWER: 139, TX_BIAS: 143, RX_POWER: 149}
_C_LANE = {TX_POWER: 154, TX_BIAS: 170, RX_POWER: 186}
_C_ACTIVE_SET = 206
CMIS_LANES = 8
_COPPER_TECHNOLOGY = frozenset({*range(0x0A, 0x10), 0x12, 0x13, 0x14})
_ACTIVE_COPPER_TECHNOLOGY = _COPPER_TECHNOLOGY - {0x0A, 0x0B}

# Plausible ranges: what a working module can report; beyond them the bytes are garbage.
_PLAUSIBLE = {TEMPERATURE: (-50.0, 150.0), VOLTAGE: (0.5, 6.0)}
# Raw counts per unit: 1/256 °C, 100 µV (-> V), 0.1 µW (-> mW), 2 µA (-> mA).
_PER_UNIT = {TEMPERATURE: 256, VOLTAGE: 10000, RX_POWER: 10000, TX_POWER: 10000, TX_BIAS: 500}
OPTICAL_MONITORS = (RX_POWER, TX_POWER, TX_BIAS)


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


def _sff8636_media(page00: bytes) -> str:
    technology = _byte(page00, _S_TECHNOLOGY - PAGE)
    compliance = _byte(page00, _S_COMPLIANCE - PAGE)
    extended = _byte(page00, _S_EXT_COMPLIANCE - PAGE)
    if technology is None:
        return UNKNOWN_MEDIA
    code = technology >> 4
    if code in _ACTIVE_COPPER_TECHNOLOGY or extended in {8, 25, 48, 50}:  # ACC codes
        return ACTIVE_COPPER
    if code in _COPPER_TECHNOLOGY or compliance == _S_CR4 or extended in _S_COPPER_EXT:
        return PASSIVE_COPPER
    return OPTICAL


def _sff8636(lower: bytes, upper: Mapping[int, bytes]) -> ModuleDiagnostics:
    page00 = upper.get(0x00, b"")
    flat = _byte(lower, _S_STATUS) is None or bool(lower[_S_STATUS] & _S_FLAT_MEM)
    media = _sff8636_media(page00)
    base = ModuleDiagnostics(SFF8636, lower[0], media=media, flat=flat,
                             identity=_identity(page00, _S_IDENTITY))
    raw_temp = _u16(lower, _S_TEMP)
    if media in COPPER or raw_temp in (None, 0x0000, 0xFFFF):
        return base  # copper: nothing measured (SONiC: N/A); ethtool: no valid temperature
    diag_type = _byte(page00, _S_DIAG_TYPE - PAGE)
    revised = _byte(lower, _S_REVISION) == _S_REV_2_8 and diag_type is not None

    def implemented(bit: int) -> bool:
        return not revised or bool(diag_type is not None and diag_type & bit)

    lanes: dict[str, tuple[Optional[float], ...]] = {
        RX_POWER: _lanes(lower, _S_RX, range(SFF8636_LANES), RX_POWER),
        TX_BIAS: _lanes(lower, _S_BIAS, range(SFF8636_LANES), TX_BIAS),
    }
    if diag_type is not None and diag_type & _S_TX_PWR_SUPPORTED:
        lanes[TX_POWER] = _lanes(lower, _S_TX, range(SFF8636_LANES), TX_POWER)
    page03 = upper.get(0x03) if not flat else None
    thresholds = _thresholds(page03, _S_THRESHOLDS, 1) if page03 is not None else {}
    temperature = _value(lower, _S_TEMP, TEMPERATURE) if implemented(_S_TEMP_MON) else None
    voltage = _value(lower, _S_VCC, VOLTAGE) if implemented(_S_VCC_MON) else None
    for monitor, value in ((TEMPERATURE, temperature), (VOLTAGE, voltage)):
        if value is None:
            thresholds.pop(monitor, None)
    if TX_POWER not in lanes:
        thresholds.pop(TX_POWER, None)
    flags: dict[str, tuple[str, ...]] = {}
    for monitor, offset in _S_FLAGS.items():
        byte = _byte(lower, offset)
        if byte is not None:
            flags[monitor] = (_level(byte >> 4, (8, 4, 2, 1)),)
    for monitor, offset in _S_LANE_FLAGS.items():
        first, second = _byte(lower, offset), _byte(lower, offset + 1)
        if monitor in lanes and first is not None and second is not None:
            nibbles = (first >> 4, first, second >> 4, second)
            flags[monitor] = tuple(_level(n, (8, 4, 2, 1)) for n in nibbles)
    los = _byte(lower, _S_RX_LOS)
    rx_los = tuple(bool(los >> lane & 1) for lane in range(SFF8636_LANES)) \
        if los is not None else ()
    return ModuleDiagnostics(SFF8636, lower[0], temperature, voltage, lanes, thresholds,
                             media, flat, base.identity, flags, rx_los)


def _cmis_media(lower: bytes, page00: bytes) -> str:
    media_type = _byte(lower, _C_MEDIA_TYPE)
    technology = _byte(page00, _C_TECHNOLOGY - PAGE)
    if media_type == _C_PASSIVE_COPPER:
        return PASSIVE_COPPER
    if media_type == _C_ACTIVE_CABLE and technology in _COPPER_TECHNOLOGY:
        return ACTIVE_COPPER if technology in _ACTIVE_COPPER_TECHNOLOGY else PASSIVE_COPPER
    if media_type is None or media_type == 0 or media_type > _C_ACTIVE_CABLE:
        return UNKNOWN_MEDIA  # undefined, BASE-T, or a code this parser does not know
    return OPTICAL


def data_paths(lower: bytes, page11: bytes, form_lanes: int) -> tuple[tuple[int, ...], ...]:
    """The media lanes (0-based) of each data path in use, in order of their first host
    lane (see the module docstring); ``()``: none can be told."""
    active: dict[tuple[int, int], list[int]] = {}
    for lane in range(form_lanes):
        code = _byte(page11, _C_ACTIVE_SET - PAGE + lane)
        if code is not None and code >> 4:
            active.setdefault((code >> 1 & 0x07, code >> 4), []).append(lane)
    if active:
        paths = []
        for (_, app), hosts in sorted(active.items(), key=lambda item: item[1][0]):
            counts = _byte(lower, _C_APPS + 4 * (app - 1) + 2) if app <= 8 else None
            host_count, media_count = (counts >> 4, counts & 0x0F) if counts else (0, 0)
            if 1 <= host_count <= form_lanes and 1 <= media_count <= form_lanes:
                starts = hosts[::host_count]  # each instance of the application in the path
                media = {start * media_count // host_count + j for start in starts
                         for j in range(media_count)}
                paths.append(tuple(sorted(lane for lane in media if lane < form_lanes)))
            else:
                paths.append(tuple(hosts))
        return tuple(paths)
    count = _byte(lower, _C_APP1_LANES)
    media_count = count & 0x0F if count is not None else 0
    if 1 <= media_count <= form_lanes:
        lanes: Sequence[int] = range(media_count)
    else:  # no valid count: the form factor's lanes that show a sign of use
        lanes = [lane for lane in range(form_lanes) if not _silent(page11, lane)]
    live = tuple(lane for lane in lanes if _dp_state(page11, lane) != _C_DP_DEACTIVATED)
    return (live,) if live else ()


def _silent(page11: bytes, lane: int) -> bool:
    """A lane whose Tx power, Tx bias and Rx power all read 0: no laser biased, no light, no
    light sent; a lane of the link never reads so on a port that is up, a lane the module
    does not use always does."""
    return all(_u16(page11, offset - PAGE + 2 * lane) in (0, None)
               for offset in _C_LANE.values())


def _dp_state(page11: bytes, lane: int) -> Optional[int]:
    byte = _byte(page11, _C_DP_STATE - PAGE + lane // 2)
    if byte is None:
        return None
    return byte >> 4 if lane % 2 else byte & 0x0F


def _cmis(lower: bytes, upper: Mapping[int, bytes]) -> ModuleDiagnostics:
    page00 = upper.get(0x00, b"")
    memory_model = _byte(lower, _C_MEMORY_MODEL)
    flat = memory_model is None or bool(memory_model & _C_FLAT)
    media = _cmis_media(lower, page00)
    identity = _identity(page00, _C_IDENTITY)
    if flat:  # no monitor pages: nothing is advertised (SONiC, ethtool: N/A)
        return ModuleDiagnostics(CMIS, lower[0], media=media, flat=flat, identity=identity)
    temperature = _value(lower, _C_TEMP, TEMPERATURE)
    voltage = _value(lower, _C_VCC, VOLTAGE)
    # page 01h unread: no lane monitor is known to be implemented (the module ones are)
    adver = _byte(upper.get(0x01, b""), _C_MON_ADVER - PAGE) or 0
    multiplier = {0x00: 1, 0x08: 2, 0x10: 4}.get(adver & _C_BIAS_MUL, 1)
    page11 = upper.get(0x11, b"")
    paths = data_paths(lower, page11, CMIS_FORM_LANES.get(lower[0], CMIS_LANES))
    read = sorted({lane for path in paths for lane in path})
    width = (read[-1] + 1) if read else 0
    implemented = {TX_BIAS: bool(adver & _C_BIAS_MON), TX_POWER: bool(adver & _C_TX_MON),
                   RX_POWER: bool(adver & _C_RX_MON)}
    if media in COPPER:  # no laser, no photodiode
        implemented = dict.fromkeys(implemented, False)
    lanes: dict[str, tuple[Optional[float], ...]] = {}
    flags: dict[str, tuple[str, ...]] = {}
    for monitor, offset in _C_LANE.items():
        if implemented[monitor]:
            scale = multiplier if monitor == TX_BIAS else 1
            values = _lanes(page11, offset - PAGE, range(width), monitor, scale)
            lanes[monitor] = tuple(v if i in read else None for i, v in enumerate(values))
            flags_of = _lane_flags(page11, _C_LANE_FLAGS[monitor], width)
            if flags_of is not None:
                flags[monitor] = flags_of
    module_flags = _byte(lower, _C_MODULE_FLAGS)
    if module_flags is not None:
        flags[TEMPERATURE] = (_level(module_flags & 0x0F, (1, 2, 4, 8)),)
        flags[VOLTAGE] = (_level(module_flags >> 4, (1, 2, 4, 8)),)
    rx_los: tuple[Optional[bool], ...] = ()
    los_adver = _byte(upper.get(0x01, b""), _C_RX_FLAGS_ADVER - PAGE)
    los = _byte(page11, _C_RX_LOS - PAGE)
    if implemented[RX_POWER] and los_adver is not None and los_adver & _C_RX_LOS_SUPPORTED \
            and los is not None:
        rx_los = tuple(bool(los >> i & 1) if i in read else None for i in range(width))
    page02 = upper.get(0x02)
    thresholds = _thresholds(page02, _C_THRESHOLDS, multiplier) if page02 is not None else {}
    for monitor in list(thresholds):
        if monitor in implemented and not implemented[monitor]:
            del thresholds[monitor]
    return ModuleDiagnostics(CMIS, lower[0], temperature, voltage, lanes, thresholds, media,
                             flat, identity, flags, rx_los, paths if len(paths) > 1 else ())


def _lane_flags(page11: bytes, offset: int, width: int) -> Optional[tuple[str, ...]]:
    """Each lane's level from CMIS's four flag bytes of one monitor (high alarm, low alarm,
    high warning, low warning; bit n-1 for lane n)."""
    raw = [_byte(page11, offset - PAGE + i) for i in range(4)]
    bytes_ = [b for b in raw if b is not None]
    if len(bytes_) != 4:
        return None
    return tuple(_level(sum(8 >> i for i, b in enumerate(bytes_) if b >> lane & 1),
                        (8, 4, 2, 1)) for lane in range(width))


def _level(bits: int, masks: tuple[int, int, int, int]) -> str:
    """The worst level whose flag bit is set (masks: high alarm, low alarm, high warning,
    low warning)."""
    for level, mask in zip(_LEVELS, masks):
        if bits & mask:
            return level
    return OK


def _identity(page00: bytes, fields: Sequence[tuple[int, int]]) -> tuple[str, str, str]:
    """Vendor name, part number and serial number: ASCII, padding and NULs stripped."""
    out = []
    for offset, size in fields:
        raw = page00[offset - PAGE:offset - PAGE + size] if len(page00) >= offset - PAGE + size \
            else b""
        text = "".join(chr(b) if 0x20 <= b < 0x7F else " " for b in raw)
        out.append(text.strip())
    return out[0], out[1], out[2]


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


def _lanes(data: bytes, offset: int, lanes: range, monitor: str, scale: int = 1
           ) -> tuple[Optional[float], ...]:
    return tuple(_scaled(_u16(data, offset + 2 * lane), monitor, scale) for lane in lanes)


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
