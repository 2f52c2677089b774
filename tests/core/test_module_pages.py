"""The module-page parsers on bytes laid out from the SFF-8636 and CMIS tables.

The builders here put raw 16-bit counts at the offsets of the tables (the offsets of
ethtool's qsfp.h and cmis.h; CMIS 5 §8.9.4 Table 8-79 for the lane monitors), written out as
numbers in this file, so the parser is checked against the tables and not against itself.
"""

from __future__ import annotations

import struct
from typing import Optional

import pytest

from nichealthd.sim import optics as sim_optics
from nichealthd.sources import module_pages
from nichealthd.sources.module_pages import pages_needed, parse
from nichealthd.sources.optics_facts import (
    DBM_FLOOR,
    RX_POWER,
    TEMPERATURE,
    TX_BIAS,
    TX_POWER,
    VOLTAGE,
    Thresholds,
    dbm,
)


def put(page: bytearray, offset: int, raw: int) -> None:
    struct.pack_into(">H", page, offset, raw & 0xFFFF)


def sff8636(*, ident: int = 0x11, flat: bool = False, temp: int = 0x2800, vcc: int = 33000,
            rx: tuple[int, ...] = (6310, 5012, 3981, 100), bias: tuple[int, ...] = (3750,) * 4,
            tx: tuple[int, ...] = (7943,) * 4, diag_type: int = 0x0C,
            thresholds: bool = True) -> tuple[bytes, dict[int, bytes]]:
    """Lower page 00h, upper page 00h and upper page 03h of an SFF-8636 module."""
    low, up0, up3 = bytearray(128), bytearray(128), bytearray(128)
    low[0] = up0[0] = ident
    low[2] = 0x04 if flat else 0x00  # byte 2 bit 2: Flat_mem
    put(low, 22, temp)  # bytes 22-23: temperature
    put(low, 26, vcc)  # bytes 26-27: Vcc
    for lane in range(4):
        put(low, 34 + 2 * lane, rx[lane])  # bytes 34-41: Rx power 1-4
        put(low, 42 + 2 * lane, bias[lane])  # bytes 42-49: Tx bias 1-4
        put(low, 50 + 2 * lane, tx[lane])  # bytes 50-57: Tx power 1-4
    up0[220 - 128] = diag_type  # byte 220: diagnostic monitoring type
    if thresholds:
        # page 03h bytes 128 (temp), 144 (Vcc), 176 (Rx), 184 (bias), 192 (Tx): HA LA HW LW
        for offset, values in ((128, (75 * 256, (-5 * 256) & 0xFFFF, 70 * 256, 0)),
                               (144, (36300, 29700, 34650, 31350)),
                               (176, (31623, 501, 15849, 1000)),
                               (184, (7500, 1000, 6500, 1500)),
                               (192, (31623, 1000, 19953, 1585))):
            for index, raw in enumerate(values):
                put(up3, offset - 128 + 2 * index, raw)
    return bytes(low), {0x00: bytes(up0), 0x03: bytes(up3)}


def cmis(*, ident: int = 0x18, flat: bool = False, temp: int = 0x2800, vcc: int = 33000,
         lanes: int = 8, app_lanes: int = 0x88, adver: int = 0x07,
         rx: int = 6310, tx: int = 7943, bias: int = 3750) -> tuple[bytes, dict[int, bytes]]:
    """Lower memory and upper pages 00h, 01h, 02h and 11h of a CMIS module."""
    low, up0, up1, up2, up11 = (bytearray(128) for _ in range(5))
    low[0] = up0[0] = ident
    low[2] = 0x80 if flat else 0x00  # byte 2 bit 7: flat memory
    put(low, 14, temp)  # bytes 14-15
    put(low, 16, vcc)  # bytes 16-17
    low[88] = app_lanes  # application 1: host lanes << 4 | media lanes
    up1[160 - 128] = adver  # byte 160: lane monitors implemented, bias multiplier
    for offset, values in ((128, (75 * 256, (-5 * 256) & 0xFFFF, 70 * 256, 0)),
                           (136, (36300, 29700, 34650, 31350)),
                           (176, (31623, 1000, 19953, 1585)),  # Tx power first in CMIS
                           (184, (7500, 1000, 6500, 1500)),
                           (192, (31623, 501, 15849, 1000))):
        for index, raw in enumerate(values):
            put(up2, offset - 128 + 2 * index, raw)
    for lane in range(lanes):
        put(up11, 154 - 128 + 2 * lane, tx)  # bytes 154-169: Tx power 1-8
        put(up11, 170 - 128 + 2 * lane, bias)  # bytes 170-185: Tx bias 1-8
        put(up11, 186 - 128 + 2 * lane, rx)  # bytes 186-201: Rx power 1-8
    return bytes(low), {0x00: bytes(up0), 0x01: bytes(up1), 0x02: bytes(up2),
                        0x11: bytes(up11)}


def close(a: Optional[float], b: float) -> bool:
    return a is not None and abs(a - b) < 1e-6


def test_sff8636_every_field_and_unit() -> None:
    lower, upper = sff8636(temp=0x2880, vcc=32950)
    assert pages_needed(lower) == (0x00, 0x03)
    d = parse(lower, upper)
    assert d is not None and d.spec == "SFF-8636" and d.identifier == 0x11
    assert close(d.temperature, 40.5)  # 0x2880 / 256
    assert close(d.voltage, 3.295)  # 32950 x 100 µV
    assert d.lanes[RX_POWER] == pytest.approx((0.631, 0.5012, 0.3981, 0.01))  # 0.1 µW -> mW
    assert d.lanes[TX_BIAS] == pytest.approx((7.5,) * 4)  # 3750 x 2 µA
    assert d.lanes[TX_POWER] == pytest.approx((0.7943,) * 4)
    assert dbm(d.lanes[RX_POWER][0] or 0) == pytest.approx(-2.0, abs=0.01)
    assert dbm(d.lanes[RX_POWER][3] or 0) == pytest.approx(-20.0)
    assert d.thresholds[TEMPERATURE] == Thresholds(75.0, -5.0, 70.0, 0.0)
    assert d.thresholds[VOLTAGE] == Thresholds(3.63, 2.97, 3.465, 3.135)
    assert d.thresholds[RX_POWER] == pytest.approx(Thresholds(3.1623, 0.0501, 1.5849, 0.1))
    assert d.thresholds[TX_BIAS] == Thresholds(15.0, 2.0, 13.0, 3.0)
    assert d.thresholds[TX_POWER] == pytest.approx(Thresholds(3.1623, 0.1, 1.9953, 0.1585))


def test_cmis_every_field_and_unit_and_the_bias_multiplier() -> None:
    lower, upper = cmis(temp=(-3 * 256) & 0xFFFF, app_lanes=0x44)
    assert pages_needed(lower) == (0x00, 0x01, 0x02, 0x11)
    d = parse(lower, upper)
    assert d is not None and d.spec == "CMIS" and d.identifier == 0x18
    assert close(d.temperature, -3.0)  # signed
    assert close(d.voltage, 3.3)
    assert d.lanes[RX_POWER] == pytest.approx((0.631,) * 4)  # 4 media lanes
    assert d.lanes[TX_POWER] == pytest.approx((0.7943,) * 4)
    assert d.lanes[TX_BIAS] == pytest.approx((7.5,) * 4)
    assert d.thresholds[RX_POWER].low_warning == pytest.approx(0.1)  # from byte 198
    assert d.thresholds[TX_POWER].low_warning == pytest.approx(0.1585)  # from byte 182
    x4 = parse(*cmis(adver=0x07 | 0x10))  # bits 4-3 = 10b: x4
    assert x4 is not None and x4.lanes[TX_BIAS][0] == pytest.approx(30.0)
    assert x4.thresholds[TX_BIAS] == Thresholds(60.0, 8.0, 52.0, 12.0)
    eight = parse(*cmis(app_lanes=0x00))  # no application lane count: bank 0's 8 lanes
    assert eight is not None and len(eight.lanes[RX_POWER]) == 8


@pytest.mark.parametrize("ident", [0x18, 0x19, 0x1B, 0x1E, 0x1F, 0x20])
def test_every_cmis_identifier(ident: int) -> None:
    d = parse(*cmis(ident=ident))
    assert d is not None and d.spec == "CMIS"


@pytest.mark.parametrize("ident", [0x0C, 0x0D, 0x11])
def test_every_sff8636_identifier(ident: int) -> None:
    d = parse(*sff8636(ident=ident))
    assert d is not None and d.spec == "SFF-8636"


def test_unimplemented_monitors_are_not_available() -> None:
    # SFF-8636 without Tx power measurement (byte 220 bit 2 clear), flat memory: no page 03h
    lower, upper = sff8636(diag_type=0x08, flat=True)
    assert pages_needed(lower) == (0x00,)
    d = parse(lower, upper)
    assert d is not None and TX_POWER not in d.lanes and d.thresholds == {}
    assert RX_POWER in d.lanes
    # SFF-8636 with no valid temperature: ethtool's "no diagnostics" (0x0000 / 0xFFFF)
    for raw in (0x0000, 0xFFFF):
        none = parse(*sff8636(temp=raw))
        assert none is not None and none.temperature is None and not none.lanes
    # CMIS advertising only Rx power; CMIS flat memory: module monitors only
    rx_only = parse(*cmis(adver=0x04))
    assert rx_only is not None and set(rx_only.lanes) == {RX_POWER}
    assert TX_POWER not in rx_only.thresholds and RX_POWER in rx_only.thresholds
    lower, upper = cmis(flat=True)
    assert pages_needed(lower) == (0x00,)
    flat = parse(lower, upper)
    # no page 01h advertises a monitor: the temperature bytes read 40 °C but are not shown
    assert flat is not None and flat.flat and flat.temperature is None and not flat.lanes
    # thresholds all zero (not set) are no thresholds
    lower, upper = cmis()
    d = parse(lower, {**upper, 0x02: bytes(128)})
    assert d is not None and d.thresholds == {} and RX_POWER in d.lanes


def test_garbage_is_not_available_never_an_exception() -> None:
    assert parse(b"", {}) is None
    assert pages_needed(b"") == ()
    assert parse(bytes([0x03]) + bytes(127), {}) is None  # an SFP: not parsed here
    assert parse(bytes([0x11]), {}) is not None  # one byte: a module, nothing readable
    short = parse(bytes([0x11, 0, 0]) + bytes(20), {})
    assert short is not None and short.temperature is None and not short.lanes
    lower, upper = sff8636(temp=0x7F00)  # 127 °C is plausible; 0x9C00 (-100 °C) is not
    assert parse(lower, upper).temperature == pytest.approx(127.0)  # type: ignore[union-attr]
    d = parse(*sff8636(temp=0x9C00, vcc=200))
    assert d is not None and d.temperature is None and d.voltage is None
    # thresholds out of order (low warning above high warning) are none
    lower, upper = sff8636()
    page3 = bytearray(upper[0x03])
    put(page3, 176 - 128 + 6, 30000)
    d = parse(lower, {**upper, 0x03: bytes(page3)})
    assert d is not None and RX_POWER not in d.thresholds and TEMPERATURE in d.thresholds
    # short upper pages: their fields are not available
    d = parse(lower, {0x00: b"", 0x03: upper[0x03][:50]})
    assert d is not None and d.thresholds.get(RX_POWER) is None
    assert d.thresholds.get(TEMPERATURE) is not None  # bytes 128-135 are there
    for junk in (bytes(range(256))[:128], b"\xff" * 128, b"\x18" + b"\xff" * 127):
        module_pages.parse(junk, {p: b"\xff" * 128 for p in (0, 1, 2, 3, 0x11)})


def test_no_light_is_a_reading_not_missing() -> None:
    d = parse(*sff8636(rx=(0, 0, 0, 0)))
    assert d is not None and d.lanes[RX_POWER] == (0.0,) * 4
    assert dbm(0.0) == DBM_FLOOR


@pytest.mark.parametrize("rate", ["100 Gb/sec (4X EDR)", "400 Gb/sec (4X NDR)"])
def test_the_simulators_pages_parse_to_its_healthy_module(rate: str, tmp_path: object) -> None:
    pages = (sim_optics.cmis_pages if rate.startswith("400") else
             sim_optics.sff8636_pages)(dict(sim_optics.HEALTHY))
    lower = pages[0][:128]
    upper = {p: (data[128:] if p == 0 else data) for p, data in pages.items()}
    d = parse(lower, upper)
    assert d is not None and d.temperature == pytest.approx(40.0)
    assert [round(dbm(v or 0), 2) for v in d.lanes[RX_POWER]] == [-2.0] * 4
    assert d.thresholds[RX_POWER].low_warning == pytest.approx(0.1)  # -10 dBm
    assert dbm(d.thresholds[RX_POWER].low_alarm) == pytest.approx(-13.0, abs=0.01)
    assert d.thresholds[TEMPERATURE] == Thresholds(75.0, -5.0, 70.0, 0.0)


@pytest.mark.parametrize("count_byte", [0x40, 0x4F, 0xFF, 0x00, 0x0F])
def test_an_invalid_application_lane_count_reads_only_the_lanes_in_use(count_byte: int) -> None:
    """A 4-lane module in an 8-lane form factor whose application 1 lane count (byte 88 bits
    3-0) reads 0 or 0xF, with no active control set, no data path states and no Rx LOS
    flag advertised: lanes 5-8 read 0 on every monitor, so they are not read."""
    lower, upper = cmis(lanes=4, app_lanes=count_byte)
    d = parse(lower, upper)
    assert d is not None and len(d.lanes[RX_POWER]) == 4
    assert d.paths() == ((0, 1, 2, 3),)
    valid = parse(*cmis(lanes=4, app_lanes=0x44))
    assert valid is not None and len(valid.lanes[RX_POWER]) == 4
    # an 8-lane module with a valid count of 8 reads all eight, even a dark one
    dark = bytearray(upper[0x11])
    put(dark, 186 - 128 + 2 * 7, 0)
    eight = parse(cmis(app_lanes=0x88)[0], {**cmis()[1], 0x11: bytes(dark)})
    assert eight is not None and eight.lanes[RX_POWER][7] == 0.0


def test_a_paged_cmis_module_whose_page_01h_cannot_be_read() -> None:
    """Its temperature and voltage are measured (paged memory: SONiC shows them); no lane
    monitor is known to be implemented, so none is read."""
    lower, upper = cmis()
    d = parse(lower, {p: v for p, v in upper.items() if p != 0x01})
    assert d is not None and d.temperature == pytest.approx(40.0) and not d.lanes
    assert TEMPERATURE in d.thresholds and RX_POWER not in d.thresholds
