#!/usr/bin/env python3
"""ListPorts latency on a 128-port sim host while nichealthd polls every second.

Starts a private dbus-daemon (the test bus config, with the project's policy), builds a
``nichealthd-sim`` tree with ``--profile synthetic --devices 128``, runs nichealthd on it as a
subprocess (``--dbus system --polling-interval 1s``) and calls ListPorts back to back from a
dbus-fast client for ``--seconds`` (so many calls overlap polls). Prints the figures; the
target is p99 < 20 ms. Run from the repository root:

    python bench/dbus_latency.py [--devices 128] [--seconds 15] [--interval 1s]
"""

from __future__ import annotations

import argparse
import asyncio
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path[:0] = [str(REPO), str(REPO / "tests" / "dbus")]

from testbus import start_bus  # noqa: E402

from nichealthd.sim import tree  # noqa: E402
from nichealthd.surfaces.dbus_common import (  # noqa: E402
    BUS_NAME,
    INTERFACE,
    OBJECT_PATH,
    BusType,
    Message,
    MessageBus,
    harden_writer,
)


def percentile(values: list[float], q: float) -> float:
    ordered = sorted(values)
    index = min(len(ordered) - 1, max(0, round(q / 100 * (len(ordered) - 1))))
    return ordered[index]


async def measure(seconds: float) -> tuple[list[float], int, int, int]:
    bus = await MessageBus(bus_type=BusType.SYSTEM).connect()
    harden_writer(bus)

    def call(member: str, signature: str = "", body: list[object] | None = None) -> Message:
        return Message(destination=BUS_NAME, path=OBJECT_PATH, interface=INTERFACE,
                       member=member, signature=signature, body=body or [])

    async def polls() -> int:
        reply = await bus.call(call("GetStatus"))
        return int(reply.body[0]["poll_count"].value)

    # Wait until the daemon has polled twice (counters have rates, caches are warm once).
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline:
        try:
            if await polls() >= 2:
                break
        except (KeyError, IndexError, TypeError):  # not on the bus yet (an error reply)
            pass
        await asyncio.sleep(0.2)
    first_polls = await polls()
    latencies: list[float] = []
    ports = 0
    end = time.monotonic() + seconds
    while time.monotonic() < end:
        started = time.perf_counter()
        reply = await bus.call(call("ListPorts"))
        latencies.append((time.perf_counter() - started) * 1000)
        ports = len(reply.body[0])
    last_polls = await polls()
    bus.disconnect()
    return latencies, ports, first_polls, last_polls


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--devices", type=int, default=128)
    parser.add_argument("--seconds", type=float, default=15.0)
    parser.add_argument("--interval", default="1s")
    args = parser.parse_args()
    for tool in ("dbus-daemon",):
        if shutil.which(tool) is None:
            print(f"{tool} is required", file=sys.stderr)
            return 1
    work = Path(tempfile.mkdtemp(prefix="nichealthd-bench-"))
    bus = start_bus()
    os.environ["DBUS_SYSTEM_BUS_ADDRESS"] = bus.address
    root = work / "host"
    tree.create(root, "synthetic", devices=args.devices)
    log = open(work / "daemon.log", "wb")  # noqa: SIM115
    daemon = subprocess.Popen(
        [sys.executable, "-m", "nichealthd.runtime.daemon",
         "--config", str(root / "nichealthd.toml"),
         "--dbus", "system", "--polling-interval", args.interval, "--event-log", ""],
        cwd=REPO, env=dict(os.environ, PYTHONPATH=str(REPO)), stdout=log,
        stderr=subprocess.STDOUT)
    try:
        # measure() waits for the daemon's first polls; only a daemon that died is fatal.
        time.sleep(1.0)
        if daemon.poll() is not None:
            print((work / "daemon.log").read_text(), file=sys.stderr)
            return 1
        latencies, ports, before, after = asyncio.run(measure(args.seconds))
    finally:
        daemon.terminate()
        daemon.wait(15)
        log.close()
        bus.stop()
        shutil.rmtree(work, ignore_errors=True)
    print(f"ListPorts on a {args.devices}-device synthetic host ({ports} ports), nichealthd "
          f"polling every {args.interval}")
    print(f"  calls      {len(latencies)} in {args.seconds:g} s "
          f"(polls during the run: {after - before})")
    print(f"  median     {statistics.median(latencies):.2f} ms")
    print(f"  p90        {percentile(latencies, 90):.2f} ms")
    print(f"  p99        {percentile(latencies, 99):.2f} ms   (target < 20 ms)")
    print(f"  max        {max(latencies):.2f} ms")
    return 0


if __name__ == "__main__":
    sys.exit(main())
