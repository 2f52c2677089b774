"""Reading the config file safely and turning it into a validated :class:`Config`.

Whatever is at the path (a FIFO, ``/dev/zero``, a directory, invalid UTF-8, 5000-deep arrays,
a 5000-digit number), the result is the parsed TOML or a :class:`ConfigError` naming the file
and, where TOML or a simple scan gives one, the line: never another exception, never a hang
and never an unbounded read.

The config names the commands the daemon runs, so it is obeyed only when it is trusted
(:mod:`.trust`: owned by root or the daemon's user, writable by nobody else), and so are the
programs of those commands while ``slurmDrain`` is on; at start, at a reload and in
``nichealthctl config check`` alike, since all three load it here.
"""

from __future__ import annotations

import os
import re
import sys
from dataclasses import dataclass
from typing import Dict, Mapping, Optional

from ..core.config import Config
from ..core.config_build import build_config
from ..core.config_errors import Collector, ConfigError
from ..core.config_lines import KeyLines
from . import trust
from .safefile import UnusableFile, read_small_file

if sys.version_info >= (3, 11):
    import tomllib
else:  # pragma: no cover - exercised on Python < 3.11 only
    import tomli as tomllib

MAX_CONFIG_BYTES = 1024 * 1024  # a real config is a few KiB
_TOML_POSITION = re.compile(r"\s*\(at line (\d+), column (\d+)\)\s*$")
_LONG_NUMBER = re.compile(r"[0-9a-fA-FxX_]{1000,}")


@dataclass
class ConfigFile:
    """A parsed file: its TOML data and where its keys are."""

    data: Dict[str, object]
    lines: KeyLines


def read_config_file(path: str) -> Optional[ConfigFile]:
    """The parsed file; None when it does not exist. Raises :class:`ConfigError`."""
    raw = _read_bytes(path)
    if raw is None:
        return None
    try:
        text = raw.decode("utf-8")
    except UnicodeDecodeError as exc:
        line = raw.count(b"\n", 0, exc.start) + 1
        column = exc.start - (raw.rfind(b"\n", 0, exc.start) + 1) + 1
        raise ConfigError.one(path, "", f"not valid UTF-8 (byte 0x{raw[exc.start]:02x}); "
                                        f"TOML files are UTF-8 text", line, column) from None
    return ConfigFile(_parse(path, text), KeyLines.scan(text))


def _read_bytes(path: str) -> Optional[bytes]:
    """Read a regular file of at most MAX_CONFIG_BYTES without blocking on a FIFO, refused
    when it is not trusted."""
    allowed = trust.owners()

    def vet(info: os.stat_result) -> Optional[str]:
        found = trust.problem(info, allowed)
        if found is None:
            return None
        return (f"refused: the file {found}; it names the commands nichealthd runs, so "
                f"whoever can write it chooses them: {trust.fix(info, path, allowed)}")

    try:
        return read_small_file(path, MAX_CONFIG_BYTES, vet)
    except UnusableFile as exc:
        problem = str(exc)
        if problem.startswith("larger than"):
            problem += "; not a config file"
        raise ConfigError.one(path.replace("\0", "\\0"), "", problem) from None


def _parse(path: str, text: str) -> Dict[str, object]:
    try:
        data: Dict[str, object] = tomllib.loads(text)
    except tomllib.TOMLDecodeError as exc:
        message = str(exc)
        position = _TOML_POSITION.search(message)
        if position is None:
            raise ConfigError.one(path, "", f"not valid TOML: {message}") from None
        raise ConfigError.one(path, "", f"not valid TOML: {message[:position.start()]}",
                              int(position.group(1)), int(position.group(2))) from None
    except RecursionError:
        raise ConfigError.one(path, "", "not valid TOML: arrays or inline tables nested "
                                        "too deeply", _line_of_most(text, "[{")) from None
    except ValueError:  # a number longer than Python converts (sys.int_info)
        line = next((n for n, text_line in enumerate(text.splitlines(), 1)
                     if _LONG_NUMBER.search(text_line)), None)
        raise ConfigError.one(path, "", "not valid TOML: a number with too many digits",
                              line) from None
    return data


def _line_of_most(text: str, characters: str) -> Optional[int]:
    """The line holding the most of ``characters`` (where a deep nesting opens)."""
    best, where = 0, None
    for number, line in enumerate(text.splitlines(), 1):
        count = sum(line.count(c) for c in characters)
        if count > best:
            best, where = count, number
    return where


def load_config(path: Optional[str], overrides: Optional[Mapping[str, object]] = None,
                *, must_exist: bool = False) -> Config:
    """Load ``path`` (missing file = built-in defaults unless ``must_exist``), apply overrides.

    ``overrides`` uses the config keys (camelCase); command-line flags arrive this way so
    that they are validated exactly like the file. Raises :class:`ConfigError` and nothing
    else, whatever the file holds.
    """
    data: Mapping[str, object] = {}
    lines = KeyLines()
    if path:
        parsed = read_config_file(path)
        if parsed is None and must_exist:
            raise ConfigError.one(path, "", "file not found")
        if parsed is not None:
            data, lines = parsed.data, parsed.lines
    config = build_config(data, path, overrides or {}, lines)
    _check_commands(config, lines)
    return config


COMMAND_KEYS = (("slurmDrainCommand", "slurm_drain_command"),
                ("slurmResumeCommand", "slurm_resume_command"),
                ("slurmReasonCommand", "slurm_reason_command"))


def _check_commands(config: Config, lines: KeyLines) -> None:
    """Refuse commands the daemon would run from a place others can change (sudo's rule,
    :func:`.trust.command_problem`); only while ``slurmDrain`` is on, as they run only then."""
    if not config.slurm_drain:
        return
    allowed = trust.owners()
    errors = Collector()
    for key, attribute in COMMAND_KEYS:
        argv: tuple[str, ...] = getattr(config, attribute)
        found = trust.command_problem(trust.resolve(argv[0]), allowed)
        if found:
            errors.add(config.source, key, f"refused: {found}", lines.line("", key))
    errors.raise_if_any()
