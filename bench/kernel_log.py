"""The cost of following the kernel log: idle, and 1,000 kernel lines per second.

Builds a real journal directory (systemd-journal-remote from the export format, as the tests
do), then drives the in-process path of one poll for the kernel log: the journal source's read
from the committed cursor plus the kernel-log family's evaluation of the lines, on a 8-device
snapshot. "idle": no new line per poll. "1000/s": 1,000 new kernel lines per 1 s poll (one
mlx5 fault line in 20, the rest unrelated lines); the journal writes happen between the timed
reads and are not counted. "repeating": the same, with the fault a TX timeout, a non-fatal rule
whose every line is counted in the repetition window; the ACCESS_REG fault of the
other load is not. Prints CPU (process_time) and wall per poll, and CPU % of one core
at a 1 s poll interval. Needs python3-systemd (or systemd-python) and systemd-journal-remote.

    python3 bench/kernel_log.py [--polls N] [--rate LINES_PER_S]
"""

from __future__ import annotations

import argparse
import statistics
import sys
import tempfile
import time
from dataclasses import replace
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

from nichealthd.core.checks.kernel_log import KERNEL_LOG, KernelLogSection, KernelLogSettings
from nichealthd.core.config_build import build_config
from nichealthd.core.evaluate import PollMemory, evaluate
from nichealthd.core.model import DeviceSnapshot, HostSnapshot, PortSnapshot
from nichealthd.core.state import MonitorState
from nichealthd.core.topology import GpuTopology, Topology
from nichealthd.sim.journal import export_entry, write_entries
from nichealthd.sources.kernel_log import JournalSource

BOOT = "0123456789abcdef0123456789abcdef"
FAULT = ("mlx5_core 0000:{bus:02x}:00.0: mlx5_cmd_out_err:838:(pid 9): ACCESS_REG(0x805) "
         "op_mod(0x1) failed, status bad parameter(0x3), syndrome (0x6c4d4c), err(-22)")
REPEATING = "mlx5_core 0000:{bus:02x}:00.0 ib{port}: TX timeout detected"
NOISE = "audit: type=1400 audit({n}.000:1): apparmor=\"ALLOWED\" operation=\"open\" n={n}"


def snapshot(now: datetime) -> HostSnapshot:
    devices = tuple(
        DeviceSnapshot(name=f"mlx5_{i}", pci_address=f"0000:{0x10 + i:02x}:00.0",
                       driver="mlx5_core", vendor="0x15b3", numa_node=0,
                       netdevs=(f"ib{i}",),
                       ports=(PortSnapshot(f"mlx5_{i}", 1, "InfiniBand", "4: ACTIVE",
                                           "5: LinkUp", netdev=f"ib{i}"),))
        for i in range(8))
    return HostSnapshot(now, BOOT, devices)


def batch(first: int, count: int, start_usec: int, fault: str = FAULT) -> list[bytes]:
    out = []
    for k in range(count):
        n = first + k
        text = (fault.format(bus=0x10 + n % 8, port=n % 8) if n % 20 == 0
                else NOISE.format(n=n))
        out.append(export_entry(text, BOOT, start_usec + k * 1000, 1_000_000 + n))
    return out


def run(polls: int, rate: int, directory: Path, fault: str = FAULT) -> dict[str, Any]:
    config = build_config({"nodeName": "bench"}, None, {})
    topology = Topology(GpuTopology(frozenset({0}), (), {}))
    source = JournalSource(str(directory))
    state = MonitorState(boot_id=BOOT)
    memory = PollMemory()
    written = 0
    cpu: list[float] = []
    read_cpu: list[float] = []
    wall: list[float] = []
    lines_seen = 0
    events = 0
    base = int(time.time() * 1e6)
    for poll in range(polls + 3):
        if rate:
            write_entries(directory, batch(written, rate, base + poll * 1_000_000, fault))
            written += rate
        now = datetime.now(timezone.utc)
        c0, w0 = time.process_time(), time.perf_counter()
        committed = state.section(KERNEL_LOG).cursor
        lines, cursor = source.read(committed, BOOT,
                                    config.settings(KernelLogSettings).kernel_log_max_lines)
        c_read = time.process_time()
        snap = replace(snapshot(now), kernel_lines=lines, kernel_cursor=cursor)
        result = evaluate(state, snap, config, topology, memory, now, baseline=poll == 0)
        c1, w1 = time.process_time(), time.perf_counter()
        state, memory = result.state, result.memory
        if poll >= 3:  # warm-up polls are not counted
            cpu.append(c1 - c0)
            read_cpu.append(c_read - c0)
            wall.append(w1 - w0)
            lines_seen += len(lines)
            events += sum(1 for e in result.events if e.check_name == "SysLogsNICDriverError"
                          or e.error_code[0].endswith("_repeated"))
    source.close()
    section: KernelLogSection = state.section(KERNEL_LOG)
    return {"cpu": cpu, "read": read_cpu, "wall": wall, "lines": lines_seen, "events": events,
            "matches": sum(section.counts.values())}


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--polls", type=int, default=30)
    parser.add_argument("--rate", type=int, default=1000, help="kernel lines per 1 s poll")
    args = parser.parse_args()
    print(f"kernel log via the journal, 8 devices, {args.polls} polls after 3 warm-up")
    print("CPU/poll: the journal read plus the whole poll's evaluation (every family); "
          "read: the journal part alone")
    print(f"{'load':<14}{'CPU/poll ms (median, max)':<28}{'read ms':<10}"
          f"{'wall/poll ms':<14}{'CPU % at 1 s':<14}lines/matches/events")
    for label, rate, fault in (("idle", 0, FAULT), (f"{args.rate} lines/s", args.rate, FAULT),
                               ("  repeating", args.rate, REPEATING)):
        with tempfile.TemporaryDirectory(prefix="nichealthd-bench-journal-") as tmp:
            directory = Path(tmp)
            write_entries(directory, batch(0, 10, int(time.time() * 1e6) - 10_000_000))
            got = run(args.polls, rate, directory, fault)
        cpu_ms = [c * 1000 for c in got["cpu"]]
        wall_ms = [w * 1000 for w in got["wall"]]
        median = statistics.median(cpu_ms)
        read_ms = statistics.median(c * 1000 for c in got["read"])
        print(f"{label:<14}{median:>8.2f} {max(cpu_ms):>8.2f}{'':<11}{read_ms:>7.2f}{'':<3}"
              f"{statistics.median(wall_ms):>8.2f}{'':<6}{median / 10:>6.2f} %{'':<6}"
              f"{got['lines']}/{got['matches']}/{got['events']}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
