"""The failure boundary of a source and of the families that need it, through the running
daemon (sources/boundary.py, core/evaluate.py, runtime/family_watch.py).

No source of the shipped package raises on any input the tests can give (each found case
became "unreadable"), so the fault is a bug planted in a source outside it: the package is
copied with the worked example of ARCHITECTURE.md added (tests/data/adding_a_family), its
netdev-MTU source raising while a file exists. Everything else is the real daemon.
"""

from __future__ import annotations

import os
import shutil
from pathlib import Path
from typing import Callable

from ..harness import NotifySocket, wait_until
from ..metrics.conftest import get, parse
from ..netports import free_port
from .conftest import REPO, SimHost, running_daemon
from .test_adding_a_family import EXAMPLE
from .test_driver_reload import sim
from .test_service import events, notify  # noqa: F401 (fixture)

CANNOT = "check family roce_mtu cannot judge: netdev_mtu not read: ZeroDivisionError"
BUG = '''        if os.path.exists(os.environ["NICHEALTHD_TEST_FAULT"]):  # the planted bug
            raise ZeroDivisionError("division by zero")
'''


def with_a_buggy_source(top: Path) -> None:
    """A copy of the package with the example family and its source, which raises while
    the file named by NICHEALTHD_TEST_FAULT exists."""
    shutil.copytree(REPO / "nichealthd", top / "nichealthd",
                    ignore=shutil.ignore_patterns("__pycache__"))
    shutil.copy(EXAMPLE / "roce_mtu.py", top / "nichealthd/core/checks/roce_mtu.py")
    source = (EXAMPLE / "netdev_mtu.py").read_text()
    anchor = '        """Port key -> (netdev, MTU or None when unreadable)."""\n'
    assert anchor in source
    (top / "nichealthd/sources/netdev_mtu.py").write_text(source.replace(anchor, anchor + BUG))


def family_up(base: str) -> dict[str, float]:
    status, text = get(base + "/metrics")
    assert status == 200, text
    return {dict(labels)["family"]: value for (name, labels), value in parse(text).items()
            if name == "nichealthd_family_up"}


def port_health(base: str) -> dict[tuple[str, str], float]:
    """``nichealthd_port_health`` by (device, port): an unknown port has no sample."""
    status, text = get(base + "/metrics")
    assert status == 200, text
    return {(dict(labels)["device"], dict(labels)["port"]): value
            for (name, labels), value in parse(text).items() if name == "nichealthd_port_health"}


def test_a_source_that_raises_costs_only_the_families_that_need_it(
        sim_host: Callable[..., SimHost], notify: NotifySocket,  # noqa: F811
        tmp_path: Path) -> None:
    top, fault = tmp_path / "extended", tmp_path / "fault"
    with_a_buggy_source(top)
    fault.write_text("")
    host = sim_host()
    with host.config.open("a") as config:
        config.write("roceMtuMinimum = 9000\n")  # the example family on
    base = f"http://127.0.0.1:{free_port()}"
    env = dict(os.environ, NOTIFY_SOCKET=str(notify.path), PYTHONPATH=str(top),
               NICHEALTHD_TEST_FAULT=str(fault))
    with running_daemon(host.config, env, "--metrics-listen", base[len("http://"):],
                        cwd=top) as (proc, lines):
        wait_until(lambda: family_up(base).get("roce_mtu") == 0,
                   "nichealthd_family_up{family=roce_mtu} 0", proc=proc, detail=lines.tail)
        up = family_up(base)
        assert up["link_state"] == up["link_counters"] == 1, up
        # Only the ports it judges (the 4 RoCE ports) are unknown; the 8 InfiniBand ports
        # keep their health (CheckFamily.judges).
        wait_until(lambda: any(CANNOT in s and "12 ports: 8 healthy, 0 degraded, 0 fatal, "
                               "4 unknown" in s for s in notify.statuses),
                   "STATUS= naming the family and the unknown ports", proc=proc,
                   detail=lambda: "\n".join(notify.statuses[-3:]))
        health = port_health(base)
        assert health[("mlx5_0", "1")] == 0 and len(health) == 8, health  # no RoCE sample
        sim(host, "uncable", "mlx5_0", "1")  # the other families judge and commit as usual
        wait_until(lambda: any(e["errorCode"] == ["port_state"] and e["isFatal"]
                               for e in events(host)), "the port's fatal event", proc=proc,
                   detail=lines.tail)
        assert not any(e["errorCode"] == ["roce_mtu"] for e in events(host))
        logged = sum("nichealthd.monitor: check family roce_mtu cannot judge" in line
                     for line in lines.lines)
        assert logged == 1, lines.tail(40)  # once, not every poll
        fault.unlink()  # the bug no longer met: it judges again
        wait_until(lambda: family_up(base).get("roce_mtu") == 1,
                   "nichealthd_family_up{family=roce_mtu} 1", proc=proc, detail=lines.tail)
        wait_until(lambda: any("check family roce_mtu judges again" in line
                               for line in lines.lines), "the recovery logged", proc=proc,
                   detail=lines.tail)
