"""The optics family from outside: the real daemon (``--once``) on a simulated RoCE host.

``nichealthd-sim create`` writes a healthy module (real SFF-8636 / CMIS bytes) for every
RoCE port under ``ROOT/ethtool``; ``set-optics`` changes one port's readings as an operator's
drill would; each ``--once`` run is a new process, so the optics family is due every run.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any, Callable

import pytest

from ..harness import NotifySocket, ctl, ctl_output, wait_until
from ..metrics.conftest import get, parse
from ..netports import free_port
from .conftest import REPO, SimHost, running_daemon
from .test_service import events, notify  # noqa: F401 (fixture)


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


def test_show_optics_and_the_module_series_from_a_running_daemon(
        sim_host: Callable[..., SimHost], notify: NotifySocket,  # noqa: F811
        tmp_path: Path) -> None:
    """The records the family's hooks make reach ``nichealthctl show optics`` over varlink
    and the ``nichealthd_module_*`` series reach /metrics."""
    host = sim_host("a100-roce")
    sim("set-optics", str(host.root), "mlx5_1", "1", "--rx-power", "-11")
    socket_path, metrics = tmp_path / "varlink.sock", f"127.0.0.1:{free_port()}"
    env = dict(os.environ, NOTIFY_SOCKET=str(notify.path))
    with running_daemon(host.config, env, "--varlink-socket", str(socket_path),
                        "--metrics-listen", metrics) as (proc, lines):
        wait_until(lambda: bool(optics(events(host))), "the optics event", proc=proc,
                   detail=lines.tail)

        def show(*args: str) -> str:
            return ctl_output(socket_path, "show", "optics", *args, env=env)

        table = show().splitlines()
        assert all(len(line) <= 80 for line in table), table
        row = next(line for line in table if line.startswith("mlx5_1/1 "))
        assert row.split()[4] == "-11.0" and row.endswith("rx_power: low warning")
        quiet = next(line for line in table if line.startswith("mlx5_2/1 "))
        assert quiet.endswith(" ok")
        records = {(r["device"], r["port"]): r for r in json.loads(show("--json"))}
        assert len(records) == 18  # every RoCE port of the host
        assert [lane["rx_power_dbm"] for lane in records[("mlx5_1", 1)]["module_lanes"]] == \
            ["-11.0"] * 4  # text, as D-Bus carries nested records
        assert records[("mlx5_1", 1)]["optics_alerts"] == ["rx_power: low warning"]
        status, text = get(f"http://{metrics}/metrics")
        assert status == 200
        samples = parse(text)
        netdev = records[("mlx5_1", 1)]["module_netdev"]
        assert samples[("nichealthd_module_rx_power_dbm", frozenset(
            {("device", "mlx5_1"), ("port", "1"), ("netdev", netdev), ("lane", "1")}))] == \
            pytest.approx(-11.0, abs=0.01)
        assert samples[("nichealthd_family_up", frozenset({("family", "optics")}))] == 1


def test_copper_bad_lane_counts_twin_ports_and_flat_memory_are_judged_as_they_are(
        sim_host: Callable[..., SimHost], notify: NotifySocket,  # noqa: F811
        tmp_path: Path) -> None:
    """A RoCE host carrying a passive DAC, a module whose application lane count reads
    0xFF, a twin-port module shared by two ports and a flat-memory module: no event at all,
    every live lane shown once for its own port, nothing shown that the module does not
    measure; then a dead laser on the twin's lanes 5-8 is one degradation, of the second
    port."""
    host = sim_host("a100-roce")
    root = str(host.root)
    sim("set-optics", root, "mlx5_1", "1", "--module", "passive-dac")
    sim("set-optics", root, "mlx5_2", "1", "--module", "lane-count-255")
    sim("set-optics", root, "mlx5_3", "1", "--module", "flat")
    sim("set-optics", root, "mlx5_4", "1", "--module", "twin-port", "--twin", "mlx5_5")
    first = host.once()
    assert first.returncode == 0, first.stderr
    assert not optics(first.events) and not first.fatal(), first.events
    socket_path, metrics = tmp_path / "varlink.sock", f"127.0.0.1:{free_port()}"
    env = dict(os.environ, NOTIFY_SOCKET=str(notify.path))
    with running_daemon(host.config, env, "--varlink-socket", str(socket_path),
                        "--metrics-listen", metrics) as (proc, lines):
        def shown() -> dict[tuple[str, int], dict[str, Any]]:
            out = ctl(socket_path, "show", "optics", "--json", env=env)
            if out.returncode != 0:
                return {}
            return {(r["device"], r["port"]): r for r in json.loads(out.stdout)}

        wait_until(lambda: ("mlx5_4", 1) in shown() and "module_lanes" in
                   shown()[("mlx5_4", 1)], "the optics records", proc=proc, detail=lines.tail)
        records = shown()
        dac, bad, flat = records[("mlx5_1", 1)], records[("mlx5_2", 1)], records[("mlx5_3", 1)]
        assert dac["module_media"] == "passive copper" and dac["module_lanes"] == []
        assert "module_temperature_c" not in dac and "module_temperature_c" not in flat
        assert flat["module_memory"] == "flat" and flat["module_lanes"] == []
        assert [lane["lane"] for lane in bad["module_lanes"]] == ["1", "2", "3", "4"]
        assert [lane["lane"] for lane in records[("mlx5_4", 1)]["module_lanes"]] == \
            ["1", "2", "3", "4"]
        assert [lane["lane"] for lane in records[("mlx5_5", 1)]["module_lanes"]] == \
            ["5", "6", "7", "8"]
        status, text = get(f"http://{metrics}/metrics")
        assert status == 200
        samples = parse(text)
        temps = {dict(labels)["device"] for name, labels in samples
                 if name == "nichealthd_module_temperature_celsius"}
        assert not {"mlx5_1", "mlx5_3"} & temps and "mlx5_2" in temps
        rx = [dict(labels) for name, labels in samples if name == "nichealthd_module_rx_power_dbm"]
        for device in ("mlx5_1", "mlx5_3"):
            assert not [r for r in rx if r["device"] == device]
        twin = sorted((r["device"], r["lane"]) for r in rx if r["device"] in ("mlx5_4", "mlx5_5"))
        assert twin == [("mlx5_4", str(n)) for n in range(1, 5)] + \
            [("mlx5_5", str(n)) for n in range(5, 9)]  # every live lane once
    assert not optics(events(host))
    sim("set-optics", root, "mlx5_4", "1", "--rx-power", "-20", "--lanes", "5-8")
    run = host.once()
    found = optics(run.events)
    assert [(e["entitiesImpacted"][0]["entityValue"], e["isFatal"], e["recommendedAction"])
            for e in found] == [("mlx5_5", False, "NONE")], run.events
    assert "on lane 5, 6, 7, 8" in found[0]["message"]


def test_rx_power_below_the_low_alarm_is_one_degradation_and_a_fibre_cut_one_replace_vm(
        sim_host: Callable[..., SimHost]) -> None:
    host = sim_host("a100-roce")
    assert host.once().returncode == 0
    sim("set-optics", str(host.root), "mlx5_1", "1", "--rx-power", "-20")
    run = host.once()
    assert [(e["errorCode"], e["isFatal"], e["recommendedAction"]) for e in run.events
            if not e["isHealthy"]] == [(["optics_rx_power"], False, "NONE")], run.events
    sim("set-optics", str(host.root), "mlx5_2", "1", "--rx-power", "-40")  # the cut fibre
    sim("port", str(host.root), "mlx5_2", "1", "--state", "DOWN", "--phys-state", "Polling")
    cut = host.once()
    replace_vm = [e for e in cut.events if e["recommendedAction"] == "REPLACE_VM"]
    assert [(e["errorCode"], e["entitiesImpacted"][0]["entityValue"]) for e in replace_vm] \
        == [(["port_state"], "mlx5_2")], cut.events
    assert not optics(cut.events)


def test_a_module_swap_starts_a_new_rx_baseline(sim_host: Callable[..., SimHost]) -> None:
    """The old module's Rx fell 4 dB (a drop); an in-spec replacement reading as low is a
    new module: the drop closes and nothing new opens."""
    host = sim_host("a100-roce")
    root = str(host.root)
    assert not optics(host.once().events)
    sim("set-optics", root, "mlx5_1", "1", "--rx-power", "-6")
    assert [e["errorCode"] for e in optics(host.once().events)] == [["optics_rx_power_drop"]]
    assert "serial SIM" in sim("set-optics", root, "mlx5_1", "1", "--module", "optical")
    sim("set-optics", root, "mlx5_1", "1", "--rx-power", "-6")
    swapped = optics(host.once().events)
    assert [(e["errorCode"], e["isHealthy"]) for e in swapped] == [
        (["optics_rx_power_drop"], True)], swapped
    assert "a different module is plugged in" in swapped[0]["message"]
    assert not optics(host.once().events)
