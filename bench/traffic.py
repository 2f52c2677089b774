"""A busy healthy host: the traffic counters of every port of a sim tree move once a second.

What a training node looks like to a NIC health monitor: data, packet and wait counters rise
every second, error counters do not. bench/run.py measures this by default (``--quiet-tree``:
every counter still, as before 2026-12-02); it runs the writer as a process of its own, so that
its CPU is no part of the in-process poll it measures beside it:

    python3 bench/traffic.py ROOT    # until killed

Values are written in place (the reader keeps the files open), at a 400 Gb/s port's pace: the
PMA data counters count 4-byte words, ``port_xmit_wait`` ticks (32 bits, saturating: about
ten days at this pace from 0, so a bench never reaches it) and the RDMA receive counters of
``hw_counters/``.
"""

from __future__ import annotations

import os
import signal
import sys
import time
from pathlib import Path
from types import FrameType
from typing import Optional

# Per second and port: 400 Gb/s of 4 KiB packets, in the units of each file.
PACE = {
    "counters/port_xmit_data": 12_500_000_000,  # 4-byte words
    "counters/port_rcv_data": 12_500_000_000,
    "counters/port_xmit_packets": 12_000_000,
    "counters/port_rcv_packets": 12_000_000,
    "counters/unicast_xmit_packets": 12_000_000,
    "counters/unicast_rcv_packets": 12_000_000,
    "counters/multicast_xmit_packets": 10,
    "counters/multicast_rcv_packets": 10,
    "counters/port_xmit_wait": 5_000,
    "hw_counters/rx_write_requests": 3_000_000,
    "hw_counters/rx_read_requests": 1_000_000,
}


class Traffic:
    """The moving counter files of a tree, each kept open, and their values."""

    def __init__(self, root: Path) -> None:
        self.files: list[tuple[int, int]] = []  # (fd, per second)
        self.values: list[int] = []
        for port in sorted((root / "sys" / "class" / "infiniband").glob("*/ports/*")):
            for name, pace in PACE.items():
                path = port / name
                if not path.is_file():
                    continue
                fd = os.open(path, os.O_RDWR)
                self.files.append((fd, pace))
                self.values.append(int(os.pread(fd, 64, 0) or b"0"))

    def tick(self, seconds: float = 1.0) -> None:
        """Every file ``seconds`` of traffic further."""
        for index, (fd, pace) in enumerate(self.files):
            value = self.values[index] = self.values[index] + int(pace * seconds)
            data = f"{value}\n".encode()
            os.pwrite(fd, data, 0)
            os.ftruncate(fd, len(data))

    def close(self) -> None:
        for fd, _ in self.files:
            os.close(fd)


def run(root: Path) -> None:
    """Tick once a second, a quarter second into each (the bench polls elsewhere in it)."""
    traffic = Traffic(root)
    stop = False

    def stopped(signum: int, frame: Optional[FrameType]) -> None:
        nonlocal stop
        stop = True

    signal.signal(signal.SIGTERM, stopped)
    try:
        while not stop:
            time.sleep(1 - (time.time() - 0.25) % 1)
            traffic.tick()
    finally:
        traffic.close()


if __name__ == "__main__":
    run(Path(sys.argv[1]))
