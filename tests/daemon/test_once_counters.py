"""The counter checks end to end: ``nichealthd --once`` runs against a simulated host."""

from __future__ import annotations

import json
from datetime import datetime, timedelta, timezone
from typing import Callable

from nichealthd.sim import mutate
from nichealthd.sources.config_file import load_config

from .conftest import SimHost


def test_counter_breach_latch_and_recovery(sim_host: Callable[..., SimHost]) -> None:
    host = sim_host()
    first = host.once()
    assert first.returncode == 0, first.stderr
    assert first.events and all(e["isHealthy"] for e in first.events)  # baselines only
    mutate.counter(host.root, "mlx5_0", 1, "link_downed", add=1)
    breach = host.once()
    assert len(breach.events) == 1
    event = breach.events[0]
    # Fatal, under the degradation check (as NVSentinel's monitor files fatal counters)
    assert event["checkName"] == "InfiniBandDegradationCheck"
    assert event["errorCode"] == ["link_downed"]
    assert event["isFatal"] is True and event["isHealthy"] is False
    assert event["recommendedAction"] == "REPLACE_VM"
    assert event["entitiesImpacted"] == [{"entityType": "NIC", "entityValue": "mlx5_0"},
                                         {"entityType": "NICPort", "entityValue": "1"}]
    assert event["agent"] == "nic-health-monitor" and event["componentClass"] == "NIC"
    assert event["nodeName"] == "dgx-h100-sim"
    assert event["processingStrategy"] == "EXECUTE_REMEDIATION"
    assert event["metadata"]["nichealthd.event_id"]
    assert host.once().events == []
    mutate.reset_counters(host.root)
    recovery = host.once()
    assert [(e["isHealthy"], e["checkName"], e["errorCode"]) for e in recovery.events] == [
        (True, "InfiniBandDegradationCheck", ["link_downed"])]


def test_hour_old_snapshot_fires_the_fatal_tier_only(sim_host: Callable[..., SimHost]) -> None:
    host = sim_host()
    host.once()
    state = json.loads(host.state_file.read_text())
    hour_ago = (datetime.now(timezone.utc) - timedelta(hours=1)).strftime("%Y-%m-%dT%H:%M:%SZ")
    for name in ("symbol_error_fatal", "symbol_error"):
        snap = state["counter_snapshots"][f"mlx5_0:1:{name}"]
        snap["timestamp"] = hour_ago
    host.state_file.write_text(json.dumps(state))
    mutate.counter(host.root, "mlx5_0", 1, "symbol_error", add=200)
    run = host.once()
    assert [(e["errorCode"], e["isFatal"]) for e in run.events] == [
        (["symbol_error_fatal"], True)]


def test_changed_boot_id_sends_baselines_and_drops_stale_breaches(
        sim_host: Callable[..., SimHost]) -> None:
    host = sim_host()
    host.once()
    mutate.counter(host.root, "mlx5_0", 1, "link_downed", add=1)
    assert len(host.once().fatal()) == 1
    mutate.reboot(host.root)
    run = host.once()
    assert run.fatal() == []
    clears = [e for e in run.events if not e["entitiesImpacted"]]
    config = load_config(str(host.config))
    # The EFA checks are cleared only on a host with an EFA device; and
    # InfiniBandCharDeviceCheck (nichealthd/core/checks/chardev.py) once, by its own family
    # (its section starts fresh after a reboot), not a second time with the others.
    assert "InfiniBandCharDeviceCheck" in config.checks
    assert sorted(e["checkName"] for e in clears) == sorted(
        set(config.checks) - {"EFAStateCheck", "EFADegradationCheck"})
    baselines = [e for e in run.events if "healthy after reboot" in e["message"]]
    monitored_ports = 8 + 4  # dgx-h100: 8 compute + 4 storage functions, one port each
    assert len(baselines) == monitored_ports * len(config.active_counters)
    assert json.loads(host.state_file.read_text())["breach_flags"] == {}
    mutate.counter(host.root, "mlx5_0", 1, "link_downed", add=1)
    assert len(host.once().fatal()) == 1  # a fresh latch, not a stale one


def test_bad_files_and_state_give_no_crash_and_no_false_event(
        sim_host: Callable[..., SimHost]) -> None:
    host = sim_host()
    host.once()
    counters = "sys/class/infiniband/mlx5_0/ports/1/counters"
    mutate.garbage(host.root, f"{counters}/link_downed", "not-a-number")
    garbage = host.once()
    assert garbage.returncode == 0 and garbage.events == []
    warnings = [line for line in garbage.stderr.splitlines() if "WARNING" in line]
    assert len(warnings) == 1
    assert "link_downed" in warnings[0] and "not an 8-bit counter" in warnings[0]
    mutate.counter(host.root, "mlx5_0", 1, "link_downed", set_to=0)
    mutate.remove_file(host.root, f"{counters}/symbol_error")
    vanished = host.once()
    assert vanished.returncode == 0 and vanished.events == []
    assert "WARNING" not in vanished.stderr  # a missing counter is skipped silently
    mutate.restore_file(host.root, f"{counters}/symbol_error")
    text = host.state_file.read_text()
    host.state_file.write_text(text[: len(text) // 2])  # a torn state file
    torn = host.once()
    assert torn.returncode == 0
    assert len([line for line in torn.stderr.splitlines() if "corrupt" in line]) == 1
    assert torn.fatal() == []  # a fresh start: baselines, nothing invented


def test_missing_metadata_is_a_clear_startup_error(sim_host: Callable[..., SimHost]) -> None:
    host = sim_host()
    (host.root / "gpu_metadata.json").unlink()
    run = host.once("--topology-source", "metadata")  # auto would derive it from sysfs
    assert run.returncode == 1
    assert "gpu_metadata.json does not exist" in run.stderr
    assert "Traceback" not in run.stderr and run.stderr.count("\n") == 1


def test_latched_hw_counter_wrapping_between_runs_is_no_recovery(
        sim_host: Callable[..., SimHost]) -> None:
    """A wrap across restarts: each ``--once`` is a restart; the wrap happens between two."""
    host = sim_host()
    assert host.once().returncode == 0
    mutate.counter(host.root, "mlx5_0", 1, "rnr_nak_retry_err", add=2)
    breach = host.once()
    assert [(e["errorCode"], e["isFatal"]) for e in breach.events] == [
        (["rnr_nak_retry_err"], True)]
    mutate.counter(host.root, "mlx5_0", 1, "rnr_nak_retry_err", set_to=2**32 - 1)
    assert host.once().events == []  # latched
    mutate.counter(host.root, "mlx5_0", 1, "rnr_nak_retry_err", add=2, hardware_semantics=True)
    wrapped = host.once()
    assert wrapped.returncode == 0, wrapped.stderr
    assert wrapped.events == []  # a wrap to 1, not a reset: the fatal condition stays
    assert "mlx5_0:1:rnr_nak_retry_err" in json.loads(host.state_file.read_text())[
        "breach_flags"]
    mutate.counter(host.root, "mlx5_0", 1, "rnr_nak_retry_err", set_to=0)
    assert [(e["isHealthy"], e["errorCode"]) for e in host.once().events] == [
        (True, ["rnr_nak_retry_err"])]


# port_xmit_wait is off by default (nichealthd.toml(5)): switched on where a test needs it.
XMIT_WAIT_ON = '\n[[counterDetection.counters]]\nname = "port_xmit_wait"\nenabled = true\n'


def test_saturation_one_report_per_file_and_none_for_a_traffic_counter(
        sim_host: Callable[..., SimHost]) -> None:
    """One report per saturated counter file, end to end."""
    host = sim_host()
    with host.config.open("a") as config:
        config.write(XMIT_WAIT_ON)
    mutate.counter(host.root, "mlx5_0", 1, "port_xmit_wait", set_to=2**32 - 3)
    assert host.once().fatal() == []
    mutate.counter(host.root, "mlx5_0", 1, "port_xmit_wait", add=5, hardware_semantics=True)
    quiet = host.once("--log-level", "info")
    assert quiet.events == []  # 2^32-1 on a healthy busy host: no unhealthy event
    assert "port_xmit_wait on port mlx5_0 port 1 is saturated at 4294967295" in quiet.stderr
    state = json.loads(host.state_file.read_text())
    assert state["saturated_quiet_counters"].keys() == {"mlx5_0:1:port_xmit_wait"}

    mutate.counter(host.root, "mlx5_0", 1, "symbol_error", set_to=65535)
    saturated = host.once()
    assert [(e["errorCode"], e["isHealthy"], e["isFatal"]) for e in saturated.events] == [
        (["symbol_error"], False, False)]
    assert "saturated at 65535" in saturated.events[0]["message"]
    assert host.once().events == []
    mutate.counter(host.root, "mlx5_0", 1, "symbol_error", set_to=0)
    cleared = host.once()
    assert [(e["errorCode"], e["isHealthy"]) for e in cleared.events] == [
        (["symbol_error"], True)]
    assert cleared.events[0]["checkName"] == "InfiniBandDegradationCheck"


def test_saturation_report_survives_a_vanished_file_and_its_clear_is_reported(
        sim_host: Callable[..., SimHost]) -> None:
    """A saturated error counter whose file is absent for a while (a poll rediscovers the
    port without it) keeps its report: when it comes back cleared, the healthy event closes
    the condition the platform holds open."""
    host = sim_host()
    assert host.once().fatal() == []
    mutate.counter(host.root, "mlx5_0", 1, "symbol_error", set_to=65535)
    saturated = host.once()
    assert [(e["errorCode"], e["isHealthy"]) for e in saturated.events] == [
        (["symbol_error"], False)]
    counter = "sys/class/infiniband/mlx5_0/ports/1/counters/symbol_error"
    mutate.remove_file(host.root, counter)
    assert host.once().events == []
    assert "mlx5_0:1:symbol_error" in json.loads(host.state_file.read_text())[
        "saturated_counters"]
    mutate.restore_file(host.root, counter)
    mutate.counter(host.root, "mlx5_0", 1, "symbol_error", set_to=0)
    cleared = host.once()
    assert [(e["errorCode"], e["isHealthy"]) for e in cleared.events] == [
        (["symbol_error"], True)]
