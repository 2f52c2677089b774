"""The EFA counters configured one by one, as the ConnectX ones are.

``[[counterDetection.efaCounters]]`` entries merge by name over DEFAULT_EFA_COUNTERS (override,
disable, add); an invalid entry stops the daemon with exit 2 naming file, line and key; the
defaults stay what they were; and a configured threshold is what the engine then judges.
"""

from __future__ import annotations

import logging
import re
from pathlib import Path

import pytest

from nichealthd.core.config import DEFAULT_EFA_COUNTERS, EFA_DEGRADATION_CHECK, ConfigError
from nichealthd.runtime.daemon import main
from nichealthd.sources.config_file import load_config

from .builders import Runner, host
from .test_efa import TOPOLOGY, counted, events_of


def write(tmp_path: Path, text: str) -> str:
    path = tmp_path / "config.toml"
    path.write_text(text)
    return str(path)


def test_defaults_are_unchanged_without_the_table(tmp_path: Path) -> None:
    assert load_config(None).efa_counters == DEFAULT_EFA_COUNTERS
    only_mlx5 = load_config(write(tmp_path, '[[counterDetection.counters]]\n'
                                            'name = "port_xmit_wait"\nenabled = false\n'))
    assert only_mlx5.efa_counters == DEFAULT_EFA_COUNTERS
    # The ConnectX table never reaches the EFA counters, nor the reverse.
    both = load_config(write(tmp_path, '[[counterDetection.efaCounters]]\n'
                                       'name = "rx_drops"\nthreshold = 500\n'))
    assert both.counters == load_config(None).counters


def test_merge_by_name_threshold_velocity_fatal_disable_add(tmp_path: Path) -> None:
    config = load_config(write(tmp_path, '''
[counterDetection]
enabled = true

[[counterDetection.efaCounters]]
name = "rx_drops"
threshold = 500
velocityUnit = "minute"

[[counterDetection.efaCounters]]
name = "rdma_read_wr_err"
isFatal = true
thresholdType = "delta"
threshold = 0

[[counterDetection.efaCounters]]
name = "no_completion_cmds"
isFatal = false

[[counterDetection.efaCounters]]
name = "cmds_err"
enabled = false

[[counterDetection.efaCounters]]
name = "retrans_pkts"
path = "ports/{port}/hw_counters/retrans_pkts"
thresholdType = "velocity"
threshold = 1000
velocityUnit = "second"
description = "SRD retransmitted packets"

[[counterDetection.efaCounters]]
name = "enp_carrier_changes"
path = "/sys/class/net/{interface}/carrier_changes"
threshold = 2
'''))
    by_name = {c.name: c for c in config.efa_counters}
    rx = by_name["rx_drops"]
    assert (rx.threshold, rx.velocity_unit, rx.threshold_type, rx.path) == (
        500.0, "minute", "velocity", "ports/{port}/hw_counters/rx_drops")  # path kept
    read = by_name["rdma_read_wr_err"]
    assert read.is_fatal and read.threshold_type == "delta" and read.threshold == 0
    assert not by_name["no_completion_cmds"].is_fatal
    assert not by_name["cmds_err"].enabled
    assert "cmds_err" not in {c.name for c in config.active_efa_counters}
    assert list(by_name)[-2:] == ["retrans_pkts", "enp_carrier_changes"]
    assert by_name["retrans_pkts"].description == "SRD retransmitted packets"
    # The master switch still covers them.
    off = load_config(write(tmp_path, '[counterDetection]\nenabled = false\n'
                                      '[[counterDetection.efaCounters]]\nname = "rx_drops"\n'))
    assert off.active_efa_counters == ()


@pytest.mark.parametrize("entry,key,problem", [
    ('name = "rx_drops"\nthreshold = -1', "efaCounters[rx_drops].threshold", ">= 0"),
    ('name = "rx_drops"\nthreshold = nan', "efaCounters[rx_drops].threshold", "enabled = false"),
    ('name = "rx_drops"\nvelocityUnit = "day"', "efaCounters[rx_drops].velocityUnit", "second"),
    ('name = "rx_drops"\nthresholdType = "rate"', "efaCounters[rx_drops].thresholdType",
     "delta"),
    ('name = "rx_drops"\nisFatl = true', "efaCounters[rx_drops].isFatl",
     "unknown counter field"),
    ('name = "brand_new"', "efaCounters[brand_new].path", "relative to the device"),
    ('name = "x"\npath = "ports/{interface}/x"', "efaCounters[x].path", "{port}"),
    ('name = "x"\npath = "/sys/class/net/{port}/x"', "efaCounters[x].path", "placeholder"),
    ('name = "x"\npath = "../../etc/shadow"', "efaCounters[x].path", ".."),
    ('name = "no such name!"', "efaCounters[0].name", "counter name"),
])
def test_invalid_efa_entries_name_the_key(tmp_path: Path, entry: str, key: str,
                                          problem: str) -> None:
    path = write(tmp_path, f"[[counterDetection.efaCounters]]\n{entry}\n")
    with pytest.raises(ConfigError) as raised:
        load_config(path)
    assert raised.value.key == f"counterDetection.{key}"
    assert problem in raised.value.problem
    assert re.match(rf"{re.escape(path)}:[1-3]: ", str(raised.value))  # file and line


def test_duplicates_and_a_non_table_are_rejected(tmp_path: Path) -> None:
    path = write(tmp_path, '[[counterDetection.efaCounters]]\nname = "rx_drops"\n'
                           '[[counterDetection.efaCounters]]\nname = "rx_drops"\n')
    with pytest.raises(ConfigError, match="duplicate counter name"):
        load_config(path)
    path = write(tmp_path, '[counterDetection]\nefaCounters = 3\n')
    with pytest.raises(ConfigError) as raised:
        load_config(path)
    assert raised.value.key == "counterDetection.efaCounters"
    path = write(tmp_path, '[counterDetection]\nefaCounter = []\n')
    with pytest.raises(ConfigError) as raised:
        load_config(path)
    assert "efaCounters" in raised.value.problem  # the hint names the right key


def test_daemon_exits_2_naming_file_line_and_key(tmp_path: Path,
                                                 caplog: pytest.LogCaptureFixture) -> None:
    path = write(tmp_path, '# EFA\n[[counterDetection.efaCounters]]\nname = "rx_drops"\n'
                           'thresholdType = "sometimes"\n')
    assert main(["--config", path, "--once"]) == 2
    errors = [r.getMessage() for r in caplog.records if r.levelno == logging.ERROR]
    assert len(errors) == 1
    assert f"{path}:4: counterDetection.efaCounters[rx_drops].thresholdType" in errors[0]


def test_a_configured_threshold_is_what_the_engine_judges(tmp_path: Path) -> None:
    """rx_drops at 500/s: 300/s is nothing (it breached the default 100/s), 5000/s is one."""
    config = load_config(write(tmp_path, '[[counterDetection.efaCounters]]\n'
                                         'name = "rx_drops"\nthreshold = 500\n'))
    runner = Runner(cfg=config, topology=TOPOLOGY)
    runner.poll(host(*counted(0)))
    value = 0
    for second in range(1, 6):
        value += 300
        assert events_of(runner.poll(host(*counted(second, rx_drops=value), when=second))) == []
    value += 5000
    (event,) = events_of(runner.poll(host(*counted(6, rx_drops=value), when=6)))
    assert (event.check_name, event.error_code) == (EFA_DEGRADATION_CHECK, ("rx_drops",))


def test_a_disabled_fatal_counter_is_not_judged_and_a_new_one_is(tmp_path: Path) -> None:
    config = load_config(write(tmp_path, '''
[[counterDetection.efaCounters]]
name = "no_completion_cmds"
enabled = false
[[counterDetection.efaCounters]]
name = "alloc_pd_err"
path = "hw_counters/alloc_pd_err"
isFatal = true
'''))
    runner = Runner(cfg=config, topology=TOPOLOGY)
    runner.poll(host(*counted(0, alloc_pd_err=0)))
    assert events_of(runner.poll(host(*counted(1, no_completion_cmds=5, alloc_pd_err=0),
                                      when=1))) == []
    (event,) = events_of(runner.poll(host(*counted(2, no_completion_cmds=5, alloc_pd_err=1),
                                          when=2)))
    assert event.is_fatal and event.error_code == ("alloc_pd_err",)


def test_the_shipped_file_s_efa_examples_load(tmp_path: Path) -> None:
    text = (Path(__file__).resolve().parents[2] / "etc/nichealthd/config.toml").read_text()
    block = text[text.index("#[[counterDetection.efaCounters]]"):]
    lines = [ln[1:] for ln in block.splitlines() if ln.startswith("#") and not ln.startswith("# ")]
    config = load_config(write(tmp_path, "\n".join(lines) + "\n"))
    by_name = {c.name: c for c in config.efa_counters}
    assert by_name["rx_drops"].threshold == 1000 and by_name["rdma_read_wr_err"].is_fatal
    assert not by_name["cmds_err"].enabled
