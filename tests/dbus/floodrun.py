"""Drive a D-Bus flood at a running nichealthd and measure what it does to the daemon.

Shared by tests/dbus/test_flood.py and bench/dbus_flood.py. The clients are separate
processes (:mod:`floodclient`), as nobody when that user can import dbus-fast, else as this
user (CI's unprivileged stage). While they run, /healthz is sampled every 0.2 s, the daemon's
RSS every 0.1 s (``/proc/PID/status``), and its poll count is read from /metrics (served by
its own threads) before, during and after.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import sys
import tempfile
import time
import urllib.error
import urllib.request
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Optional

from tests.harness import NOBODY

HERE = Path(__file__).resolve().parent
_POLLS = re.compile(r"^nichealthd_polls_total (\S+)$", re.MULTILINE)


def get(url: str, timeout: float = 5.0) -> tuple[int, str]:
    try:
        with urllib.request.urlopen(url, timeout=timeout) as response:
            return int(response.status), response.read().decode()
    except urllib.error.HTTPError as exc:
        body = exc.read().decode(errors="replace")
        exc.close()
        return int(exc.code), body
    except OSError as exc:
        return 0, str(exc)


def polls(base: str) -> int:
    status, body = get(base + "/metrics", timeout=10)
    match = _POLLS.search(body)
    if status != 200 or match is None:
        raise AssertionError(f"/metrics answered {status}: {body[:200]}")
    return int(float(match.group(1)))


def rss_kib(pid: int) -> int:
    try:
        with open(f"/proc/{pid}/status", encoding="ascii") as handle:
            for line in handle:
                if line.startswith("VmRSS:"):
                    return int(line.split()[1])
    except OSError:
        pass
    return 0


def client_user() -> list[str]:
    """NOBODY if nobody can run this Python with dbus-fast; else [] (we are unprivileged)."""
    if os.geteuid() != 0:
        return []
    if shutil.which("setpriv") is None:
        return []
    probe = subprocess.run([*NOBODY, sys.executable, "-c", "import dbus_fast"], cwd="/",
                           capture_output=True, timeout=30)
    return NOBODY if probe.returncode == 0 else []


@dataclass
class FloodResult:
    """What the daemon did while ``clients`` processes each sent ``calls`` calls."""

    clients: int
    calls: int
    seconds: float = 0.0
    rate_before: float = 0.0   # polls/s
    rate_during: float = 0.0
    rate_after: float = 0.0
    healthz_samples: int = 0
    healthz_bad: list[str] = field(default_factory=list)
    rss_before_kib: int = 0
    rss_peak_kib: int = 0
    rss_after_kib: int = 0
    ok: int = 0
    limited: int = 0
    errors: int = 0
    timeouts: int = 0
    failed_clients: list[str] = field(default_factory=list)
    user: str = ""

    @property
    def calls_per_second(self) -> float:
        return (self.ok + self.limited + self.errors) / self.seconds if self.seconds else 0.0

    def lines(self) -> list[str]:
        mib = 1024.0
        return [
            f"flood: {self.clients} client processes x {self.calls} calls ({self.user})",
            f"  flood lasted        {self.seconds:.1f} s",
            f"  answered            {self.ok} ok, {self.limited} LimitsExceeded, "
            f"{self.errors} other errors, {self.timeouts} timeouts "
            f"({self.calls_per_second:.0f} calls/s)",
            f"  poll rate           before {self.rate_before:.2f}/s, during "
            f"{self.rate_during:.2f}/s, after {self.rate_after:.2f}/s",
            f"  /healthz            {self.healthz_samples - len(self.healthz_bad)} of "
            f"{self.healthz_samples} samples 200",
            f"  RSS                 before {self.rss_before_kib / mib:.1f} MiB, peak "
            f"{self.rss_peak_kib / mib:.1f} MiB, after {self.rss_after_kib / mib:.1f} MiB",
        ]


def _rate(base: str, seconds: float) -> float:
    first, started = polls(base), time.monotonic()
    time.sleep(seconds)
    return (polls(base) - first) / (time.monotonic() - started)


class Clients:
    """``count`` flood client processes, connected and waiting for :meth:`go` (a context
    manager: whatever still runs at the end is killed, the copied script removed)."""

    def __init__(self, address: str, count: int, calls: int, concurrency: int,
                 user: list[str]) -> None:
        self.work = Path(tempfile.mkdtemp(prefix="nichealthd-flood-"))
        os.chmod(self.work, 0o755)
        script = self.work / "floodclient.py"
        shutil.copy(HERE / "floodclient.py", script)
        script.chmod(0o644)
        self.procs: list[subprocess.Popen[str]] = []
        try:
            for _ in range(count):
                self.procs.append(subprocess.Popen(
                    [*user, sys.executable, str(script), address, str(calls),
                     str(concurrency)], cwd=str(self.work), stdin=subprocess.PIPE,
                    stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True))
            for proc in self.procs:  # every client connected: start them together
                assert proc.stdout is not None
                if proc.stdout.readline().strip() != "ready":
                    raise AssertionError(f"a flood client did not connect: "
                                         f"{proc.communicate()}")
        except BaseException:
            self.close()
            raise

    def go(self) -> None:
        for proc in self.procs:
            assert proc.stdin is not None
            proc.stdin.write("go\n")
            proc.stdin.flush()

    def running(self) -> bool:
        return any(p.poll() is None for p in self.procs)

    def counts(self) -> list[Optional[dict[str, Any]]]:
        """Each client's counts once it exited (None: it printed none)."""
        out: list[Optional[dict[str, Any]]] = []
        for proc in self.procs:
            text, _ = proc.communicate()
            try:
                out.append(json.loads(text.strip().splitlines()[-1]))
            except (ValueError, IndexError):
                out.append(None)
        return out

    def close(self) -> None:
        for proc in self.procs:
            if proc.poll() is None:
                proc.kill()
            proc.wait()
            for stream in (proc.stdin, proc.stdout, proc.stderr):
                if stream is not None:
                    stream.close()
        shutil.rmtree(self.work, ignore_errors=True)

    def __enter__(self) -> Clients:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


def run_flood(pid: int, base: str, address: str, clients: int = 20, calls: int = 500,
              concurrency: int = 10, settle: float = 3.0,
              user: Optional[list[str]] = None) -> FloodResult:
    """Measure, flood, measure again (``base`` is ``http://host:port`` of the metrics)."""
    user = client_user() if user is None else user
    result = FloodResult(clients, calls, user="as nobody" if user else "as this user")
    result.rate_before = _rate(base, settle)
    result.rss_before_kib = result.rss_peak_kib = rss_kib(pid)
    with Clients(address, clients, calls, concurrency, user) as flood:
        time.sleep(settle)  # let the start-ups' CPU settle
        started = time.monotonic()
        first = polls(base)
        flood.go()
        next_health = 0.0
        while flood.running():
            now = time.monotonic()
            result.rss_peak_kib = max(result.rss_peak_kib, rss_kib(pid))
            if now >= next_health:
                status, body = get(base + "/healthz")
                result.healthz_samples += 1
                if status != 200:
                    result.healthz_bad.append(f"at {now - started:.1f} s: {status} "
                                              f"{body.strip()}")
                next_health = now + 0.2
            if now - started > 600:
                raise AssertionError("the flood clients did not finish within 600 s")
            time.sleep(0.1)
        result.seconds = time.monotonic() - started
        result.rate_during = (polls(base) - first) / result.seconds
        for proc, counts in zip(flood.procs, flood.counts()):
            if counts is None:
                result.failed_clients.append(f"exit {proc.returncode}")
                continue
            result.ok += counts["ok"]
            result.limited += counts["limited"]
            result.errors += counts["error"]
            result.timeouts += counts["timeout"]
    result.rate_after = _rate(base, settle)
    result.rss_after_kib = rss_kib(pid)
    return result
