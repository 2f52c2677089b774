"""The optics family from outside: the real daemon (``--once``) on a simulated RoCE host.

``nichealthd-sim create`` writes a healthy module (real SFF-8636 / CMIS bytes) for every
RoCE port under ``ROOT/ethtool``; ``set-optics`` changes one port's readings as an operator's
drill would; each ``--once`` run is a new process, so the optics family is due every run.
"""

from __future__ import annotations

import json
import subprocess
import sys
from typing import Any, Callable

from .conftest import REPO, SimHost


def sim(*args: str) -> str:
    proc = subprocess.run([sys.executable, "-m", "nichealthd.sim", *args], cwd=REPO,
                          capture_output=True, text=True, timeout=60)
    assert proc.returncode == 0, proc.stderr
    return proc.stdout


def optics(events: list[dict[str, Any]]) -> list[dict[str, Any]]:
    return [e for e in events if e["errorCode"][:1] and e["errorCode"][0].startswith("optics")]


def test_rx_power_below_the_modules_low_warning_is_one_event_and_one_recovery(
        sim_host: Callable[..., SimHost]) -> None:
    host = sim_host("a100-roce")
    first = host.once()
    assert first.returncode == 0, first.stderr
    assert not optics(first.events)  # healthy modules on every RoCE port: quiet
    assert "mlx5_1 port 1 module: Rx power -11 dBm" in sim(
        "set-optics", str(host.root), "mlx5_1", "1", "--rx-power", "-11")
    run = host.once()
    events = optics(run.events)
    assert len(events) == 1, run.events
    event = events[0]
    assert (event["checkName"], event["isFatal"], event["isHealthy"], event["errorCode"],
            event["recommendedAction"]) == (
        "EthernetDegradationCheck", False, False, ["optics_rx_power"], "NONE")
    assert {"entityType": "NIC", "entityValue": "mlx5_1"} in event["entitiesImpacted"]
    assert "below the module's low warning threshold (-10.00 dBm)" in event["message"]
    assert not optics(host.once().events)  # said once
    sim("set-optics", str(host.root), "mlx5_1", "1", "--rx-power", "-2")
    back = optics(host.once().events)
    assert [(e["isHealthy"], e["errorCode"], e["entitiesImpacted"][0]["entityValue"])
            for e in back] == [(True, ["optics_rx_power"], "mlx5_1")]
    state = json.loads(host.state_file.read_text())
    assert state["optics_open"] == {}


def test_a_module_running_hot_is_one_degradation(
        sim_host: Callable[..., SimHost]) -> None:
    host = sim_host("a100-roce")
    sim("set-optics", str(host.root), "mlx5_2", "1", "--temperature", "72")
    run = host.once()
    events = optics(run.events)
    assert [(e["errorCode"], e["isFatal"]) for e in events] == [
        (["optics_temperature"], False)], run.events
    assert "temperature 72.0 °C is above the module's high warning threshold (70.0 °C)" \
        in events[0]["message"]


def test_an_infiniband_host_has_no_modules_and_stays_quiet(
        sim_host: Callable[..., SimHost]) -> None:
    host = sim_host("dgx-h100")
    run = host.once()
    assert run.returncode == 0, run.stderr
    assert not optics(run.events)
    proc = subprocess.run([sys.executable, "-m", "nichealthd.sim", "set-optics",
                           str(host.root), "mlx5_0", "1", "--rx-power", "-11"], cwd=REPO,
                          capture_output=True, text=True, timeout=60)
    assert proc.returncode == 2 and "has no module" in proc.stderr
