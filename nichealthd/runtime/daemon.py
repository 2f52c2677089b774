"""``nichealthd``: the command-line entry: parse, load, start-up checks, ``--once``; then it
hands the validated start to the runtime, :mod:`nichealthd.runtime.service` (which never
imports this).

Start-up failures exit with a status an operator can act on: 2 for an invalid command line or
config (the message names the file, the key and the problem), 1 for anything else (the
message says what to fix), 0 after a clean stop.
"""

from __future__ import annotations

import argparse
import logging
import os
import sys
from typing import Any, Optional, Sequence

from .. import __version__
from ..core.config import (
    ALL_CHECKS,
    DBUS_MODES,
    DEFAULT_CONFIG_PATH,
    LOG_LEVELS,
    PROCESSING_STRATEGIES,
    TOPOLOGY_SOURCES,
    Config,
    ConfigError,
)
from ..core.config_build import declarations
from ..core.settings import Flag
from ..sources.config_file import load_config
from ..surfaces.eventlog import EventLog
from . import without_openssl  # noqa: F401 - before asyncio and hashlib are imported
from .fdplan import log_plan, plan_fds
from .libraries import all_surfaces, load, surface
from .logsetup import log_start_failure, setup_logging
from .monitor import Monitor
from .pollguard import PollFailed
from .rlimit import raise_nofile_limit
from .service import run_service
from .startup import (
    EXIT_OK,
    EXIT_STARTUP,
    EXIT_USAGE,
    Startup,
    StartupError,
    choose_topology,
    consumers,
    log_topology,
    prepare_state_dir,
    topology_loader,
    warn_hidden_paths,
)

__all__ = ["EXIT_CRASH", "EXIT_OK", "EXIT_STARTUP", "EXIT_USAGE", "build_parser", "main",
           "run_once", "start"]

log = logging.getLogger("nichealthd")

# An unexpected exception in the running daemon (a bug): systemd restarts the unit after it.
# Not 1, which RestartPreventExitStatus= reserves for start-up failures (nichealthd(8)).
EXIT_CRASH = 70  # EX_SOFTWARE
# Under systemd (INVOCATION_ID set) statuses 1 and 2 are not restarted, so they keep the
# start budget for the operator's retry; the message says how.
UNDER_SYSTEMD_HINT = ("; systemd does not restart nichealthd after this: fix it, then run "
                      "`systemctl restart nichealthd`")
# The surfaces' settings are keys of the configuration, and some are flags: they are found
# (their text read, their package imported, none of their libraries) when the daemon is.
all_surfaces()
# flag dest -> config key: every flag is also a config key, and flags win. These are the
# core's; a surface's key declares its flag beside it (core/settings.Flag, flag_keys()).
FLAG_KEYS = {
    "sysfs_root": "sysfsRoot",
    "proc_root": "procRoot",
    "boot_id_path": "bootIdPath",
    "state_file": "stateFile",
    "metadata_path": "metadataPath",
    "topology_source": "topologySource",
    "node_name": "nodeName",
    "processing_strategy": "processingStrategy",
    "polling_interval": "pollingInterval",
    "checks": "checks",
    "metrics_listen": "metricsListen",
    "dbus": "dbus",
    "varlink_socket": "varlinkSocket",
    "event_log": "eventLog",
    "log_level": "logLevel",
}


class _Formatter(argparse.HelpFormatter):
    """argparse's help layout, the terminal's width found as ``shutil.get_terminal_size``
    finds it (``COLUMNS``, else the terminal of stdout, else 80) but without shutil: argparse
    imports it for every parser, and it brings zlib, bz2 and lzma, 0.8 MiB of the daemon's
    memory."""

    def __init__(self, prog: str) -> None:
        super().__init__(prog, width=_columns() - 2)


def _columns() -> int:
    try:
        columns = int(os.environ.get("COLUMNS", "0"))
    except ValueError:
        columns = 0
    if columns <= 0:
        try:
            columns = os.get_terminal_size(sys.__stdout__.fileno()).columns  # type: ignore[union-attr]
        except (AttributeError, ValueError, OSError):
            columns = 0
    return columns if columns > 0 else 80


class _Parser(argparse.ArgumentParser):
    """A bad flag is a start failure too: logged at ERROR, then exit 2 as argparse does."""

    def error(self, message: str) -> Any:
        self.print_usage(sys.stderr)
        log_start_failure(f"invalid command line: {message}")
        sys.exit(EXIT_USAGE)


def build_parser() -> argparse.ArgumentParser:
    parser = _Parser(
        prog="nichealthd", formatter_class=_Formatter,
        description="NIC health daemon: watches InfiniBand/RoCE ports and error counters in "
                    "sysfs and reports health events (see nichealthd(8)).")
    add = parser.add_argument
    add("--config", metavar="PATH", default=DEFAULT_CONFIG_PATH,
        help=f"TOML config file; a missing file means built-in defaults "
             f"(default {DEFAULT_CONFIG_PATH})")
    add("--sysfs-root", metavar="DIR", help="stands in for /sys (default /sys)")
    add("--proc-root", metavar="DIR", help="stands in for /proc (default /proc)")
    add("--boot-id-path", metavar="PATH",
        help="host boot ID file (default <proc-root>/sys/kernel/random/boot_id)")
    add("--state-file", metavar="PATH",
        help="persistent state (default /var/lib/nichealthd/state.json)")
    add("--metadata-path", metavar="PATH",
        help="NVSentinel GPU metadata (default /var/lib/nvsentinel/gpu_metadata.json)")
    add("--topology-source", choices=TOPOLOGY_SOURCES,
        help="GPU<->NIC topology: auto (the metadata file when it exists and is valid, else "
             "derived from sysfs), metadata (the file is required) or sysfs (default auto)")
    add("--node-name", metavar="NAME", help="node name on every event (default $NODE_NAME, "
        "else the host name)")
    for flag in declared_flags():  # the surfaces' (the platform connector's)
        add(flag.name, metavar=flag.metavar, help=flag.help)
    add("--processing-strategy", metavar="S", choices=PROCESSING_STRATEGIES,
        help="processingStrategy of every event (default EXECUTE_REMEDIATION)")
    add("--polling-interval", metavar="DUR", help="poll period: 500ms, 1s, 2m (default 1s)")
    add("--checks", metavar="LIST", help=f"comma-separated checks (default all: "
        f"{','.join(ALL_CHECKS)})")
    add("--metrics-listen", metavar="ADDR",
        help="[HOST]:PORT for /metrics and /healthz; '' disables (default :2112)")
    add("--dbus", choices=DBUS_MODES, help="bus for the D-Bus API (default system)")
    add("--varlink-socket", metavar="PATH",
        help="unix socket of the varlink API io.nichealthd.Monitor; '' disables "
             "(default /run/nichealthd/io.nichealthd.Monitor)")
    add("--event-log", metavar="PATH",
        help="append every committed event as one JSON line ('-' = stdout)")
    add("--once", action="store_true",
        help="run exactly one poll cycle, commit, deliver what it can, and exit")
    add("--check-config", action="store_true",
        help="validate the config file with these flags as a reload would apply them, say "
             "why not, and exit: 0 valid, 2 invalid, 1 unusable (the unit's ExecReload= runs "
             "it before the reload signal)")
    add("--log-level", metavar="LEVEL", choices=LOG_LEVELS, type=str.lower,
        help="debug, info, warning or error (default info)")
    add("--version", action="version", version=f"nichealthd {__version__}")
    return parser


def declared_flags() -> list[Flag]:
    """The flags the surfaces declare with their keys (surfaces/seam.py)."""
    return [item.key.flag for item in declarations() if item.key.flag is not None]


def flag_keys() -> dict[str, str]:
    """flag dest -> config key, the core's and the declared."""
    return {**FLAG_KEYS, **{item.key.flag.dest: item.name for item in declarations()
                            if item.key.flag is not None}}


def flag_overrides(args: argparse.Namespace) -> dict[str, Any]:
    """The config keys the command line sets (flags win over the file), in the command
    line's order of flags."""
    keys = flag_keys()
    return {keys[dest]: value for dest, value in vars(args).items()
            if dest in keys and value is not None}


def start(args: argparse.Namespace) -> Startup:
    """Validate everything that can be validated before the first poll."""
    overrides = flag_overrides(args)
    config = load_config(args.config, overrides)
    setup_logging(config.log_level)
    raise_nofile_limit()  # before the open-file plan is made from the limit
    for notice in config.notices:
        log.warning("%s", notice)
    warn_hidden_paths(config)
    choice = choose_topology(config)
    prepare_state_dir(config)
    monitor = Monitor(config, choice.topology, topology_loader=topology_loader(config),
                      topology_reason=choice.reason)
    plan = plan_fds(serving=not args.once)  # the limit in force, after the raise above
    monitor.limit_open_files(plan.kept_sysfs, plan.kept_aer)
    try:
        monitor.start()
        event_log = EventLog(config.event_log, monitor.journal) if config.event_log else None
    except OSError as exc:
        # The journal and the event log hold undelivered events: never move them aside.
        raise StartupError(f"cannot read {exc.filename or config.state_dir}: {exc.strerror} "
                           f"(move the file or directory out of the way, then restart)") from None
    log_topology(choice)  # once the start is valid: a failed start says only why it failed
    log_plan(plan)
    return Startup(config, overrides, monitor, event_log, plan)


def run_once(startup: Startup) -> int:
    """One poll, commit, deliver what can be delivered, exit."""
    monitor = startup.monitor
    monitor.journal.register(consumers(startup.config, startup.event_log))
    try:
        outcome = monitor.poll()
    except PollFailed:  # logged by the monitor: nothing was committed
        monitor.close()
        return EXIT_STARTUP
    if startup.event_log is not None:
        startup.event_log.publish(outcome.committed)
    deliver_once(startup.config, monitor)
    monitor.close()
    return EXIT_OK if outcome.commit_error is None else EXIT_STARTUP


def deliver_once(config: Config, monitor: Monitor) -> None:
    """Forward pending events when a connector is configured and its socket exists (and the
    gRPC library is there: without it they stay in the outbox, runtime/libraries.py)."""
    sender = "nichealthd.surfaces.connector.sender"
    connector = surface(sender)
    deliver = (load(connector, config, sender, "deliver_pending_once")
               if connector.wanted(config) else None)
    if deliver is not None:
        deliver(config, monitor.journal)


def check_config(args: argparse.Namespace) -> int:
    """What a reload would apply (the file with the flags, and the topology it chooses:
    ``Daemon._reload``), validated without a running daemon, so that ``systemctl reload``
    fails, with the reason in the journal, before the signal: the daemon would keep its
    running configuration anyway, but the reload would have exited 0 and said nothing."""
    try:
        config = load_config(args.config, flag_overrides(args))
        choose_topology(config)
    except ConfigError as exc:
        for message in exc.messages:
            log_start_failure(f"invalid configuration: {message}")
        log_start_failure(f"{args.config} is not valid: a reload keeps the running "
                          f"configuration")
        return EXIT_USAGE
    except StartupError as exc:
        log_start_failure(f"configuration not usable: {exc}; a reload keeps the running "
                          f"configuration")
        return EXIT_STARTUP
    setup_logging(config.log_level)
    for notice in config.notices:
        log.warning("%s", notice)
    print(f"{args.config}: OK")
    return EXIT_OK


def main(argv: Optional[Sequence[str]] = None) -> int:
    args = build_parser().parse_args(argv)
    if args.check_config:
        return check_config(args)
    hint = UNDER_SYSTEMD_HINT if os.environ.get("INVOCATION_ID") and not args.once else ""
    try:
        startup = start(args)
    except ConfigError as exc:  # every problem of the file, one line each
        for number, message in enumerate(exc.messages, 1):
            end = hint if number == len(exc.messages) else ""
            log_start_failure(f"invalid configuration: {message}{end}")
        return EXIT_USAGE
    except StartupError as exc:
        log_start_failure(f"cannot start: {exc}{hint}")
        return EXIT_STARTUP
    except Exception:  # a bug; nichealthd(8) makes every start failure status 1
        if not logging.getLogger().handlers:
            setup_logging("info")
        log.critical("nichealthd failed to start on an unexpected error (a bug: please report "
                     "it with this log)", exc_info=True)
        return EXIT_STARTUP
    if args.once:
        return run_once(startup)
    try:
        return run_service(startup, args)
    except Exception:  # a bug: log it, and exit with a status systemd restarts after
        log.critical("nichealthd stopped on an unexpected error", exc_info=True)
        return EXIT_CRASH


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())
