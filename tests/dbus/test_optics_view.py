"""``nichealthctl show optics`` from port records as the family's ``port_fields`` make them
(varlink: numbers; D-Bus: lists as strings), in 80 columns."""

from __future__ import annotations

from typing import Any

from nichealthd.cli.format import Style
from nichealthd.cli.optics_view import optics_records, optics_table


def record(device: str, **fields: Any) -> dict[str, Any]:
    return {"device": device, "port": 1, "link_layer": "Ethernet", "health": "healthy",
            **fields}


WEAK = record("mlx5_1", module_netdev="enp36s0f0np0", module_status="ok",
              module_spec="CMIS", module_temperature_c=40.0, module_voltage_v=3.3,
              module_lanes=[{"lane": n, "rx_power_dbm": -11.0 if n == 1 else -2.0,
                             "tx_power_dbm": -1.0, "tx_bias_ma": 7.5} for n in range(1, 9)],
              optics_alerts=["rx_power: low warning"])
OVER_DBUS = record("mlx5_2", module_netdev="enp36s0f1np1", module_status="ok",
                   module_temperature_c=41.5, module_voltage_v=3.29,
                   module_lanes=[{"lane": "1", "rx_power_dbm": "-2.5", "tx_power_dbm": "-1.0",
                                  "tx_bias_ma": "7.5"},
                                 {"lane": "2", "tx_power_dbm": "-1.0", "tx_bias_ma": "8.25"}],
                   optics_alerts=[])
REFUSED = record("mlx5_10", module_netdev="enp100s0f0np0",
                 module_status="the kernel refuses module reads without CAP_NET_ADMIN "
                               "(Operation not permitted); install ...")
NO_MODULE = record("mlx5_0", link_layer="InfiniBand")


def test_one_row_per_port_with_a_module_fact_in_80_columns() -> None:
    lines = optics_table([REFUSED, NO_MODULE, OVER_DBUS, WEAK], Style(False))
    assert lines[0].split() == ["PORT", "NETDEV", "TEMP", "VCC", "RX", "TX", "BIAS", "STATE"]
    assert [line.split()[0] for line in lines[1:]] == ["mlx5_1/1", "mlx5_2/1", "mlx5_10/1"]
    assert all(len(line) <= 80 for line in lines), lines
    weak, dbus, refused = lines[1:]
    assert weak.split()[2:7] == ["40.0", "3.30", "-11.0", "-1.0", "7.5"]
    assert weak.endswith("rx_power: low warning")
    assert dbus.split()[4] == "-2.5" and dbus.split()[6] == "8.2" and dbus.endswith("ok")
    assert "n/a: the kernel refuse" in refused and refused.split()[2:7] == ["-"] * 5


def test_json_keeps_every_lane_and_only_ports_with_a_module_fact() -> None:
    out = optics_records([NO_MODULE, WEAK])
    assert out == [{"device": "mlx5_1", "port": 1, **{k: v for k, v in WEAK.items()
                                                      if k.startswith(("module_", "optics_"))}}]


def test_nothing_to_show_is_one_line() -> None:
    assert optics_table([NO_MODULE], Style(False)) == [
        "no module diagnostics known (no port with a netdev, or the optics check is off or "
        "has not run yet)"]


def test_a_copper_cable_and_a_flat_module_say_why_they_show_no_readings() -> None:
    dac = record("mlx5_3", module_netdev="enp45s0f0np0", module_status="ok",
                 module_spec="SFF-8636", module_media="passive copper", module_lanes=[],
                 optics_alerts=[])
    flat = record("mlx5_4", module_netdev="enp45s0f1np1", module_status="ok",
                  module_spec="CMIS", module_media="optical", module_memory="flat",
                  module_lanes=[], optics_alerts=[])
    rows = optics_table([dac, flat], Style(False))[1:]
    assert rows[0].split()[2:7] == ["-"] * 5 and rows[0].endswith("ok (passive copper)")
    assert rows[1].split()[2:7] == ["-"] * 5 and rows[1].endswith("ok (flat memory)")
