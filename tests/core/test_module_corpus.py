"""The module-page parser against real public module vectors, field by field.

The corpus (tests/data/modules/README.md): 24 modules' pages from FBOSS's ``qsfp_service``
test fixtures, and what SONiC's ``sonic_xcvr`` decoder makes of each. Every field this
parser gives must equal SONiC's where both give one, and be "not available" where SONiC
shows N/A; the lanes read are the module's live lanes (SONiC reads eight on every CMIS
module: those beyond the data paths in use read 0 there and are not read here). A few of
FBOSS's own expectations (``CmisTest.cpp``, ``cmis200GTransceiverInfoTest``) are checked too.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any, Optional

import pytest

from nichealthd.sources import module_pages
from nichealthd.sources.optics_facts import (
    PASSIVE_COPPER,
    RX_POWER,
    TEMPERATURE,
    TX_BIAS,
    TX_POWER,
    VOLTAGE,
    ModuleDiagnostics,
    dbm,
)

CORPUS = Path(__file__).resolve().parents[1] / "data" / "modules"
SONIC: dict[str, dict[str, Any]] = json.loads((CORPUS / "sonic_xcvr_decoded.json").read_text())
NAMES = sorted(SONIC)
# SONiC's threshold keys per monitor (high alarm, low alarm, high warning, low warning)
KEYS = {TEMPERATURE: "temp", VOLTAGE: "vcc", RX_POWER: "rxpower", TX_POWER: "txpower",
        TX_BIAS: "txbias"}


def load(name: str) -> tuple[bytes, dict[int, bytes]]:
    lower, pages = b"", {}
    for line in (CORPUS / name).read_text().splitlines():
        if line.startswith("lower "):
            lower = bytes.fromhex(line.split()[1])
        elif line.startswith("page "):
            _, page, data = line.split()
            pages[int(page, 16)] = bytes.fromhex(data)
    return lower, pages


def parsed(name: str) -> ModuleDiagnostics:
    lower, pages = load(name)
    # the pages the daemon asks for, as the kernel would return them
    diag = module_pages.parse(lower, {p: pages[p] for p in module_pages.pages_needed(lower)
                                      if p in pages})
    assert diag is not None
    return diag


def same(ours: Optional[float], theirs: Any, digits: float = 2e-3) -> bool:
    if theirs in ("N/A", None) or isinstance(theirs, str):
        return ours is None
    return ours is not None and abs(ours - float(theirs)) <= digits


def test_the_corpus_is_complete() -> None:
    assert len(NAMES) == 24
    assert {p.name for p in CORPUS.glob("fboss-*.txt")} == set(NAMES)
    for license_file in ("LICENSE-fboss", "LICENSE-sonic-platform-common"):
        assert (CORPUS / license_file).stat().st_size > 0


@pytest.mark.parametrize("name", NAMES)
def test_every_field_as_sonic_decodes_it(name: str) -> None:
    sonic, diag = SONIC[name], parsed(name)
    assert diag.spec == sonic["spec"]
    assert diag.flat == sonic["flat_memory"]
    copper = diag.media == PASSIVE_COPPER or (diag.spec == "SFF-8636" and
                                              diag.media == "active copper")
    assert copper == sonic["is_copper"]
    assert same(diag.temperature, sonic["temperature"]), (diag.temperature,
                                                          sonic["temperature"])
    assert same(diag.voltage, sonic["voltage"])
    read = {lane for path in diag.paths() for lane in path}
    for monitor, key in ((RX_POWER, "rx_power_mw"), (TX_POWER, "tx_power_mw"),
                         (TX_BIAS, "tx_bias_ma")):
        theirs = sonic[key] if isinstance(sonic[key], list) else []
        ours = diag.lanes.get(monitor, ())
        if not ours:  # not available here: SONiC shows N/A (or has no value) on every lane
            assert all(v == "N/A" for v in theirs) or not theirs, (monitor, theirs)
            continue
        for lane, value in enumerate(ours):
            if lane in read:
                assert same(value, theirs[lane]), (monitor, lane, value, theirs[lane])
            else:
                assert value is None
        for lane in set(range(len(theirs))) - read:
            assert theirs[lane] in (0.0, "N/A"), (monitor, lane, theirs[lane])  # not live
    los = sonic["rx_los"]
    for lane, flag in enumerate(diag.rx_los):
        if flag is not None:
            assert flag == los[lane]
    for monitor, limits in diag.thresholds.items():
        key = KEYS[monitor]
        values = (limits.high_alarm, limits.low_alarm, limits.high_warning, limits.low_warning)
        for value, level in zip(values, ("highalarm", "lowalarm", "highwarning", "lowwarning")):
            theirs = sonic["thresholds"][key + level]
            shown = dbm(value) if monitor in (RX_POWER, TX_POWER) else value
            assert same(shown, theirs, 2e-2), (monitor, level, shown, theirs)
    vendor, part, serial = diag.identity
    assert vendor == str(sonic["vendor"]).strip(" \x00")
    assert part == str(sonic["part"]).strip(" \x00")
    assert serial == str(sonic["serial"]).strip(" \x00")


def test_what_the_media_and_memory_say() -> None:
    kinds = {name: (parsed(name).media, parsed(name).flat) for name in NAMES}
    assert kinds["fboss-SffDac.txt"] == ("passive copper", True)
    assert kinds["fboss-Sff200GCr4.txt"] == ("passive copper", True)
    assert kinds["fboss-Cmis400GCr8.txt"] == ("passive copper", True)
    assert kinds["fboss-CmisCredo800AEC.txt"] == ("active copper", False)
    assert kinds["fboss-CmisFlatMem.txt"] == ("unknown", True)
    assert kinds["fboss-Cmis400GLr4.txt"] == ("optical", False)
    aec = parsed("fboss-CmisCredo800AEC.txt")
    assert aec.temperature is not None and not aec.lanes  # measured; no optical monitor


def test_the_lanes_in_use() -> None:
    paths = {name: parsed(name).paths() for name in NAMES}
    for twin in ("fboss-Cmis2x400GFr4.txt", "fboss-Cmis2x400GDr4.txt",
                 "fboss-Cmis2x800GDr4.txt", "fboss-CmisArista2x400GXdr4.txt",
                 "fboss-Cmis2x400GFr4Lpo.txt", "fboss-Cmis2x400GFr4Lite.txt"):
        assert paths[twin] == ((0, 1, 2, 3), (4, 5, 6, 7)), twin
    assert paths["fboss-Cmis800GZr.txt"] == ((0,),)  # 8 host lanes, 1 coherent media lane
    assert paths["fboss-Cmis400GDr4.txt"] == ((0, 1, 2, 3),)  # 400GAUI-8 to DR4
    assert paths["fboss-Cmis400GFr4MultiPort.txt"] == ((0, 1, 2, 3),)  # 4 x 100G-FR1
    assert paths["fboss-SffCwdm4.txt"] == ((0, 1, 2, 3),)


def test_fboss_own_expectations_of_its_200g_module() -> None:
    """``CmisTest.cpp`` ``cmis200GTransceiverInfoTest``: temperature 40.26953125 °C, Vcc
    3.3020 V, per lane Tx bias, Tx power and Rx power (mA, mW), Rx LOS 1 0 1 0, and the lane
    interrupts (Rx power high alarm 0 1 0 1, low alarm 1 1 0 1, high warning 0 0 1 1)."""
    diag = parsed("fboss-Cmis200G.txt")
    assert diag.temperature == pytest.approx(40.26953125)
    assert diag.voltage == pytest.approx(3.302)
    assert diag.lanes[TX_BIAS] == pytest.approx((48.442, 50.082, 53.516, 50.028))
    assert diag.lanes[TX_POWER] == pytest.approx((2.13, 2.0748, 2.0512, 2.1027))
    assert diag.lanes[RX_POWER] == pytest.approx((0.4032, 0.3969, 0.5812, 0.5176))
    assert diag.rx_los == (True, False, True, False)
    # the worst flag of each lane: lane 1 low alarm, 2 and 4 high alarm, 3 high warning
    assert diag.flags[RX_POWER] == ("low alarm", "high alarm", "high warning", "high alarm")
    # Tx bias high alarm 0 1 1 0, low alarm 1 1 1 0, high warning 0 0 0 1
    assert diag.flags[TX_BIAS] == ("low alarm", "high alarm", "high alarm", "high warning")
    # verifyGlobalInterrupts: temperature (high alarm, low alarm, high warning, low warning)
    # 1 1 0 1, Vcc 1 0 1 0
    assert diag.flags[TEMPERATURE] == ("high alarm",)
    assert diag.flags[VOLTAGE] == ("high alarm",)


def test_fboss_own_expectations_of_its_cwdm4_module() -> None:
    """``SffTest.cpp`` ``cwdm4TransceiverInfoTest``: 31.015625 °C, 3.2989 V, per lane values,
    Rx LOS 1 1 0 1, the lane interrupts and the Vcc warnings (high and low warning set)."""
    diag = parsed("fboss-SffCwdm4.txt")
    assert diag.media == "optical" and not diag.flat
    assert diag.temperature == pytest.approx(31.015625)
    assert diag.voltage == pytest.approx(3.2989)
    assert diag.lanes[TX_BIAS] == pytest.approx((10.28, 8.738, 17.476, 26.214))
    # FBOSS shows Tx power (1.6705 ... mW) though byte 220 bit 2 says it is not measured
    # (0x0A); SONiC and ethtool show it only when measured, and so does this parser
    assert TX_POWER not in diag.lanes and TX_POWER not in diag.flags
    assert diag.lanes[RX_POWER] == pytest.approx((0.4643, 0.9012, 0.4913, 0.4626))
    assert diag.rx_los == (True, True, False, True)
    # Rx power high alarm 1 0 1 0, low alarm 1 1 1 0, high warning 0 0 1 1
    assert diag.flags[RX_POWER] == ("high alarm", "low alarm", "high alarm", "high warning")
    # Tx bias high alarm 1 0 0 1, low alarm 1 1 0 1, high warning 0 0 1 0
    assert diag.flags[TX_BIAS] == ("high alarm", "low alarm", "high warning", "high alarm")
    assert diag.flags[TEMPERATURE] == ("ok",) and diag.flags[VOLTAGE] == ("high warning",)


def test_fboss_dac_is_a_copper_cable_with_nothing_measured() -> None:
    """``SffTest.cpp`` ``dacTransceiverInfoTest``: extended compliance 100G CR4."""
    diag = parsed("fboss-SffDac.txt")
    assert diag.media == "passive copper" and diag.temperature is None and not diag.lanes
    assert diag.identity == ("FACETEST", "NDAQGF-F302", "2023J")
