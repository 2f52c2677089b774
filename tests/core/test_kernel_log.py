"""The kernel-log family: rules, attribution, dedup, the stateful soft lockup, config."""

from __future__ import annotations

from dataclasses import replace
from typing import Any

import pytest

from nichealthd.core.checks.kernel_log import (
    CHECK_NAME,
    KERNEL_LOG,
    KernelLogSettings,
    device_fault,
)
from nichealthd.core.config_errors import ConfigError
from nichealthd.core.kernel_rules import DEFAULT_KERNEL_RULES, attribution
from nichealthd.core.model import HostSnapshot, KernelLine
from nichealthd.core.state import MonitorState

from .builders import T0, Runner, at, config, device, host, port

NIC = "0000:19:00.0"

# Real message formats (see the citations in nichealthd/core/kernel_rules.py).
LINES = {
    "cmd_exec_timeout": f"mlx5_core {NIC}: wait_func:964:(pid 112): ENABLE_HCA(0x104) timeout. "
                        "Will cause a leak of a command resource",
    "health_poll_failed": f"mlx5_core {NIC}: poll_health:825:(pid 0): device's health "
                          "compromised - reached miss count",
    "unrecoverable_err": f"mlx5_core {NIC}: print_health_info:431:(pid 0): synd 0x8: "
                         "unrecoverable hardware error",
    "netdev_watchdog": "NETDEV WATCHDOG: ib0 (mlx5_core): transmit queue 3 timed out 5120 ms",
    "mlx5_tx_timeout_detected": f"mlx5_core {NIC} ib0: TX timeout detected",
    "mlx5_rx_timeout_detected": f"mlx5_core {NIC} ib0: RX timeout on channel: 4, ICOSQ: 0x1a, "
                                "RQ: 0x1b, CQ: 0x1c",
    "pci_power_insufficient": f"mlx5_core {NIC}: mlx5_pcie_event:299:(pid 268): Detected "
                              "insufficient power on the PCIe slot (27W).",
    "port_module_high_temp": f"mlx5_core {NIC}: Port module event[error]: module 0, Cable "
                             "error, High Temperature",
    "access_reg_failed": f"mlx5_core {NIC}: mlx5_cmd_out_err:838:(pid 9): ACCESS_REG(0x805) "
                         "op_mod(0x1) failed, status bad parameter(0x3), syndrome (0x6c4d4c), "
                         "err(-22)",
    "module_unplugged": f"mlx5_core {NIC}: Port module event: module 0, Cable unplugged",
}
WATCHDOG_68 = (f"mlx5_core {NIC} ib0: NETDEV WATCHDOG: CPU: 3: transmit queue 3 timed out "
               "5120 ms")
LOCKUP = ("watchdog: BUG: soft lockup - CPU#12 stuck for 22s! [kworker/12:1:1234]",
          " ? __schedule+0x2c1/0x860",
          " mlx5e_napi_poll+0x12d/0x6c0 [mlx5_core]")
UNRELATED = ("usb 1-1: new high-speed USB device number 2 using xhci_hcd",
             "EXT4-fs (nvme0n1p1): mounted filesystem with ordered data mode",
             "mlx5_core 0000:19:00.0: firmware version: 28.39.1002",
             "NETDEV WATCHDOG: eth0 (ixgbe): transmit queue 0 timed out 5000 ms")


def nic() -> Any:
    p = replace(port("mlx5_0"), netdev="ib0")
    return device("mlx5_0", pci=NIC, ports=(p,), netdevs=("ib0",))


def snap(*texts: str, when: float = 0, step: float = 0, devices: Any = None,
         cursor: str = "c") -> HostSnapshot:
    lines = tuple(KernelLine(t, at(when + i * step)) for i, t in enumerate(texts))
    return replace(host(*(devices or (nic(),)), when=when), kernel_lines=lines,
                   kernel_cursor=cursor)


def driver_events(result: Any) -> list[Any]:
    return [e for e in result.events if e.check_name == CHECK_NAME]


def runner() -> Runner:
    r = Runner()
    r.poll(host(nic()))  # the baseline poll
    return r


@pytest.mark.parametrize("rule", sorted(LINES))
def test_each_rule_matches_its_real_message_and_attributes_it(rule: str) -> None:
    r = runner()
    events = driver_events(r.poll(snap(LINES[rule], when=1)))
    assert len(events) == 1
    event = events[0]
    fatal = {x.name: x.is_fatal for x in DEFAULT_KERNEL_RULES}[rule]
    assert event.error_code == (rule,) and event.is_fatal is fatal
    assert event.recommended_action == ("REPLACE_VM" if fatal else "NONE")
    assert event.entities[0] == ("NIC", "mlx5_0")
    assert event.metadata["kernel_log_line"] == LINES[rule]
    assert LINES[rule].replace(";", ",") in event.message


def test_the_netdev_names_the_port() -> None:
    r = runner()
    (event,) = driver_events(r.poll(snap(LINES["mlx5_tx_timeout_detected"], when=1)))
    assert event.entities == (("NIC", "mlx5_0"), ("NICPort", "1"))


def test_netdev_watchdog_in_both_orders_each_one_event() -> None:
    r = runner()
    first = driver_events(r.poll(snap(LINES["netdev_watchdog"], when=1)))
    second = driver_events(r.poll(snap(WATCHDOG_68, when=400)))
    assert [e.error_code for e in first + second] == [("netdev_watchdog",)] * 2
    assert first[0].entities == second[0].entities == (("NIC", "mlx5_0"), ("NICPort", "1"))


def test_unrelated_lines_give_nothing() -> None:
    r = runner()
    result = r.poll(snap(*UNRELATED, when=1))
    assert driver_events(result) == []
    assert r.state.section(KERNEL_LOG).counts == {}
    assert r.state.section(KERNEL_LOG).cursor == "c"


def test_access_reg_50_repeats_one_event_per_24h_window() -> None:
    r = runner()
    # 50 repeats one hour apart: events at 0 h, 24 h and 48 h
    result = r.poll(snap(*[LINES["access_reg_failed"]] * 50, when=1, step=3600))
    events = driver_events(result)
    assert len(events) == 3
    assert [e.metadata["kernel_log_time"] for e in events] == [
        "2026-01-01T12:00:01Z", "2026-01-02T12:00:01Z", "2026-01-03T12:00:01Z"]
    assert r.state.section(KERNEL_LOG).counts == {"access_reg_failed|mlx5_0": 50}


def test_fatal_first_then_dedup_5_min_and_a_condition_for_the_boot() -> None:
    r = runner()
    first = driver_events(r.poll(snap(LINES["health_poll_failed"], when=1)))
    again = driver_events(r.poll(snap(LINES["health_poll_failed"], when=200)))
    later = driver_events(r.poll(snap(LINES["health_poll_failed"], when=302)))
    assert [e.is_fatal for e in first] == [True] and again == [] and len(later) == 1
    conditions = list(KERNEL_LOG.conditions(r.state.section(KERNEL_LOG), None))
    assert [c.health for c in conditions] == ["fatal"]
    assert "health_poll_failed" in device_fault(r.state.section(KERNEL_LOG), "mlx5_0")[
        "driver_fault"]


def test_dedup_survives_a_restart() -> None:
    r = runner()
    assert driver_events(r.poll(snap(LINES["module_unplugged"], when=1)))
    r.restart()
    assert driver_events(r.poll(snap(LINES["module_unplugged"], when=60))) == []


def test_soft_lockup_needs_the_mlx5_frame_even_across_polls() -> None:
    r = runner()
    assert driver_events(r.poll(snap(*LOCKUP[:2], when=1))) == []
    (event,) = driver_events(r.poll(snap(LOCKUP[2], when=2)))
    assert event.error_code == ("mlx5_napi_soft_lockup",) and event.is_fatal
    assert event.entities == ()  # a stack frame names no device: the host's
    assert "soft lockup" in event.message and "mlx5e_napi_poll" in event.message
    r2 = runner()
    other = ("watchdog: BUG: soft lockup - CPU#2 stuck for 23s! [x:1]",
             " nvme_poll+0x1/0x2 [nvme]")
    assert driver_events(r2.poll(snap(*other, when=1))) == []
    # a frame long after the header (beyond headerLines) does not count
    r3 = Runner(config(kernelLogRules=[{"name": "mlx5_napi_soft_lockup", "headerLines": 2}]))
    r3.poll(host(nic()))
    far = (LOCKUP[0], "a", "b", LOCKUP[2])
    assert driver_events(r3.poll(snap(*far, when=1))) == []


def test_unattributable_goes_to_the_host_with_the_text() -> None:
    r = runner()
    line = "mlx5_core: INFO: synd 0x8: unrecoverable hardware error."
    (event,) = driver_events(r.poll(snap(line, when=1)))
    assert event.entities == () and line in event.message and event.is_fatal
    other_pci = LINES["health_poll_failed"].replace(NIC, "0000:aa:00.0")
    (event,) = driver_events(r.poll(snap(other_pci, when=2)))
    assert event.entities == () and "0000:aa:00.0" in event.message


def test_an_excluded_device_follows_its_role() -> None:
    r = Runner(config(nicExclusionRegex="mlx5_0"))
    r.poll(host(nic()))
    result = r.poll(snap(LINES["health_poll_failed"], when=1))
    assert driver_events(result) == []
    assert r.state.section(KERNEL_LOG).counts == {"health_poll_failed|mlx5_0": 1}


def test_a_failed_commit_reads_again_and_reports_once() -> None:
    r = runner()
    result = r.evaluate(snap(LINES["cmd_exec_timeout"], when=1, cursor="after"))
    assert len(driver_events(result)) == 1  # not adopted: the commit failed
    assert r.state.section(KERNEL_LOG).cursor == ""
    again = r.poll(snap(LINES["cmd_exec_timeout"], when=1, cursor="after"))
    assert len(driver_events(again)) == 1 and r.state.section(KERNEL_LOG).cursor == "after"


def test_urgent_only_for_matches() -> None:
    old = KERNEL_LOG.fresh()
    moved = old.copy()
    moved.cursor = "x"
    assert not KERNEL_LOG.urgent(old, moved, config())
    moved.counts["a|b"] = 1
    assert KERNEL_LOG.urgent(old, moved, config())


def test_section_round_trips_and_renames() -> None:
    r = runner()
    r.poll(snap(*LOCKUP[:1], LINES["access_reg_failed"], when=1))
    section = r.state.section(KERNEL_LOG)
    data = MonitorState.from_json(r.state.to_json()).section(KERNEL_LOG)
    assert data == section and data.pending
    renamed = KERNEL_LOG.rename(section, {"mlx5_0": "mlx5_1"}, T0)
    assert renamed.counts == {"access_reg_failed|mlx5_1": 1} and "mlx5_1" in renamed.faults


def test_series_counts_per_rule_and_device() -> None:
    r = runner()
    r.poll(snap(LINES["access_reg_failed"], LINES["access_reg_failed"], when=1))
    series, window = KERNEL_LOG.series(r.state.section(KERNEL_LOG), None)
    assert series.kind == "counter" and window.kind == "gauge"
    assert window.samples == ()  # access_reg_failed does not count toward repetition
    assert series.samples == ((("access_reg_failed", "mlx5_0"), 2.0),)


def test_config_overrides_adds_and_switches_off_rules() -> None:
    cfg = config(kernelLogRules=[
        {"name": "access_reg_failed", "window": "1h", "isFatal": True},
        {"name": "module_unplugged", "enabled": False},
        {"name": "site_rule", "regex": "mlx5_core.*my site fault", "errorCode": "SITE"}])
    rules = {r.name: r for r in cfg.settings(KernelLogSettings).kernel_rules}
    assert rules["access_reg_failed"].window == 3600 and rules["access_reg_failed"].is_fatal
    r = Runner(cfg)
    r.poll(host(nic()))
    result = r.poll(snap(LINES["module_unplugged"], f"mlx5_core {NIC}: my site fault",
                         when=1))
    assert [e.error_code for e in driver_events(result)] == [("SITE",)]


@pytest.mark.parametrize("entry, key", [
    ({"name": "new_rule"}, "kernelLogRules.new_rule.regex"),
    ({"name": "x", "regex": "("}, "kernelLogRules.x.regex"),
    ({"name": "access_reg_failed", "window": "-1s"}, "kernelLogRules.access_reg_failed.window"),
    ({"name": "cmd_exec_timeout", "colour": 1}, "kernelLogRules.cmd_exec_timeout.colour"),
])
def test_bad_rules_name_the_key(entry: dict[str, Any], key: str) -> None:
    with pytest.raises(ConfigError) as info:
        config(kernelLogRules=[entry])
    assert key in str(info.value)


def test_kernel_log_mode_is_validated() -> None:
    assert config().settings(KernelLogSettings).kernel_log == "journal"
    assert config(kernelLog="off").settings(KernelLogSettings).kernel_log == "off"
    with pytest.raises(ConfigError, match="kernelLog"):
        config(kernelLog="syslog")


def test_off_runs_nothing() -> None:
    r = Runner(config(kernelLog="off"))
    r.poll(host(nic()))
    assert driver_events(r.poll(snap(LINES["health_poll_failed"], when=1))) == []


def test_attribution() -> None:
    assert attribution(WATCHDOG_68) == (NIC, "ib0")
    assert attribution(LINES["netdev_watchdog"]) == (None, "ib0")
    assert attribution("mlx5_core 0000:AB:00.1: x") == ("0000:ab:00.1", None)


def test_dedup_window_is_per_device() -> None:
    other = device("mlx5_1", pci="0000:1a:00.0")
    r = Runner()
    r.poll(host(nic(), other))
    lines = (LINES["module_unplugged"], LINES["module_unplugged"].replace(NIC, "0000:1a:00.0"))
    result = r.poll(snap(*lines, when=1, devices=(nic(), other)))
    assert [e.entities[0][1] for e in driver_events(result)] == ["mlx5_0", "mlx5_1"]


def test_show_devices_has_the_last_driver_fault() -> None:
    from nichealthd.cli.format import Style, devices_table
    from nichealthd.core.views import device_records
    r = runner()
    s = snap(LINES["module_unplugged"], when=1)
    result = r.poll(s)
    (record,) = device_records(s, result, r.state)
    assert str(record["driver_fault"]).startswith("module_unplugged at 2026-01-01T12:00:01Z: ")
    assert any("mlx5_0 driver fault: module_unplugged" in line
               for line in devices_table([record], Style(False), 200))
