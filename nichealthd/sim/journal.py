"""Kernel log lines of a simulated host, written as real journal files.

Entries are built in the journal export format and written by ``systemd-journal-remote -o FILE
-`` (Debian package systemd-journal-remote), which appends to an existing file: the daemon
reads them with the same journal reader it uses on a real host (``kernelLogPath``). The lines
are the mlx5 driver's real message formats (see nichealthd/core/kernel_rules.py).
"""

from __future__ import annotations

import os
import shutil
import subprocess
import time
from pathlib import Path
from typing import Dict, Iterable, List, Optional, Sequence, Tuple

from . import tree
from .fsio import PathLike, SimError

JOURNAL_DIR = "journal"  # under ROOT, the default for kernel-log
JOURNAL_FILE = "kernel.journal"
MACHINE_ID = "5f1c2a7e9d3b4c6a8e0f1a2b3c4d5e6f"
REMOTE = ("/lib/systemd/systemd-journal-remote", "/usr/lib/systemd/systemd-journal-remote")

# {pci}: the device's PCI function; {netdev}: its first interface.
LINES: Dict[str, str] = {
    "cmd_exec_timeout": "mlx5_core {pci}: wait_func:1189:(pid 72061): ACCESS_REG(0x805) "
                        "timeout. Will cause a leak of a command resource",
    "health_poll_failed": "mlx5_core {pci}: poll_health:825:(pid 0): device's health "
                          "compromised - reached miss count",
    "unrecoverable_err": "mlx5_core {pci}: print_health_info:431:(pid 0): synd 0x8: "
                         "unrecoverable hardware error",
    "netdev_watchdog": "NETDEV WATCHDOG: {netdev} (mlx5_core): transmit queue 3 timed out "
                       "5120 ms",
    "netdev_watchdog_6.8": "mlx5_core {pci} {netdev}: NETDEV WATCHDOG: CPU: 7: transmit queue "
                           "3 timed out 5120 ms",
    "mlx5_tx_timeout_detected": "mlx5_core {pci} {netdev}: TX timeout detected",
    "mlx5_rx_timeout_detected": "mlx5_core {pci} {netdev}: RX timeout on channel: 4, ICOSQ: "
                                "0x1a, RQ: 0x1b, CQ: 0x1c",
    "mlx5_napi_soft_lockup": "watchdog: BUG: soft lockup - CPU#12 stuck for 22s! "
                             "[kworker/12:1:1234]\n"
                             " mlx5e_napi_poll+0x12d/0x6c0 [mlx5_core]",
    "pci_power_insufficient": "mlx5_core {pci}: mlx5_pcie_event:299:(pid 268): Detected "
                              "insufficient power on the PCIe slot (27W).",
    "port_module_high_temp": "mlx5_core {pci}: Port module event[error]: module 0, Cable "
                             "error, High Temperature",
    "access_reg_failed": "mlx5_core {pci}: mlx5_cmd_out_err:838:(pid 9): ACCESS_REG(0x805) "
                         "op_mod(0x1) failed, status bad parameter(0x3), syndrome (0x6c4d4c), "
                         "err(-22)",
    "module_unplugged": "mlx5_core {pci}: Port module event: module 0, Cable unplugged",
    "unrelated": "mlx5_core {pci}: firmware version: 28.39.1002",
}


def remote_binary() -> Optional[str]:
    for path in REMOTE:
        if os.access(path, os.X_OK):
            return path
    return shutil.which("systemd-journal-remote")


def export_entry(message: str, boot_id: str, realtime_usec: int, monotonic_usec: int,
                 hostname: str = "simhost") -> bytes:
    """One kernel-transport entry in the journal export format."""
    fields = [
        ("__REALTIME_TIMESTAMP", str(realtime_usec)),
        ("__MONOTONIC_TIMESTAMP", str(monotonic_usec)),
        ("_BOOT_ID", boot_id.replace("-", "").strip()),
        ("_MACHINE_ID", MACHINE_ID), ("_HOSTNAME", hostname), ("_TRANSPORT", "kernel"),
        ("SYSLOG_FACILITY", "0"), ("SYSLOG_IDENTIFIER", "kernel"), ("PRIORITY", "3"),
        ("MESSAGE", message),
    ]
    out = bytearray()
    for key, value in fields:
        if "\n" in value:  # binary-safe form: name, newline, 64-bit LE length, data
            data = value.encode()
            out += key.encode() + b"\n" + len(data).to_bytes(8, "little") + data + b"\n"
        else:
            out += f"{key}={value}\n".encode()
    return bytes(out) + b"\n"


def write_entries(target: PathLike, entries: Iterable[bytes]) -> Path:
    """Append entries to the journal file ``target`` (a directory: its kernel.journal)."""
    path = Path(target)
    if path.is_dir() or not path.suffix:
        path.mkdir(parents=True, exist_ok=True)
        path = path / JOURNAL_FILE
    binary = remote_binary()
    if binary is None:
        raise SimError("systemd-journal-remote is not installed (Debian: apt-get install "
                       "systemd-journal-remote)")
    done = subprocess.run([binary, "-o", str(path), "-"], input=b"".join(entries),
                          capture_output=True, check=False)
    if done.returncode != 0:
        raise SimError(f"systemd-journal-remote failed: "
                       f"{done.stderr.decode(errors='replace').strip()}")
    return path


def line_for(root: PathLike, dev: str, rule: str) -> List[str]:
    """The kernel line(s) of RULE for device DEV of the fake host (``host``: no device)."""
    if rule not in LINES:
        raise SimError(f"unknown rule {rule!r}; known: {', '.join(sorted(LINES))}")
    pci, netdev = "0000:ff:00.0", "eth9"
    if dev != "host":
        device = tree.device(tree.load(Path(root)), dev)
        pci = device["pci"]
        netdevs = [p["netdev"] for p in device["ports"].values() if p.get("netdev")] \
            if isinstance(device.get("ports"), dict) else []
        netdev = netdevs[0] if netdevs else netdev
    return LINES[rule].format(pci=pci, netdev=netdev).split("\n")


def kernel_log(root: PathLike, dev: str, rule: str, *, journal: Optional[PathLike] = None,
               count: int = 1, interval: float = 0.0, text: Optional[str] = None,
               start: Optional[float] = None) -> Tuple[Path, int]:
    """Append ``count`` repeats of RULE's line for DEV (or ``text``) to the host's journal.

    Entries carry the host's boot ID and wall times ``start`` (default now) plus
    ``interval`` seconds per repeat. Returns the journal file and the entries written.
    """
    top = Path(root)
    boot_id = (top / tree.BOOT_ID).read_text().strip()
    lines: Sequence[str] = [text] if text is not None else line_for(top, dev, rule)
    now = time.time() if start is None else start
    mono = int(time.monotonic() * 1e6)
    entries = []
    for i in range(count):
        for j, line in enumerate(lines):
            usec = int((now + i * interval) * 1e6) + j
            entries.append(export_entry(line, boot_id, usec, mono + i * 1000 + j))
    target = Path(journal) if journal is not None else top / JOURNAL_DIR
    return write_entries(target, entries), len(entries)
