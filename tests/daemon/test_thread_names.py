"""The daemon's threads carry their names in /proc (runtime/threadnames.py): ``top -H``
tells the poll from the metrics server."""

from __future__ import annotations

import os
from pathlib import Path
from typing import Callable

from ..harness import NotifySocket, wait_until
from ..netports import free_port
from .conftest import SimHost, running_daemon
from .test_service import notify  # noqa: F401 (fixture)


def thread_names(pid: int) -> list[str]:
    tasks = Path(f"/proc/{pid}/task")
    names = []
    for task in tasks.iterdir():
        try:
            names.append((task / "comm").read_text().strip())
        except OSError:  # a thread that just ended
            pass
    return names


def test_every_thread_of_the_running_daemon_has_its_name(
        sim_host: Callable[..., SimHost], notify: NotifySocket) -> None:  # noqa: F811
    host = sim_host()
    env = dict(os.environ, NOTIFY_SOCKET=str(notify.path))
    listen = f"127.0.0.1:{free_port()}"
    with running_daemon(host.config, env, "--metrics-listen", listen) as (proc, lines):
        notify.wait_for("READY=1")
        wait_until(lambda: {"poll", "metrics-http"} <= set(thread_names(proc.pid)),
                   "the poll and metrics threads named", proc=proc,
                   detail=lambda: str(thread_names(proc.pid)))
