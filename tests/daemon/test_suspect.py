"""The suspect part from outside: a fault injected at each part of a simulated host gives
exactly one unhealthy event, whose suspect (metadata ``nichealthd.suspect`` and the message's
``suspect:`` suffix) is that part; ``show ports`` shows it.

Each fault is the simulator's (``nichealthd-sim``): a laser that died (``set-optics
--tx-bias 0``), the far end gone dark (``--rx-power -40``, the local Tx untouched), packets
the far end marked bad (``counter port_rcv_remote_physical_errors``), a port waiting for the
subnet manager, a PCIe error, a high pre-FEC BER on a healthy module, and a port down on an
InfiniBand host whose modules nichealthd cannot read (``unknown``: the facts do not decide).
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any, Callable

from nichealthd.core.events import SUSPECT_KEY

from ..harness import NotifySocket, ctl_output, wait_until
from .conftest import REPO, Run, SimHost, running_daemon
from .test_service import events, notify  # noqa: F401 (fixture)

REMOTE_ERRORS = """
[[counterDetection.counters]]
name = "port_rcv_remote_physical_errors"
path = "counters/port_rcv_remote_physical_errors"
thresholdType = "delta"
threshold = 0
"""


def sim(*args: str) -> str:
    proc = subprocess.run([sys.executable, "-m", "nichealthd.sim", *args], cwd=REPO,
                          capture_output=True, text=True, timeout=60)
    assert proc.returncode == 0, proc.stderr
    return proc.stdout


def unhealthy(run: Run) -> list[dict[str, Any]]:
    assert run.returncode == 0, run.stderr
    return [e for e in run.events if not e["isHealthy"]]


def the_one(run: Run, part: str, code: str) -> dict[str, Any]:
    """The run's only unhealthy event: its code, its suspect in the metadata and message."""
    found = unhealthy(run)
    assert len(found) == 1, found
    event = found[0]
    assert event["errorCode"] == [code], event
    assert event["metadata"][SUSPECT_KEY] == part, event
    assert f" - suspect: {part}" in event["message"], event
    return event


def quiet_first(host: SimHost) -> None:
    assert not unhealthy(host.once())  # the healthy host: nothing to suspect


def test_a_laser_that_died_is_the_module(sim_host: Callable[..., SimHost]) -> None:
    host = sim_host("a100-roce")
    quiet_first(host)
    sim("set-optics", str(host.root), "mlx5_1", "1", "--tx-bias", "0")
    event = the_one(host.once(), "module", "optics_tx_bias")
    assert event["message"].endswith(
        "suspect: module (Tx bias 0.00 mA on lane 1, 2, 3, 4 below its low alarm)")
    assert event["recommendedAction"] == "NONE"  # optics never decide a REPLACE_VM


def test_the_far_end_gone_dark_is_the_cable_or_far_end(
        sim_host: Callable[..., SimHost]) -> None:
    host = sim_host("a100-roce")
    quiet_first(host)
    sim("set-optics", str(host.root), "mlx5_1", "1", "--rx-power", "-40")
    event = the_one(host.once(), "cable-or-far-end", "optics_rx_power")
    assert "Rx loss of signal on lane 1, 2, 3, 4, local Tx healthy" in event["message"]


def test_remote_physical_errors_are_the_cable_or_far_end(
        sim_host: Callable[..., SimHost]) -> None:
    host = sim_host("dgx-h100")
    with host.config.open("a") as config:
        config.write(REMOTE_ERRORS)
    quiet_first(host)
    sim("counter", str(host.root), "mlx5_0", "1", "port_rcv_remote_physical_errors",
        "--add", "25")
    event = the_one(host.once(), "cable-or-far-end", "port_rcv_remote_physical_errors")
    assert "packets marked bad by the far end" in event["message"]


def test_a_port_waiting_for_the_subnet_manager_is_the_fabric(
        sim_host: Callable[..., SimHost]) -> None:
    host = sim_host("dgx-h100")
    quiet_first(host)
    sim("port", str(host.root), "mlx5_0", "1", "--state", "INIT", "--phys-state", "LinkUp")
    the_one(host.once(), "fabric", "port_state")


def test_a_pcie_error_is_the_nic(sim_host: Callable[..., SimHost]) -> None:
    host = sim_host("dgx-h100")
    quiet_first(host)
    sim("aer", str(host.root), "mlx5_0", "fatal")
    event = unhealthy(host.once())
    assert len(event) == 1, event
    assert event[0]["errorCode"][0].startswith("aer_")
    assert event[0]["metadata"][SUSPECT_KEY] == "nic"


def test_a_high_ber_on_a_healthy_module_is_the_link(sim_host: Callable[..., SimHost]) -> None:
    host = sim_host("a100-roce")
    quiet_first(host)
    sim("set-ber", str(host.root), "mlx5_1", "1", "1e-4")
    found = []
    for _ in range(4):  # the BER is judged over a window of reads
        found += unhealthy(host.once())
        if found:
            break
    assert len(found) == 1, found
    assert found[0]["metadata"][SUSPECT_KEY] == "link", found
    assert "every local module diagnostic healthy" in found[0]["message"]


def test_a_port_down_without_module_facts_is_unknown(sim_host: Callable[..., SimHost]
                                                     ) -> None:
    host = sim_host("dgx-h100")  # InfiniBand: no module diagnostics through ethtool
    quiet_first(host)
    sim("uncable", str(host.root), "mlx5_3", "1")
    event = the_one(host.once(), "unknown", "port_state")
    assert event["isFatal"] and event["recommendedAction"] == "REPLACE_VM"  # unchanged


def test_show_ports_names_the_suspect(sim_host: Callable[..., SimHost],
                                      notify: NotifySocket,  # noqa: F811
                                      tmp_path: Path) -> None:
    host = sim_host("a100-roce")
    with host.config.open("a") as config:
        config.write('opticsInterval = "1s"\n')
    sim("set-optics", str(host.root), "mlx5_1", "1", "--tx-bias", "0")
    socket_path = tmp_path / "varlink.sock"
    env = dict(os.environ, NOTIFY_SOCKET=str(notify.path))
    with running_daemon(host.config, env, "--varlink-socket", str(socket_path)) as (proc,
                                                                                     lines):
        wait_until(lambda: any(not e["isHealthy"] for e in events(host)), "the module event",
                   proc=proc, detail=lines.tail)

        def ctl(*args: str) -> str:
            return ctl_output(socket_path, "show", "ports", *args, env=env)

        table = ctl("--wide").splitlines()
        headers = table[0].split()
        assert "SUSPECT" in headers, table
        row = next(line.split() for line in table if line.startswith("mlx5_1/1 "))
        assert row[headers.index("SUSPECT")] == "module", table
        records = {(r["device"], r["port"]): r for r in json.loads(ctl("--json"))}
        assert records[("mlx5_1", 1)]["suspect"] == "module"
        assert "Tx bias 0.00 mA" in records[("mlx5_1", 1)]["suspect_evidence"]
        assert {r["suspect"] for k, r in records.items() if k != ("mlx5_1", 1)} == {""}
