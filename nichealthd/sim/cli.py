"""nichealthd-sim command line: a thin argparse layer over tree.create and the mutate module.

Bad arguments (unknown profile, device, port, counter, state name) exit 2 with one line on
stderr, other failures exit 1; never a traceback, because operators run this in fault drills.
"""

from __future__ import annotations

import argparse
import sys
from collections import Counter
from typing import Callable, Dict, List, NoReturn, Optional

from . import journal, mutate, tree
from .fsio import SimError
from .profiles import PROFILES

PROG = "nichealthd-sim"


class _Parser(argparse.ArgumentParser):
    """ArgumentParser whose errors are one line (no usage dump) and exit 2."""

    def error(self, message: str) -> NoReturn:
        self.exit(2, f"{self.prog}: error: {message}\n")


def _port(text: str) -> int:
    try:
        num = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"port must be a number, got {text!r}") from None
    if num < 1:
        raise argparse.ArgumentTypeError(f"port numbers start at 1, got {num}")
    return num


def _seconds(text: str) -> float:
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"seconds must be a number, got {text!r}") from None
    if not 0 <= value <= 86400:
        raise argparse.ArgumentTypeError(f"seconds must be between 0 and 86400, got {text}")
    return value


def _renamed(names: Dict[str, str]) -> None:
    moved = [f"{old} -> {new}" for old, new in names.items() if old != new]
    print(f"{len(names)} devices back" + (f": {', '.join(moved)}" if moved else ""))


def _build_parser() -> argparse.ArgumentParser:
    parser = _Parser(prog=PROG, description="Build and mutate a fake GPU host for nichealthd.")
    sub = parser.add_subparsers(dest="cmd", metavar="COMMAND", parser_class=_Parser)
    sub.required = True

    def cmd(name: str, help_text: str, *args: str) -> argparse.ArgumentParser:
        p = sub.add_parser(name, help=help_text, description=help_text)
        for arg in args:
            if arg == "PORT":
                p.add_argument(arg, type=_port)
            else:
                p.add_argument(arg)
        return p

    cmd("profiles", "list the host profiles")
    p = cmd("demo", "run nichealthd on a simulated host with a private D-Bus and show "
            "nichealthctl")
    p.add_argument("--profile", default="dgx-h100", metavar="NAME", help="default: dgx-h100")
    p.add_argument("--root", metavar="DIR", help="build the host here (default: a temp dir)")
    p = cmd("create", "build a fake host under ROOT", "ROOT")
    p.add_argument("--profile", default="dgx-h100", metavar="NAME", help="default: dgx-h100")
    p.add_argument("--devices", type=int, metavar="N", help="device count (synthetic only)")
    p.add_argument(
        "--no-new-hw-counters",
        action="store_true",
        help="omit req_transport_retries_exceeded/req_rnr_retries_exceeded (pre-2024 kernels)",
    )
    p.add_argument("--force", action="store_true", help="rebuild over an existing fake host")
    p.add_argument("--no-metadata", action="store_true",
                   help="leave gpu_metadata.json out (a host without NVSentinel: nichealthd "
                        "derives the GPU topology from the PCI tree)")
    cmd("show", "print each device's port state and intended role", "ROOT")
    p = cmd(
        "port", "set a port's state, physical state and/or netdev operstate", "ROOT", "DEV", "PORT"
    )
    p.add_argument("--state", help="NOP|DOWN|INIT|ARMED|ACTIVE|ACTIVE_DEFER")
    p.add_argument(
        "--phys-state",
        help="Sleep|Polling|Disabled|PortConfigurationTraining|LinkUp|LinkErrorRecovery|PhyTest",
    )
    p.add_argument("--operstate", help="up|down|lowerlayerdown|dormant|unknown|...")
    cmd("uncable", "pull the cable: DOWN/Polling, operstate down", "ROOT", "DEV", "PORT")
    p = cmd(
        "counter",
        "add to or set a counter (counters/, hw_counters/, carrier_changes, statistics/)",
        "ROOT",
        "DEV",
        "PORT",
        "NAME",
    )
    group = p.add_mutually_exclusive_group(required=True)
    group.add_argument("--add", type=int, metavar="N")
    group.add_argument("--set", type=int, metavar="N", dest="set_to")
    p.add_argument(
        "--hardware-semantics",
        action="store_true",
        help="--add saturates PMA counters at their width, wraps hw_counters at 2^32",
    )
    p = cmd("reset-counters", "zero all counters (of one device / port)", "ROOT")
    p.add_argument("DEV", nargs="?")
    p.add_argument("PORT", nargs="?", type=_port)
    cmd("reboot", "new boot_id, counters zeroed, ports back to the profile's state", "ROOT")
    cmd("remove-device", "hot-remove an IB device (dir + class link)", "ROOT", "DEV")
    cmd("restore-device", "bring a removed IB device back", "ROOT", "DEV")
    cmd("remove-port", "remove ports/<PORT> of a device", "ROOT", "DEV", "PORT")
    cmd("restore-port", "bring a removed port back", "ROOT", "DEV", "PORT")
    cmd("remove-file", "remove ROOT/PATH", "ROOT", "PATH")
    cmd("restore-file", "bring a removed ROOT/PATH back", "ROOT", "PATH")
    p = cmd("garbage", "write non-numeric text into ROOT/PATH in place", "ROOT", "PATH")
    p.add_argument("--text", default="garbage", help="default: garbage")
    cmd("unreadable", "make reads of ROOT/PATH fail (EISDIR)", "ROOT", "PATH")
    cmd("readable", "undo unreadable", "ROOT", "PATH")
    cmd("rename", "the kernel registers DEV again as NEW at the same PCI function", "ROOT",
        "DEV", "NEW")
    p = cmd("driver-reload", "every RDMA device vanishes at once (driver unload or firmware "
            "reset) and returns with its counters at zero", "ROOT")
    p.add_argument("--down", type=_seconds, default=0.0, metavar="S",
                   help="stay unloaded S seconds before the return (blocks; default 0)")
    p.add_argument("--rename", action="store_true",
                   help="return under shifted names (mlx5_N -> mlx5_N+<device count>)")
    cmd("driver-unload", "every RDMA device vanishes at once (until driver-load)", "ROOT")
    p = cmd("driver-load", "the devices of driver-unload return, counters at zero", "ROOT")
    p.add_argument("--rename", action="store_true",
                   help="return under shifted names (mlx5_N -> mlx5_N+<device count>)")
    cmd("hide-class", "make sys/class/infiniband absent", "ROOT")
    cmd("unhide-class", "bring sys/class/infiniband back", "ROOT")
    # The kernel log (#17): real journal files the daemon reads with kernelLogPath.
    p = cmd("kernel-log", "append the kernel's line for RULE about DEV (or 'host') to the "
            "host's journal (ROOT/journal; point kernelLogPath at it)", "ROOT", "DEV", "RULE")
    p.add_argument("--journal", metavar="PATH", help="journal directory or file "
                   "(default: ROOT/journal)")
    p.add_argument("--count", type=int, default=1, metavar="N", help="repeats (default 1)")
    p.add_argument("--interval", type=_seconds, default=0.0, metavar="S",
                   help="seconds between the repeats' timestamps (default 0)")
    p.add_argument("--text", help="log this text instead of RULE's line (RULE is ignored)")
    return parser


def _profiles(_: argparse.Namespace) -> None:
    for name, make in PROFILES.items():
        print(f"{name:<18} {make().description}")


def _create(a: argparse.Namespace) -> None:
    manifest = tree.create(
        a.ROOT,
        a.profile,
        devices=a.devices,
        new_hw_counters=not a.no_new_hw_counters,
        force=a.force,
        metadata=not a.no_metadata,
    )
    roles = Counter(manifest["roles"].values())
    summary = ", ".join(f"{n} {role}" for role, n in sorted(roles.items()))
    print(
        f"built {manifest['profile']} in {a.ROOT}: {len(manifest['devices'])} devices "
        f"({summary}); {len(manifest['gpus'])} GPUs"
        f"{'' if manifest['metadata'] else ', no GPU metadata file'}; "
        f"config {a.ROOT}/nichealthd.toml"
    )


def _port_cmd(a: argparse.Namespace) -> None:
    if a.state is None and a.phys_state is None and a.operstate is None:
        raise SimError("port: give at least one of --state, --phys-state, --operstate")
    mutate.set_port(
        a.ROOT, a.DEV, a.PORT, state=a.state, phys_state=a.phys_state, operstate=a.operstate
    )


def _counter(a: argparse.Namespace) -> None:
    value = mutate.counter(
        a.ROOT,
        a.DEV,
        a.PORT,
        a.NAME,
        add=a.add,
        set_to=a.set_to,
        hardware_semantics=a.hardware_semantics,
    )
    print(f"{a.DEV} port {a.PORT} {a.NAME} = {value}")


def _reset(a: argparse.Namespace) -> None:
    mutate.reset_counters(a.ROOT, a.DEV, a.PORT)


def _reboot(a: argparse.Namespace) -> None:
    print(f"boot_id {mutate.reboot(a.ROOT)}")


def _kernel_log(a: argparse.Namespace) -> None:
    if not 1 <= a.count <= 1_000_000:
        raise SimError(f"--count must be between 1 and 1000000, got {a.count}")
    path, written = journal.kernel_log(a.ROOT, a.DEV, a.RULE, journal=a.journal,
                                       count=a.count, interval=a.interval, text=a.text)
    print(f"{written} kernel line(s) appended to {path}")


def _demo(a: argparse.Namespace) -> None:
    from .demo import run_demo  # imports nothing of the daemon until asked
    code = run_demo(a.profile, a.root)
    if code:
        raise SystemExit(code)


HANDLERS: Dict[str, Callable[[argparse.Namespace], None]] = {
    "profiles": _profiles,
    "demo": _demo,
    "create": _create,
    "show": lambda a: print(tree.show(a.ROOT), end=""),
    "port": _port_cmd,
    "uncable": lambda a: mutate.uncable(a.ROOT, a.DEV, a.PORT),
    "counter": _counter,
    "reset-counters": _reset,
    "reboot": _reboot,
    "remove-device": lambda a: mutate.remove_device(a.ROOT, a.DEV),
    "restore-device": lambda a: mutate.restore_device(a.ROOT, a.DEV),
    "remove-port": lambda a: mutate.remove_port(a.ROOT, a.DEV, a.PORT),
    "restore-port": lambda a: mutate.restore_port(a.ROOT, a.DEV, a.PORT),
    "remove-file": lambda a: mutate.remove_file(a.ROOT, a.PATH),
    "restore-file": lambda a: mutate.restore_file(a.ROOT, a.PATH),
    "garbage": lambda a: mutate.garbage(a.ROOT, a.PATH, a.text),
    "unreadable": lambda a: mutate.unreadable(a.ROOT, a.PATH),
    "readable": lambda a: mutate.readable(a.ROOT, a.PATH),
    "rename": lambda a: mutate.rename_device(a.ROOT, a.DEV, a.NEW),
    "driver-reload": lambda a: _renamed(mutate.driver_reload(a.ROOT, a.down, a.rename)),
    "driver-unload": lambda a: print(f"{len(mutate.unload_driver(a.ROOT))} devices gone"),
    "driver-load": lambda a: _renamed(mutate.load_driver(a.ROOT, a.rename)),
    "hide-class": lambda a: mutate.hide_class(a.ROOT),
    "unhide-class": lambda a: mutate.unhide_class(a.ROOT),
    "kernel-log": _kernel_log,
}


def main(argv: Optional[List[str]] = None) -> int:
    """Entry point of the nichealthd-sim console script; returns the exit status."""
    args = _build_parser().parse_args(argv)
    try:
        HANDLERS[args.cmd](args)
    except SimError as exc:
        print(f"{PROG}: error: {exc}", file=sys.stderr)
        return 2
    except OSError as exc:
        print(f"{PROG}: error: {exc}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
