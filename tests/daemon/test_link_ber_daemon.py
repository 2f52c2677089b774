"""Link BER end to end: ``nichealthd --once`` on a simulated RoCE host driven by ``set-ber``."""

from __future__ import annotations

import json
import logging
import os
import re
import shutil
from datetime import datetime, timedelta, timezone
from typing import Any, Callable

import pytest

from nichealthd.runtime.monitor import Monitor
from nichealthd.runtime.startup import load_topology
from nichealthd.sim import cli as sim_cli
from nichealthd.sources.config_file import load_config

from .conftest import Run, SimHost


def ber_events(run: Run) -> list[dict[str, Any]]:
    return [e for e in run.events if e["errorCode"] and e["errorCode"][0].startswith("link_")
            and "LinkBer" in e["message"]]


def drill(host: SimHost, *args: str) -> None:
    assert sim_cli.main([*args[:1], str(host.root), *args[1:]]) == 0


def test_set_ber_past_the_limit_is_one_predicted_failure_and_one_recovery(
        sim_host: Callable[..., SimHost]) -> None:
    host = sim_host("oci-h100")
    netdev = host.manifest["devices"][1]["ports"]["1"]["netdev"]
    assert host.manifest["devices"][1]["name"] == "mlx5_1"
    shutil.rmtree(host.root / "ethtool" / netdev)  # a port without PHY files
    for _ in range(2):  # the first read is each port's first sample; the second a window
        run = host.once()
        assert run.returncode == 0, run.stderr
        assert ber_events(run) == []  # a new host's BER (1e-8) is quiet
    drill(host, "set-ber", "mlx5_0", "1", "1e-4")
    # the window that spans the set-ber may or may not reach the limit; one of the next two
    # does, and says it once
    runs = [host.once(), host.once(), host.once()]
    told = [e for run in runs for e in ber_events(run)]
    assert len(told) == 1, told
    event = told[0]
    assert event["checkName"] == "EthernetDegradationCheck"
    assert event["errorCode"] == ["link_ber"]
    assert event["isFatal"] is False and event["isHealthy"] is False
    assert event["recommendedAction"] == "NONE"
    assert "predicted failure" in event["message"]
    # the BER of the window it was told in: 1e-4, or a little less across the set-ber
    ber = re.search(r"pre-FEC BER ([0-9.e+-]+) ", event["message"])
    assert ber and 2.4e-5 <= float(ber.group(1)) <= 1e-4, event["message"]
    assert "RS(544,514) KP4 FEC's correction limit 2.4e-04" in event["message"]
    assert event["entitiesImpacted"] == [{"entityType": "NIC", "entityValue": "mlx5_0"},
                                         {"entityType": "NICPort", "entityValue": "1"}]
    drill(host, "set-ber", "mlx5_0", "1", "1e-8")
    runs = [host.once(), host.once(), host.once()]
    healed = [e for run in runs for e in ber_events(run)]
    assert len(healed) == 1, healed
    assert healed[0]["isHealthy"] is True and healed[0]["errorCode"] == ["link_ber"]
    assert "back below" in healed[0]["message"]
    assert all(run.returncode == 0 for run in runs)


def _said(runs: list[Run], text: str) -> int:
    return sum(run.stderr.count(text) for run in runs)


def test_impossible_inputs_are_no_event_and_said_once(
        sim_host: Callable[..., SimHost]) -> None:
    """An all-ones read of the corrected bits (the simulator's files written as a broken
    driver would), and a negative baseline in the state file: no event, one log line each."""
    host = sim_host("oci-h100")
    netdev = host.manifest["devices"][0]["ports"]["1"]["netdev"]
    stats = host.root / "ethtool" / netdev / "stats"
    runs = [host.once(), host.once()]
    good = stats.read_text()
    stats.write_text(good.replace("rx_corrected_bits_phy:",
                                  "rx_corrected_bits_phy: 18446744073709551615\n#", 1))
    runs.append(host.once())
    stats.write_text(good)
    state = json.loads(host.state_file.read_text())
    assert state["link_ber_baseline"], "two runs make a baseline of every RoCE port"
    state["link_ber_baseline"] = {key: -1e-5 for key in state["link_ber_baseline"]}
    host.state_file.write_text(json.dumps(state))
    runs += [host.once(), host.once(), host.once()]
    assert all(run.returncode == 0 for run in runs), [run.stderr for run in runs]
    assert [e for run in runs for e in ber_events(run)] == []
    assert _said(runs, "rx_corrected_bits_phy: out of range for a 64-bit PHY counter") == 1
    ports = len(state["link_ber_baseline"])
    # each port's corrupt baseline once, in the run that healed it; never again
    assert _said(runs[3:4], "is no bit error ratio") == ports
    assert _said(runs[4:], "is no bit error ratio") == 0
    assert all(v > 0 for v in json.loads(host.state_file.read_text())[
        "link_ber_baseline"].values())


def test_a_pam4_port_at_1e_7_among_peers_at_1e_12_is_healthy(
        sim_host: Callable[..., SimHost]) -> None:
    host = sim_host("oci-h100")
    roce = [d for d in host.manifest["devices"]
            if d.get("ports", {}).get("1", {}).get("netdev")
            and (host.root / "ethtool" / d["ports"]["1"]["netdev"]).is_dir()]
    assert len(roce) >= 5
    for n, dev in enumerate(roce):
        drill(host, "set-ber", dev["name"], "1", "1e-7" if n == 0 else "1e-12")
    runs = [host.once() for _ in range(4)]
    assert all(run.returncode == 0 for run in runs), [run.stderr for run in runs]
    assert [e for run in runs for e in ber_events(run)] == []


def test_a_running_monitor_says_an_impossible_input_once(
        sim_host: Callable[..., SimHost], caplog: pytest.LogCaptureFixture) -> None:
    """The daemon's poll loop in-process on a sim host, its clock a minute on per poll (each
    poll a link-BER run): an all-ones corrected-bits read that lasts is no event and one log
    line of the source; a corrupt baseline one line of the family, in the poll that heals it."""
    host = sim_host("oci-h100")
    netdev = host.manifest["devices"][0]["ports"]["1"]["netdev"]
    stats = host.root / "ethtool" / netdev / "stats"
    config = load_config(str(host.config))
    os.makedirs(config.state_dir, exist_ok=True)
    ticks = iter(range(0, 3600, 61))
    start = datetime.now(timezone.utc)
    monitor = Monitor(config, load_topology(config),
                      clock=lambda: start + timedelta(seconds=next(ticks)))
    monitor.start()
    try:
        events = [e for _ in range(2) for e in monitor.poll().result.events]
        monitor.close()
        state = json.loads(host.state_file.read_text())
        state["link_ber_baseline"] = {key: -1e-5 for key in state["link_ber_baseline"]}
        host.state_file.write_text(json.dumps(state))
        stats.write_text(stats.read_text().replace(
            "rx_corrected_bits_phy:", "rx_corrected_bits_phy: 18446744073709551615\n#", 1))
        monitor = Monitor(config, load_topology(config),
                          clock=lambda: start + timedelta(seconds=next(ticks)))
        monitor.start()
        with caplog.at_level(logging.INFO):
            events += [e for _ in range(5) for e in monitor.poll().result.events]
    finally:
        monitor.close()
    assert [e for e in events if "LinkBer" in e.message] == []
    said = [r.getMessage() for r in caplog.records]
    assert sum("out of range for a 64-bit PHY counter" in m for m in said) == 1, said
    assert sum("is no bit error ratio" in m for m in said) == len(state["link_ber_baseline"])
