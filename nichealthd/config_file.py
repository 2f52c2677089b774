"""Reading a config file safely and locating keys in it.

Whatever is at the path (a FIFO, ``/dev/zero``, a directory, invalid UTF-8, 5000-deep arrays,
a 5000-digit number), the result is the parsed TOML or a :class:`ConfigError` naming the file
and, where TOML or a simple scan gives one, the line: never another exception, never a hang
and never an unbounded read.
"""

from __future__ import annotations

import re
import sys
from dataclasses import dataclass, field
from typing import Any, Dict, Optional, Tuple

from .config_errors import ConfigError
from .safefile import UnusableFile, read_small_file

if sys.version_info >= (3, 11):
    import tomllib
else:  # pragma: no cover - exercised on Python < 3.11 only
    import tomli as tomllib

MAX_CONFIG_BYTES = 1024 * 1024  # a real config is a few KiB
_TOML_POSITION = re.compile(r"\s*\(at line (\d+), column (\d+)\)\s*$")
_HEADER = re.compile(r"^\s*(\[\[?)([^\]\[#]*)\]\]?\s*(?:#.*)?$")
_KEY = re.compile(r"""^\s*(?:"([^"]*)"|'([^']*)'|([A-Za-z0-9_.\-]+))\s*=""")
_LONG_NUMBER = re.compile(r"[0-9a-fA-FxX_]{1000,}")


@dataclass
class KeyLines:
    """Where keys are in the file, by a line scan (the parser does not say).

    ``table`` is the dotted header (``""`` for the top level); ``index`` counts the ``[[...]]``
    entries of an array of tables.
    """

    keys: Dict[Tuple[str, int, str], int] = field(default_factory=dict)
    tables: Dict[Tuple[str, int], int] = field(default_factory=dict)

    @classmethod
    def scan(cls, text: str) -> KeyLines:
        found = cls()
        table: Tuple[str, int] = ("", 0)
        counts: Dict[str, int] = {}
        for number, line in enumerate(text.splitlines(), 1):
            header = _HEADER.match(line)
            if header:
                name = _dotted(header.group(2))
                index = counts[name] = counts.get(name, -1) + 1 if header.group(1) == "[[" else 0
                table = (name, index)
                found.tables.setdefault(table, number)
                continue
            key = _KEY.match(line)
            if key:
                name = next(g for g in key.groups() if g is not None)
                found.keys.setdefault((table[0], table[1], _dotted(name)), number)
        return found

    def line(self, table: str, key: str = "", index: int = 0) -> Optional[int]:
        """The key's line (or its own ``[table.key]`` header); else its table's header line."""
        if key:
            dotted = f"{table}.{key}" if table else key
            for where in ((table, index, key), ("", 0, dotted)):
                if where in self.keys:
                    return self.keys[where]
            if (dotted, 0) in self.tables:
                return self.tables[(dotted, 0)]
        return self.tables.get((table, index))


def _dotted(name: str) -> str:
    return ".".join(part.strip().strip("\"'") for part in name.split("."))


@dataclass
class ConfigFile:
    """A parsed file: its TOML data and where its keys are."""

    data: Dict[str, Any]
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
    """Read a regular file of at most MAX_CONFIG_BYTES without blocking on a FIFO."""
    try:
        return read_small_file(path, MAX_CONFIG_BYTES)
    except UnusableFile as exc:
        problem = str(exc)
        if problem.startswith("larger than"):
            problem += "; not a config file"
        raise ConfigError.one(path.replace("\0", "\\0"), "", problem) from None


def _parse(path: str, text: str) -> Dict[str, Any]:
    try:
        data: Dict[str, Any] = tomllib.loads(text)
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
