"""Bad input never makes a false REPLACE_VM or a failed poll: the real daemon on a sim tree.

Each case writes what a broken or hostile sysfs may hold with ``nichealthd-sim`` (``aer``,
``temp``, ``garbage``, ``unbind``) while a cable is pulled on another NIC (``uncable``): the
poll that reads both commits, reports the port DOWN and nothing else, and logs the bad file
once as unreadable. Before the one parser of numbers (core/numbers.py): an AER total of
10^26 gave a fatal AER event, a root-port total of 2^64 one more, a critical temperature of
1 m°C a fatal "at or above its critical threshold" for a 55 °C card, and a total of 400 or
5000 digits and ``--1`` in ``numa_node`` failed every poll (``--once`` exited 1, nothing was
judged or committed, the pulled cable went unreported).
"""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path
from typing import Any, Callable, Iterator

import pytest

from nichealthd.sim import pcifiles, tree

from ..harness import NotifySocket
from .conftest import Run, SimHost
from .test_poll_boundary import Running
from .test_service import (
    events,
    notify,  # noqa: F401 (fixture)
)

PULLED = "mlx5_3"  # the real fault of every case, on another NIC than the bad file's


def sim(*args: str) -> None:
    subprocess.run([sys.executable, "-m", "nichealthd.sim", *args], check=True,
                   capture_output=True, text=True, timeout=60)


def function(host: SimHost, dev: str) -> Path:
    return pcifiles.device_function(host.root, tree.device(host.manifest, dev))


def garbage(host: SimHost, path: Path, text: str) -> None:
    sim("garbage", str(host.root), str(path.relative_to(host.root)), f"--text={text}")


def table(total: str, count: str) -> str:
    """An ``aer_dev_*`` table as the kernel writes it, with ``count`` on its total line."""
    return "".join(f"{name} 0\n" for name in pcifiles.UNCOR_ERRORS) + f"{total} {count}\n"


def aer_total(count: str) -> Callable[[SimHost], Path]:
    def write(host: SimHost) -> Path:
        path = function(host, "mlx5_0") / "aer_dev_fatal"
        garbage(host, path, table("TOTAL_ERR_FATAL", count))
        return path
    return write


def rootport_total(count: str) -> Callable[[SimHost], Path]:
    def write(host: SimHost) -> Path:
        path = pcifiles.chain(function(host, "mlx5_0"))[0] / "aer_rootport_total_err_fatal"
        garbage(host, path, count)
        return path
    return write


def critical_1_mdeg(host: SimHost) -> Path:
    sim("temp", str(host.root), "mlx5_0", "55", "--crit", "0.001")
    return next((function(host, "mlx5_0") / "hwmon").glob("hwmon*/temp1_crit"))


def numa_of_unbound(host: SimHost) -> Path:
    path = function(host, "mlx5_8") / "numa_node"  # unbound before the first poll
    garbage(host, path, "--1")
    return path


CASES: dict[str, Callable[[SimHost], Path]] = {
    "AER total 10^26": aer_total("9" * 26),
    "AER total 2^64": aer_total(str(2**64)),
    "AER total 400 digits": aer_total("9" * 400),
    "AER total 5000 digits": aer_total("9" * 5000),
    "AER total negative": aer_total("-3"),
    "AER total not a number": aer_total("lots"),
    "AER total not ASCII": aer_total("３"),
    "root-port total 2^64": rootport_total(str(2**64)),
    "root-port total 10^26": rootport_total("9" * 26),
    "root-port total 2^63 (64 bits, but not since boot)": rootport_total(str(2**63)),
    "critical temperature 1 m°C": critical_1_mdeg,
    "numa_node --1 of an unbound function": numa_of_unbound,
}


def entities_of(event: dict[str, Any]) -> set[tuple[str, str]]:
    return {(x["entityType"], x["entityValue"]) for x in event["entitiesImpacted"]}


def pulled_and_nothing_else(run: Run) -> None:
    """The poll committed, the pulled port is reported fatal, and nothing else is unhealthy."""
    assert run.returncode == 0, run.stderr[-3000:]
    unhealthy = [e for e in run.events if not e["isHealthy"]]
    assert unhealthy, run.stderr[-3000:]
    for event in unhealthy:
        assert ("NIC", PULLED) in entities_of(event), event
    assert any(e["isFatal"] and e["checkName"] == "InfiniBandStateCheck"
               and ("NICPort", "1") in entities_of(e) for e in unhealthy)


@pytest.mark.parametrize("case", list(CASES))
def test_bad_numbers_are_unreadable_and_a_real_fault_is_reported_in_the_same_poll(
        sim_host: Callable[..., SimHost], case: str) -> None:
    host = sim_host("dgx-h100")
    sim("unbind", str(host.root), "mlx5_8")  # a NIC function no driver holds (spare port)
    first = host.once()
    assert first.returncode == 0, first.stderr[-3000:]
    assert not [e for e in first.events if not e["isHealthy"]], first.events
    bad = CASES[case](host)
    sim("uncable", str(host.root), PULLED, "1")
    run = host.once()
    pulled_and_nothing_else(run)
    said = [line for line in run.stderr.splitlines()
            if f"/{bad.parent.name}/{bad.name}: " in line]  # by /sys/bus/pci or /sys/devices
    assert len(said) == 1 and said[0].endswith("taken as unreadable"), run.stderr[-3000:]
    again = host.once()  # still there: still unreadable, still no event, still committed
    assert again.returncode == 0, again.stderr[-3000:]
    assert not [e for e in again.events if not e["isHealthy"]], again.events


@pytest.fixture
def running(sim_host: Callable[..., SimHost], notify: NotifySocket  # noqa: F811
            ) -> Iterator[Running]:
    host = sim_host()
    with host.config.open("a") as fh:
        fh.write('\npcieAerInterval = "1s"\n')  # read the tables every second, not every 10
    daemon = Running(host, notify)
    yield daemon
    code, err = daemon.daemon.stop()
    assert code == 0, err[-2000:]


def test_a_running_daemon_reports_a_pulled_cable_beside_a_5000_digit_aer_total(
        running: Running) -> None:
    """Before: OverflowError in every poll while the total was there; the pulled port went
    unreported and /healthz said 503."""
    host = running.host
    aer_total("9" * 5000)(host)
    sim("uncable", str(host.root), PULLED, "1")
    running.wait_for(lambda: any(e["isFatal"] and ("NIC", PULLED) in entities_of(e)
                                 for e in events(host)), "the pulled port's fatal event")
    running.wait_for(lambda: "taken as unreadable" in running.lines.tail(), "the log line")
    assert running.healthz() == (200, "ok\n")
    assert not [e for e in events(host)
                if not e["isHealthy"] and ("NIC", PULLED) not in entities_of(e)]
    assert running.failures("read") == running.failures("evaluate") == 0
