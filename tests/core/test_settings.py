"""The settings seam (core/settings.py): a family's keys are read, validated and reported as the
daemon's own are, from its declaration alone."""

from __future__ import annotations

import sys
from dataclasses import dataclass, replace
from typing import Any

import pytest

from nichealthd.core.checks import families
from nichealthd.core.checks.kernel_log import KernelLogSettings
from nichealthd.core.checks.link_flaps import LinkFlapSettings
from nichealthd.core.checks.link_settings import LinkStateSettings
from nichealthd.core.config import Config
from nichealthd.core.config_build import declarations, family_settings, value_of
from nichealthd.core.config_errors import Collector, ConfigError
from nichealthd.core.config_lines import KeyLines
from nichealthd.core.settings import (
    AllSettings,
    Duration,
    Integer,
    Reader,
    Report,
    Settings,
    setting,
)
from nichealthd.sources.config_file import load_config

from .builders import config

if sys.version_info >= (3, 11):
    import tomllib
else:  # pragma: no cover - exercised on Python < 3.11 only
    import tomli as tomllib


@dataclass(frozen=True)
class ProbeSettings(Settings):
    """A family's settings as a new family would declare them."""

    probe_interval: float = setting("probeInterval", 30.0, Duration(1.0, 3600.0),
                                    "How often the probe runs")
    probe_limit: int = setting("probeLimit", 4, Integer(0, 10), "Probes per run")

    def validate(self, config: AllSettings, report: Report) -> None:
        if self.probe_limit > self.probe_interval:
            report.problem("probeLimit", f"must be at most probeInterval, got {self.probe_limit}")


def read(text: str, overrides: dict[str, Any] | None = None
         ) -> tuple[dict[type, dict[str, Any]], Collector]:
    errors = Collector()
    values = Reader((Config, ProbeSettings)).scalars(
        tomllib.loads(text), overrides or {}, "probe.toml", KeyLines.scan(text), errors)
    return values, errors


def test_a_declared_key_is_read_into_its_owner_and_bounded() -> None:
    values, errors = read('pollingInterval = "2s"\nprobeInterval = "1m"\nprobeLimit = 11\n')
    assert values == {Config: {"polling_interval": 2.0}, ProbeSettings: {"probe_interval": 60.0}}
    assert [str(p) for p in errors.problems] == [
        "probe.toml:3: probeLimit: must be between 0 and 10, got 11"]


def test_an_unknown_key_hints_at_every_owners_keys() -> None:
    _, errors = read("probeLimt = 3\n")
    assert [str(p) for p in errors.problems] == [
        "probe.toml:1: probeLimt: unknown key (did you mean 'probeLimit'?); the keys are listed "
        "in nichealthd.toml(5)"]


def test_a_key_is_declared_once() -> None:
    @dataclass(frozen=True)
    class Clash(Settings):
        interval: float = setting("pollingInterval", 1.0, Duration(0.1, 1.0), "clash")

    with pytest.raises(RuntimeError, match="pollingInterval is declared twice"):
        Reader((Config, Clash))


def test_a_cross_key_rule_names_the_file_line_or_the_command_line() -> None:
    errors, notices = Collector(), list[str]()
    text = "probeInterval = 2\n\nprobeLimit = 3\n"
    report = Report("probe.toml", KeyLines.scan(text), errors, {"probeLimit": 3}, (), notices)
    ProbeSettings(2.0, 3).validate(Config(), report)
    flags = Report("probe.toml", KeyLines.scan(text), errors, {}, {"probeLimit": 3}, notices)
    ProbeSettings(2.0, 3).validate(Config(), flags)
    assert [str(p) for p in errors.problems] == [
        "probe.toml:3: probeLimit: must be at most probeInterval, got 3",
        "<command line>: probeLimit: must be at most probeInterval, got 3"]


def test_each_family_owns_its_settings_class_and_reads_it_from_the_config() -> None:
    kinds = [f.settings for f in families() if f.settings is not None]
    assert len(kinds) == len(set(kinds)) == len(family_settings())
    loaded = config(linkFlapCount=5, kernelLogRepeatWindow="2h")
    assert loaded.settings(LinkFlapSettings).link_flap_count == 5
    assert loaded.settings(KernelLogSettings).kernel_log_repeat_window == 7200.0
    assert loaded.settings(LinkStateSettings) is Config().settings(LinkStateSettings)


def test_settings_left_at_their_defaults_compare_equal() -> None:
    """However a value came to be the default (absent, or written out), the configs are
    equal: a reload of an equivalent file changes nothing."""
    assert config(linkFlapCount=3, stateHoldDown="0s") == config()
    assert config().family_settings == ()
    assert config(linkFlapCount=4) != config()


def test_every_declared_key_reads_back_what_the_file_says(tmp_path: Any) -> None:
    path = tmp_path / "config.toml"
    path.write_text('nicTemperatureMargin = 7\ncardVerdictHoldTime = "1m"\nlogLevel = "debug"\n')
    loaded = load_config(str(path))
    values = {item.name: value_of(loaded, item) for item in declarations()}
    assert (values["nicTemperatureMargin"], values["cardVerdictHoldTime"],
            values["logLevel"]) == (7, 60.0, "debug")
    defaults = load_config(None)
    changed = {item.name for item in declarations()
               if value_of(loaded, item) != value_of(defaults, item)}
    assert changed == {"nicTemperatureMargin", "cardVerdictHoldTime", "logLevel"}


def test_the_family_rules_keep_their_messages() -> None:
    with pytest.raises(ConfigError) as raised:
        config(linkFlapCount=4, linkFlapFatalCount=3, driverReloadGrace="20m",
               driverReloadTimeout="10m")
    assert [p.key for p in raised.value.problems] == ["driverReloadTimeout", "linkFlapFatalCount"]
    assert raised.value.messages == [
        "test.toml: driverReloadTimeout: must be longer than driverReloadGrace (20m), got 10m",
        "test.toml: linkFlapFatalCount: must be 0 (never fatal) or at least linkFlapCount (4) "
        "and 2, got 3"]
    warned = config(linkFlapCount=0, stateHoldDown="10s")
    assert warned.notices == (
        "test.toml: stateHoldDown (10s) with linkFlapCount = 0: an outage shorter than the "
        "hold-down is never reported, however often the link flaps (flap detection is off, so "
        "nothing escalates)",)
    assert replace(warned, notices=()) == warned  # notices are not part of the value
