"""Building a :class:`~nichealthd.core.config.Config` from a file's values: every key, checked.

It sits above the family registry (:mod:`nichealthd.core.checks`), which it asks for every
family's settings class, so the config itself needs no family. One validator serves the
daemon (start and reload) and ``nichealthctl config check``. It makes one pass over the file
and collects every problem (file, line, key, what is wrong) into one
:class:`~nichealthd.core.config_errors.ConfigError`, so an operator never has to guess why the
daemon refused to start (exit status 2) and fixes a file in one round. Unknown keys are
errors: a typo must not silently fall back to a default.
"""

from __future__ import annotations

import functools
import os
import socket
from dataclasses import replace
from typing import Any, Dict, List, Mapping, Optional, Type, cast

from . import checks
from .config import (
    DETECTION,
    DETECTION_KEYS,
    EFA_COUNTERS_KEY,
    EFA_COUNTERS_TABLE,
    Config,
    default_settings,
    merge_counters,
)
from .config_errors import Collector, show
from .config_lines import KeyLines
from .settings import Declared, Reader, Report, Settings, boolean, declared, hint, key_label

# ------------------------------------------------------------- the declarations

def family_settings() -> tuple[Type[Settings], ...]:
    """The settings classes of the check families, in family order."""
    return tuple(dict.fromkeys(f.settings for f in checks.families() if f.settings is not None))


def declarations() -> tuple[Declared, ...]:
    """Every top-level key: the daemon's own, then each family's (nichealthd.toml(5))."""
    owners: tuple[type, ...] = (Config, *family_settings())
    return tuple(item for owner in owners for item in declared(owner))


def value_of(config: Config, item: Declared) -> Any:
    """The value ``config`` holds for a declared key."""
    owner = config if item.owner is Config else config.settings(item.owner)
    return getattr(owner, item.attr)


@functools.lru_cache(maxsize=1)
def _reader() -> Reader:
    return Reader((Config, *family_settings()), others=(DETECTION,))


# ------------------------------------------------------------------ loading

def build_config(data: Mapping[str, object], source: Optional[str],
                 overrides: Mapping[str, object], lines: Optional[KeyLines] = None) -> Config:
    """Validate parsed TOML plus flag overrides into a :class:`Config`.

    One pass: every problem is collected, then all are raised together. The order of the
    problems: the top-level keys in file order, the flags, ``[counterDetection]``, each
    family's cross-key rules, then the families' tables.
    """
    lines = lines or KeyLines()
    errors = Collector()
    reader = _reader()
    values = reader.scalars(data, overrides, source, lines, errors)
    notices: List[str] = []
    detection = _counter_detection(data.get(DETECTION, {}), source, lines, errors, notices)
    config = _assemble(values, source)
    report = Report(source, lines, errors, data, overrides, notices)
    for settings in (config.settings(kind) for kind in family_settings()):
        settings.validate(config, report)
    tables = reader.tables(data, source, lines, errors)
    errors.raise_if_any()
    for owner, merged in tables.items():
        values.setdefault(owner, {}).update(merged)
    config = _assemble(values, source)
    if not config.node_name:
        config = replace(config, node_name=os.environ.get("NODE_NAME") or socket.gethostname())
    return replace(config, **detection, notices=tuple(notices))


def _assemble(values: Mapping[type, Mapping[str, Any]], source: Optional[str]) -> Config:
    """The Config of the values read, by owner; each family's settings only where they
    differ from its defaults."""
    families: tuple[Settings, ...] = tuple(
        replace(cast(Any, default_settings(kind)), **values.get(kind, {}))
        for kind in family_settings())
    return replace(Config(), **values.get(Config, {}), source=source,
                   family_settings=tuple(s for s in families if s != default_settings(type(s))))


def _counter_detection(detection: object, source: Optional[str], lines: KeyLines,
                       errors: Collector, notices: List[str]) -> Dict[str, Any]:
    """The ``[counterDetection]`` table: its switch and the merged counters."""
    if not isinstance(detection, dict):
        errors.add(source, DETECTION, f"expected a table, got {show(detection)}",
                   lines.line("", DETECTION))
        return {}
    values: Dict[str, Any] = {}
    for key, raw in detection.items():
        line = lines.line(DETECTION, key)
        if key == "enabled":
            enabled = errors.convert(source, f"{DETECTION}.enabled", boolean, raw, line)
            if enabled is not None:
                values["counter_detection_enabled"] = enabled
        elif key not in ("counters", EFA_COUNTERS_KEY):
            errors.add(source, f"{DETECTION}.{key_label(key)}",
                       f"unknown key{hint(key, DETECTION_KEYS)}; [counterDetection] has "
                       f"only enabled, [[counterDetection.counters]] and "
                       f"[[{EFA_COUNTERS_TABLE}]]", line)
    counters, counter_notices = merge_counters(detection.get("counters", []), source,
                                               lines, errors)
    values["counters"] = counters
    notices.extend(counter_notices)
    if EFA_COUNTERS_KEY in detection:
        values["efa_counters"], _ = merge_counters(
            detection[EFA_COUNTERS_KEY], source, lines, errors, efa=True)
    return values
