#!/usr/bin/env python3
"""Varlink latency and its effect on polling: ListPorts/ListCounters on a sim host while
nichealthd polls, and the poll period seen while bad clients hammer the socket.

Builds a ``nichealthd-sim`` tree (``--profile synthetic --devices N``), runs nichealthd on it
(``--dbus none --varlink-socket DIR/io.nichealthd.Monitor``, debug log for the poll starts),
then for ``--seconds`` each:

1. calls ``ListPorts`` back to back on one connection (median, p99, calls/s);
2. the same with ``ListCounters`` (the largest answer);
3. runs 8 flooding clients (pipelined ListCounters without reading, garbage, reconnects)
   beside one well-behaved client, and prints the spread of the daemon's poll start times
   (from its debug log): polling must stay on its schedule.

Run from the repository root:

    python bench/varlink_latency.py [--devices 128] [--seconds 10] [--interval 1s]
"""

from __future__ import annotations

import argparse
import os
import re
import shutil
import signal
import socket
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path[:0] = [str(REPO)]

from nichealthd.sim import tree  # noqa: E402
from nichealthd.surfaces.varlink_protocol import encode_call  # noqa: E402

M = "io.nichealthd.Monitor."


def percentile(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, max(0, round(q / 100 * (len(ordered) - 1))))]


def ask(sock: socket.socket, method: str, buffer: bytearray) -> bytes:
    sock.sendall(encode_call(method))
    while True:
        end = buffer.find(b"\0")
        if end >= 0:
            data = bytes(buffer[:end])
            del buffer[:end + 1]
            return data
        chunk = sock.recv(1 << 20)
        if not chunk:
            raise ConnectionError("closed")
        buffer += chunk


def latency(path: str, method: str, seconds: float) -> tuple[list[float], int]:
    sock = socket.socket(socket.AF_UNIX)
    sock.connect(path)
    buffer = bytearray()
    times: list[float] = []
    size = 0
    end = time.monotonic() + seconds
    while time.monotonic() < end:
        start = time.perf_counter()
        size = len(ask(sock, M + method, buffer))
        times.append((time.perf_counter() - start) * 1000)
    sock.close()
    return times, size


def flood(path: str, stop: threading.Event, kind: int) -> None:
    while not stop.is_set():
        try:
            sock = socket.socket(socket.AF_UNIX)
            sock.connect(path)
            sock.settimeout(0.5)
            if kind == 0:  # pipelined calls, never read
                sock.sendall(encode_call(M + "ListCounters") * 2000)
            elif kind == 1:  # garbage
                sock.sendall(os.urandom(8192) + b"\0")
            else:  # connect, one call, go
                sock.sendall(encode_call(M + "GetStatus"))
            sock.close()
        except OSError:
            pass


def poll_starts(log: Path) -> list[float]:
    return [float(m) for m in re.findall(r"poll started at monotonic ([0-9.]+)",
                                         log.read_text(errors="replace"))]


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--devices", type=int, default=128)
    parser.add_argument("--seconds", type=float, default=10.0)
    parser.add_argument("--interval", default="1s")
    args = parser.parse_args()
    work = Path(tempfile.mkdtemp(prefix="nichealthd-bench-vl-"))
    root = work / "host"
    tree.create(root, "synthetic", devices=args.devices)
    path = str(work / "io.nichealthd.Monitor")
    log = work / "daemon.log"
    with open(log, "wb") as out:
        proc = subprocess.Popen(
            [sys.executable, "-m", "nichealthd.runtime.daemon", "--config",
             str(root / "nichealthd.toml"), "--dbus", "none", "--polling-interval",
             args.interval, "--varlink-socket", path, "--log-level", "debug"],
            cwd=REPO, stdout=out, stderr=subprocess.STDOUT,
            env=dict(os.environ, PYTHONPATH=str(REPO)))
    try:
        deadline = time.monotonic() + 60
        while "ready:" not in log.read_text(errors="replace"):
            if time.monotonic() > deadline or proc.poll() is not None:
                print(log.read_text()[-2000:])
                return 1
            time.sleep(0.1)
        print(f"host: synthetic, {args.devices} devices; polling every {args.interval}")
        for method in ("ListPorts", "ListCounters"):
            times, size = latency(path, method, args.seconds)
            print(f"{method:13s} {len(times) / args.seconds:8.0f} calls/s  median "
                  f"{statistics.median(times):6.2f} ms  p99 {percentile(times, 99):6.2f} ms  "
                  f"max {max(times):6.2f} ms  ({size} bytes)")
        before = len(poll_starts(log))
        stop = threading.Event()
        threads = [threading.Thread(target=flood, args=(path, stop, i % 3), daemon=True)
                   for i in range(8)]
        for thread in threads:
            thread.start()
        times, _ = latency(path, "ListPorts", args.seconds)
        stop.set()
        for thread in threads:
            thread.join(5)
        starts = poll_starts(log)[before:]
        gaps = [b - a for a, b in zip(starts, starts[1:])]
        print(f"under flood   ListPorts median {statistics.median(times):6.2f} ms  p99 "
              f"{percentile(times, 99):6.2f} ms; poll period min {min(gaps):.3f} s  max "
              f"{max(gaps):.3f} s over {len(gaps)} polls")
        print(f"daemon log lines about bad clients: "
              f"{log.read_text(errors='replace').count('varlink connection')}")
        return 0
    finally:
        proc.send_signal(signal.SIGTERM)
        proc.wait(30)
        shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    sys.exit(main())
