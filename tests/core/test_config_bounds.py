"""Every numeric config value rejects nan, +-inf and out-of-range values (#23, #12.6): through
the loader, through the daemon (exit 2), and the bounds are the ones nichealthd.toml(5) gives."""

from __future__ import annotations

import dataclasses
import logging
import re
import subprocess
import sys
from pathlib import Path

import pytest

from nichealthd.core.config import (
    DURATION_BOUNDS,
    INTEGER_BOUNDS,
    SCALAR_KEYS,
    Config,
    ConfigError,
    CounterSpec,
)
from nichealthd.core.duration import format_duration
from nichealthd.runtime.daemon import main as daemon_main
from nichealthd.sources.config_file import load_config

REPO = Path(__file__).resolve().parents[2]
LINK_DOWNED = "counterDetection.counters[link_downed].threshold"
SYMBOL_ERROR = "counterDetection.counters[symbol_error].threshold"


def counter(name: str, value: str) -> str:
    return f'[[counterDetection.counters]]\nname = "{name}"\nthreshold = {value}\n'


# key as reported -> (TOML line(s) that set it to VALUE, rejected values, accepted values)
NUMERIC: dict[str, tuple[str, list[str], list[str]]] = {
    "pollingInterval": ("pollingInterval = {}",
                        ["nan", "inf", "-inf", "1e308", "0", "-1", '"99ms"', '"0.000001ms"',
                         '"61m"', "3601"],
                        ['"100ms"', '"1h"', "0.1", "3600"]),
    "connectorBatchInterval": ("connectorBatchInterval = {}",
                               ["nan", "inf", "-inf", '"9ms"', '"2h"', "0"],
                               ['"10ms"', '"1h"']),
    "connectorTimeout": ("connectorTimeout = {}",
                         ["nan", "inf", "-inf", '"99ms"', '"11m"', "0"],
                         ['"100ms"', '"10m"']),
    "cardVerdictHoldTime": ("cardVerdictHoldTime = {}",
                            ["nan", "inf", "-inf", "-1", '"25h"', "86401"],
                            ["0", '"0s"', '"24h"']),
    "stateHoldDown": ("stateHoldDown = {}",
                      ["nan", "inf", "-inf", "-1", '"61m"', "3601"],
                      ["0", '"0s"', '"10s"', '"1h"']),
    "linkFlapCount": ("linkFlapCount = {}",
                      ["nan", "inf", "-1", "10001", "1.5", '"3"'],
                      ["0", "1", "10000"]),
    "linkFlapWindow": ("linkFlapWindow = {}",
                       ["nan", "inf", "-inf", "0", '"999ms"', '"169h"', "604801"],
                       ['"1s"', '"1h"', '"168h"', "604800"]),
    "linkFlapFatalCount": ("linkFlapFatalCount = {}",
                           ["nan", "inf", "-1", "10001", "1.5", "1", "2"],
                           ["0", "3", "10000"]),
    "driverReloadGrace": ('driverReloadGrace = {}\ndriverReloadTimeout = "24h"',
                          ["nan", "inf", "-inf", "-1", '"61m"', "3601"],
                          ["0", '"0s"', '"1h"']),
    "driverReloadTimeout": ("driverReloadGrace = 0\ndriverReloadTimeout = {}",
                            ["nan", "inf", "-inf", "0", '"999ms"', '"25h"', "86401"],
                            ["1", '"1s"', '"24h"']),
    # #16.3-6: the adapter facts' cadence.
    "adapterCheckInterval": ("adapterCheckInterval = {}",
                             ["nan", "inf", "-inf", "0", '"999ms"', '"61m"', "3601"],
                             ["1", '"1s"', '"1h"']),
    "outboxMaxEvents": ("outboxMaxEvents = {}",
                        ["nan", "inf", "-inf", "0", "-5", "10000001", "1.5", '"100"'],
                        ["1", "10000000"]),
    "outboxMaxBytes": ("outboxMaxBytes = {}",
                       ["nan", "inf", "-inf", "65535", "17179869185", "1e9"],
                       ["65536", "17179869184"]),
    "kernelLogMaxLines": ("kernelLogMaxLines = {}",
                          ["nan", "inf", "-inf", "9", "1000001", "1.5", '"100"'],
                          ["10", "1000000"]),
    # #17.4: repetition of non-fatal driver faults (0 off; one line is no repetition).
    "kernelLogRepeatCount": ("kernelLogRepeatCount = {}",
                             ["nan", "inf", "-1", "1", "1001", "1.5", '"3"'],
                             ["0", "2", "1000"]),
    "kernelLogRepeatWindow": ("kernelLogRepeatWindow = {}",
                              ["nan", "inf", "-inf", "0", '"999ms"', '"169h"', "604801"],
                              ['"1s"', '"1h"', '"168h"', "604800"]),
    "eventHistorySize": ("eventHistorySize = {}",
                         ["nan", "inf", "-inf", "0", "100001", "true"],
                         ["1", "100000"]),
    # PCI-side families (#16.1, .2, .7)
    "pcieLinkInterval": ("pcieLinkInterval = {}",
                         ["nan", "inf", "-inf", "-1", '"25h"', "86401"],
                         ["0", '"1s"', '"24h"']),
    "pcieAerInterval": ("pcieAerInterval = {}",
                        ["nan", "inf", "-inf", "-1", '"25h"'], ["0", '"10s"', '"24h"']),
    "nicTemperatureInterval": ("nicTemperatureInterval = {}",
                               ["nan", "inf", "-inf", "-1", '"25h"'], ["0", '"1m"', '"24h"']),
    "pcieAerCorrectablePerMinute": ("pcieAerCorrectablePerMinute = {}",
                                    ["nan", "inf", "-1", "1000001", "1.5", '"8"'],
                                    ["0", "8", "1000000"]),
    "nicTemperatureMargin": ("nicTemperatureMargin = {}",
                             ["nan", "inf", "-1", "51", "2.5", "true"], ["0", "5", "50"]),
    LINK_DOWNED: (counter("link_downed", "{}"),
                  ["nan", "inf", "-inf", "-1", "-0.5", "18446744073709551617", "1e20", '"0"'],
                  ["0", "18446744073709551616", "2.5"]),
    SYMBOL_ERROR: (counter("symbol_error", "{}"),
                   ["nan", "inf", "-inf", "-1", "1e300"],
                   ["0", "120.0", "1e6"]),
}
REJECTED = [(key, value) for key, (_, bad, _) in NUMERIC.items() for value in bad]
ACCEPTED = [(key, value) for key, (_, _, good) in NUMERIC.items() for value in good]


def config_file(tmp_path: Path, key: str, value: str) -> str:
    path = tmp_path / "config.toml"
    path.write_text(NUMERIC[key][0].format(value) + "\n")
    return str(path)


def test_the_table_covers_every_numeric_key() -> None:
    numeric_fields = {f.name for f in dataclasses.fields(Config) if f.type in ("float", "int")}
    by_field = {attr: key for key, (attr, _) in SCALAR_KEYS.items()}
    assert {by_field[name] for name in numeric_fields} | {LINK_DOWNED, SYMBOL_ERROR} \
        == set(NUMERIC)
    # The configured ones (the window lengths are derived from velocityUnit, not set).
    assert [f.name for f in dataclasses.fields(CounterSpec) if f.type == "float" and f.init] \
        == ["threshold"]


@pytest.mark.parametrize("key,value", REJECTED)
def test_loader_rejects(tmp_path: Path, key: str, value: str) -> None:
    path = config_file(tmp_path, key, value)
    with pytest.raises(ConfigError) as raised:
        load_config(path)
    assert [p.key for p in raised.value.problems] == [key]
    assert raised.value.messages[0].startswith(f"{path}:")
    if "threshold" in key and value in ("nan", "inf", "-inf", "1e300", "1e20",
                                        "18446744073709551617"):
        assert "to switch a counter off set enabled = false" in raised.value.problem


@pytest.mark.parametrize("key,value", ACCEPTED)
def test_loader_accepts_the_bounds(tmp_path: Path, key: str, value: str) -> None:
    load_config(config_file(tmp_path, key, value))


@pytest.mark.parametrize("key,value", [(k, v) for k, v in REJECTED
                                       if v in ("nan", "inf", "-inf")])
def test_daemon_exits_2_naming_file_and_key(tmp_path: Path, caplog: pytest.LogCaptureFixture,
                                            key: str, value: str) -> None:
    path = config_file(tmp_path, key, value)
    assert daemon_main(["--config", path, "--once"]) == 2
    errors = [r.getMessage() for r in caplog.records if r.levelno == logging.ERROR]
    assert errors and errors[0].startswith(f"invalid configuration: {path}:")
    assert f": {key}: " in errors[0]


@pytest.mark.parametrize("value", ["nan", "inf", "-inf"])
def test_issue_23_done_when(tmp_path: Path, value: str) -> None:
    """The real programs: `threshold = nan|inf|-inf` on link_downed is exit 2 from both."""
    path = config_file(tmp_path, LINK_DOWNED, value)
    for program in (["nichealthd.runtime.daemon", "--config", path, "--once"],
                    ["nichealthd.cli.ctl", "config", "check", path]):
        result = subprocess.run([sys.executable, "-m", *program], cwd=REPO,
                                capture_output=True, text=True, timeout=60)
        assert result.returncode == 2, (program, result.stderr)
        assert f"{path}:3: {LINK_DOWNED}: threshold must be a finite number" in result.stderr
        assert "enabled = false" in result.stderr and "Traceback" not in result.stderr


def man_paragraph(key: str) -> str:
    text = (REPO / "man/nichealthd.toml.5").read_text()
    start = text.index(f".BR {key} ")
    end = text.find("\n.TP", start)
    return text[start:end].replace("\\-", "-")


@pytest.mark.parametrize("key", DURATION_BOUNDS)
def test_duration_bounds_are_documented(key: str) -> None:
    low, high = DURATION_BOUNDS[key]
    assert re.search(rf"[Bb]etween {format_duration(low)}\b.* and {format_duration(high)}\b",
                     " ".join(man_paragraph(key).split())), key


@pytest.mark.parametrize("key", INTEGER_BOUNDS)
def test_integer_bounds_are_documented(key: str) -> None:
    low, high = INTEGER_BOUNDS[key]
    text = " ".join(man_paragraph(key).split())
    assert re.search(rf"between {low}\b.* and {high}\b", text), key
