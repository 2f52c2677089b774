"""Human output of ``nichealthctl``: tables that fit the terminal (80 columns when piped),
colour only on a TTY without ``NO_COLOR``, and the one-line texts of each record kind.

Pure functions of plain records (the dicts of :mod:`nichealthd.core.views` as they come off the
bus), so they are tested without a bus.
"""

from __future__ import annotations

import os
import re
import shutil
import textwrap
from datetime import datetime, timedelta
from typing import IO, Callable, Mapping, NamedTuple, Optional, Sequence, Union

from ..core.events import local_clock, parse_timestamp
from ..core.jsontypes import JsonRecord

ELLIPSIS = "…"
_RATE = re.compile(r"^\s*(\d+(?:\.\d+)?)\s*Gb/sec")
_LINK = {"InfiniBand": "IB", "Ethernet": "ETH"}
_COLOURS = {"green": "32", "yellow": "33", "red": "1;31", "dim": "2", "bold": "1"}
HEALTH_COLOUR = {"healthy": "green", "degraded": "yellow", "fatal": "red",
                 "uncabled": "dim", "unknown": "yellow"}


class Style:
    """ANSI colour when ``enabled``; otherwise every method returns the text unchanged."""

    def __init__(self, enabled: bool) -> None:
        self.enabled = enabled

    @classmethod
    def for_stream(cls, stream: IO[str]) -> Style:
        """Colour only for a terminal, never with NO_COLOR set (https://no-color.org) or
        TERM=dumb."""
        tty = hasattr(stream, "isatty") and stream.isatty()
        return cls(bool(tty) and "NO_COLOR" not in os.environ
                   and os.environ.get("TERM") != "dumb")

    def paint(self, text: str, colour: Optional[str]) -> str:
        if not self.enabled or not colour or colour not in _COLOURS:
            return text
        return f"\033[{_COLOURS[colour]}m{text}\033[0m"

    def health(self, text: str, padded: Optional[str] = None) -> str:
        return self.paint(padded if padded is not None else text,
                          HEALTH_COLOUR.get(text.strip().lower()))


def output_width(stream: IO[str]) -> int:
    """The terminal's width on a TTY; 80 when piped (predictable for scripts)."""
    if hasattr(stream, "isatty") and stream.isatty():
        return max(shutil.get_terminal_size((80, 24)).columns, 40)
    return 80


def fit(text: str, width: int) -> str:
    return text if len(text) <= width else text[:max(width - 1, 0)] + ELLIPSIS


GAP = 2  # spaces between two columns


class Columns(NamedTuple):
    """How a table's columns give way and look: ``shrink``, the columns cut with an ellipsis
    when the table is too wide (in that order; ``(col, floor)`` to stop a column at
    ``floor`` characters), ``right``, those aligned right, and ``colour(col, cell, padded)``,
    which may decorate a padded cell (after sizing, so escapes never count as width)."""

    shrink: Sequence[Union[int, tuple[int, int]]] = ()
    right: Sequence[int] = ()
    colour: Optional[Callable[[int, str, str], str]] = None


PLAIN = Columns()


def render_table(headers: Sequence[str], rows: Sequence[Sequence[str]], width: int = 80,
                 columns: Columns = PLAIN) -> list[str]:
    """Columns sized to their content, cut as ``columns`` says when the table is wider than
    ``width``."""
    shrink, right, colour = columns
    gap = GAP
    widths = [len(h) for h in headers]
    for row in rows:
        for i, cell in enumerate(row):
            widths[i] = max(widths[i], len(cell))
    excess = sum(widths) + gap * (len(widths) - 1) - width
    for entry in shrink:
        if excess <= 0:
            break
        col, floor = entry if isinstance(entry, tuple) else (entry, 0)
        floor = max(len(headers[col]), 4, floor)
        cut = min(excess, widths[col] - floor)
        if cut > 0:
            widths[col] -= cut
            excess -= cut
    for entry in shrink:  # still too wide: the same columns below their floors (headers too)
        if excess <= 0:
            break
        col = entry[0] if isinstance(entry, tuple) else entry
        cut = min(excess, widths[col] - 2)
        if cut > 0:
            widths[col] -= cut
            excess -= cut
    lines = []
    for r, row in enumerate([list(headers), *[list(r) for r in rows]]):
        cells = []
        for i, cell in enumerate(row):
            text = fit(cell, widths[i])
            padded = text.rjust(widths[i]) if i in right else text.ljust(widths[i])
            if r > 0 and colour is not None:
                padded = colour(i, text, padded)
            cells.append(padded)
        lines.append((" " * gap).join(cells).rstrip())
    return lines


# ------------------------------------------------------------ reading a record
# The records are the daemon's answers as decoded (JsonRecord: values are ``object``); these
# read a field as the text or number a cell needs, and a wrong type is a TypeError, as the
# int()/float() they stand for raise it.

def text(record: JsonRecord, key: str, default: str = "-") -> str:
    """A text field, ``default`` when absent or empty."""
    value = record.get(key)
    return str(value) if value else default


def as_int(value: object) -> int:
    """``int(value)`` of a number (or digits) as a record holds it."""
    if isinstance(value, (int, float, str)):
        return int(value)
    raise TypeError(f"not a number: {type(value).__name__}")


def as_float(value: object) -> float:
    """``float(value)`` of a number as a record holds it."""
    if isinstance(value, (int, float, str)):
        return float(value)
    raise TypeError(f"not a number: {type(value).__name__}")


def items(value: object) -> list[object]:
    """A list field (``[]`` when absent or empty)."""
    if not value:
        return []
    if isinstance(value, (list, tuple)):
        return list(value)
    raise TypeError(f"not a list: {type(value).__name__}")


def record_list(value: object) -> list[JsonRecord]:
    """A list of records (``pcie_hops``), ``[]`` when absent or empty."""
    found = items(value)
    for item in found:
        if not isinstance(item, Mapping):
            raise TypeError(f"not a record: {type(item).__name__}")
    return [item for item in found if isinstance(item, Mapping)]


# ---------------------------------------------------------------------- cells

def natural_key(record: JsonRecord) -> tuple[tuple[Union[int, str], ...], int]:
    """mlx5_2 before mlx5_10 (the kernel's numbering, not the alphabet's)."""
    parts = re.split(r"(\d+)", str(record.get("device", "")))
    return (tuple(int(p) if p.isdigit() else p for p in parts), as_int(record.get("port", 0)))


def port_name(record: JsonRecord) -> str:
    return f"{record.get('device', '?')}/{record.get('port', '?')}"


def short_rate(rate: str) -> str:
    """``400 Gb/sec (4X NDR)`` -> ``400G`` (the table must leave room for REASON)."""
    match = _RATE.match(rate or "")
    return f"{match.group(1)}G" if match else (rate or "-")


def short_link(link_layer: str) -> str:
    return _LINK.get(link_layer, link_layer or "-")


def health_column(record: JsonRecord) -> str:
    """What the HEALTH column says: reported health, ``uncabled``, or ``-`` (not monitored)."""
    if not record.get("monitored"):
        return "-"
    health = text(record, "health", "unknown")
    return "uncabled" if health == "suppressed" else health


def counter_state(record: JsonRecord) -> str:
    if record.get("value") is None:
        return "absent"
    if record.get("breached"):
        return "FATAL" if record.get("fatal") else "breached"
    if record.get("saturated"):
        return "saturated"
    return "ok"


def _unit(record: JsonRecord) -> str:
    return {"second": "/s", "minute": "/min", "hour": "/h"}.get(str(record.get("unit", "")), "")


def counter_last(record: JsonRecord) -> str:
    """Last change: the delta of a delta counter, the rate of a velocity counter."""
    if record.get("type") == "velocity":
        rate = record.get("rate")
        return "-" if rate is None else f"{rate:.3g}{_unit(record)}"
    delta = record.get("delta")
    return "-" if delta is None else f"+{delta}"


def counter_limit(record: JsonRecord) -> str:
    threshold = record.get("threshold", 0)
    text = f"{threshold:g}" if isinstance(threshold, float) else str(threshold)
    return f">{text}{_unit(record)}" if record.get("type") == "velocity" else f">{text}"


# ---------------------------------------------------------------------- tables

def port_reason(record: JsonRecord) -> str:
    """Why a monitored port is not healthy (``link_downed breached``), ``-`` when nothing."""
    if not record.get("monitored"):
        return "-"
    return ", ".join(str(r) for r in items(record.get("reasons"))) or "-"


def count_cell(record: JsonRecord, key: str) -> str:
    """A per-port count (flaps in the window, blips held down): ``-`` for none."""
    value = record.get(key) or 0
    return str(value) if value else "-"


def rate_cell(record: JsonRecord) -> str:
    """``400G``; ``200G!`` when the port runs below its peers (REASON says at what rate)."""
    if not record.get("present", True):
        return "-"
    return short_rate(text(record, "rate", "")) + ("!" if record.get("rate_degraded") else "")


REASON_ROOM = 16  # characters of REASON the ports table keeps before it leaves columns out
# The room a fault may need in the ports table ("Disabled", "degraded", a reason): which
# columns are left out is decided with it, whatever the ports hold now.
FAULT_ROOM = {"PHYS": len("Disabled"), "HEALTH": len("degraded"), "SUSPECT": len("unknown"),
              "REASON": REASON_ROOM}


def ports_table(records: Sequence[JsonRecord], style: Style, width: int = 80) -> list[str]:
    """Every port with its health and its reasons (the daemon's one health model); why
    a port is not monitored below the table. FLAPS counts down/up cycles in the flap window,
    BLIPS the unhealthy states that recovered within the hold-down; a rate below the port's
    peers is marked ``!``. SUSPECT names the part to look at first of an unhealthy port
    (``-`` on a healthy one). When the table is wider than ``width``, NETDEV is left out, then
    BLIPS and FLAPS (first those with nothing to show; ``--wide``/``--json`` show them all),
    then cells are cut. REASON, PHYS and HEALTH count with the room a fault needs
    (FAULT_ROOM) whatever they hold, so the columns do not change when a port goes down: the
    tables before and after it (the demo's) have the same ones."""
    headers = ["PORT", "LINK", "ROLE", "STATE", "PHYS", "RATE", "FLAPS", "BLIPS", "NETDEV",
               "HEALTH", "SUSPECT", "REASON"]
    records = sorted(records, key=natural_key)
    # LINK: EFA for an EFA port (its link layer reads "Unknown").
    rows = [[port_name(r), "EFA" if r.get("adapter") == "efa" else short_link(
                 text(r, "link_layer", "")), text(r, "role"),
             text(r, "state", "?"), text(r, "phys_state", "?"), rate_cell(r),
             count_cell(r, "flaps"), count_cell(r, "blips"),
             text(r, "netdev"), health_column(r), text(r, "suspect"), port_reason(r)]
            for r in records]

    def wider() -> bool:  # than ``width`` with the room of FAULT_ROOM in its columns
        room = [[cell.ljust(FAULT_ROOM.get(name, 0), "x")[:FAULT_ROOM.get(name, len(cell))]
                 for name, cell in zip(headers, row)] for row in rows]
        return max(len(line) for line in render_table(headers, room, 10**6)) > width

    def empty(name: str) -> bool:
        return all(row[headers.index(name)] == "-" for row in rows)

    counts = sorted(("BLIPS", "FLAPS"), key=lambda name: not empty(name))  # empty first
    for optional in ("NETDEV", *counts):
        if not wider():
            break
        col = headers.index(optional)
        del headers[col]
        for row in rows:
            del row[col]
    health_col, rate_col = headers.index("HEALTH"), headers.index("RATE")

    def colour(col: int, text: str, padded: str) -> str:
        if col == health_col:
            return style.health(text, padded)
        if (col in (3, 4) and text not in ("ACTIVE", "LinkUp", "?")) or (
                col == rate_col and text.endswith("!")):
            return style.paint(padded, "yellow")
        return padded

    reason = len(headers) - 1
    suspect = headers.index("SUSPECT")
    lines = render_table(headers, rows, width,  # SUSPECT cut to "cable-or-…" at most
                         Columns(shrink=((reason, REASON_ROOM), 2, 4, (suspect, 10), 5,
                                         reason, 3, 1, 0),
                                 colour=colour))
    excluded = [r for r in records if not r.get("monitored")]
    if excluded:
        lines.append("")
        lines.append("Not monitored:")
        lines.extend(fit(f"  {port_name(r)}  {r.get('excluded') or r.get('role') or '?'}", width)
                     for r in excluded)
    return lines


def devices_table(records: Sequence[JsonRecord], style: Style, width: int = 80) -> list[str]:
    headers = ("DEVICE", "PCI", "TYPE", "FIRMWARE", "ROLE", "PORTS", "STATE", "NETDEVS")
    records = sorted(records, key=natural_key)
    # TYPE: the HCA type, or the adapter family where there is none (EFA).
    rows = [(str(r.get("device", "?")), text(r, "pci_address"),
             text(r, "hca_type", text(r, "adapter")),
             text(r, "fw_ver"), text(r, "role", "-" if r.get("present") else "?"),
             str(r.get("ports", 0)), _device_state(r),
             ",".join(str(n) for n in items(r.get("netdevs"))) or "-") for r in records]

    def colour(col: int, text: str, padded: str) -> str:
        if col == 6 and text in ("MISSING", "LOST"):
            return style.paint(padded, "red")
        if col == 6 and text == "RELOADING":
            return style.paint(padded, "yellow")
        return padded

    lines = render_table(headers, rows, width,
                         Columns(shrink=(7, 3, 2, 1, 4), right=(5,), colour=colour))
    lines.extend(fit(note, width) for r in records for note in _device_notes(r))
    for section in _device_sections(records):
        lines.append("")
        lines.extend(fit(text, width) for text in section)
    return lines


def _device_notes(r: JsonRecord) -> list[str]:
    """The lines under the table about one device: lost, firmware drift, character devices."""
    notes = []
    if r.get("lost"):
        notes.append(f"{r.get('device')}: lost NIC, no RDMA device: "
                     f"{r.get('lost_reason') or '?'} (since {r.get('lost_since') or '?'})")
    if r.get("firmware_drift"):
        notes.append(f"{r.get('device')}: firmware drift ({r['firmware_drift']} of its role "
                     f"group's cards of the same model)")
    if r.get("char_devices_missing"):
        notes.append(f"{r.get('device')}: character devices missing: "
                     f"{', '.join(str(c) for c in items(r['char_devices_missing']))}")
    return notes


def _device_sections(records: Sequence[JsonRecord]) -> list[list[str]]:
    """The paragraphs after the table, each only when it has a line: renames, the PCI side
    of each NIC where it is known, and the kernel log's driver faults."""
    sections = [
        [f"{r.get('device')} was {r['renamed_from']} until {r.get('renamed_at') or '?'} "
         f"(same PCI function)" for r in records if r.get("renamed_from")],
        [f"{r.get('device')}: {_pci_line(r)}" for r in records
         if r.get("pcie_link") or "temperature_c" in r or "aer_dev_fatal" in r],
        [f"{r.get('device')} driver fault: {r['driver_fault']}" for r in records
         if r.get("driver_fault")],
    ]
    return [section for section in sections if section]


def _pci_line(record: JsonRecord) -> str:
    """``PCIe x16 at 32.0 GT/s, AER fatal 0 non-fatal 0 correctable 3, 55.0 °C (crit 105.0)``."""
    parts = []
    if record.get("pcie_link"):
        degraded = [h for h in record_list(record.get("pcie_hops")) if h.get("degraded") == "true"]
        parts.append(f"PCIe {record['pcie_link']}"
                     + (f" ({len(degraded)} hop(s) DEGRADED)" if degraded else ""))
    if "aer_dev_fatal" in record or "aer_dev_correctable" in record:
        parts.append(f"AER fatal {record.get('aer_dev_fatal', '?')} non-fatal "
                     f"{record.get('aer_dev_nonfatal', '?')} correctable "
                     f"{record.get('aer_dev_correctable', '?')}")
    if record.get("aer_root_port"):
        parts.append(f"root port {record['aer_root_port']} AER fatal "
                     f"{record.get('aer_rootport_total_err_fatal', '?')} non-fatal "
                     f"{record.get('aer_rootport_total_err_nonfatal', '?')} correctable "
                     f"{record.get('aer_rootport_total_err_cor', '?')}")
    if "temperature_c" in record:
        crit = record.get("temperature_crit_c")
        parts.append(f"{as_float(record['temperature_c']):.1f} °C"
                     + (f" (crit {as_float(crit):.1f})" if crit is not None else ""))
    return ", ".join(parts)


def pcie_table(records: Sequence[JsonRecord], style: Style, width: int = 80) -> list[str]:
    """``show pcie``: every hop of every NIC, the NIC's own link first."""
    headers = ("DEVICE", "UPSTREAM", "DOWNSTREAM", "LINK", "CAPABLE", "STATE")
    rows = []
    for r in sorted(records, key=natural_key):
        for hop in record_list(r.get("pcie_hops")):
            state = {"true": "DEGRADED", "false": "ok"}.get(str(hop.get("degraded", "")),
                                                             "unknown")
            rows.append((str(r.get("device", "?")), str(hop.get("upstream", "?")),
                         str(hop.get("downstream", "?")), text(hop, "link"),
                         text(hop, "capable"), state))
    if not rows:
        return ["no PCIe hops known (no link files, or the PCIe link check is off or has "
                "not run yet)"]

    def colour(col: int, text: str, padded: str) -> str:
        return style.paint(padded, "yellow") if col == 5 and text == "DEGRADED" else padded

    return render_table(headers, rows, width, Columns(shrink=(2, 1), colour=colour))


def _device_state(record: JsonRecord) -> str:
    """present, MISSING, RELOADING while every device is gone in a driver event, or
    LOST for a PCI function without an RDMA device."""
    if record.get("present", True):
        return "present"
    if record.get("lost"):
        return "LOST"
    return "RELOADING" if record.get("driver_event") else "MISSING"


def counters_table(records: Sequence[JsonRecord], style: Style, width: int = 80) -> list[str]:
    """One block per port (counter names are long; a PORT column would not fit 80)."""
    headers = ("COUNTER", "VALUE", "LAST", "LIMIT", "STATE")
    lines: list[str] = []
    order: list[str] = []
    groups: dict[str, list[JsonRecord]] = {}
    for r in sorted(records, key=natural_key):
        key = port_name(r)
        if key not in groups:
            groups[key] = []
            order.append(key)
        groups[key].append(r)

    def colour(col: int, text: str, padded: str) -> str:
        if col == 4:
            return style.paint(padded, {"FATAL": "red", "breached": "yellow",
                                        "absent": "dim", "saturated": "yellow"}.get(text))
        return padded

    for key in order:
        if lines:
            lines.append("")
        lines.append(style.paint(key, "bold"))
        rows = [(str(r.get("counter", "?")), "-" if r.get("value") is None else str(r["value"]),
                 counter_last(r), counter_limit(r), counter_state(r)) for r in groups[key]]
        lines.extend("  " + line for line in render_table(
            headers, rows, width - 2, Columns(shrink=(0, 1), right=(1, 2), colour=colour)))
    return lines


MESSAGE_MIN = 30  # below this many columns beside the head, the message goes under it


def event_line(event: JsonRecord, style: Style, width: int = 80) -> str:
    """``2026-01-01T00:00:00Z  fatal     Port mlx5_0 port 1: …``; a message longer than the
    room beside the head wraps onto indented lines within ``width`` (never cut: the reason is
    at its end), one event per line with ``--wide``. May hold several lines."""
    severity = str(event.get("severity") or "")
    stamp = str(event.get("generatedTimestamp", "?"))
    head = f"{stamp}  {severity.ljust(8)}  "
    painted = f"{stamp}  {style.health(severity, severity.ljust(8))}  "
    message = str(event.get("message", ""))
    if len(head) + len(message) <= width:
        return painted + message
    if width - len(head) >= MESSAGE_MIN:  # beside the head, continued under the message
        indent = " " * len(head)
        lines = textwrap.wrap(message, width - len(head))
        return "\n".join([painted + lines[0]] + [indent + line for line in lines[1:]])
    lines = textwrap.wrap(message, max(width - 2, 10))  # a narrow terminal: under the head
    return "\n".join([painted.rstrip()] + ["  " + line for line in lines])


def no_events_line(hidden: int) -> str:
    """What ``events`` prints when there is nothing to show (``hidden``: boot baselines left
    out without ``--all``)."""
    if not hidden:
        return "no events"
    return (f"no events besides the boot baselines ({hidden} hidden: "
            f"nichealthctl events --all shows them)")


CLEAR_MARK = "no state from this boot"
BASELINE_MARK = "healthy after reboot"
BASELINE_WINDOW = timedelta(seconds=1)


def is_check_clear(event: JsonRecord) -> bool:
    """The check-scoped clear a first poll after a reboot (or without state) starts with."""
    return (bool(event.get("isHealthy")) and not event.get("entitiesImpacted")
            and CLEAR_MARK in str(event.get("message", "")))


class BaselineFilter:
    """Tells the boot baselines apart, event by event (also while following): the
    check-scoped clears, the healthy events of the same first poll (stamped just after
    them), and every "healthy after reboot". On a host where nichealthd never ran the first
    poll sends no clear (nothing earlier to clear): there the first event the host ever
    committed (``seq`` 1) opens that poll instead.

    Recoveries and every unhealthy event are kept: a first poll cannot recover anything,
    so its healthy events only restate the baseline.
    """

    def __init__(self) -> None:
        self.starts: list[datetime] = []

    def is_baseline(self, event: JsonRecord) -> bool:
        if not event.get("isHealthy"):
            return False
        try:
            moment: Optional[datetime] = parse_timestamp(
                str(event.get("generatedTimestamp", "")))
        except ValueError:
            moment = None
        if is_check_clear(event) or as_int(event.get("seq", 0)) == 1:
            if moment is not None:
                self.starts.append(moment)
            return True
        if BASELINE_MARK in str(event.get("message", "")):
            return True
        return moment is not None and any(
            start <= moment <= start + BASELINE_WINDOW for start in self.starts[-16:])


def baseline_filter(events: Sequence[JsonRecord]) -> list[JsonRecord]:
    """The events without the boot baselines (see :class:`BaselineFilter`)."""
    baselines = BaselineFilter()
    return [e for e in events if not baselines.is_baseline(e)]


NO_DEVICES = "no InfiniBand/RoCE devices found"


Row = tuple[str, str, Optional[str]]  # label, value, colour


def status_lines(status: JsonRecord, systemd: JsonRecord, style: Style,
                 ago: Optional[float], width: int = 80) -> list[str]:
    """The status block; the fatal and degraded ports are named with their reasons, long
    values are cut to ``width`` (``--wide``/``--json`` for everything)."""
    health = str(status.get("health", "unknown"))
    node = fit(str(status.get("node_name", "?")), max(width - 40, 10))
    head = (f"nichealthd {status.get('version', '?')} on {node}: "
            f"{style.health(health, health.upper())}")
    rows = [("ports", _ports_summary(status), None), *_health_rows(status),
            *_daemon_rows(status, ago), *_trouble_rows(status)]
    rows.append(("systemd", str(systemd.get("summary", "?")), None))
    via = status.get("transport")
    if isinstance(via, dict) and via.get("kind"):
        api = "D-Bus" if via["kind"] == "dbus" else str(via["kind"])
        rows.append(("via", f"{api}, {via.get('address', '?')}", None))
    room = max(width - 13, 10)
    return [head] + [f"  {label:<11}{style.paint(fit(value, room), colour)}"
                     for label, value, colour in rows]


def _ports_summary(status: JsonRecord) -> str:
    """``12 monitored: 11 healthy, 0 degraded, 1 fatal``, or why there is nothing to count."""
    if status.get("devices_found") is False:
        return "no ports monitored" if status.get("problems") else NO_DEVICES
    ports = (f"{status.get('ports_total', 0)} monitored: {status.get('ports_healthy', 0)} "
             f"healthy, {status.get('ports_degraded', 0)} degraded, "
             f"{status.get('ports_fatal', 0)} fatal")
    if status.get("ports_uncabled"):
        ports += f", {status['ports_uncabled']} uncabled"
    if status.get("ports_unknown"):
        ports += f", {status['ports_unknown']} unknown"
    return ports


def _health_rows(status: JsonRecord) -> list[Row]:
    """A driver event in progress, then each problem (red when it names a fatal port)."""
    rows: list[Row] = []
    reloading = [str(d) for d in items(status.get("devices_reloading"))]
    if reloading:
        since = local_clock(str(status.get("reloading_since") or "")) or "?"
        rows.append(("reloading", f"{len(reloading)} devices held by a driver event since "
                     f"{since} (gone, PCI function on the bus: driver unloaded or firmware "
                     f"reset; last health kept): {', '.join(reloading)}", "yellow"))
    fatal_ports = [str(p) for p in items(status.get("fatal_ports"))]
    for problem in items(status.get("problems")):
        text = str(problem)
        fatal = any(text.startswith(p + " ") for p in fatal_ports)
        rows.append(("", text, "red" if fatal else "yellow"))
    return rows


def _daemon_rows(status: JsonRecord, ago: Optional[float]) -> list[Row]:
    """The topology, the last poll, the connector, the boot, the start and the config."""
    interval = as_float(status.get("polling_interval", 0) or 0)
    every = f"{interval * 1000:g} ms" if interval < 1 else f"{interval:g} s"
    last = text(status, "last_poll", "never")
    if ago is not None and status.get("last_poll"):
        last += f" ({ago:.1f} s ago)"
    connector = (f"{status.get('connector_state', '?')}; outbox "
                 f"{status.get('outbox_depth', 0)}, dead letters "
                 f"{status.get('dead_letters', 0)}")
    rows: list[Row] = []
    if status.get("topology"):
        rows.append(("topology", str(status["topology"]), None))
    rows += [
        ("last poll", f"{last}, {status.get('poll_count', 0)} polls, every {every}", None),
        ("connector", connector, None),
    ]
    if status.get("connector_last_error"):
        rows.append(("", f"last error: {status['connector_last_error']}", "yellow"))
    rows += _slurm_rows(status)
    rows += _surface_rows(status)
    return rows + [
        ("boot ID", str(status.get("boot_id") or "-"), None),
        ("started", f"{status.get('started_at', '?')}, pid {status.get('pid', '?')}", None),
        ("config", str(status.get("config_path", "?")), None),
    ]


def _slurm_rows(status: JsonRecord) -> list[Row]:
    """Slurm draining, where it is on: a drain or resume that cannot be done (first: the node
    is then not drained for what the events call for), what it holds, what it did last and
    its last error."""
    mode = status.get("slurm_mode")
    if not mode or mode == "off":
        return []
    drained = [str(c) for c in items(status.get("slurm_drained_for"))]
    failing = str(status.get("slurm_failing") or "")
    if status.get("slurm_drain_held", bool(drained)):
        held = (f"drained for {len(drained)}: {', '.join(drained)}" if drained
                else "drained, every condition recovered")
    else:
        held = (f"not drained by nichealthd, {len(drained)} fatal open: {', '.join(drained)}"
                if drained else "no drain held")
    rows: list[Row] = [("slurm", f"failing ({failing})", "red")] if failing else []
    rows.append(("" if failing else "slurm", f"{mode}; {held}",
                 "red" if drained else None))
    if status.get("slurm_last_action"):
        rows.append(("", f"last action: {status['slurm_last_action']}", None))
    if status.get("slurm_last_error") and not failing:  # the failing row says it
        rows.append(("", f"last error: {status['slurm_last_error']}", "yellow"))
    return rows


# Surfaces whose status has rows of its own (the connector's and Slurm's keys, above).
SHOWN_APART = frozenset({"connector", "slurm"})


def _surface_rows(status: JsonRecord) -> list[Row]:
    """Every other surface as it published its status (``surfaces``): its state, the events
    pending on its cursor and its last success; its last error."""
    rows: list[Row] = []
    for surface in items(status.get("surfaces")):
        if not isinstance(surface, Mapping) or surface.get("name") in SHOWN_APART:
            continue
        state = str(surface.get("state") or "?")
        parts = [state]
        if surface.get("pending") is not None:
            parts.append(f"{surface['pending']} pending")
        when = local_clock(str(surface.get("last_success") or ""))
        if when:
            parts.append(f"last success {when}")
        rows.append((str(surface.get("name", "?")), "; ".join(parts),
                     "red" if state == "failing" else None))
        if surface.get("last_error"):
            rows.append(("", f"last error: {surface['last_error']}", "yellow"))
    return rows


def _trouble_rows(status: JsonRecord) -> list[Row]:
    """What fails in the poll loop, and a rejected reload."""
    rows: list[Row] = []
    if status.get("poll_error"):
        rows.append(("failing", str(status["poll_error"]), "red"))
    if status.get("reload_error"):
        rows.append(("reload", f"last reload rejected: {status['reload_error']}", "yellow"))
    return rows
