#!/usr/bin/env python3
"""nichealthd benchmark: what one poll costs, what the running daemon costs, how fast it reacts.

Run from the repository root (no install needed; the Python that runs it needs the daemon's
dependencies, e.g. the project venv):

    python3 bench/run.py            # 8, 34 and 128 devices, about 4 minutes per size
    python3 bench/run.py --quick    # smoke run: 8 devices, seconds per phase

For each fake host (``nichealthd-sim`` synthetic profile) it prints:

1. poll cycle  - CPU and wall time of ``Monitor.poll()`` driven in-process (median, p99), back
                 to back and once a second, and the share of its sysfs read,
2. daemon      - CPU % of one core and peak RSS (VmHWM) of a real ``nichealthd`` at 1 s polling,
3. syscalls    - ``strace -c -f`` attached to that daemon after warm-up, divided by the counter
                 values it read in the window (steady state, including periodic re-discovery),
4. peer        - CPU per scrape of Debian's ``prometheus-node-exporter`` (infiniband collector
                 only) on the same tree, and nichealthd's CPU per cycle relative to it,
5. latency     - time from a fault written to the tree to its line in the event log,
6. VF host     - the daemon on 8 PFs with 127 SR-IOV VFs each beside the same 8 PFs without
                 VFs, both at once (``--vf-host``; on by default when 8 is among the sizes).

The tree is a busy healthy host (bench/traffic.py: data, packet and wait counters move every
second, error counters do not); ``--quiet-tree`` leaves every counter still.

Targets are ratios of figures measured side by side in one run, printed next to each figure as
PASS/FAIL (absolute targets only with ``--absolute``, for a quiet machine); nothing is asserted.
See bench/README.md.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import logging
import os
import platform
import random
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
import urllib.request
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable, Optional

REPO = Path(__file__).resolve().parents[1]
sys.path[:0] = [str(REPO), str(REPO / "tests" / "dbus")]

from probe import Probe  # noqa: E402
from testbus import start_bus  # noqa: E402

from nichealthd.sim import mutate, tree  # noqa: E402
from nichealthd.sources.config_file import load_config  # noqa: E402
from nichealthd.sources.sysfs import SysfsReader  # noqa: E402
from nichealthd.surfaces.seam import surfaces  # noqa: E402

surfaces()  # the surfaces' keys (a sim host's platformConnectorSocket) are the config's
TARGET_HOST = 34
# Ratios, each of two figures measured side by side in one run (load-independent; judged on
# every machine). The daemon and node_exporter are compared both woken once a second, and the
# daemon with its own poll driven in-process at the same pace (like for like: a poll after a
# 1 s sleep runs on cold caches and costs 1.5-3x a back-to-back one).
TARGET_DAEMON_TO_POLL = 1.5     # whole daemon CPU per cycle / in-process poll, both each 1 s
TARGET_RATIO = 0.35             # whole daemon CPU per cycle / node_exporter scrape each 1 s
TARGET_POLL_TO_READ = 2.0       # in-process poll CPU / its sysfs reads' CPU
TARGET_SYSCALLS = 1.5           # syscalls per counter value
TARGET_RSS_MIB = 35.0           # peak RSS at TARGET_HOST devices, no connector socket
TARGET_VF_RATIO = 1.2           # daemon CPU on 8 PFs x 127 VFs / on the same 8 PFs alone
VF_HOST = (8, 127)              # PFs, VFs of each: SR-IOV as cloud and Kubernetes hosts run it
SCRAPES_TIMED = 10              # /metrics scrapes whose CPU the VF host section prints
LATENCY_SLACK = 0.050           # fault -> event <= interval + this
# Absolute figures: judged only with --absolute, on a quiet (GPU) machine.
TARGET_CYCLE_CPU = 0.005
TARGET_CPU_PERCENT = 0.3
INTERVAL = 1.0
TICK = os.sysconf("SC_CLK_TCK")


@dataclass
class Settings:
    sizes: list[int]
    cycles: int
    warmup: float
    duration: float
    strace_window: float
    scrapes: int
    faults: int
    workdir: Path
    keep: bool
    paced: int = 60
    absolute: bool = False
    bus_address: Optional[str] = None  # a private system bus for the daemon's D-Bus service
    quiet_tree: bool = False  # every counter still (before 2026-12-02: the only tree)
    vf_host: bool = False


@dataclass
class Report:
    """Figures of one size; also written as JSON with ``--json``."""

    devices: int
    figures: dict[str, Any] = field(default_factory=dict)
    verdicts: dict[str, bool] = field(default_factory=dict)


# ------------------------------------------------------------------ helpers

def quantile(values: list[float], q: float) -> float:
    """Nearest-rank quantile (p99 of 300 samples is the 297th smallest)."""
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, max(0, int(round(q * len(ordered) + 0.5)) - 1))]


def ms(seconds: float) -> str:
    return f"{seconds * 1e3:.2f} ms"


def verdict(report: Report, key: str, ok: bool, target: str) -> str:
    report.verdicts[key] = ok
    return f"[{target}: {'PASS' if ok else 'FAIL'}]"


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def http_get(url: str, timeout: float = 10.0) -> str:
    with urllib.request.urlopen(url, timeout=timeout) as response:
        return str(response.read().decode())


def wait_until(predicate: Callable[[], bool], timeout: float, what: str) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        with contextlib.suppress(Exception):
            if predicate():
                return
        time.sleep(0.05)
    raise RuntimeError(f"timed out waiting for {what}")


def thread_cpu_ns(pid: int) -> dict[str, int]:
    """CPU time of the live threads of ``pid`` in nanoseconds (schedstat), summed by their
    name in /proc (``comm``: runtime/threadnames.py). A thread that exits while it is read is
    left out; raises OSError when ``pid`` is gone."""
    by_name: dict[str, int] = {}
    for task in os.listdir(f"/proc/{pid}/task"):
        with contextlib.suppress(FileNotFoundError):
            name = Path(f"/proc/{pid}/task/{task}/comm").read_text().strip()
            ns = int(Path(f"/proc/{pid}/task/{task}/schedstat").read_text().split()[0])
            by_name[name] = by_name.get(name, 0) + ns
    return by_name


def cpu_seconds(pid: int) -> float:
    """CPU time of every live thread of ``pid``, in seconds (see :func:`thread_seconds`)."""
    return thread_seconds(pid)[0]


def thread_seconds(pid: int) -> tuple[float, Optional[float]]:
    """CPU time of every live thread of ``pid`` and of its poll thread (named ``poll`` in
    /proc; None before it is named: a revision without thread names), in seconds, from one
    walk of /proc/PID/task: both are read at the same instant of a window's edge.

    /proc/PID/task/*/schedstat counts nanoseconds, where /proc/PID/stat counts 10 ms ticks
    (too coarse for a few ms per second). The whole process's time is its CPU clock
    (clock_getcpuclockid(3)), nanoseconds too, and it keeps the time of threads that exited
    (a thread that ended inside a window made the sum of the live ones fall short, once
    below the poll thread alone); /proc/PID/stat is the fallback.
    """
    try:
        by_name = thread_cpu_ns(pid)
    except (OSError, ValueError, IndexError):
        fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
        return (int(fields[11]) + int(fields[12])) / TICK, None
    poll = by_name.get("poll")
    try:
        total = time.clock_gettime(process_cpu_clock(pid))
    except OSError:
        total = sum(by_name.values()) / 1e9
    return total, (poll / 1e9 if poll is not None else None)


def process_cpu_clock(pid: int) -> int:
    """The clock ID of ``pid``'s CPU time, as glibc's clock_getcpuclockid makes it (Linux:
    the negated PID, shifted, with CPUCLOCK_SCHED)."""
    return ((~pid) << 3) | 2


def status_kib(pid: int, key: str) -> int:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith(key + ":"):
            return int(line.split()[1])
    return 0


def metric(text: str, name: str) -> Optional[float]:
    match = re.search(rf"^{re.escape(name)} (\S+)$", text, re.MULTILINE)
    return float(match.group(1)) if match else None


def series_count(body: str) -> int:
    """The series of one scrape (its sample lines)."""
    return sum(1 for line in body.splitlines() if line and not line.startswith("#"))


def build_host(workdir: Path, devices: int, vfs: int = 0) -> Path:
    root = workdir / (f"host{devices}x{vfs}vf" if vfs else f"host{devices}")
    if root.exists():
        shutil.rmtree(root)
    tree.create(root, "synthetic", devices=devices, vfs=vfs)
    return root


def load() -> str:
    """The load average, printed beside each figure: this bench's CPU figures move with it."""
    one, five, fifteen = os.getloadavg()
    return f"load {one:.1f}/{five:.1f}/{fifteen:.1f}"


@contextlib.contextmanager
def busy(roots: list[Path], settings: Settings) -> Any:
    """The trees' traffic counters moving once a second (bench/traffic.py), in a process of
    its own, unless ``--quiet-tree``."""
    if settings.quiet_tree:
        yield
        return
    writers = [subprocess.Popen([sys.executable, str(REPO / "bench" / "traffic.py"), str(root)])
               for root in roots]
    try:
        yield
    finally:
        for writer in writers:
            writer.terminate()
        for writer in writers:
            writer.wait(10)


def per_poll_reads(root: Path) -> tuple[int, int]:
    """(counter values, attribute files) one poll reads on this tree, from the real reader."""
    config = load_config(str(root / "nichealthd.toml"), {})
    reader = SysfsReader(config)
    from datetime import datetime, timezone
    reader.observe(datetime.now(timezone.utc))
    before = reader.files.reads
    snapshot = reader.observe(datetime.now(timezone.utc))
    total = reader.files.reads - before
    counters = sum(len({path for path in port.counter_paths.values()})
                   for device in snapshot.devices for port in device.ports)
    reader.close()
    return counters, total - counters


# ------------------------------------------------------------ 1. poll cycle

def bench_cycle(root: Path, settings: Settings, report: Report) -> None:
    """Drive Monitor.poll() in-process (bench/probe.py): CPU (process_time) and wall time per
    cycle, and its sysfs read's CPU."""
    state_dir = settings.workdir / f"inprocess{report.devices}"
    shutil.rmtree(state_dir, ignore_errors=True)
    probe = Probe(root, state_dir)
    try:
        back_to_back = probe.polls(settings.cycles)
        # The same poll once a second, as the daemon runs it: cold caches after each sleep.
        paced = probe.polls(settings.paced, offset=time.time() % 1)
    finally:
        probe.close()
    cpu, wall = back_to_back.cpu, back_to_back.wall
    back_to_back_read = statistics.median(back_to_back.read)
    fig = report.figures
    fig["cycle_cpu_median_s"] = statistics.median(cpu)
    fig["cycle_cpu_p99_s"] = quantile(cpu, 0.99)
    fig["cycle_wall_median_s"] = statistics.median(wall)
    fig["cycle_wall_p99_s"] = quantile(wall, 0.99)
    fig["cycle_read_cpu_median_s"] = back_to_back_read
    # Means, as the daemon's CPU per cycle is: the work done every 10 s or 60 s counts.
    fig["paced_cpu_mean_s"] = statistics.mean(paced.cpu)
    fig["paced_read_cpu_mean_s"] = statistics.mean(paced.read)
    fig["ratio_poll_to_read"] = fig["paced_cpu_mean_s"] / fig["paced_read_cpu_mean_s"]
    fig["ratio_poll_to_read_back_to_back"] = fig["cycle_cpu_median_s"] / back_to_back_read
    line = (f"  poll cycle, in-process ({settings.cycles} cycles back to back): CPU median "
            f"{ms(fig['cycle_cpu_median_s'])}, p99 {ms(fig['cycle_cpu_p99_s'])}; wall median "
            f"{ms(fig['cycle_wall_median_s'])}, p99 {ms(fig['cycle_wall_p99_s'])} "
            f"(sysfs read: CPU median {ms(back_to_back_read)})")
    if settings.absolute and report.devices == TARGET_HOST:
        line += " " + verdict(report, "cycle_cpu", fig["cycle_cpu_median_s"] <= TARGET_CYCLE_CPU,
                              "<= 5 ms CPU per cycle")
    line += (f"\n  poll cycle, in-process once a second ({settings.paced} cycles): CPU mean "
             f"{ms(fig['paced_cpu_mean_s'])} (sysfs read {ms(fig['paced_read_cpu_mean_s'])}); "
             f"{load()}"
             f"\n    ratio poll / sysfs read {fig['ratio_poll_to_read']:.2f} once a second "
             + verdict(report, "poll_to_read", fig["ratio_poll_to_read"] <= TARGET_POLL_TO_READ,
                       f"<= {TARGET_POLL_TO_READ:g}")
             + f"; {fig['ratio_poll_to_read_back_to_back']:.2f} back to back")
    print(line, flush=True)


# ------------------------------------------------------------- 2. daemon

class DaemonProcess:
    """A real nichealthd on the tree, configured as deployed: 1 s polling, metrics on a free
    port, varlink on a socket in the tree, event log on, the D-Bus service on a private
    system bus (when ``bus_address``), and a connector target whose socket does not exist
    (a host without NVSentinel: "down"). ``repo``: the checkout it runs from
    (bench/daemon_ab.py runs two revisions)."""

    def __init__(self, root: Path, bus_address: Optional[str], repo: Path = REPO) -> None:
        self.root = root
        self.port = free_port()
        self.url = f"http://127.0.0.1:{self.port}"
        self.event_log = root / "events.jsonl"
        self.log = open(root / "daemon.log", "w")  # noqa: SIM115 - closed in stop()
        env = dict(os.environ, PYTHONPATH=str(repo))
        if bus_address:
            env["DBUS_SYSTEM_BUS_ADDRESS"] = bus_address
        self.proc = subprocess.Popen(
            [sys.executable, "-m", "nichealthd.runtime.daemon",
             "--config", str(root / "nichealthd.toml"),
             "--polling-interval", "1s", "--metrics-listen", f"127.0.0.1:{self.port}",
             "--event-log", str(self.event_log), "--log-level", "warning",
             "--dbus", "system" if bus_address else "none",
             "--varlink-socket", str(root / "varlink.sock"),
             "--platform-connector-socket", f"unix://{root}/no-connector.sock"],
            cwd=repo, env=env, stdout=self.log, stderr=subprocess.STDOUT)
        wait_until(lambda: http_get(self.url + "/healthz").startswith("ok"), 30,
                   "nichealthd to answer /healthz")

    @property
    def pid(self) -> int:
        return self.proc.pid

    def polls(self) -> float:
        return metric(http_get(self.url + "/metrics"), "nichealthd_polls_total") or 0.0

    def stop(self) -> None:
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            try:
                self.proc.wait(15)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()
        self.log.close()


def bench_daemon(daemon: DaemonProcess, peer: Optional[NodeExporter], settings: Settings,
                 report: Report) -> None:
    """CPU % of one core and peak RSS over ``duration`` s of steady 1 s polling (no scrapes
    of the daemon), while the peer is scraped once a second beside it."""
    time.sleep(settings.warmup)
    polls0 = daemon.polls()
    (cpu0, poll0), wall0 = thread_seconds(daemon.pid), time.monotonic()
    if peer is not None:
        peer.scrape_each_second(settings.duration - 1)
    time.sleep(settings.duration)
    (cpu1, poll1), wall1 = thread_seconds(daemon.pid), time.monotonic()
    polls1 = daemon.polls()
    if peer is not None:
        peer.join()
    fig = report.figures
    fig["daemon_window_s"] = wall1 - wall0
    fig["daemon_cpu_s"] = cpu1 - cpu0
    fig["daemon_cpu_percent"] = 100 * (cpu1 - cpu0) / (wall1 - wall0)
    fig["daemon_polls"] = polls1 - polls0
    fig["daemon_cpu_per_cycle_s"] = (cpu1 - cpu0) / max(polls1 - polls0, 1)
    if poll0 is not None and poll1 is not None:
        fig["daemon_poll_thread_per_cycle_s"] = (poll1 - poll0) / max(polls1 - polls0, 1)
    fig["daemon_peak_rss_mib"] = status_kib(daemon.pid, "VmHWM") / 1024
    fig["daemon_rss_mib"] = status_kib(daemon.pid, "VmRSS") / 1024
    fig["daemon_series"] = series_count(http_get(daemon.url + "/metrics"))
    line = (f"  daemon, {fig['daemon_window_s']:.0f} s at 1 s polling: CPU "
            f"{fig['daemon_cpu_percent']:.2f} % of one core ({fig['daemon_cpu_s']:.2f} s CPU, "
            f"{ms(fig['daemon_cpu_per_cycle_s'])} per cycle over {fig['daemon_polls']:.0f} polls), "
            f"peak RSS {fig['daemon_peak_rss_mib']:.1f} MiB "
            f"(now {fig['daemon_rss_mib']:.1f} MiB); {fig['daemon_series']} series; {load()}")
    if report.devices == TARGET_HOST:
        if settings.absolute:
            line += " " + verdict(report, "cpu_percent",
                                  fig["daemon_cpu_percent"] <= TARGET_CPU_PERCENT,
                                  f"<= {TARGET_CPU_PERCENT:g} %")
        line += " " + verdict(report, "rss", fig["daemon_peak_rss_mib"] <= TARGET_RSS_MIB,
                              f"<= {TARGET_RSS_MIB:g} MiB")
    poll_thread = fig.get("daemon_poll_thread_per_cycle_s")
    if poll_thread is not None:
        line += (f"\n    of each cycle, the poll thread {ms(poll_thread)}, the other threads "
                 f"(event loop, D-Bus, varlink, metrics, connector) "
                 f"{ms(fig['daemon_cpu_per_cycle_s'] - poll_thread)}")
    paced = fig.get("paced_cpu_mean_s")
    if paced:
        fig["ratio_daemon_to_poll"] = fig["daemon_cpu_per_cycle_s"] / paced
        fig["ratio_daemon_to_poll_back_to_back"] = (fig["daemon_cpu_per_cycle_s"]
                                                    / fig["cycle_cpu_median_s"])
        line += (f"\n    ratio daemon per cycle / in-process poll once a second "
                 f"{fig['ratio_daemon_to_poll']:.2f} "
                 + verdict(report, "daemon_to_poll",
                           fig["ratio_daemon_to_poll"] <= TARGET_DAEMON_TO_POLL,
                           f"<= {TARGET_DAEMON_TO_POLL:g}")
                 + f"; {fig['ratio_daemon_to_poll_back_to_back']:.2f} to the back-to-back poll")
    print(line, flush=True)


# ------------------------------------------------------------- 3. syscalls

def parse_strace_summary(text: str) -> dict[str, int]:
    """``strace -c`` table -> {syscall: calls} (the total line is left out)."""
    calls: dict[str, int] = {}
    for line in text.splitlines():
        parts = line.split()
        if len(parts) < 5 or not re.match(r"^\d+\.\d+$", parts[0]) or parts[-1] == "total":
            continue
        calls[parts[-1]] = int(parts[3])
    return calls


def bench_syscalls(daemon: DaemonProcess, root: Path, settings: Settings,
                   report: Report) -> None:
    """strace -c -f attached to the warm daemon for a window; syscalls per counter value."""
    strace = shutil.which("strace")
    if strace is None:
        print("  syscalls: skipped (strace not installed; .ci/metrics-deps.sh)", flush=True)
        return
    counters, attributes = per_poll_reads(root)
    out = settings.workdir / f"strace{report.devices}.txt"
    polls0 = daemon.polls()
    tracer = subprocess.Popen([strace, "-c", "-f", "-p", str(daemon.pid), "-o", str(out)],
                              stderr=subprocess.DEVNULL)
    time.sleep(settings.strace_window)
    tracer.send_signal(signal.SIGINT)
    tracer.wait(30)
    polls1 = daemon.polls()
    calls = parse_strace_summary(out.read_text())
    total = sum(calls.values())
    # The polls in the window: nichealthd_polls_total scraped just before strace attaches and
    # just after it detaches (the gaps are milliseconds against 1 s polls). pread64 no longer
    # counts them: the AER tables and the adapter facts are kept open and pread too, every
    # 10 s, so "preads / files per poll" overstated the polls by about 5 % (and the values).
    polls = polls1 - polls0
    values = polls * counters
    per_value = total / values if values else float("inf")
    fig = report.figures
    fig.update(syscalls_window_s=settings.strace_window, syscalls_total=total,
               syscalls_polls=polls, syscalls_pread64=calls.get("pread64", 0),
               counter_values_per_poll=counters, attribute_reads_per_poll=attributes,
               syscalls_counter_values=values, syscalls_per_value=per_value,
               syscalls_by_name=dict(sorted(calls.items(), key=lambda kv: -kv[1])))
    top = ", ".join(f"{name} {n}" for name, n in list(fig["syscalls_by_name"].items())[:6])
    print(f"  syscalls, strace -c -f for {settings.strace_window:.0f} s: {per_value:.3f} per "
          f"counter value ({total} syscalls / {values:.0f} values = {polls:.0f} polls x "
          f"{counters} values, the polls counted on /metrics; {attributes} attribute reads "
          f"per poll; top: {top}) "
          + verdict(report, "syscalls", per_value <= TARGET_SYSCALLS, "<= 1.5"), flush=True)


# ------------------------------------------------------------ 4. peer

class NodeExporter:
    """Debian's node_exporter with only the infiniband collector, on the same tree: the peer.

    Scraped once a second *during the daemon's window* (:meth:`scrape_each_second`, in a
    thread, half a second after the window starts), so that both figures of the ratio are
    measured in the same seconds of the same machine; back to back afterwards."""

    def __init__(self, binary: str, root: Path) -> None:
        self.port = free_port()
        self.url = f"http://127.0.0.1:{self.port}/metrics"
        self.proc = subprocess.Popen(
            [binary, f"--path.sysfs={root / 'sys'}", f"--path.procfs={root / 'proc'}",
             "--collector.disable-defaults", "--collector.infiniband",
             f"--web.listen-address=127.0.0.1:{self.port}"],
            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        self.per_second: Optional[float] = None
        self._thread: Optional[threading.Thread] = None
        wait_until(lambda: "node_infiniband" in http_get(self.url), 30, "node_exporter")
        for _ in range(3):
            http_get(self.url)
        self.series = sum(1 for line in http_get(self.url).splitlines()
                          if line.startswith("node_infiniband"))

    @classmethod
    def start(cls, root: Path) -> Optional[NodeExporter]:
        binary = shutil.which("prometheus-node-exporter") or shutil.which("node_exporter")
        return cls(binary, root) if binary else None

    def scrape_each_second(self, seconds: float) -> None:
        """Start scraping once a second for ``seconds`` (in a thread); :meth:`join` waits."""
        def scrape() -> None:
            time.sleep(0.5)
            self.per_second = scraped_each_second(self.proc.pid, self.url, seconds)
        self._thread = threading.Thread(target=scrape, daemon=True)
        self._thread.start()

    def join(self) -> None:
        if self._thread is not None:
            self._thread.join()

    def back_to_back(self, scrapes: int) -> float:
        cpu0 = cpu_seconds(self.proc.pid)
        for _ in range(scrapes):
            http_get(self.url)
        return (cpu_seconds(self.proc.pid) - cpu0) / scrapes

    def stop(self) -> None:
        self.proc.terminate()
        self.proc.wait(10)


def bench_node_exporter(peer: Optional[NodeExporter], settings: Settings,
                        report: Report) -> None:
    """CPU per scrape of node_exporter's infiniband collector on the same tree: once a second
    during the daemon's window (measured there), and back to back now."""
    if peer is None:
        print("  node_exporter: skipped (prometheus-node-exporter not installed; "
              ".ci/metrics-deps.sh)", flush=True)
        return
    per_scrape = peer.back_to_back(settings.scrapes)
    per_second = peer.per_second or 0.0
    series = peer.series
    fig = report.figures
    fig["node_exporter_cpu_per_scrape_s"] = per_scrape
    fig["node_exporter_cpu_per_scrape_1s_s"] = per_second
    fig["node_exporter_series"] = series
    line = (f"  node_exporter --collector.infiniband ({series} node_infiniband series): "
            f"{ms(per_scrape)} CPU per scrape, {settings.scrapes} back to back; "
            f"{ms(per_second)} per scrape, once a second during the daemon's "
            f"{settings.duration:.0f} s window")
    ours_series = fig.get("daemon_series")
    if ours_series is not None:
        line += (f"\n    nichealthd series {ours_series} (all of /metrics) "
                 + verdict(report, "series", ours_series <= series, "<= node_exporter's"))
    ours = fig.get("daemon_cpu_per_cycle_s")
    if ours is not None and per_second > 0:
        fig["ratio_daemon"] = ours / per_second
        fig["ratio_daemon_back_to_back"] = ours / per_scrape
        fig["ratio_inprocess"] = fig["cycle_cpu_median_s"] / per_scrape
        line += (f"\n    nichealthd CPU per cycle {ms(ours)} (whole daemon, 1 s polling) -> ratio "
                 f"{fig['ratio_daemon']:.2f} to the scrape once a second in the same window "
                 + verdict(report, "ratio", fig["ratio_daemon"] <= TARGET_RATIO,
                           f"<= {TARGET_RATIO:g}")
                 + f"; {fig['ratio_daemon_back_to_back']:.2f} to the back-to-back scrape; "
                 f"in-process cycle to back-to-back scrape {fig['ratio_inprocess']:.2f}")
    print(line, flush=True)


def scraped_each_second(pid: int, url: str, seconds: float) -> float:
    """node_exporter's CPU per scrape when scraped once a second, as nichealthd polls: the
    whole process over the window (its idle runtime included, as the daemon figure includes
    the daemon's) divided by the scrapes. Back-to-back scrapes run on warm caches; a process
    woken once a second does not, on either side of the comparison."""
    scrapes = max(1, int(seconds))
    cpu0, start = cpu_seconds(pid), time.monotonic()
    for n in range(1, scrapes + 1):
        time.sleep(max(0.0, start + n - time.monotonic()))
        http_get(url)
    return (cpu_seconds(pid) - cpu0) / scrapes


# ------------------------------------------------------------ 5. latency

class EventTail:
    """Follows the event log; returns new events as parsed JSON."""

    def __init__(self, path: Path) -> None:
        self.path = path
        self.offset = path.stat().st_size if path.exists() else 0
        self.partial = b""

    def new(self) -> list[dict[str, Any]]:
        try:
            with open(self.path, "rb") as handle:
                handle.seek(self.offset)
                data = handle.read()
        except FileNotFoundError:
            return []
        self.offset += len(data)
        data = self.partial + data
        lines = data.split(b"\n")
        self.partial = lines.pop()
        return [json.loads(line) for line in lines if line.strip()]


def _matches(event: dict[str, Any], device: str, healthy: bool) -> bool:
    entities = {(e["entityType"], e["entityValue"]) for e in event["entitiesImpacted"]}
    return (event["checkName"] == "InfiniBandStateCheck" and event["isHealthy"] == healthy
            and any(value == device for _, value in entities))


def bench_latency(daemon: DaemonProcess, root: Path, devices: int, settings: Settings,
                  report: Report) -> None:
    """Port DOWN then ACTIVE again at random phases; time until each event is in the log."""
    tail = EventTail(daemon.event_log)
    rng = random.Random(7)
    samples: list[float] = []
    timeouts = 0
    for i in range(settings.faults):
        device = f"mlx5_{i % devices}"
        for healthy, state, phys in ((False, "DOWN", "Disabled"), (True, "ACTIVE", "LinkUp")):
            time.sleep(rng.uniform(0.0, INTERVAL))  # a uniformly random phase of the poll
            written = time.monotonic()
            mutate.set_port(root, device, 1, state=state, phys_state=phys)
            deadline = written + 3 * INTERVAL
            seen = None
            while seen is None and time.monotonic() < deadline:
                if any(_matches(e, device, healthy) for e in tail.new()):
                    seen = time.monotonic()
                else:
                    time.sleep(0.002)
            if seen is None:
                timeouts += 1
            else:
                samples.append(seen - written)
    limit = INTERVAL + LATENCY_SLACK
    fig = report.figures
    if not samples:
        print("  event latency: no event seen", flush=True)
        report.verdicts["latency"] = False
        return
    fig.update(latency_samples=len(samples), latency_timeouts=timeouts,
               latency_min_s=min(samples), latency_median_s=statistics.median(samples),
               latency_p99_s=quantile(samples, 0.99), latency_max_s=max(samples))
    ok = timeouts == 0 and fig["latency_max_s"] <= limit
    print(f"  event latency, {len(samples)} faults (port down / up at random phases): min "
          f"{ms(fig['latency_min_s'])}, median {ms(fig['latency_median_s'])}, p99 "
          f"{ms(fig['latency_p99_s'])}, max {ms(fig['latency_max_s'])}"
          + (f", {timeouts} not seen within 3 s" if timeouts else "") + " "
          + verdict(report, "latency", ok, f"every one <= {ms(limit)}"), flush=True)


# ----------------------------------------------------------------- main

def machine() -> str:
    lscpu = ""
    with contextlib.suppress(OSError, subprocess.SubprocessError):
        out = subprocess.run(["lscpu"], capture_output=True, text=True, timeout=10).stdout
        model = re.search(r"^Model name:\s*(.+)$", out, re.MULTILINE)
        lscpu = model.group(1).strip() if model else ""
    return (f"{platform.node()}: {os.cpu_count()} CPUs ({lscpu or platform.machine()}), "
            f"Linux {platform.release()}, Python {platform.python_version()}")


def run_size(devices: int, settings: Settings) -> Report:
    report = Report(devices)
    tree_kind = "quiet tree" if settings.quiet_tree else "busy healthy tree"
    print(f"\n== {devices} devices (synthetic profile, {tree_kind}), 1 s polling ==",
          flush=True)
    root = build_host(settings.workdir, devices)
    with busy([root], settings):
        bench_cycle(root, settings, report)
        peer = NodeExporter.start(root)
        try:
            daemon = DaemonProcess(root, settings.bus_address)
            try:
                bench_daemon(daemon, peer, settings, report)
                bench_syscalls(daemon, root, settings, report)
                bench_latency(daemon, root, devices, settings, report)
            finally:
                daemon.stop()
            bench_node_exporter(peer, settings, report)
        finally:
            if peer is not None:
                peer.stop()
    return report


def cpu_per_cycle_unscraped(daemons: list[DaemonProcess], seconds: float) -> list[float]:
    """Each daemon's CPU per cycle over the same ``seconds`` of steady polling, with no scrape
    inside the window: its CPU per second there over its polls per second, counted by a
    scrape before and one after (on a host with a thousand devices a scrape costs tens of ms,
    in a thread that may or may not have exited when the CPU is read: /proc's per-thread
    times lose an exited thread's)."""
    first = [(d.polls(), time.monotonic()) for d in daemons]
    time.sleep(1.0)  # the scrapes' threads are done
    start = [(cpu_seconds(d.pid), time.monotonic()) for d in daemons]
    time.sleep(seconds)
    end = [(cpu_seconds(d.pid), time.monotonic()) for d in daemons]
    last = [(d.polls(), time.monotonic()) for d in daemons]
    return [((c1 - c0) / (t1 - t0)) / max((p1 - p0) / (u1 - u0), 1e-9)
            for (p0, u0), (c0, t0), (c1, t1), (p1, u1) in zip(first, start, end, last)]


def scrape_cpu(daemon: DaemonProcess, scrapes: int) -> float:
    """CPU of one /metrics scrape, back to back: the whole process from /proc/PID/stat, which
    keeps the time of exited threads (each request has its own), in clock ticks."""
    def ticks() -> int:
        fields = Path(f"/proc/{daemon.pid}/stat").read_text().rsplit(")", 1)[1].split()
        return int(fields[11]) + int(fields[12])

    before = ticks()
    for _ in range(scrapes):
        http_get(daemon.url + "/metrics")
    return (ticks() - before) / TICK / scrapes


def run_vf_host(settings: Settings) -> Report:
    """The daemon on 8 PFs with 127 VFs each beside the daemon on the same 8 PFs alone, both
    running at once over the same window (neither on D-Bus: one bus name, no scrape inside
    it), each host's in-process poll back to back, and one scrape of each. Target: the VF
    host's CPU per cycle <= 1.2 x the other's."""
    pfs, vfs = VF_HOST
    report = Report(pfs * (1 + vfs))
    print(f"\n== VF host: {pfs} PFs x {vfs} VFs beside {pfs} PFs alone, both at once ==",
          flush=True)
    plain, sriov = build_host(settings.workdir, pfs), build_host(settings.workdir, pfs, vfs)
    fig = report.figures
    for name, root in (("plain", plain), ("vf", sriov)):
        probe = Probe(root, settings.workdir / f"inprocess-{name}")
        try:
            fig[f"{name}_poll_cpu_median_s"] = statistics.median(probe.polls(60).cpu)
        finally:
            probe.close()
    with busy([plain, sriov], settings):
        daemons = [DaemonProcess(plain, None), DaemonProcess(sriov, None)]
        try:
            time.sleep(settings.warmup)
            cycles = cpu_per_cycle_unscraped(daemons, settings.duration)
            for name, daemon, cycle in zip(("plain", "vf"), daemons, cycles):
                fig[f"{name}_daemon_cpu_per_cycle_s"] = cycle
                fig[f"{name}_daemon_peak_rss_mib"] = status_kib(daemon.pid, "VmHWM") / 1024
                fig[f"{name}_scrape_cpu_s"] = scrape_cpu(daemon, SCRAPES_TIMED)
        finally:
            for daemon in daemons:
                daemon.stop()
    fig["ratio_vf_host"] = fig["vf_daemon_cpu_per_cycle_s"] / fig["plain_daemon_cpu_per_cycle_s"]
    print(f"  in-process poll back to back: {ms(fig['plain_poll_cpu_median_s'])} without VFs, "
          f"{ms(fig['vf_poll_cpu_median_s'])} with\n"
          f"  daemon per cycle, {settings.duration:.0f} s at once: "
          f"{ms(fig['plain_daemon_cpu_per_cycle_s'])} without VFs "
          f"({fig['plain_daemon_peak_rss_mib']:.1f} MiB), "
          f"{ms(fig['vf_daemon_cpu_per_cycle_s'])} with "
          f"({fig['vf_daemon_peak_rss_mib']:.1f} MiB); {load()}\n"
          f"  one /metrics scrape (not in the figures above): "
          f"{ms(fig['plain_scrape_cpu_s'])} without VFs, {ms(fig['vf_scrape_cpu_s'])} with\n"
          f"    ratio VF host / without VFs {fig['ratio_vf_host']:.2f} "
          + verdict(report, "vf_host", fig["ratio_vf_host"] <= TARGET_VF_RATIO,
                    f"<= {TARGET_VF_RATIO:g}"), flush=True)
    return report


def parse_args(argv: Optional[list[str]]) -> tuple[Settings, argparse.Namespace]:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--quick", action="store_true",
                        help="smoke run: 8 devices, short windows (seconds, not minutes)")
    parser.add_argument("--sizes", help="comma-separated device counts (default 8,34,128)")
    parser.add_argument("--duration", type=float,
                        help="daemon CPU/RSS window in seconds (default 60)")
    parser.add_argument("--strace-window", type=float, help="seconds traced (default 65, so "
                        "one 60 s re-discovery falls inside)")
    parser.add_argument("--cycles", type=int, help="in-process poll cycles (default 300)")
    parser.add_argument("--paced", type=int, help="in-process poll cycles once a second "
                        "(default 60: the daemon window, its 10 s and 60 s work included)")
    parser.add_argument("--absolute", action="store_true", help="also judge the absolute "
                        "targets (only meaningful on a quiet machine: the GPU VM)")
    parser.add_argument("--scrapes", type=int, help="node_exporter scrapes (default 200)")
    parser.add_argument("--faults", type=int, help="faults for the latency figure (default 20; "
                        "each gives two events)")
    parser.add_argument("--workdir", help="where the fake hosts go (default a temp dir)")
    parser.add_argument("--keep", action="store_true", help="keep the fake hosts")
    parser.add_argument("--json", metavar="FILE", help="also write the figures as JSON")
    parser.add_argument("--quiet-tree", action="store_true", help="every counter still (the "
                        "default tree is a busy healthy host: traffic counters move)")
    parser.add_argument("--vf-host", action=argparse.BooleanOptionalAction, default=None,
                        help="also the VF host beside the same PFs without VFs (default: when "
                        "8 is among the sizes)")
    args = parser.parse_args(argv)
    quick = args.quick
    sizes = [int(s) for s in args.sizes.split(",")] if args.sizes else ([8] if quick
                                                                         else [8, 34, 128])
    workdir = Path(args.workdir) if args.workdir else Path(tempfile.mkdtemp(prefix="nhbench-"))
    workdir.mkdir(parents=True, exist_ok=True)
    settings = Settings(
        sizes=sizes,
        cycles=args.cycles or (30 if quick else 300),
        paced=args.paced or (3 if quick else 60),
        absolute=args.absolute,
        warmup=2.0 if quick else 5.0,
        duration=args.duration or (3.0 if quick else 60.0),
        strace_window=args.strace_window or (3.0 if quick else 65.0),
        scrapes=args.scrapes or (10 if quick else 200),
        faults=args.faults or (2 if quick else 20),
        workdir=workdir,
        keep=args.keep or bool(args.workdir),
        quiet_tree=args.quiet_tree,
        vf_host=(8 in sizes and not quick) if args.vf_host is None else args.vf_host,
    )
    return settings, args


def main(argv: Optional[list[str]] = None) -> int:
    settings, args = parse_args(argv)
    logging.disable(logging.CRITICAL)  # the in-process monitor's start-up notes
    print(f"nichealthd benchmark, {time.strftime('%Y-%m-%d %H:%M %Z')}; {machine()}")
    print(f"targets, ratios of figures measured side by side in this run (every host): whole "
          f"daemon CPU per cycle <= {TARGET_DAEMON_TO_POLL:g} x its in-process poll and <= "
          f"{TARGET_RATIO:g} x node_exporter's scrape (all once a second); in-process poll <= "
          f"{TARGET_POLL_TO_READ:g} x its sysfs read; <= {TARGET_SYSCALLS:g} syscalls per "
          f"counter value; event latency <= interval + {LATENCY_SLACK * 1e3:.0f} ms; peak RSS "
          f"<= {TARGET_RSS_MIB:g} MiB at {TARGET_HOST} devices; VF host <= "
          f"{TARGET_VF_RATIO:g} x the same PFs alone"
          + (f"; absolute ({TARGET_HOST} devices): <= 5 ms CPU per cycle, <= "
             f"{TARGET_CPU_PERCENT:g} % of one core" if settings.absolute else
             "; absolute figures are reported, judged only with --absolute"))
    bus = start_bus() if shutil.which("dbus-daemon") else None
    settings.bus_address = bus.address if bus else None
    print("the daemon runs as deployed: metrics, event log, connector target (absent: down), "
          + ("D-Bus service on a private system bus" if bus else
             "no D-Bus (dbus-daemon is not installed)"))
    reports = []
    try:
        for devices in settings.sizes:
            reports.append(run_size(devices, settings))
        if settings.vf_host:
            reports.append(run_vf_host(settings))
    finally:
        if bus is not None:
            bus.stop()
        if not settings.keep:
            shutil.rmtree(settings.workdir, ignore_errors=True)
    failed = [f"{r.devices}:{k}" for r in reports for k, ok in r.verdicts.items() if not ok]
    print(f"\n{'all targets met' if not failed else 'targets missed: ' + ', '.join(failed)}")
    if args.json:
        Path(args.json).write_text(json.dumps(
            {"date": time.strftime("%Y-%m-%dT%H:%M:%S%z"), "machine": machine(),
             "results": [{"devices": r.devices, **r.figures, "verdicts": r.verdicts}
                         for r in reports]}, indent=2) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
