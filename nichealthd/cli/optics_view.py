"""``nichealthctl show optics``: each port's pluggable module, from the port records.

The optics family puts its readings in the port records (``module_*`` fields and
``optics_alerts``, core/checks/optics.py ``port_fields``); this view only picks them out, so
it reads the same records as ``show ports`` over D-Bus or varlink. Over D-Bus the lanes
travel as string maps (``aa{ss}``): every value is taken as text or a number alike.
"""

from __future__ import annotations

from typing import Mapping, Optional, Sequence

from ..core.jsontypes import JsonRecord
from .format import Columns, Style, items, natural_key, port_name, render_table

MODULE_KEYS = ("module_netdev", "module_status", "module_spec", "module_media",
               "module_memory", "module_identity", "module_temperature_c", "module_voltage_v",
               "module_lanes", "optics_alerts")


def optics_records(records: Sequence[JsonRecord]) -> list[dict[str, object]]:
    """``--json``: the ports with a module fact, their device, port and module fields."""
    return [{"device": r.get("device"), "port": r.get("port"),
             **{k: r[k] for k in MODULE_KEYS if k in r}}
            for r in sorted(records, key=natural_key) if "module_netdev" in r]


def _number(value: object) -> Optional[float]:
    if not isinstance(value, (int, float, str)):
        return None
    try:
        return float(value)
    except ValueError:
        return None


def _lanes(record: JsonRecord, name: str) -> list[float]:
    """One reading of every lane that has it (``module_lanes``)."""
    lanes = items(record.get("module_lanes"))
    return [n for n in (_number(lane.get(name)) for lane in lanes if isinstance(lane, Mapping))
            if n is not None]


def _cell(value: Optional[float], digits: int) -> str:
    return "-" if value is None else f"{value:.{digits}f}"


def _unmonitored(record: JsonRecord) -> str:
    """Why a healthy module shows no readings: a copper cable or a flat memory measures
    none (``module_media``, ``module_memory``); empty for a module that measures."""
    media, memory = record.get("module_media"), record.get("module_memory")
    if media in ("passive copper", "active copper") and not _lanes(record, "rx_power_dbm"):
        return f" ({media})"
    return " (flat memory)" if memory == "flat" else ""


def optics_table(records: Sequence[JsonRecord], style: Style, width: int = 80) -> list[str]:
    """One row per port with a module fact: TEMP (°C), VCC (V), the weakest Rx and Tx lane
    (RX, TX: dBm), the highest bias (BIAS: mA), and STATE: the open reports, ``ok`` (with
    why a copper cable or a flat-memory module shows no readings: ``-`` is "not measured",
    never 0), or why there is nothing to show. STATE is cut to 22 characters first, then
    NETDEV, to stay within ``width``."""
    headers = ("PORT", "NETDEV", "TEMP", "VCC", "RX", "TX", "BIAS", "STATE")
    rows = []
    for r in optics_records(records):
        rx, tx, bias = (_lanes(r, k) for k in ("rx_power_dbm", "tx_power_dbm", "tx_bias_ma"))
        alerts = [str(a) for a in items(r.get("optics_alerts"))]
        status = str(r.get("module_status", ""))
        state = ", ".join(alerts) if alerts else ("ok" + _unmonitored(r) if status == "ok"
                                                  else f"n/a: {status}")
        rows.append((port_name(r), str(r.get("module_netdev", "-")),
                     _cell(_number(r.get("module_temperature_c")), 1),
                     _cell(_number(r.get("module_voltage_v")), 2),
                     _cell(min(rx) if rx else None, 1), _cell(min(tx) if tx else None, 1),
                     _cell(max(bias) if bias else None, 1), state))
    if not rows:
        return ["no module diagnostics known (no port with a netdev, or the optics check is "
                "off or has not run yet)"]

    def colour(col: int, text: str, padded: str) -> str:
        if col == 7 and not text.startswith(("ok", "n/a")):
            return style.paint(padded, "yellow")  # optics predict: never a fatal colour
        return padded

    return render_table(headers, rows, width, Columns(shrink=((7, 22), (1, 8), (7, 12)),
                                                      right=(2, 3, 4, 5, 6), colour=colour))
