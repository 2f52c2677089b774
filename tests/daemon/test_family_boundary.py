"""The failure boundary of a source through the running daemon: a kernel log that cannot be
read costs only the kernel-log family (runtime/monitor.py, core/evaluate.py).

The fault is real: ``kernelLog = "kmsg"`` on a path that does not exist, as a unit without
the kmsg drop-in meets it. The other families judge and commit as usual (a port pulled is
reported); the kernel-log family is shown as not judging on every surface until the source
can be read again.
"""

from __future__ import annotations

from pathlib import Path
from typing import Callable

from ..harness import NotifySocket
from ..metrics.conftest import get, parse
from .conftest import SimHost
from .test_driver_reload import configure, sim
from .test_poll_boundary import Running
from .test_service import events, notify  # noqa: F401 (fixture)

CANNOT = "check family kernel_log cannot judge: kernel_log not read: "


def family_up(daemon: Running) -> dict[str, float]:
    status, text = get(daemon.base + "/metrics")
    assert status == 200, text
    return {dict(labels)["family"]: value for (name, labels), value in parse(text).items()
            if name == "nichealthd_family_up"}


def test_a_kernel_log_that_cannot_be_read_costs_only_its_family(
        sim_host: Callable[..., SimHost], notify: NotifySocket,  # noqa: F811
        tmp_path: Path) -> None:
    kmsg = tmp_path / "kmsg"
    host = configure(sim_host(), kernelLog="kmsg", kernelLogPath=str(kmsg))
    daemon = Running(host, notify)
    try:
        daemon.wait_for(lambda: family_up(daemon).get("kernel_log") == 0,
                        "nichealthd_family_up{family=kernel_log} 0")
        up = family_up(daemon)
        assert up["link_state"] == up["link_counters"] == 1, up
        assert any(CANNOT in s and "12 ports: 0 healthy, 0 degraded, 0 fatal, 12 unknown" in s
                   for s in notify.statuses), notify.statuses
        sim(host, "uncable", "mlx5_0", "1")  # the other families judge and commit as usual
        daemon.wait_for(lambda: any(e["errorCode"] == ["port_state"] and e["isFatal"]
                                    for e in events(host)), "the port's fatal event")
        assert not any(e["checkName"] == "KernelLogCheck" for e in events(host))
        logged = daemon.lines.count("nichealthd.monitor: check family kernel_log cannot judge")
        assert logged == 1, daemon.lines.tail(40)  # once, not every poll
        kmsg.write_text("")  # readable again: it judges again
        daemon.wait_for(lambda: family_up(daemon).get("kernel_log") == 1,
                        "nichealthd_family_up{family=kernel_log} 1")
        daemon.lines.wait_for("check family kernel_log judges again")
    finally:
        code, err = daemon.daemon.stop()
    assert code == 0, err[-2000:]
