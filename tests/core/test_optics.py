"""The optics family's rules, as pure functions of snapshots with an injected clock.

The module facts are the simulator's healthy module (sim/optics.py: thresholds Rx power
+5 / -13 / +2 / -10 dBm, temperature 75 / -5 / 70 / 0 °C) with readings changed, parsed by
the real parser: the same bytes the daemon reads on a simulated host.
"""

from __future__ import annotations

from dataclasses import replace
from typing import Any, Optional

import pytest

from nichealthd.core.checks.optics import OPTICS, OpticsSection, judge, level
from nichealthd.core.events import HealthEvent
from nichealthd.sim import optics as sim_optics
from nichealthd.sources import module_pages
from nichealthd.sources.optics import PORT_OPTICS
from nichealthd.sources.optics_facts import (
    RX_POWER,
    TX_BIAS,
    ModuleDiagnostics,
    PortOptics,
    Thresholds,
)

from .builders import Runner, at, config, device, host, port

ETH = "Ethernet"


def module(rate: str = "100", **readings: float) -> ModuleDiagnostics:
    values = dict(sim_optics.HEALTHY, **readings)
    pages = (sim_optics.cmis_pages if rate == "400" else sim_optics.sff8636_pages)(values)
    upper = {p: (data[128:] if p == 0 else data) for p, data in pages.items()}
    parsed = module_pages.parse(pages[0][:128], upper)
    assert parsed is not None
    return parsed


def snap(when: float, facts: dict[str, PortOptics], *, state: str = "4: ACTIVE",
         phys: str = "5: LinkUp") -> Any:
    devices = [device(f"mlx5_{i}", pci=f"0000:{0x47 + i:02x}:00.0",
                      ports=(port(f"mlx5_{i}", layer=ETH, state=state, phys=phys),))
               for i in range(2)]
    return replace(host(*devices, when=when), facts={PORT_OPTICS: facts})


def facts(rx0: float = -2.0, temp0: float = 40.0, rate: str = "100",
          **kw: Any) -> dict[str, PortOptics]:
    return {"mlx5_0_1": PortOptics("eth0", module(rate, rx_power=rx0, temperature=temp0)),
            "mlx5_1_1": PortOptics("eth1", module(rate))}


def optics_events(result: Any) -> list[HealthEvent]:
    return [e for e in result.events if e.error_code[:1]
            and e.error_code[0].startswith("optics_")]


def brief(events: list[HealthEvent]) -> list[tuple[str, str, bool, bool, str]]:
    return [(e.check_name, e.error_code[0], e.is_fatal, e.is_healthy,
             dict(e.entities).get("NIC", "")) for e in events]


def test_rx_power_below_the_low_warning_is_one_event_and_one_recovery() -> None:
    r = Runner(config())
    assert not optics_events(r.poll(snap(0, facts())))
    low = optics_events(r.poll(snap(60, facts(rx0=-11.0))))
    assert brief(low) == [("EthernetDegradationCheck", "optics_rx_power", False, False,
                           "mlx5_0")]
    assert low[0].recommended_action == "NONE"
    assert low[0].message == (
        "RoCE port mlx5_0 port 1 (eth0): module Rx power -11.00 dBm on lane 1, 2, 3, 4 is "
        "below the module's low warning threshold (-10.00 dBm), the module flags it too")
    assert not optics_events(r.poll(snap(120, facts(rx0=-11.2))))  # said once
    back = optics_events(r.poll(snap(180, facts())))
    assert brief(back) == [("EthernetDegradationCheck", "optics_rx_power", False, True,
                            "mlx5_0")]
    assert not optics_events(r.poll(snap(240, facts())))


def test_rx_power_below_the_low_alarm_on_an_active_port_is_a_degradation() -> None:
    r = Runner(config())
    r.poll(snap(0, facts()))
    warn = optics_events(r.poll(snap(60, facts(rx0=-11.0))))
    assert [e.is_fatal for e in warn] == [False]
    alarm = optics_events(r.poll(snap(120, facts(rx0=-20.0))))
    assert brief(alarm) == [
        ("EthernetDegradationCheck", "optics_rx_power", False, True, "mlx5_0"),  # leaves warn
        ("EthernetDegradationCheck", "optics_rx_power", False, False, "mlx5_0")]
    assert alarm[1].recommended_action == "NONE"  # optics predict: never REPLACE_VM
    assert "low alarm threshold (-13.00 dBm)" in alarm[1].message
    back = optics_events(r.poll(snap(180, facts())))
    assert brief(back) == [("EthernetDegradationCheck", "optics_rx_power", False, True,
                            "mlx5_0")]


def test_a_fibre_cut_is_one_replace_vm_the_port_states() -> None:
    r = Runner(config())
    r.poll(snap(0, facts()))
    cut = r.poll(snap(60, facts(rx0=-40.0), state="1: DOWN", phys="3: Disabled"))
    fatal = [e for e in cut.events if e.is_fatal]  # both ports of the snapshot went down
    assert sorted((dict(e.entities)["NIC"], e.error_code[0], e.recommended_action)
                  for e in fatal) == [("mlx5_0", "port_state", "REPLACE_VM"),
                                      ("mlx5_1", "port_state", "REPLACE_VM")]
    assert not optics_events(cut)  # not ACTIVE: the optics add nothing
    assert not optics_events(r.poll(snap(120, facts(rx0=-40.0), state="1: DOWN",
                                         phys="3: Disabled")))


def test_temperature_warning_and_alarm_are_degradations() -> None:
    r = Runner(config())
    r.poll(snap(0, facts()))
    warm = optics_events(r.poll(snap(60, facts(temp0=72.0))))
    assert brief(warm) == [("EthernetDegradationCheck", "optics_temperature", False, False,
                            "mlx5_0")]
    hot = optics_events(r.poll(snap(120, facts(temp0=80.0))))
    assert [(e.is_fatal, e.is_healthy) for e in hot] == [(False, True), (False, False)]
    assert "high alarm" in hot[1].message
    assert [e.is_healthy for e in optics_events(r.poll(snap(180, facts())))] == [True]


def test_rx_power_falling_from_its_own_baseline() -> None:
    r = Runner(config())
    r.poll(snap(0, facts()))
    drop = optics_events(r.poll(snap(60, facts(rx0=-6.0))))  # within the module's limits
    assert brief(drop) == [("EthernetDegradationCheck", "optics_rx_power_drop", False, False,
                            "mlx5_0")]
    assert "fell 4.0 dB below its baseline" in drop[0].message
    r.restart()  # the baseline survives a restart
    assert not optics_events(r.poll(snap(120, facts(rx0=-6.0))))
    back = optics_events(r.poll(snap(180, facts(rx0=-2.5))))
    assert [(e.error_code[0], e.is_healthy) for e in back] == [("optics_rx_power_drop", True)]
    assert back[0].message == ("RoCE port mlx5_0 port 1 (eth0): module Rx power is back "
                               "within 3 dB of its baseline on every lane")


def test_the_drop_is_off_at_zero_and_a_threshold_report_replaces_it() -> None:
    r = Runner(config(opticsRxPowerDrop=0))
    r.poll(snap(0, facts()))
    assert not optics_events(r.poll(snap(60, facts(rx0=-8.0))))
    r = Runner(config())
    r.poll(snap(0, facts()))
    assert [e.error_code[0] for e in optics_events(r.poll(snap(60, facts(rx0=-11.0))))] == [
        "optics_rx_power"]


def test_a_cmis_module_is_judged_alike() -> None:
    r = Runner(config())
    r.poll(snap(0, facts(rate="400")))
    low = optics_events(r.poll(snap(60, facts(rx0=-11.0, rate="400"))))
    assert brief(low) == [("EthernetDegradationCheck", "optics_rx_power", False, False,
                           "mlx5_0")]


def test_ports_without_module_or_thresholds_stay_quiet() -> None:
    r = Runner(config())
    bare = replace(module(rx_power=-30.0, temperature=90.0), thresholds={})
    quiet = {"mlx5_0_1": PortOptics("eth0", reason="no module plugged in"),
             "mlx5_1_1": PortOptics("eth1", bare)}
    assert not optics_events(r.poll(snap(0, quiet)))
    assert not optics_events(r.poll(snap(60, quiet)))
    assert not optics_events(r.poll(snap(120, {})))


def test_what_was_said_is_held_while_the_module_cannot_be_read() -> None:
    r = Runner(config())
    r.poll(snap(0, facts()))
    assert optics_events(r.poll(snap(60, facts(rx0=-11.0))))
    gone = {"mlx5_0_1": PortOptics("eth0", reason="no module plugged in, or it does not "
                                               "answer (EIO)")}
    assert not optics_events(r.poll(snap(120, gone)))
    section = r.state.section(OPTICS)
    assert list(section.records) == ["mlx5_0_1/rx_power"]


def test_nothing_is_judged_on_a_port_that_is_not_active() -> None:
    r = Runner(config())
    down = {"state": "1: DOWN", "phys": "2: Polling"}
    r.poll(snap(0, facts(), **down))  # down at first sight, no evidence: uncabled
    assert not optics_events(r.poll(snap(60, facts(rx0=-30.0, temp0=80.0), **down)))
    assert not optics_events(r.poll(snap(120, facts(rx0=-30.0, temp0=80.0), **down)))


def test_the_family_runs_at_its_cadence_and_off_at_zero() -> None:
    r = Runner(config())
    r.poll(snap(0, facts()))
    assert not optics_events(r.poll(snap(30, facts(rx0=-11.0))))  # not due
    assert optics_events(r.poll(snap(60, facts(rx0=-11.0))))
    r = Runner(config(opticsInterval=0))
    r.poll(snap(0, facts()))
    assert not optics_events(r.poll(snap(60, facts(rx0=-11.0))))


@pytest.mark.parametrize("value, expected", [
    (3.0, "high alarm"), (-1.0, "low alarm"), (2.5, "high warning"), (0.5, "low warning"),
    (1.0, "ok"), (2.0, "ok"), (0.0, "low warning")])  # on a threshold: not beyond it
def test_levels(value: float, expected: str) -> None:
    assert level(value, Thresholds(2.5, 0.0, 2.0, 1.0)) == expected


def test_judge_names_the_worst_lane_and_only_lanes_at_that_level() -> None:
    diag = module()
    lanes = {RX_POWER: (0.631, 0.02, 0.08, None)}  # -2, -17 (alarm), -10.97 (warning), -
    found = judge(replace(diag, lanes={**diag.lanes, **lanes}), {}, 3)
    assert found[RX_POWER].level == "low alarm" and not found[RX_POWER].fatal
    assert "on lane 2 is below" in found[RX_POWER].detail


def test_fields_and_series_from_the_picture() -> None:
    r = Runner(config())
    r.poll(snap(0, facts()))
    result = r.poll(snap(60, facts(rx0=-11.0)))
    picture = result.pictures[OPTICS.id]
    section: OpticsSection = r.state.section(OPTICS)
    fields: dict[str, Any] = dict(OPTICS.port_fields(section, picture, ("mlx5_0", 1)))
    assert fields["module_netdev"] == "eth0" and fields["module_spec"] == "SFF-8636"
    assert fields["module_lanes"] == [
        {"lane": str(n), "rx_power_dbm": "-11.0", "tx_power_dbm": "-1.0", "tx_bias_ma": "7.5"}
        for n in range(1, 5)]
    assert fields["module_temperature_c"] == 40.0
    assert fields["optics_alerts"] == ["rx_power: low warning"]
    series = {s.name: s for s in OPTICS.series(section, picture)}
    assert dict(series["module_tx_bias_amperes"].samples)[
        ("mlx5_0", "1", "eth0", "1")] == pytest.approx(0.0075)
    rx = dict(series["module_rx_power_dbm"].samples)
    assert rx[("mlx5_0", "1", "eth0", "1")] == pytest.approx(-11.0, abs=0.01)
    alerts = dict(series["module_alert"].samples)
    assert alerts[("mlx5_0", "1", "rx_power")] == 1.0
    assert sum(alerts.values()) == 1.0 and len(alerts) == 2 * 6  # 2 ports, 6 monitors
    none: Optional[Any] = OPTICS.port_fields(section, {}, ("mlx5_9", 1))
    assert none == {}


def test_a_renamed_device_keeps_its_records_and_baselines() -> None:
    r = Runner(config())
    r.poll(snap(0, facts()))
    r.poll(snap(60, facts(rx0=-11.0)))
    section = OPTICS.rename(r.state.section(OPTICS), {"mlx5_0": "mlx5_5"}, at(90))
    assert list(section.records) == ["mlx5_5_1/rx_power"]
    assert section.records["mlx5_5_1/rx_power"].device == "mlx5_5"
    assert "mlx5_5_1/0" in section.baselines and "mlx5_0_1/0" not in section.baselines


def kind_module(kind: str, rate: str = "400", **lane_readings: float) -> ModuleDiagnostics:
    """A module of one of the simulator's kinds (sim/optics.py), parsed by the real parser;
    ``lane_readings``: ``rx5=-20`` sets lane 5's Rx power."""
    count = 8 if kind == "twin-port" else 4
    lanes = [dict(sim_optics.HEALTHY) for _ in range(count)]
    for name, value in lane_readings.items():
        lanes[int(name[2:]) - 1]["rx_power"] = value
    if kind == "passive-dac":
        lanes = [dict(v, rx_power=-40.0, tx_bias=0.0, tx_power=-40.0) for v in lanes]
    if kind == "passive-dac" and rate != "400":
        pages = sim_optics.sff8636_pages(dict(sim_optics.HEALTHY, temperature=0.0,
                                              voltage=0.0), lanes, "DAC1", copper=True)
    else:
        pages = sim_optics.cmis_pages(dict(sim_optics.HEALTHY), lanes, "TWIN1", kind)
    upper = {p: (data[128:] if p == 0 else data) for p, data in pages.items()}
    parsed = module_pages.parse(pages[0][:128], upper)
    assert parsed is not None
    return parsed


@pytest.mark.parametrize("rate", ["100", "400"])
def test_a_passive_copper_cable_is_not_judged_and_shows_no_reading(rate: str) -> None:
    """A DAC reads 0 mW and 0 mA (no laser, no photodiode): the SFF-8636 one has paged
    memory with Rx power thresholds on page 03h; its transmitter technology says copper."""
    dac = kind_module("passive-dac", rate)
    assert dac.media == "passive copper" and not dac.lanes and dac.temperature is None
    r = Runner(config())
    both = {"mlx5_0_1": PortOptics("eth0", dac), "mlx5_1_1": PortOptics("eth1", dac)}
    assert not optics_events(r.poll(snap(0, both)))
    result = r.poll(snap(60, both))
    assert not optics_events(result) and not [e for e in result.events if e.is_fatal]
    fields = dict(OPTICS.port_fields(r.state.section(OPTICS), result.pictures[OPTICS.id],
                                     ("mlx5_0", 1)))
    assert fields["module_media"] == "passive copper" and fields["module_lanes"] == []
    assert "module_temperature_c" not in fields and "module_voltage_v" not in fields
    series = {s.name: s for s in OPTICS.series(r.state.section(OPTICS),
                                               result.pictures[OPTICS.id])}
    for name in ("module_temperature_celsius", "module_rx_power_dbm", "module_tx_bias_amperes",
                 "module_alert"):  # nothing it does not measure, not even an alert of 0
        assert not series[name].samples, name


@pytest.mark.parametrize("kind", ["lane-count-0", "lane-count-15", "lane-count-255"])
def test_a_bad_application_lane_count_reads_only_the_live_lanes(kind: str) -> None:
    module4 = kind_module(kind)
    assert len(module4.lanes[RX_POWER]) == 4  # lanes 5-8: data path deactivated
    r = Runner(config())
    one = {"mlx5_0_1": PortOptics("eth0", module4), "mlx5_1_1": PortOptics("eth1", module4)}
    assert not optics_events(r.poll(snap(0, one)))
    assert not optics_events(r.poll(snap(60, one)))


def test_lanes_outside_the_link_reading_0_with_the_modules_los_clear_are_not_judged() -> None:
    """Even were lanes 5-8 read (no data path state known), 0 mW with the module's own Rx
    LOS flag clear is a monitor that does not measure, not darkness."""
    module4 = kind_module("lane-count-255")
    lanes = {**module4.lanes, RX_POWER: (*module4.lanes[RX_POWER], 0.0, 0.0, 0.0, 0.0)}
    wide = replace(module4, lanes=lanes, rx_los=(False,) * 8)
    assert judge(wide, {}, 3)[RX_POWER].level == "ok"
    dark = replace(wide, rx_los=(False,) * 4 + (True,) * 4)
    assert judge(dark, {}, 3)[RX_POWER].level == "low alarm"


def test_a_twin_port_module_judges_each_lane_once_for_its_own_port() -> None:
    twin = kind_module("twin-port", rx5=-20.0, rx6=-20.0)
    assert twin.data_paths == ((0, 1, 2, 3), (4, 5, 6, 7))
    r = Runner(config())
    shared = {"mlx5_0_1": PortOptics("eth0", twin), "mlx5_1_1": PortOptics("eth1", twin)}
    events = optics_events(r.poll(snap(0, shared)))
    assert brief(events) == [("EthernetDegradationCheck", "optics_rx_power", False, False,
                              "mlx5_1")]
    assert "on lane 5, 6 is below the module's low alarm threshold" in events[0].message
    picture = r.poll(snap(60, shared)).pictures[OPTICS.id]
    section = r.state.section(OPTICS)
    first: dict[str, Any] = dict(OPTICS.port_fields(section, picture, ("mlx5_0", 1)))
    second: dict[str, Any] = dict(OPTICS.port_fields(section, picture, ("mlx5_1", 1)))
    assert [lane["lane"] for lane in first["module_lanes"]] == ["1", "2", "3", "4"]
    assert [lane["lane"] for lane in second["module_lanes"]] == ["5", "6", "7", "8"]
    rx = dict(next(s for s in OPTICS.series(section, picture)
                   if s.name == "module_rx_power_dbm").samples)
    assert sorted(k[3] for k in rx if k[0] == "mlx5_1") == ["5", "6", "7", "8"]
    assert len(rx) == 8  # every live lane once


def test_a_flat_memory_module_shows_no_temperature_and_is_not_judged() -> None:
    flat = kind_module("flat")
    assert flat.flat and flat.temperature is None and not flat.lanes
    r = Runner(config())
    both = {"mlx5_0_1": PortOptics("eth0", flat), "mlx5_1_1": PortOptics("eth1", flat)}
    result = r.poll(snap(0, both))
    assert not optics_events(result)
    series = {s.name: s for s in OPTICS.series(r.state.section(OPTICS),
                                               result.pictures[OPTICS.id])}
    assert not series["module_temperature_celsius"].samples
    assert not series["module_rx_power_dbm"].samples


def test_the_rx_baseline_follows_the_module() -> None:
    def with_serial(serial: str, rx: float) -> dict[str, PortOptics]:
        diag = replace(module(rx_power=rx), identity=("V", "P", serial))
        return {"mlx5_0_1": PortOptics("eth0", diag), "mlx5_1_1": PortOptics("eth1", module())}

    r = Runner(config())
    r.poll(snap(0, with_serial("A1", -2.0)))
    drop = optics_events(r.poll(snap(60, with_serial("A1", -6.0))))
    assert [e.error_code[0] for e in drop] == ["optics_rx_power_drop"]
    swapped = optics_events(r.poll(snap(120, with_serial("B2", -6.0))))  # an in-spec new one
    assert [(e.error_code[0], e.is_healthy) for e in swapped] == [("optics_rx_power_drop", True)]
    assert "a different module is plugged in (V P, serial B2)" in swapped[0].message
    assert r.state.section(OPTICS).baselines["mlx5_0_1/0"] == pytest.approx(-6.0, abs=0.01)
    assert not optics_events(r.poll(snap(180, with_serial("B2", -6.0))))


def test_a_twin_module_without_a_serial_number_is_shared_only_within_one_card() -> None:
    """FBOSS's twin-port fixtures have no serial number: two functions of one PCI slot
    reading it share it; two cards reading modules alike do not (each is its own)."""
    twin = replace(kind_module("twin-port", rx5=-20.0), identity=("FACETEST", "2X400G", ""))
    shared = {"mlx5_0_1": PortOptics("eth0", twin), "mlx5_1_1": PortOptics("eth1", twin)}

    def one_card(when: float) -> Any:
        devices = [device(f"mlx5_{i}", pci=f"0000:47:00.{i}",
                          ports=(port(f"mlx5_{i}", layer=ETH),)) for i in range(2)]
        return replace(host(*devices, when=when), facts={PORT_OPTICS: shared})

    events = optics_events(Runner(config()).poll(one_card(0)))
    assert [dict(e.entities)["NIC"] for e in events] == ["mlx5_1"]
    apart = optics_events(Runner(config()).poll(snap(0, shared)))  # slots 47:00 and 48:00
    assert sorted(dict(e.entities)["NIC"] for e in apart) == ["mlx5_0", "mlx5_1"]


def test_a_zero_the_module_does_not_flag_is_not_measured() -> None:
    """Tx bias of exactly 0 on a lane (a laser switched off) with the module's own Tx bias
    flags clear is not judged; flagged, it is (a latched flag sets again while it lasts)."""
    diag = kind_module("lane-count-0")
    bias = (0.0, *diag.lanes[TX_BIAS][1:])
    off = replace(diag, lanes={**diag.lanes, TX_BIAS: bias},
                  flags={**diag.flags, TX_BIAS: ("ok",) * 4})
    assert "tx_bias" not in {m for m, f in judge(off, {}, 3).items() if f.level != "ok"}
    flagged = replace(off, flags={**off.flags, TX_BIAS: ("low alarm", "ok", "ok", "ok")})
    found = judge(flagged, {}, 3)["tx_bias"]
    assert found.level == "low alarm" and not found.fatal
    assert found.detail.endswith("the module flags it too")


def test_a_fatal_record_of_the_earlier_version_is_said_again_as_a_degradation() -> None:
    """A state file of the version that made Rx power below the low alarm fatal (and had no
    ``optics_modules``) loads; its fatal record is closed and re-opened, non-fatal."""
    r = Runner(config())
    r.poll(snap(0, facts()))
    r.poll(snap(60, facts(rx0=-20.0)))
    data = r.state.to_json()
    record = data["optics_open"]["mlx5_0_1/rx_power"]
    record.update(check_name="EthernetStateCheck", is_fatal=True)
    data.pop("optics_modules", None)
    r.state = type(r.state).from_json(data)
    again = optics_events(r.poll(snap(120, facts(rx0=-20.0))))
    assert brief(again) == [
        ("EthernetStateCheck", "optics_rx_power", False, True, "mlx5_0"),
        ("EthernetDegradationCheck", "optics_rx_power", False, False, "mlx5_0")]
    assert not optics_events(r.poll(snap(180, facts(rx0=-20.0))))
