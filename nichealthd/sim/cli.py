"""nichealthd-sim command line: a thin argparse layer over tree.create and the mutate module.

Bad arguments (unknown profile, device, port, counter, state name) exit 2 with one line on
stderr, other failures exit 1; never a traceback, because operators run this in fault drills.
"""

from __future__ import annotations

import argparse
import sys
from collections import Counter
from pathlib import Path
from typing import Callable, Dict, List, NoReturn, Optional

from . import adapter, journal, mutate, optics, pcibus, pcifiles, subnet, tree
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
    p.add_argument("--vfs", type=int, default=0, metavar="N",
                   help="SR-IOV VFs of each PF (synthetic only, up to 127)")
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
    cmd("recable", "plug the cable back (undo uncable): ACTIVE/LinkUp, operstate up", "ROOT",
        "DEV", "PORT")
    p = cmd("flap", "take a port down and up N times in the foreground (link_downed and "
            "carrier_changes +1 per down), as a flapping link does", "ROOT", "DEV", "PORT")
    p.add_argument("--cycles", type=int, default=3, metavar="N", help="default: 3")
    p.add_argument("--down", type=_seconds, default=40.0, metavar="S",
                   help="seconds down per cycle (default: 40)")
    p.add_argument("--up", type=_seconds, metavar="S",
                   help="seconds up between cycles (default: --down)")
    cmd("set-rate", "set a port's rate: '200 Gb/sec (4X HDR)', or Gb/s at its current lanes",
        "ROOT", "DEV", "PORT", "RATE")
    p = cmd("set-ber", "set a port's pre-FEC bit error ratio from now on (its netdev's "
            "ethtool files)", "ROOT", "DEV", "PORT")
    p.add_argument("BER", type=float, help="e.g. 1e-8 (healthy) or 1e-4")
    # EFA health is its netdev's (netdev down: port --operstate down)
    p = cmd("carrier", "set the port netdev's carrier: 0 lost, 1 back (operstate untouched)",
            "ROOT", "DEV", "PORT")
    p.add_argument("VALUE", type=int, choices=(0, 1))
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
    p = cmd("reboot", "new boot_id, counters zeroed, ports back to the profile's state",
            "ROOT")
    p.add_argument("--sm-pending", action="store_true",
                   help="the InfiniBand ports come up waiting for the subnet manager (INIT, "
                        "link up, LIDs 0) until sm start or sm activate")
    p = cmd("set-optics", "rewrite a port's module diagnostics (every lane): Rx power in dBm, "
            "temperature in °C; or plug another kind of module", "ROOT", "DEV", "PORT")
    p.add_argument("--rx-power", type=float, metavar="DBM", help="-40 to 8")
    p.add_argument("--temperature", type=float, metavar="C", help="-40 to 125")
    p.add_argument("--tx-bias", type=float, metavar="MA",
                   help="0 to 131 (0: the local laser died)")
    p.add_argument("--tx-power", type=float, metavar="DBM", help="-40 to 8")
    p.add_argument("--module", choices=optics.KINDS, help="plug a module of this kind")
    p.add_argument("--lanes", metavar="LIST",
                   help="--rx-power, --tx-bias, --tx-power on these lanes only (5-8, 1,3)")
    p.add_argument("--twin", metavar="DEV[/PORT]",
                   help="with --module twin-port: the other host port the module serves")
    cmd("remove-device", "an IB device leaves the class directory (dir + class link); its "
        "PCI function stays on the bus (pci-remove takes the card off it)", "ROOT", "DEV")
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
    p.add_argument("--swap", nargs=2, metavar=("DEV", "OTHER"), default=(),
                   help="DEV and OTHER return under each other's names (probe order changed)")
    p.add_argument("--stagger", type=_seconds, default=0.0, metavar="S",
                   help="unload a third of the devices at a time, S seconds apart (blocks)")
    p = cmd("driver-unload", "every RDMA device vanishes at once (until driver-load)", "ROOT")
    p.add_argument("--stagger", type=_seconds, default=0.0, metavar="S",
                   help="a third of the devices at a time, S seconds apart (blocks), as an "
                        "unload with busy users does")
    p = cmd("driver-load", "the devices of driver-unload return, counters at zero", "ROOT")
    p.add_argument("--rename", action="store_true",
                   help="return under shifted names (mlx5_N -> mlx5_N+<device count>)")
    p.add_argument("--swap", nargs=2, metavar=("DEV", "OTHER"), default=(),
                   help="DEV and OTHER return under each other's names (probe order changed)")
    p = cmd("fw-reset", "firmware reset of DEV's card: its RDMA devices vanish while its "
            "PCI functions stay on the bus, and return with their counters at zero", "ROOT",
            "DEV")
    p.add_argument("--down", type=_seconds, default=30.0, metavar="S",
                   help="seconds the devices stay away (blocks; default 30)")
    cmd("pci-remove", "DEV's card falls off the PCI bus: RDMA devices, netdevs and PCI "
        "functions vanish (until pci-rescan)", "ROOT", "DEV")
    cmd("pci-rescan", "DEV's card is found on the PCI bus again (undo pci-remove); its "
        "devices return with their counters at zero", "ROOT", "DEV")
    p = cmd("sm", "the InfiniBand subnet manager: stop takes every ACTIVE InfiniBand port "
            "(of one SM with --sm-lid) to INIT/LinkUp without its LIDs, start brings them "
            "back, activate one port of DEV (a slow sweep), move puts DEV's port on another "
            "subnet (--sm-lid, --prefix)", "ROOT")
    p.add_argument("ACTION", choices=("stop", "start", "activate", "move"))
    p.add_argument("DEV", nargs="?", help="activate, move: the device")
    p.add_argument("--port", type=_port, metavar="N", help="activate, move: its port "
                   "(activate: default its first held; move: default 1)")
    p.add_argument("--sm-lid", metavar="LID", help="stop, start: that SM's ports only; "
                   "move: the new SM's LID (required)")
    p.add_argument("--prefix", metavar="GID_PREFIX",
                   help="move: the new subnet prefix, e.g. fe80:0000:0000:0001")
    # PCI side of a NIC
    p = cmd("pcie-degrade", "train a PCIe hop of DEV down (or back with --restore)", "ROOT",
            "DEV")
    p.add_argument("--hop", type=int, default=0, metavar="N",
                   help="0: the NIC's own link (default), 1: the next one up, ...")
    p.add_argument("--width", type=int, metavar="W", help="lanes, e.g. 8")
    p.add_argument("--speed", metavar="S", help='e.g. "16.0 GT/s PCIe"')
    p.add_argument("--upstream-max-speed", metavar="S",
                   help="make the port above slower (a Gen4 root port) and train to it")
    p.add_argument("--restore", action="store_true", help="retrain to what both ends support")
    p = cmd("aer", "add PCIe AER errors to DEV's function (or the port above it)", "ROOT",
            "DEV", "KIND")
    p.add_argument("--count", type=int, default=1, metavar="N", help="default 1")
    p.add_argument("--error", metavar="NAME", help="e.g. BadTLP, MalfTLP")
    p.add_argument("--upstream", action="store_true", help="the port above the NIC")
    p.add_argument("--rootport-only", action="store_true",
                   help="only the total of the root port above DEV (an error of another device "
                        "below it: a GPU, a switch port); by default the root port's total "
                        "counts the error too, as the kernel counts it")
    p = cmd("temp", "set DEV's ASIC temperature (degrees C)", "ROOT", "DEV", "CELSIUS")
    p.add_argument("--crit", type=float, metavar="C", help="also set its critical threshold")
    cmd("hide-class", "make sys/class/infiniband absent", "ROOT")
    # --- adapter
    for verb, text in (("chardev-remove", "remove a character device entry (or with --class "
                        "a whole class directory)"),
                       ("chardev-restore", "bring a removed character device entry back")):
        p = cmd(verb, text, "ROOT")
        p.add_argument("DEV", nargs="?")
        p.add_argument("--kind", default="umad", choices=("uverbs", "umad", "issm"),
                       help="default: umad")
        p.add_argument("--port", type=_port, default=1, help="default: 1")
        p.add_argument("--class", dest="klass", choices=("verbs", "mad"),
                       help="the whole sys/class/infiniband_verbs or infiniband_mad")
    cmd("unbind", "the driver lets go of DEV's PCI function: no RDMA device, netdev or "
        "character devices; the function stays on the bus", "ROOT", "DEV")
    p = cmd("bind", "undo unbind (or with --driver hand the unbound function to another "
            "driver: a driver link, no RDMA device or netdev)", "ROOT", "DEV")
    p.add_argument("--driver", metavar="NAME",
                   help="e.g. vfio-pci (passthrough); default: mlx5_core, undoing unbind")
    cmd("fw", "a firmware flash: rewrite DEV's fw_ver", "ROOT", "DEV", "VERSION")
    p = cmd("link-admin", "ip link set <netdev of DEV> up|down (flags IFF_UP; down also "
            "sets operstate down)", "ROOT", "DEV", "STATE")
    p.add_argument("--port", type=_port, default=1, help="default: 1")
    cmd("unhide-class", "bring sys/class/infiniband back", "ROOT")
    # The kernel log: real journal files the daemon reads with kernelLogPath.
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
        vfs=a.vfs,
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
    bits = mutate.counter_width(a.ROOT, a.DEV, a.PORT, a.NAME)
    if bits is not None and bits < 64 and value >> bits:
        print(f"note: {a.NAME} has {bits} bits on the hardware: nichealthd takes {value} as "
              f"unreadable, not as errors (--hardware-semantics saturates or wraps --add as "
              f"the hardware does)", file=sys.stderr)


def _flap(a: argparse.Namespace) -> None:
    def tick(cycle: int, phase: str) -> None:
        print(f"{a.DEV} port {a.PORT} cycle {cycle}/{a.cycles}: {phase}", flush=True)

    mutate.flap(a.ROOT, a.DEV, a.PORT, cycles=a.cycles, down=a.down, up=a.up, tick=tick)


def _set_rate(a: argparse.Namespace) -> None:
    print(f"{a.DEV} port {a.PORT} rate = {mutate.set_rate(a.ROOT, a.DEV, a.PORT, a.RATE)}")


def _set_ber(a: argparse.Namespace) -> None:
    netdev = mutate.set_ber(a.ROOT, a.DEV, a.PORT, a.BER)
    print(f"{a.DEV} port {a.PORT} ({netdev}) pre-FEC BER = {a.BER:g}")


def _carrier(a: argparse.Namespace) -> None:
    mutate.carrier(a.ROOT, a.DEV, a.PORT, a.VALUE)


def _reset(a: argparse.Namespace) -> None:
    mutate.reset_counters(a.ROOT, a.DEV, a.PORT)


def _reboot(a: argparse.Namespace) -> None:
    if a.sm_pending:
        boot_id, held = subnet.hold(a.ROOT)
        print(f"boot_id {boot_id}; waiting for the SM: " + " ".join(f"{d}/{p}" for d, p in held))
    else:
        print(f"boot_id {mutate.reboot(a.ROOT)}")


def _sm(a: argparse.Namespace) -> None:
    """``sm ROOT stop|start|activate|move``: prints the ports (move: the new subnet)."""
    if a.ACTION in ("activate", "move") and not a.DEV:
        raise SimError(f"sm {a.ACTION}: give the device (DEV)")
    if a.ACTION == "move":
        if not a.sm_lid:
            raise SimError("sm move: give the new SM's LID (--sm-lid)")
        print(subnet.move(a.ROOT, a.DEV, a.port or 1, a.sm_lid, a.prefix))
        return
    if a.ACTION == "activate":
        ports = subnet.activate(a.ROOT, a.DEV, a.port)
    else:
        ports = (subnet.stop if a.ACTION == "stop" else subnet.start)(a.ROOT, a.sm_lid)
    print(" ".join(f"{d}/{p}" for d, p in ports))


def _set_optics(a: argparse.Namespace) -> None:
    manifest = tree.load(Path(a.ROOT))
    dev = tree.device(manifest, a.DEV)
    twin = None
    if a.twin:
        name, _, number = a.twin.partition("/")
        try:
            twin = (tree.device(manifest, name), _port(number or "1"))
        except argparse.ArgumentTypeError as exc:
            raise SimError(f"--twin {a.twin}: {exc}") from None
    changed = optics.set_optics(a.ROOT, dev, a.PORT, rx_power=a.rx_power,
                                temperature=a.temperature, tx_bias=a.tx_bias,
                                tx_power=a.tx_power, module=a.module, lanes=a.lanes,
                                twin=twin)
    print(f"{a.DEV} port {a.PORT} module: {', '.join(changed)}")


def _chardev(a: argparse.Namespace, remove: bool) -> None:
    if a.klass:
        (adapter.remove_class if remove else adapter.restore_class)(a.ROOT, a.klass)
        return
    if not a.DEV:
        raise SimError("give DEV (or --class verbs|mad)")
    func = adapter.remove_chardev if remove else adapter.restore_chardev
    print(func(a.ROOT, a.DEV, a.kind, a.port))


def _link_admin(a: argparse.Namespace) -> None:
    if a.STATE not in ("up", "down"):
        raise SimError(f"STATE is up or down, got {a.STATE!r}")
    adapter.link_admin(a.ROOT, a.DEV, a.STATE == "up", a.port)


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


def _aer(a: argparse.Namespace) -> None:
    if a.rootport_only:
        address, value = pcifiles.rootport_aer(_function(a), a.KIND, a.count)
        print(f"root port {address}: {pcifiles.ROOTPORT[a.KIND]} = {value}")
        return
    print(f"{a.KIND} total = "
          f"{pcifiles.aer(_function(a), a.KIND, a.count, a.error, a.upstream)}")


def _function(a: argparse.Namespace) -> Path:
    """DEV's PCI function directory (the PCI-side mutations)."""
    return pcifiles.device_function(a.ROOT, tree.device(tree.load(Path(a.ROOT)), a.DEV))


HANDLERS: Dict[str, Callable[[argparse.Namespace], None]] = {
    "profiles": _profiles,
    "demo": _demo,
    "create": _create,
    "show": lambda a: print(tree.show(a.ROOT), end=""),
    "port": _port_cmd,
    "uncable": lambda a: mutate.uncable(a.ROOT, a.DEV, a.PORT),
    "recable": lambda a: mutate.recable(a.ROOT, a.DEV, a.PORT),
    "carrier": _carrier,
    "counter": _counter,
    "flap": _flap,
    "set-rate": _set_rate,
    "set-ber": _set_ber,
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
    "driver-reload": lambda a: _renamed(mutate.driver_reload(a.ROOT, a.down, a.rename,
                                                             swap=a.swap,
                                                             stagger=a.stagger)),
    "driver-unload": lambda a: print(
        f"{len(mutate.unload_driver(a.ROOT, a.stagger))} devices gone"),
    "fw-reset": lambda a: print(" ".join(pcibus.firmware_reset(a.ROOT, a.DEV, a.down))),
    "pci-remove": lambda a: print(" ".join(pcibus.pci_remove(a.ROOT, a.DEV))),
    "pci-rescan": lambda a: print(" ".join(pcibus.pci_rescan(a.ROOT, a.DEV))),
    "sm": _sm,
    "driver-load": lambda a: _renamed(mutate.load_driver(a.ROOT, a.rename, a.swap)),
    "pcie-degrade": lambda a: print(pcifiles.pcie_degrade(
        _function(a), a.hop, a.width, a.speed, a.upstream_max_speed, a.restore)),
    "aer": _aer,
    "temp": lambda a: print(pcifiles.temperature(_function(a), float(a.CELSIUS), a.crit)),
    "set-optics": _set_optics,
    "hide-class": lambda a: mutate.hide_class(a.ROOT),
    "chardev-remove": lambda a: _chardev(a, remove=True),
    "chardev-restore": lambda a: _chardev(a, remove=False),
    "unbind": lambda a: print(adapter.unbind(a.ROOT, a.DEV)),
    "bind": lambda a: print(adapter.bind(a.ROOT, a.DEV, a.driver)),
    "fw": lambda a: adapter.set_firmware(a.ROOT, a.DEV, a.VERSION),
    "link-admin": lambda a: _link_admin(a),
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
