"""The daemon's own cost as the ``process_*`` families every Prometheus client exports.

CPU seconds, resident and virtual memory, start time, open and maximum file descriptors, read
from ``/proc/<pid>/stat``, ``limits`` and ``fd/`` (proc(5)) on each scrape: the names, help
texts and arithmetic of prometheus-client's ``ProcessCollector`` (and of Go's client), which the
fleet dashboard (packaging/grafana/) and the recording rules read. A file that cannot be read
gives no series for what it holds, never 0.
"""

from __future__ import annotations

import os
from typing import Optional

from .metrics_text import CounterFamily, Family, GaugeFamily

PAGE_SIZE = os.sysconf("SC_PAGE_SIZE")
TICKS = os.sysconf("SC_CLK_TCK")


class ProcessFamilies:
    """``process_*`` of process ``pid`` under ``proc`` (the daemon's own by default)."""

    def __init__(self, proc: str = "/proc", pid: str = "self") -> None:
        self._proc = proc
        self._pid = pid
        self._boot: Optional[float] = None
        try:
            self._boot = _field(os.path.join(proc, "stat"), b"btime ", 1)
        except OSError:
            pass  # no /proc: no process_* series

    def families(self) -> list[Family]:
        if not self._boot:
            return []
        where = os.path.join(self._proc, self._pid)
        out: list[Family] = []
        try:
            with open(os.path.join(where, "stat"), "rb") as stat:
                # After the command's closing parenthesis, from field 3 (state) on.
                fields = stat.read().split(b")")[-1].split()
        except OSError:
            pass
        else:
            out += [
                GaugeFamily("process_virtual_memory_bytes", "Virtual memory size in bytes.",
                            value=float(fields[20])),
                GaugeFamily("process_resident_memory_bytes", "Resident memory size in bytes.",
                            value=float(fields[21]) * PAGE_SIZE),
                GaugeFamily("process_start_time_seconds",
                            "Start time of the process since unix epoch in seconds.",
                            value=float(fields[19]) / TICKS + self._boot),
                CounterFamily("process_cpu_seconds_total",
                              "Total user and system CPU time spent in seconds.",
                              value=float(fields[11]) / TICKS + float(fields[12]) / TICKS),
            ]
        try:
            max_fds = _field(os.path.join(where, "limits"), b"Max open file", 3)
            open_fds = len(os.listdir(os.path.join(where, "fd")))
        except OSError:
            return out
        out.append(GaugeFamily("process_open_fds", "Number of open file descriptors.",
                               value=open_fds))
        if max_fds is not None:
            out.append(GaugeFamily("process_max_fds", "Maximum number of open file descriptors.",
                                   value=max_fds))
        return out


def _field(path: str, prefix: bytes, index: int) -> Optional[float]:
    """Word ``index`` of the first line of ``path`` that starts with ``prefix``: ``btime`` of
    ``/proc/stat`` (the boot's Unix time, which start times count from), the soft limit of
    "Max open files" in ``/proc/<pid>/limits``."""
    with open(path, "rb") as lines:
        for line in lines:
            if line.startswith(prefix):
                return float(line.split()[index])
    return None
