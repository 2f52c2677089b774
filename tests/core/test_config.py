"""Configuration: defaults, merging by name, NVSentinel's rendered file, validation (exit 2)."""

from __future__ import annotations

import logging
from pathlib import Path

import pytest

from nichealthd.core.config import DEFAULT_COUNTERS, ConfigError
from nichealthd.runtime.daemon import main
from nichealthd.sources.config_file import load_config

NVSENTINEL_CONFIG = '''
nicExclusionRegex = "^veth.*,^docker.*,^br-.*,^lo$"
nicInclusionRegexOverride = ""
sysClassInfinibandPath = "/nvsentinel/sys/class/infiniband"
sysClassNetPath = "/nvsentinel/sys/class/net"

[counterDetection]
enabled = true

[[counterDetection.counters]]
name = "link_downed"
path = "counters/link_downed"
enabled = true
isFatal = true
thresholdType = "delta"
threshold = 0
description = "Port Training State Machine failed - QP disconnect"

[[counterDetection.counters]]
name = "symbol_error_fatal"
path = "counters/symbol_error"
enabled = true
isFatal = true
thresholdType = "velocity"
threshold = 120.0
velocityUnit = "hour"
description = "Symbol errors exceed IBTA BER threshold (10E-12) - link outside spec"

[[counterDetection.counters]]
name = "carrier_changes"
path = "/sys/class/net/{interface}/statistics/carrier_changes"
enabled = true
isFatal = false
thresholdType = "delta"
threshold = 2
description = "Link instability - carrier state changes"
'''


def write(tmp_path: Path, text: str) -> str:
    path = tmp_path / "config.toml"
    path.write_text(text)
    return str(path)


def test_defaults_are_the_spec_table() -> None:
    config = load_config(None)
    names = [c.name for c in config.counters]
    assert "out_of_sequence" in names and "port_xmit_wait" in names
    assert len(names) == len(set(names)) == 14
    carrier = next(c for c in DEFAULT_COUNTERS if c.name == "carrier_changes")
    assert carrier.path == "/sys/class/net/{interface}/carrier_changes"
    fatal = sorted(c.name for c in DEFAULT_COUNTERS if c.is_fatal)
    assert fatal == ["excessive_buffer_overrun_errors", "link_downed",
                     "local_link_integrity_errors", "rnr_nak_retry_err", "symbol_error_fatal"]
    assert config.polling_interval == 1.0 and config.dbus == "system"


def test_nvsentinel_rendered_config_loads_unchanged(tmp_path: Path) -> None:
    config = load_config(write(tmp_path, NVSENTINEL_CONFIG))
    assert config.nic_exclusion_regex == ("^veth.*", "^docker.*", "^br-.*", "^lo$")
    assert config.sys_class_infiniband == "/nvsentinel/sys/class/infiniband"
    carrier = next(c for c in config.counters if c.name == "carrier_changes")
    assert carrier.path == "/sys/class/net/{interface}/carrier_changes"
    assert any("statistics/carrier_changes does not exist" in n for n in config.notices)


def test_merge_by_name_override_disable_add(tmp_path: Path) -> None:
    config = load_config(write(tmp_path, '''
[[counterDetection.counters]]
name = "symbol_error"
isFatal = true
threshold = 120.0
velocityUnit = "hour"
[[counterDetection.counters]]
name = "port_xmit_wait"
enabled = false
[[counterDetection.counters]]
name = "custom_vendor_error"
path = "hw_counters/vendor_specific_err"
thresholdType = "delta"
threshold = 100
'''))
    by_name = {c.name: c for c in config.counters}
    assert by_name["symbol_error"].is_fatal and by_name["symbol_error"].velocity_unit == "hour"
    assert by_name["symbol_error"].path == "counters/symbol_error"  # kept from the default
    assert not by_name["port_xmit_wait"].enabled
    assert "port_xmit_wait" not in {c.name for c in config.active_counters}
    assert by_name["custom_vendor_error"].threshold == 100
    assert list(by_name)[-1] == "custom_vendor_error"


@pytest.mark.parametrize("entry,key,problem", [
    ('name = "x"\npath = "counters/x"\nthresholdType = "rate"', "thresholdType", "delta"),
    ('name = "link_downed"\nthreshold = -1', "threshold", ">= 0"),
    ('name = "link_downed"\nthreshold = nan', "counters[link_downed].threshold", "enabled = false"),
    ('name = "link_downed"\nthreshold = inf', "counters[link_downed].threshold", "finite"),
    ('name = "symbol_error"\nthreshold = -inf', "counters[symbol_error].threshold", "finite"),
    ('name = "symbol_error"\nvelocityUnit = "day"', "velocityUnit", "second"),
    ('name = "brand_new"', "path", "needs a path"),
    ('name = "link_downed"\nthreshold = "0"', "threshold", "number"),
    ('name = "link_downed"\nisFatl = true', "isFatl", "unknown counter field"),
    ('name = "x"\npath = "counters/{device}"', "path", "placeholder"),
])
def test_invalid_counter_entries_name_the_key(tmp_path: Path, entry: str, key: str,
                                               problem: str) -> None:
    path = write(tmp_path, f"[[counterDetection.counters]]\n{entry}\n")
    with pytest.raises(ConfigError) as raised:
        load_config(path)
    assert raised.value.key.endswith(key)
    assert problem in raised.value.problem
    assert path in str(raised.value)


def test_duplicate_counter_names_are_rejected(tmp_path: Path) -> None:
    path = write(tmp_path, '[[counterDetection.counters]]\nname = "link_downed"\n'
                           '[[counterDetection.counters]]\nname = "link_downed"\n')
    with pytest.raises(ConfigError, match="duplicate counter name"):
        load_config(path)


@pytest.mark.parametrize("text,key", [
    ('pollingInterval = "fast"', "pollingInterval"),
    ('checks = "InfiniBandStateCheck,Bogus"', "checks"),
    ('dbus = "user"', "dbus"),
    ('pollingInterval = "0.000001ms"', "pollingInterval"),
    ("pollingInterval = 1e308", "pollingInterval"),
    ("pollingInterval = inf", "pollingInterval"),
    ("pollingInterval = nan", "pollingInterval"),
    ('pollingInterval = "2h"', "pollingInterval"),
    ('connectorTimeout = "1h"', "connectorTimeout"),
    ('connectorBatchInterval = "1ms"', "connectorBatchInterval"),
    ('metricsListen = "2112"', "metricsListen"),
    ('metricsListen = "[::1:2112"', "metricsListen"),
    ('metricsListen = "::1:2112"', "metricsListen"),
    ('processingStrategy = "NOW"', "processingStrategy"),
    ('nicExclusionRegex = "(["', "nicExclusionRegex"),
    ("this is not toml", ""),
])
def test_invalid_scalars(tmp_path: Path, text: str, key: str) -> None:
    with pytest.raises(ConfigError) as raised:
        load_config(write(tmp_path, text + "\n"))
    assert raised.value.key == key


def test_every_flag_is_a_config_key_and_flags_win(tmp_path: Path) -> None:
    path = write(tmp_path, 'pollingInterval = "2s"\nnodeName = "from-file"\n')
    config = load_config(path, {"pollingInterval": "500ms"})
    assert config.polling_interval == 0.5 and config.node_name == "from-file"


def test_daemon_exits_2_naming_file_and_key(tmp_path: Path,
                                            caplog: pytest.LogCaptureFixture) -> None:
    path = write(tmp_path, '[[counterDetection.counters]]\nname = "link_downed"\n'
                           'thresholdType = "sometimes"\n')
    assert main(["--config", path, "--once"]) == 2
    errors = [r.getMessage() for r in caplog.records if r.levelno == logging.ERROR]
    assert len(errors) == 1  # one problem, one line, at error priority
    assert path in errors[0] and "thresholdType" in errors[0]
    assert "'delta' or 'velocity'" in errors[0]


def test_unknown_top_level_key_is_an_error_with_a_hint(tmp_path: Path) -> None:
    """A typo must not silently fall back to the default."""
    path = write(tmp_path, 'pollingIntervall = "2s"\n')
    with pytest.raises(ConfigError) as raised:
        load_config(path)
    assert raised.value.key == "pollingIntervall"
    assert "unknown key (did you mean 'pollingInterval'?)" in raised.value.problem
    assert raised.value.line == 1
