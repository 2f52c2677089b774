"""``nichealthctl``: the operator's client of nichealthd's D-Bus and varlink APIs (nichealthctl(1)).

Every command is one or two calls through a :class:`~nichealthd.cli.transport.Transport`
(``org.nichealthd.NicHealth1`` on D-Bus, or ``io.nichealthd.Monitor`` over varlink with
``--varlink``); the answers are the records of :mod:`nichealthd.core.views` either way, so
``--json`` prints what the daemon knows, unchanged, and the output does not depend on the API.
Failures are one line and an exit status, never a traceback: 3 when the daemon cannot be
reached and for a usage error (``check``'s UNKNOWN: a typo in a monitoring system's command
must never read as CRITICAL), 2 only for ``config check`` of an invalid file. With ``--json``
every path prints JSON, failures an object with ``error`` and ``exit``.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import sys
import time
from datetime import datetime, timezone
from typing import (
    AsyncContextManager,
    AsyncIterator,
    Awaitable,
    Callable,
    Coroutine,
    List,
    NoReturn,
    Optional,
    Sequence,
    Union,
)

from .. import __version__
from ..core.config import DEFAULT_CONFIG_PATH, ConfigError
from ..core.duration import parse_duration
from ..core.jsontypes import JsonRecord
from ..sources.config_file import load_config
from .connect import connect
from .event_filter import SINCE_FORMS, EventFilter, parse_since
from .format import (
    NO_DEVICES,
    BaselineFilter,
    Style,
    as_int,
    counters_table,
    devices_table,
    event_line,
    items,
    no_events_line,
    output_width,
    pcie_table,
    ports_table,
    status_lines,
)
from .optics_view import optics_records, optics_table
from .transport import (
    DEFAULT_VARLINK_SOCKET,
    EXIT_UNREACHABLE,
    ClientRecord,
    CtlError,
    Note,
    Transport,
)

EXIT_OK, EXIT_DEGRADED, EXIT_FATAL = 0, 1, 2
EXIT_USAGE = 3  # the monitoring-plugin UNKNOWN, never CRITICAL
EXIT_INVALID_CONFIG = 2  # config check: the file is invalid
EXIT_FAILURE = 1
WIDE = 10_000  # --wide: no column is cut
DEFAULT_TIMEOUT = 5.0
SYSTEMD_RUN_DIR = "/run/systemd/system"
UNIT = "nichealthd.service"
CHECK_LABELS = {EXIT_OK: "OK", EXIT_DEGRADED: "WARNING", EXIT_FATAL: "CRITICAL",
                EXIT_UNREACHABLE: "UNKNOWN"}
MAX_PROBLEMS = 5
# A command: its exit status, or a coroutine that gives it (main runs it).
Command = Callable[[argparse.Namespace], Union[int, Awaitable[int]]]
# A table of records as format.py draws it (width: the terminal's, or WIDE).
Table = Callable[[Sequence[JsonRecord], Style, int], List[str]]

def session(args: argparse.Namespace) -> AsyncContextManager[Transport]:
    """The transport of this command line: ``--varlink[=SOCKET]``, else D-Bus (--bus),
    falling back to varlink when the bus cannot be reached."""
    return connect(getattr(args, "varlink", None), args.bus, args.timeout)


def run(coro: Coroutine[object, object, int]) -> int:
    return int(asyncio.run(coro))


# ------------------------------------------------------------------- helpers

def emit_json(data: object) -> None:
    print(json.dumps(data, indent=2))


def print_lines(lines: Sequence[str]) -> None:
    sys.stdout.write("".join(line + "\n" for line in lines))


def _style() -> Style:
    return Style.for_stream(sys.stdout)


def _width(args: argparse.Namespace) -> int:
    """The terminal's width (80 when piped); no limit with ``--wide``."""
    return WIDE if getattr(args, "wide", False) else output_width(sys.stdout)


def counter_json(record: JsonRecord) -> dict[str, object]:
    """Absent values are null in JSON (``value`` is int or null, nichealthctl(1)), after the
    others (D-Bus cannot carry null: it leaves them out; varlink sends them in place)."""
    out = {key: value for key, value in record.items() if value is not None}
    for key in ("value", "delta", "rate"):
        out.setdefault(key, None)
    return out


def parse_target(text: Optional[str]) -> tuple[str, int]:
    """``DEV`` or ``DEV/PORT`` -> (device, port); nothing -> all."""
    if not text:
        return "", 0
    device, _, port = text.partition("/")
    if not device:
        raise CtlError(f"invalid port {text!r}: expected DEV or DEV/PORT, e.g. mlx5_0/1",
                       EXIT_USAGE)
    if not port:
        return device, 0
    if not port.isdigit() or int(port) < 1:
        raise CtlError(f"invalid port {text!r}: PORT must be a number from 1, e.g. mlx5_0/1",
                       EXIT_USAGE)
    return device, int(port)


def seconds_since(timestamp: str) -> Optional[float]:
    if not timestamp:
        return None
    try:
        from ..core.events import parse_timestamp
        moment = parse_timestamp(timestamp)
    except ValueError:
        return None
    return max((datetime.now(timezone.utc) - moment).total_seconds(), 0.0)


def systemd_unit_state(run_dir: str = SYSTEMD_RUN_DIR) -> dict[str, object]:
    """The unit's state through pystemd when systemd runs; says plainly when it does not."""
    if not os.path.isdir(run_dir):
        return {"running": False, "summary": "systemd is not running on this host"}
    try:
        from pystemd.systemd1 import Unit
    except ImportError:
        return {"running": True, "unit": UNIT,
                "summary": f"systemd is running, but pystemd is not installed, so the state "
                           f"of {UNIT} is not shown (try: systemctl status nichealthd)"}
    try:
        unit = Unit(UNIT.encode())
        unit.load()

        def text(value: object) -> str:  # pystemd's properties are bytes
            return value.decode() if isinstance(value, bytes) else str(value)

        info: dict[str, object] = {
            "running": True, "unit": UNIT,
            "load_state": text(unit.Unit.LoadState),
            "active_state": text(unit.Unit.ActiveState),
            "sub_state": text(unit.Unit.SubState),
            "unit_file_state": text(unit.Unit.UnitFileState),
            "main_pid": int(unit.Service.MainPID),
        }
    except Exception as exc:
        return {"running": True, "unit": UNIT,
                "summary": f"cannot query {UNIT} through pystemd: {exc}"}
    info["summary"] = (f"{UNIT} {info['active_state']} ({info['sub_state']}), "
                       f"{info['unit_file_state'] or info['load_state']}, "
                       f"main PID {info['main_pid'] or '-'}")
    return info


# ------------------------------------------------------------------ commands

async def cmd_status(args: argparse.Namespace) -> int:
    systemd = systemd_unit_state()
    try:
        async with session(args) as client:
            status = await client.status()
            status["transport"] = client.describe()
    except CtlError as exc:
        if not args.json and systemd.get("running"):
            print(f"nichealthctl: {systemd['summary']}", file=sys.stderr)
        raise exc
    if args.json:
        emit_json({**status, "systemd": systemd})
    else:
        print_lines(status_lines(status, systemd, _style(),
                                 seconds_since(str(status.get("last_poll", ""))),
                                 _width(args)))
    return EXIT_OK


async def _show_records(args: argparse.Namespace,
                        fetch: Callable[[Transport], Awaitable[List[ClientRecord]]],
                        table: Table) -> int:
    """Shared body of ``show ports`` / ``show devices``: one list call, JSON or a table."""
    async with session(args) as client:
        records = await fetch(client)
    if args.json:
        emit_json(records)
    else:
        print_lines(table(records, _style(), _width(args)))
    return EXIT_OK


async def cmd_show_ports(args: argparse.Namespace) -> int:
    if not args.json:
        async with session(args) as client:
            records = await client.list_ports()
            found = records or (await client.status()).get("devices_found", True)
        if not found:  # a host without RDMA devices: say so in one line, not an empty table
            print(NO_DEVICES)
            return EXIT_OK
        print_lines(ports_table(records, _style(), _width(args)))
        return EXIT_OK
    return await _show_records(args, lambda client: client.list_ports(), ports_table)


async def cmd_show_devices(args: argparse.Namespace) -> int:
    if not args.json:
        async with session(args) as client:
            records = await client.list_devices()
        # No device present, missing, held or lost: one line, not a bare header.
        print_lines(devices_table(records, _style(), _width(args)) if records else [NO_DEVICES])
        return EXIT_OK
    return await _show_records(args, lambda client: client.list_devices(), devices_table)


async def cmd_show_pcie(args: argparse.Namespace) -> int:
    if args.json:
        async with session(args) as client:
            records = await client.list_devices()
        emit_json([{"device": r.get("device"), "pcie_hops": r.get("pcie_hops") or []}
                   for r in records if r.get("pcie_hops")])
        return EXIT_OK
    return await _show_records(args, lambda client: client.list_devices(), pcie_table)


async def cmd_show_optics(args: argparse.Namespace) -> int:
    if args.json:
        async with session(args) as client:
            records = await client.list_ports()
        emit_json(optics_records(records))
        return EXIT_OK
    return await _show_records(args, lambda client: client.list_ports(), optics_table)


async def cmd_show_counters(args: argparse.Namespace) -> int:
    device, port = parse_target(args.target)
    async with session(args) as client:
        records = await client.list_counters(device, port)
    if args.json:
        emit_json([counter_json(r) for r in records])
    elif not records:
        print("no counters (no monitored ports)")
    else:
        print_lines(counters_table(records, _style(), _width(args)))
    return EXIT_OK


def _event_json(record: JsonRecord) -> dict[str, object]:
    return dict(record)


def _event_filter(args: argparse.Namespace) -> EventFilter:
    """--since and --device, read before anything is asked of the daemon."""
    since = None
    if args.since is not None:
        try:
            since = parse_since(args.since, datetime.now(timezone.utc))
        except ValueError as exc:
            raise CtlError(str(exc), EXIT_USAGE) from None
    device, port = parse_target(args.device)
    return EventFilter(since, device, port)


async def cmd_events(args: argparse.Namespace) -> int:
    if args.lines < 0:
        raise CtlError("-n must be 0 or more", EXIT_USAGE)
    chosen = _event_filter(args)
    style = _style()
    width = _width(args)
    async with session(args) as client:
        baselines = BaselineFilter()
        # Boot baselines are hidden unless --all, and --since/--device keep only some: ask
        # for the whole history, drop them, keep the last N (184 "healthy after reboot" lines
        # must not push the rest out).
        history = (args.lines if args.all and not chosen else 0) if args.lines else None
        if args.follow:
            events, notes = await client.follow(history)
        else:
            events = await client.list_events(history) if history is not None else []
        last_seq = as_int(events[-1]["seq"]) if events else 0
        hidden = 0
        if not args.all:
            kept = [e for e in events if not baselines.is_baseline(e)]
            hidden, events = len(events) - len(kept), kept
        if chosen:  # after the baselines: their filter must see every event, in order
            events = [e for e in events if chosen.keeps(e)]
        events = events[-args.lines:] if args.lines else []
        if not args.follow:
            if args.json:
                emit_json([_event_json(e) for e in events])
            elif events:
                print_lines([event_line(e, style, width) for e in events])
            elif args.lines:  # a quiet host: say so rather than print nothing
                print(_none_line(hidden, chosen))
            return EXIT_OK
        for event in events:
            _print_event(event, args.json, style, width)
        if not events and args.lines and not args.json:  # beside the stream, not in it
            print(f"nichealthctl: {_none_line(hidden, chosen)}; waiting for new ones (Ctrl-C "
                  f"to stop)", file=sys.stderr, flush=True)
        shown = None if args.all else baselines
        return await _follow(client, notes, last_seq, args.json, style, width, shown, chosen)


def _none_line(hidden: int, chosen: EventFilter) -> str:
    """"no events", and what --since/--device asked for when they were given."""
    if not chosen:
        return no_events_line(hidden)
    asked = [f"since {chosen.since.astimezone().isoformat(timespec='seconds')}"
             if chosen.since is not None else "",
             f"about {chosen.device}{f'/{chosen.port}' if chosen.port else ''}"
             if chosen.device else ""]
    return "no events " + " ".join(a for a in asked if a)


def _print_event(event: JsonRecord, as_json: bool, style: Style, width: int) -> None:
    if as_json:  # --follow --json: one object per line, so it can stream
        print(json.dumps(_event_json(event)), flush=True)
    else:
        print(event_line(event, style, width), flush=True)


async def _follow(client: Transport, notes: AsyncIterator[Note], last_seq: int, as_json: bool,
                  style: Style, width: int, baselines: Optional[BaselineFilter],
                  chosen: EventFilter) -> int:
    """Print each new event (the boot baselines of a restart too only with --all)."""
    async for kind, value in notes:
        if kind in ("left", "back"):
            note = ("nichealthd is back" if kind == "back" else
                    "nichealthd left; waiting for it to return (Ctrl-C to stop)")
            print(f"nichealthctl: {note}", file=sys.stderr, flush=True)
            if kind == "back":
                last_seq = 0  # a restarted daemon may have compacted; never drop its events
            continue
        if value is None:  # only "left" and "back" come without a record
            continue
        seq = as_int(value.get("seq", 0))
        if seq and seq <= last_seq:
            continue
        last_seq = max(last_seq, seq)
        if baselines is not None and baselines.is_baseline(value):
            continue
        if chosen and not chosen.keeps(value):
            continue
        _print_event(value, as_json, style, width)
    return EXIT_OK


async def cmd_check(args: argparse.Namespace) -> int:
    async with session(args) as client:
        status = await client.status()
        health = str(status.get("health", ""))
        devices = await client.list_devices() \
            if not as_int(status.get("ports_total", 0) or 0) else []
    code = {"healthy": EXIT_OK, "degraded": EXIT_DEGRADED, "fatal": EXIT_FATAL}.get(
        health, EXIT_UNREACHABLE)
    problems = [str(p) for p in items(status.get("problems"))]
    unmonitored = unmonitored_devices(devices)
    if code == EXIT_OK and unmonitored:
        code = EXIT_DEGRADED
        problems.append(f"{len(unmonitored)} RDMA devices present but none monitored: "
                        + ", ".join(unmonitored))
    line = check_line(code, status, problems)
    if args.json:
        emit_json({"status": CHECK_LABELS[code], "exit": code, "health": health,
                   "summary": line, "problems": problems,
                   "fatal_ports": items(status.get("fatal_ports")),
                   "degraded_ports": items(status.get("degraded_ports"))})
    else:
        print(line)
    return code


def unmonitored_devices(devices: Sequence[JsonRecord]) -> list[str]:
    """``mlx5_0 (management: default route)`` for each present device when none is monitored.

    A host with no RDMA device at all is OK (nothing to watch); one whose devices are all
    excluded is not: a wrong exclusion or a topology mismatch would otherwise read as healthy.
    """
    present = [d for d in devices if d.get("present", True)]
    if not present or any(d.get("monitored") for d in present):
        return []
    return [f"{d.get('device', '?')} ({d.get('role') or '?'}"
            + (f": {d['role_reason']}" if d.get("role_reason") else "") + ")"
            for d in present]


def check_line(code: int, status: JsonRecord, problems: list[str]) -> str:
    """The one line of ``check``: the counts are those of the daemon's health model, the
    same that decided the verdict; the problems name each fatal and degraded port and why."""
    total = as_int(status.get("ports_total", 0))
    healthy = as_int(status.get("ports_healthy", 0))
    degraded = as_int(status.get("ports_degraded", 0))
    fatal = as_int(status.get("ports_fatal", 0))
    uncabled = as_int(status.get("ports_uncabled", 0))
    perf = f" | healthy={healthy} degraded={degraded} fatal={fatal} ports={total}"
    label = f"NICHEALTH {CHECK_LABELS[code]} - "
    if code == EXIT_OK:
        text = (f"{healthy} ports healthy" if total else
                NO_DEVICES if status.get("devices_found") is False else "no ports monitored")
        if uncabled:
            text += f", {uncabled} uncabled"
        return label + text + perf
    if code == EXIT_UNREACHABLE:
        return label + f"nichealthd reports health {status.get('health')!r}" + perf
    text = f"{fatal} fatal, {degraded} degraded of {total} ports"
    if problems:
        shown = problems[:MAX_PROBLEMS]
        more = len(problems) - len(shown)
        text += ": " + ", ".join(shown) + (f" and {more} more" if more else "")
    return label + text + perf


async def cmd_reload(args: argparse.Namespace) -> int:
    """``Reload`` (root only: the D-Bus policy, SO_PEERCRED over varlink): re-read the config."""
    if os.geteuid() != 0:
        raise CtlError("reload changes the running daemon and is for root only "
                       "(try: sudo nichealthctl reload, or systemctl reload nichealthd)",
                       EXIT_FAILURE)
    async with session(args) as client:
        try:
            accepted, message = await client.reload()
        except CtlError as exc:
            if "denied" in exc.message:
                raise CtlError(exc.message, EXIT_FAILURE) from None
            raise
    if args.json:
        emit_json({"accepted": bool(accepted), "message": str(message)})
    elif accepted:
        print(str(message))
    else:
        print(f"nichealthctl: {message}", file=sys.stderr)
    return EXIT_OK if accepted else EXIT_FAILURE


def cmd_config_check(args: argparse.Namespace) -> int:
    """Every problem of the file in one run, one line each: FILE[:LINE]: KEY: PROBLEM."""
    path = args.file or DEFAULT_CONFIG_PATH
    try:
        config = load_config(path, must_exist=True)
    except ConfigError as exc:
        if args.json:
            emit_json({"file": path, "ok": False, "key": exc.key, "problem": exc.problem,
                       "error": exc.messages[0],
                       "errors": [{"line": p.line, "column": p.column, "key": p.key,
                                   "problem": p.problem, "message": str(p)}
                                  for p in exc.problems]})
        else:
            for message in exc.messages:
                print(message, file=sys.stderr)
            if len(exc.problems) > 1:
                print(f"{path}: invalid ({len(exc.problems)} errors)", file=sys.stderr)
        return EXIT_INVALID_CONFIG
    if args.json:
        emit_json({"file": path, "ok": True, "notices": list(config.notices)})
    else:
        for notice in config.notices:
            print(f"{path}: warning: {notice}", file=sys.stderr)
        print(f"{path}: OK")
    return EXIT_OK


# -------------------------------------------------------------------- parser

def _timeout(text: str) -> float:
    try:
        return parse_duration(text)
    except ValueError as exc:
        raise argparse.ArgumentTypeError(str(exc)) from None


class UsageError(Exception):
    """A bad command line: reported by :func:`main` (exit 3, JSON with ``--json``)."""

    def __init__(self, message: str, usage: str) -> None:
        super().__init__(message)
        self.message = message
        self.usage = usage


class Parser(argparse.ArgumentParser):
    """argparse exits 2 on a usage error, CRITICAL to a monitoring system; raise instead."""

    def error(self, message: str) -> NoReturn:
        raise UsageError(f"{self.prog}: error: {message}", self.format_usage())


def build_parser() -> argparse.ArgumentParser:
    # Global options work before or after the command (`nichealthctl show ports --json`):
    # the main parser has the defaults, each command's parser a copy that leaves them alone.
    def global_options(into: argparse.ArgumentParser, defaults: bool) -> None:
        def default(value: object) -> object:
            return value if defaults else argparse.SUPPRESS
        into.add_argument("--json", action="store_true", default=default(False),
                          help="print JSON (an array; an object for status, check, reload "
                               "and every failure)")
        into.add_argument("--wide", action="store_true", default=default(False),
                          help="do not cut long cells to the terminal's width (80 when "
                               "piped)")
        into.add_argument("--bus", choices=("system", "session"), default=default("system"),
                          help="bus to find nichealthd on (default system; "
                               "DBUS_SYSTEM_BUS_ADDRESS is honoured)")
        into.add_argument("--varlink", dest="varlink", action="store_const",
                          const=DEFAULT_VARLINK_SOCKET, default=default(None),
                          help=f"use the varlink API instead of D-Bus; --varlink=SOCKET names "
                               f"the socket (default {DEFAULT_VARLINK_SOCKET}; without this "
                               f"option nichealthctl uses D-Bus and falls back to varlink when "
                               f"the bus cannot be reached)")
        into.add_argument("--varlink-socket", dest="varlink", default=default(None),
                          help=argparse.SUPPRESS)  # what --varlink=SOCKET becomes
        into.add_argument("--timeout", type=_timeout, metavar="DUR",
                          default=default(DEFAULT_TIMEOUT),
                          help=f"how long to wait for the bus and the daemon "
                               f"(default {DEFAULT_TIMEOUT:g}s; 500ms, 2s …)")

    parser = Parser(
        prog="nichealthctl",
        description="Query nichealthd, the NIC health daemon, over D-Bus or varlink.",
        epilog="exit status: 0 ok; 1 failure (reload rejected or not root); check: 1 "
               "degraded, 2 fatal; config check: 2 invalid config; 3 nichealthd unreachable "
               "or usage error")
    global_options(parser, True)
    parser.add_argument("--version", action="version", version=f"nichealthctl {__version__}")
    parser.set_defaults(func=None)
    sub = parser.add_subparsers(dest="command", metavar="COMMAND")

    def add(name: str, func: Command, help_text: str,
            into: argparse._SubParsersAction[Parser] = sub) -> argparse.ArgumentParser:
        p: argparse.ArgumentParser = into.add_parser(name, help=help_text,
                                                     description=help_text)
        global_options(p, False)
        p.set_defaults(func=func)
        return p

    add("status", cmd_status, "daemon status, overall health and the systemd unit's state")
    show = sub.add_parser("show", help="ports, devices, pcie, optics or counters")
    show_sub = show.add_subparsers(dest="what", metavar="WHAT")
    show.set_defaults(func=None, show_parser=show)
    add("ports", cmd_show_ports, "every port: link state, role, health", show_sub)
    add("devices", cmd_show_devices, "every NIC: PCI address, firmware, role, presence",
        show_sub)
    add("pcie", cmd_show_pcie, "every PCIe hop from each NIC up to its root port: link as "
        "trained, what both ends support", show_sub)
    add("optics", cmd_show_optics, "every port's pluggable module: temperature, voltage, "
        "weakest Rx/Tx lane, bias, reports against the module's thresholds", show_sub)
    counters = add("counters", cmd_show_counters,
                   "error counters of monitored ports: value, last change, threshold, breach",
                   show_sub)
    counters.add_argument("target", nargs="?", metavar="DEV[/PORT]",
                          help="one device or one port (default all)")
    events = add("events", cmd_events, "recent health events (newest last)")
    events.add_argument("-n", "--lines", type=int, default=20, metavar="N",
                        help="how many past events (default 20; 0 = none)")
    events.add_argument("-f", "--follow", action="store_true",
                        help="keep printing new events as they are committed "
                             "(with --json: one object per line)")
    events.add_argument("-a", "--all", action="store_true",
                        help="include the boot baselines (\"healthy after reboot\" and the "
                             "clears of a first poll), hidden by default")
    events.add_argument("--since", metavar="TIME",
                        help=f"only events from TIME on: {SINCE_FORMS}; local time unless "
                             f"it says its zone")
    events.add_argument("--device", metavar="DEV[/PORT]",
                        help="only events about this NIC (or one port of it, or the PCI "
                             "address of a lost NIC)")
    add("check", cmd_check, "monitoring-plugin check: exit 0 healthy, 1 degraded (or devices "
        "present but none monitored), 2 fatal, 3 unreachable")
    add("reload", cmd_reload, "re-read the daemon's config file (root only; D-Bus Reload)")
    config = sub.add_parser("config", help="offline checks of a config file")
    config_sub = config.add_subparsers(dest="what", metavar="WHAT")
    config.set_defaults(func=None, show_parser=config)
    check = add("check", cmd_config_check,
                "validate a config file as the daemon would (exit 0 OK, 2 invalid)",
                config_sub)
    check.add_argument("file", nargs="?", metavar="FILE",
                       help=f"config file (default {DEFAULT_CONFIG_PATH})")
    return parser


def main(argv: Optional[Sequence[str]] = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    # --varlink alone is a flag (a following word is the command), --varlink=SOCKET a value
    argv = ["--varlink-socket=" + a[len("--varlink="):] if a.startswith("--varlink=") else a
            for a in argv]
    parser = build_parser()
    try:
        args = parser.parse_args(argv)
    except UsageError as exc:
        return _usage_error(exc.message, exc.usage, "--json" in argv)
    if args.func is None:
        usage = (getattr(args, "show_parser", None) or parser).format_usage()
        return _usage_error("nichealthctl: a command is required", usage, args.json)
    is_check = args.func is cmd_check
    started = time.monotonic()
    try:
        result = args.func(args)
        code = run(result) if asyncio.iscoroutine(result) else int(result)
    except CtlError as exc:
        code = EXIT_UNREACHABLE if is_check else exc.code
        if args.json:
            _json_error(exc.message, code, is_check)
        elif is_check:
            print(f"NICHEALTH UNKNOWN - {exc.message}")
        else:
            print(f"nichealthctl: {exc.message}", file=sys.stderr)
        return code
    except KeyboardInterrupt:
        return EXIT_OK if getattr(args, "follow", False) else 130
    except BrokenPipeError:  # `nichealthctl events | head`
        try:
            sys.stdout = open(os.devnull, "w")  # noqa: SIM115 - silence the final flush
        except OSError:
            pass
        return EXIT_OK
    except Exception as exc:  # never a traceback for the operator
        if os.environ.get("NICHEALTHCTL_DEBUG"):
            raise
        text = (f"unexpected error after {time.monotonic() - started:.1f} s: "
                f"{type(exc).__name__}: {exc} (set NICHEALTHCTL_DEBUG=1 for details)")
        code = EXIT_UNREACHABLE if is_check else EXIT_FAILURE
        if args.json:
            _json_error(text, code, is_check)
        else:
            print(f"{'NICHEALTH UNKNOWN - ' if is_check else 'nichealthctl: '}{text}",
                  file=sys.stdout if is_check else sys.stderr)
        return code
    return code


def _usage_error(message: str, usage: str, as_json: bool) -> int:
    """Exit 3 (UNKNOWN): usage on stderr, and with --json an error object on stdout."""
    sys.stderr.write(usage)
    print(message, file=sys.stderr)
    if as_json:
        emit_json({"error": message, "exit": EXIT_USAGE})
    return EXIT_USAGE


def _json_error(message: str, code: int, is_check: bool) -> None:
    """A failure as JSON on stdout (``check`` keeps its object's keys: status UNKNOWN)."""
    if is_check:
        emit_json({"status": CHECK_LABELS[EXIT_UNREACHABLE], "exit": code, "health": "",
                   "summary": f"NICHEALTH UNKNOWN - {message}", "problems": [],
                   "error": message})
    else:
        emit_json({"error": message, "exit": code})


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())
