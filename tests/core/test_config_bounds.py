"""Every numeric config value rejects nan, +-inf and out-of-range values: through
the loader, through the daemon (exit 2), and the bounds are the ones nichealthd.toml(5) gives.

The keys and their bounds are the declarations (the daemon's own and every family's, see
nichealthd/core/settings.py): each bounded key gets the generated cases below, and the table
adds the hand-picked values of some keys.
"""

from __future__ import annotations

import dataclasses
import logging
import re
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from nichealthd.core.config import Config, ConfigError, CounterSpec
from nichealthd.core.config_build import declarations, settings_classes
from nichealthd.core.duration import format_duration
from nichealthd.core.settings import Declared, Duration
from nichealthd.runtime.daemon import main as daemon_main
from nichealthd.sources.config_file import load_config

REPO = Path(__file__).resolve().parents[2]
LINK_DOWNED = "counterDetection.counters[link_downed].threshold"
SYMBOL_ERROR = "counterDetection.counters[symbol_error].threshold"


def counter(name: str, value: str) -> str:
    return f'[[counterDetection.counters]]\nname = "{name}"\nthreshold = {value}\n'


# Every key with bounds, from the declarations.
BOUNDED: dict[str, Declared] = {item.name: item for item in declarations() if item.bounds}
# A cross-key rule needs another key set so that only the bound is wrong.
CONTEXT = {"driverReloadGrace": 'driverReloadTimeout = "24h"',
           "driverReloadTimeout": "driverReloadGrace = 0"}
# The counter thresholds: key as reported -> the TOML that sets it to VALUE.
COUNTER_LINES = {LINK_DOWNED: counter("link_downed", "{}"),
                 SYMBOL_ERROR: counter("symbol_error", "{}")}

# Hand-picked values besides the generated ones: key as reported -> (rejected, accepted).
NUMERIC: dict[str, tuple[list[str], list[str]]] = {
    "pollingInterval": (["nan", "inf", "-inf", "1e308", "0", "-1", '"99ms"', '"0.000001ms"',
                         '"61m"', "3601"],
                        ['"100ms"', '"1h"', "0.1", "3600"]),
    "connectorBatchInterval": (["nan", "inf", "-inf", '"9ms"', '"2h"', "0"],
                               ['"10ms"', '"1h"']),
    "connectorTimeout": (["nan", "inf", "-inf", '"99ms"', '"11m"', "0"],
                         ['"100ms"', '"10m"']),
    "cardVerdictHoldTime": (["nan", "inf", "-inf", "-1", '"25h"', "86401"],
                            ["0", '"0s"', '"24h"']),
    "stateHoldDown": (["nan", "inf", "-inf", "-1", '"61m"', "3601"],
                      ["0", '"0s"', '"10s"', '"1h"']),
    "linkFlapCount": (["nan", "inf", "-1", "10001", "1.5", '"3"'],
                      ["0", "1", "10000"]),
    "linkFlapWindow": (["nan", "inf", "-inf", "0", '"999ms"', '"169h"', "604801"],
                       ['"1s"', '"1h"', '"168h"', "604800"]),
    "linkFlapFatalCount": (["nan", "inf", "-1", "10001", "1.5", "1", "2"],
                           ["0", "3", "10000"]),
    "driverReloadGrace": (["nan", "inf", "-inf", "-1", '"61m"', "3601"],
                          ["0", '"0s"', '"1h"']),
    "driverReloadTimeout": (["nan", "inf", "-inf", "0", '"999ms"', '"25h"', "86401"],
                            ["1", '"1s"', '"24h"']),
    # The adapter facts' cadence.
    "adapterCheckInterval": (["nan", "inf", "-inf", "0", '"999ms"', '"61m"', "3601"],
                             ["1", '"1s"', '"1h"']),
    "outboxMaxEvents": (["nan", "inf", "-inf", "0", "-5", "10000001", "1.5", '"100"'],
                        ["1", "10000000"]),
    "outboxMaxBytes": (["nan", "inf", "-inf", "65535", "17179869185", "1e9"],
                       ["65536", "17179869184"]),
    "kernelLogMaxLines": (["nan", "inf", "-inf", "9", "1000001", "1.5", '"100"'],
                          ["10", "1000000"]),
    # Repetition of non-fatal driver faults (0 off; one line is no repetition).
    "kernelLogRepeatCount": (["nan", "inf", "-1", "1", "1001", "1.5", '"3"'],
                             ["0", "2", "1000"]),
    "kernelLogRepeatWindow": (["nan", "inf", "-inf", "0", '"999ms"', '"169h"', "604801"],
                              ['"1s"', '"1h"', '"168h"', "604800"]),
    "eventHistorySize": (["nan", "inf", "-inf", "0", "100001", "true"],
                         ["1", "100000"]),
    # PCI-side families
    "pcieLinkInterval": (["nan", "inf", "-inf", "-1", '"25h"', "86401"],
                         ["0", '"1s"', '"24h"']),
    "pcieAerInterval": (["nan", "inf", "-inf", "-1", '"25h"'], ["0", '"10s"', '"24h"']),
    "nicTemperatureInterval": (["nan", "inf", "-inf", "-1", '"25h"'], ["0", '"1m"', '"24h"']),
    "pcieAerCorrectablePerMinute": (["nan", "inf", "-1", "1000001", "1.5", '"8"'],
                                    ["0", "8", "1000000"]),
    "nicTemperatureMargin": (["nan", "inf", "-1", "51", "2.5", "true"], ["0", "5", "50"]),
    LINK_DOWNED: (["nan", "inf", "-inf", "-1", "-0.5", "18446744073709551617", "1e20", '"0"'],
                  ["0", "18446744073709551616", "2.5"]),
    SYMBOL_ERROR: (["nan", "inf", "-inf", "-1", "1e300"],
                   ["0", "120.0", "1e6"]),
}


def generated(item: Declared) -> tuple[list[str], list[str]]:
    """nan, +-inf, just outside each bound and a value of the wrong kind are rejected; the
    bounds themselves are accepted."""
    assert item.bounds is not None
    low, high = item.bounds
    if isinstance(item.key.parse, Duration):
        below = "-1" if low == 0 else repr(low * 0.99)
        return ["nan", "inf", "-inf", below, repr(high + 1), "true"], [repr(low), repr(high)]
    return (["nan", "inf", "-inf", str(int(low) - 1), str(int(high) + 1), "1.5", f'"{int(low)}"'],
            [str(int(low)), str(int(high))])


def cases(which: int) -> list[tuple[str, str]]:
    found = {(key, value) for key, item in BOUNDED.items() for value in generated(item)[which]}
    found |= {(key, value) for key, values in NUMERIC.items() for value in values[which]}
    return sorted(found)


REJECTED = cases(0)
ACCEPTED = cases(1)


def config_file(tmp_path: Path, key: str, value: str) -> str:
    line = COUNTER_LINES.get(key) or "\n".join(filter(None, (f"{key} = {{}}", CONTEXT.get(key))))
    path = tmp_path / "config.toml"
    path.write_text(line.format(value) + "\n")
    return str(path)


def test_every_number_is_declared_with_bounds() -> None:
    """A numeric field of the Config or of a family's or surface's settings is a key with
    bounds (so it gets the cases above and a documented range), and the hand-picked values
    name only such keys."""
    owners: tuple[Any, ...] = (Config, *settings_classes())
    for owner in owners:
        numeric = {f.name for f in dataclasses.fields(owner) if f.type in ("float", "int")}
        assert numeric == {item.attr for item in BOUNDED.values() if item.owner is owner}, owner
    assert set(NUMERIC) - set(BOUNDED) == {LINK_DOWNED, SYMBOL_ERROR}
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
def test_non_finite_thresholds_are_refused_by_both_programs(tmp_path: Path, value: str) -> None:
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


@pytest.mark.parametrize("key", sorted(BOUNDED))
def test_bounds_are_documented(key: str) -> None:
    item = BOUNDED[key]
    assert item.bounds is not None
    low, high = item.bounds
    text = " ".join(man_paragraph(key).split())
    if isinstance(item.key.parse, Duration):
        assert re.search(rf"[Bb]etween {format_duration(low)}\b.* and {format_duration(high)}\b",
                         text), key
    else:
        assert re.search(rf"between {int(low)}\b.* and {int(high)}\b", text), key
