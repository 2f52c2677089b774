"""Non-fatal driver faults repeating on one device, flap-style: every matching line
counts in a persisted sliding window; reaching kernelLogRepeatCount gives ONE non-fatal
CONTACT_SUPPORT event under the device's degradation check, its recovery when the window
holds fewer lines again."""

from __future__ import annotations

from dataclasses import replace
from typing import Any

import pytest

from nichealthd.core.boot import decide_start
from nichealthd.core.checks.kernel_log import CHECK_NAME, KERNEL_LOG, KernelLogSettings
from nichealthd.core.config_errors import ConfigError
from nichealthd.core.evaluate import CycleResult
from nichealthd.core.state import MonitorState

from .builders import T0, Runner, config, device, host, port
from .test_kernel_log import LINES, NIC, nic, snap

WATCHDOG = LINES["netdev_watchdog"]
TX = LINES["mlx5_tx_timeout_detected"]
OTHER_NIC = "0000:1a:00.0"
IB_DEGRADATION = "InfiniBandDegradationCheck"


def repeats(result: CycleResult) -> list[Any]:
    return [e for e in result.events if e.error_code[0].endswith("_repeated")]


def dedup(result: CycleResult) -> list[Any]:
    return [e for e in result.events if e.check_name == CHECK_NAME]


def runner(cfg: Any = None, *devices: Any) -> Runner:
    r = Runner(cfg)
    r.poll(host(*(devices or (nic(),))))
    return r


def test_three_lines_within_an_hour_give_one_contact_support_event() -> None:
    r = runner()
    first = r.poll(snap(WATCHDOG, when=10))
    second = r.poll(snap(WATCHDOG, when=70))
    assert repeats(first) == repeats(second) == []
    third = r.poll(snap(WATCHDOG, when=130))
    # the dedup window (5 min) shows the fault once: the repetition counts every line
    assert len(dedup(first)) == 1 and dedup(second) == dedup(third) == []
    (event,) = repeats(third)
    assert (event.check_name, event.is_fatal, event.is_healthy, event.recommended_action) == (
        IB_DEGRADATION, False, False, "CONTACT_SUPPORT")
    assert event.error_code == ("netdev_watchdog_repeated",)
    assert event.entities == (("NIC", "mlx5_0"), ("PCI", NIC))
    assert event.message.startswith("mlx5_0: kernel driver fault netdev_watchdog (")
    assert "repeated - 3 lines within 1h (threshold 3)" in event.message
    assert event.metadata == {"kernel_log_rule": "netdev_watchdog", "kernel_log_repeats": "3",
                              "kernel_log_repeat_window": "1h", "nichealthd.suspect": "nic",
                              "nichealthd.suspect_evidence":
                                  "netdev_watchdog_repeated is the adapter's own condition"}
    assert ";" not in event.message
    # a fourth line: still one report; the condition is a degradation of the host
    assert repeats(r.poll(snap(WATCHDOG, when=190))) == []
    section = r.state.section(KERNEL_LOG)
    (condition,) = [c for c in KERNEL_LOG.conditions(section, None)]
    assert condition.health == "degraded" and "netdev_watchdog repeated" in condition.reason


def test_lines_of_one_poll_count_each() -> None:
    r = runner()
    (event,) = repeats(r.poll(snap(WATCHDOG, WATCHDOG, WATCHDOG, when=10, step=1)))
    assert event.error_code == ("netdev_watchdog_repeated",)


def test_the_window_slides_and_the_recovery_carries_the_same_identity() -> None:
    r = runner()
    r.poll(snap(WATCHDOG, when=10))
    r.poll(snap(WATCHDOG, when=70))
    (told,) = repeats(r.poll(snap(WATCHDOG, when=130)))
    # lines at 10, 70, 130: 3 within the hour until 10 s + 1 h, then 2
    assert r.poll(snap(when=3609)).events == ()
    got = r.poll(snap(when=3610))
    (healed,) = repeats(got)
    assert got.events == (healed,)
    assert (healed.check_name, healed.is_healthy, healed.is_fatal, healed.error_code,
            healed.entities, healed.recommended_action) == (
        told.check_name, True, False, told.error_code, told.entities, "NONE")
    assert healed.message == ("mlx5_0: kernel driver fault netdev_watchdog no longer "
                              "repeating - 2 line(s) within 1h (threshold 3)")
    assert list(KERNEL_LOG.conditions(r.state.section(KERNEL_LOG), None)) == []
    # the lines left expire: the record goes, with no event
    assert r.poll(snap(when=3800)).events == ()
    assert r.state.section(KERNEL_LOG).repeats == {}
    # and it can repeat again
    r.poll(snap(WATCHDOG, WATCHDOG, when=4000))
    assert len(repeats(r.poll(snap(WATCHDOG, when=4001)))) == 1


def test_nothing_to_do_returns_the_section_it_was_given() -> None:
    r = runner()
    r.poll(snap(WATCHDOG, when=10, cursor="c"))
    before = r.state.section(KERNEL_LOG)
    r.poll(snap(when=20, cursor="c"))
    assert r.state.section(KERNEL_LOG) is before


def test_the_window_survives_a_restart_and_a_reboot_clears_it() -> None:
    r = runner()
    r.poll(snap(WATCHDOG, when=10))
    r.poll(snap(WATCHDOG, when=70))
    r.restart()
    assert len(repeats(r.poll(snap(WATCHDOG, when=130)))) == 1
    saved = MonitorState.from_json(r.state.to_json())
    assert saved.section(KERNEL_LOG).repeats == r.state.section(KERNEL_LOG).repeats
    decision = decide_start(saved, "boot-2")
    assert decision.baseline and decision.state.section(KERNEL_LOG).repeats == {}


def test_a_state_file_of_before_repetition_loads() -> None:
    r = runner()
    r.poll(snap(WATCHDOG, when=10))
    data = r.state.to_json()
    del data["kernel_log"]["repeats"]
    assert MonitorState.from_json(data).section(KERNEL_LOG).repeats == {}


def test_per_rule_and_per_device() -> None:
    other = device("mlx5_1", pci=OTHER_NIC)
    r = runner(None, nic(), other)
    lines = (WATCHDOG, WATCHDOG, TX, LINES["module_unplugged"].replace(NIC, OTHER_NIC))
    assert repeats(r.poll(snap(*lines, when=10, devices=(nic(), other)))) == []
    keys = sorted(r.state.section(KERNEL_LOG).repeats)
    assert keys == ["mlx5_tx_timeout_detected|mlx5_0", "module_unplugged|mlx5_1",
                    "netdev_watchdog|mlx5_0"]


@pytest.mark.parametrize("rule", ["cmd_exec_timeout", "health_poll_failed", "access_reg_failed"])
def test_fatal_rules_and_access_reg_do_not_count(rule: str) -> None:
    r = runner()
    result = r.poll(snap(*[LINES[rule]] * 50, when=10, step=1))
    assert repeats(result) == [] and r.state.section(KERNEL_LOG).repeats == {}


def test_unattributable_and_excluded_lines_do_not_count() -> None:
    host_line = "mlx5_core: Port module event: module 0, Cable unplugged"
    r = runner()
    assert repeats(r.poll(snap(*[host_line] * 5, when=10))) == []
    r2 = runner(config(nicExclusionRegex="mlx5_0"))
    assert repeats(r2.poll(snap(*[WATCHDOG] * 5, when=10))) == []
    assert r.state.section(KERNEL_LOG).repeats == r2.state.section(KERNEL_LOG).repeats == {}


def test_lines_older_than_the_window_repeat_nothing_now() -> None:
    """A backlog read after a long stop: the lines are in the log, not repeating now."""
    r = runner()
    lines = tuple(replace(line, at=T0.replace(hour=9)) for line in
                  snap(*[WATCHDOG] * 5).kernel_lines)  # 3 h before the poll
    result = r.poll(replace(snap(when=10), kernel_lines=lines))
    assert repeats(result) == [] and len(dedup(result)) == 1
    assert r.state.section(KERNEL_LOG).repeats == {}


def test_ethernet_and_efa_devices_use_their_degradation_check() -> None:
    eth = device("mlx5_0", pci=NIC, ports=(replace(port("mlx5_0", layer="Ethernet"),
                                                   netdev="ib0"),), netdevs=("ib0",))
    r = runner(None, eth)
    (event,) = repeats(r.poll(snap(*[TX] * 3, when=10, devices=(eth,))))
    assert event.check_name == "EthernetDegradationCheck"


def test_a_switched_off_degradation_check_tells_nothing() -> None:
    r = runner(config(checks="InfiniBandStateCheck"))
    assert repeats(r.poll(snap(*[WATCHDOG] * 3, when=10))) == []


def test_configured_count_and_window() -> None:
    r = runner(config(kernelLogRepeatCount=5, kernelLogRepeatWindow="10m"))
    assert repeats(r.poll(snap(*[TX] * 4, when=10, step=60))) == []
    assert len(repeats(r.poll(snap(TX, when=300)))) == 1
    # lines at 10, 70, 130, 190, 300: 10 minutes after the first, 4 left of 5 -> recovery
    assert r.poll(snap(when=609)).events == ()
    assert len(repeats(r.poll(snap(when=610)))) == 1
    assert len(r.state.section(KERNEL_LOG).repeats["mlx5_tx_timeout_detected|mlx5_0"]
               .times) == 4


def test_a_rule_switched_out_of_repetition_and_a_site_rule() -> None:
    cfg = config(kernelLogRules=[
        {"name": "netdev_watchdog", "repeat": False},
        {"name": "site_rule", "regex": "mlx5_core.*my site fault", "errorCode": "SITE"}])
    r = runner(cfg)
    site = f"mlx5_core {NIC}: my site fault"
    result = r.poll(snap(*[WATCHDOG] * 3, site, site, site, when=10))
    assert [e.error_code for e in repeats(result)] == [("SITE_repeated",)]


def test_count_zero_is_off_and_switching_off_recovers() -> None:
    off = runner(config(kernelLogRepeatCount=0))
    assert repeats(off.poll(snap(*[WATCHDOG] * 10, when=10))) == []
    assert off.state.section(KERNEL_LOG).repeats == {}
    r = runner()
    (told,) = repeats(r.poll(snap(*[WATCHDOG] * 3, when=10)))
    r.config = config(kernelLogRepeatCount=0)  # a reload
    (healed,) = repeats(r.poll(snap(when=20)))
    assert healed.is_healthy and healed.entities == told.entities
    assert healed.message.endswith("repetition detection switched off")
    assert r.state.section(KERNEL_LOG).repeats == {}


def test_a_renamed_device_keeps_its_window_and_recovers_under_the_identity_told() -> None:
    r = runner()
    (told,) = repeats(r.poll(snap(*[WATCHDOG] * 3, when=10)))
    section = KERNEL_LOG.rename(r.state.section(KERNEL_LOG), {"mlx5_0": "mlx5_1"}, T0)
    assert list(section.repeats) == ["netdev_watchdog|mlx5_1"]
    moved = section.repeats["netdev_watchdog|mlx5_1"].told
    assert moved is not None and moved.entities == told.entities


def test_series_shows_the_lines_in_the_window() -> None:
    r = runner()
    r.poll(snap(WATCHDOG, WATCHDOG, when=10))
    _, window = KERNEL_LOG.series(r.state.section(KERNEL_LOG), None)
    assert window.name == "kernel_log_repeat_window_matches"
    assert window.samples == ((("netdev_watchdog", "mlx5_0"), 2.0),)


def test_defaults_and_bad_values_name_the_key() -> None:
    cfg = config().settings(KernelLogSettings)
    assert (cfg.kernel_log_repeat_count, cfg.kernel_log_repeat_window) == (3, 3600.0)
    for key, value in (("kernelLogRepeatCount", 1), ("kernelLogRepeatCount", 1001),
                       ("kernelLogRepeatCount", "3"), ("kernelLogRepeatWindow", "0s"),
                       ("kernelLogRepeatWindow", "8d")):
        with pytest.raises(ConfigError, match=key):
            config(**{key: value})
    with pytest.raises(ConfigError, match="kernelLogRules.netdev_watchdog.repeat"):
        config(kernelLogRules=[{"name": "netdev_watchdog", "repeat": "no"}])


def test_a_reload_that_takes_the_rule_out_recovers() -> None:
    r = runner()
    (told,) = repeats(r.poll(snap(*[WATCHDOG] * 3, when=10)))
    r.config = config(kernelLogRules=[{"name": "netdev_watchdog", "repeat": False}])
    (healed,) = repeats(r.poll(snap(when=20)))
    assert healed.is_healthy and healed.error_code == told.error_code
    assert healed.message.endswith("repetition detection switched off for this rule")
