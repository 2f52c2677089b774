"""Declared settings: a config key is declared once, with everything about it, by its owner.

The daemon (:class:`nichealthd.core.config.Config`) and each check family (a frozen subclass
of :class:`Settings`, named by ``CheckFamily.settings``) declare their top-level keys as
dataclass fields made by :func:`setting`: the TOML key (the file format is the external
contract: nichealthd.toml(5)), the default, the parser with its bounds and the one
line the man page's paragraph of the key carries. :class:`Reader` turns the keys of a file
(and the command line's) into the values of their owners, and :class:`Report` gives a
family's cross-key rule (:meth:`Settings.validate`) the same file, line and key in its
problems as a parser's. Validation, ``nichealthctl config check``, the man-page test and the
bounds test all iterate over these declarations.
"""

from __future__ import annotations

import dataclasses
import re
import shlex
from dataclasses import dataclass, field
from typing import (
    Any,
    Callable,
    ClassVar,
    Collection,
    Dict,
    Iterable,
    List,
    Mapping,
    Optional,
    Protocol,
    Sequence,
    Tuple,
    Type,
    TypeVar,
)

from .config_errors import Collector, show
from .config_lines import KeyLines
from .duration import format_duration, parse_duration

T = TypeVar("T")

GENERAL_KEYS = "GENERAL KEYS"  # the man page section a key is documented in by default
_DECLARED = "nichealthd.setting"  # the dataclass field metadata key of a declaration
# A table merged by its owner (an array of tables such as [[kernelLogRules]]): it reports
# its own problems, with their lines, into the collector.
Merge = Callable[[Any, Optional[str], KeyLines, Collector], Any]


# ------------------------------------------------------------- parsers
# Each takes a raw TOML (or flag) value and returns the setting's value or raises ValueError
# with a message; the Collector turns that into a Problem naming file, line and key.

def string(value: object) -> str:
    if not isinstance(value, str):
        raise ValueError(f"expected a string, got {show(value)}")
    if "\0" in value:
        raise ValueError("must not contain a NUL byte")
    return value


def boolean(value: object) -> bool:
    if not isinstance(value, bool):
        raise ValueError(f"expected true or false, got {show(value)}")
    return value


def command(value: object) -> Tuple[str, ...]:
    """A command line split as a shell would (``shlex``), run without one: each word one
    argument, ``{node}`` and ``{reason}`` filled in per argument (never re-split)."""
    text = string(value)
    try:
        argv = tuple(shlex.split(text))
    except ValueError as exc:
        raise ValueError(f"cannot split {show(value)} into arguments: {exc}") from None
    if not argv:
        raise ValueError("expected a command such as 'scontrol update NodeName={node} ...'")
    for word in argv:
        rest = re.sub(r"{(?:node|reason)}", "", word)
        if "{" in rest or "}" in rest:
            raise ValueError(f"unknown placeholder or stray brace in {show(word)}; the "
                             f"placeholders are {{node}} and {{reason}}")
    return argv


@dataclass(frozen=True)
class Choice:
    """One of ``options`` (compared in lower case with ``lower``)."""

    options: Tuple[str, ...]
    lower: bool = False

    def __call__(self, value: object) -> str:
        text = string(value)
        text = text.lower() if self.lower else text
        if text not in self.options:
            raise ValueError(f"expected one of {', '.join(self.options)}, got {show(value)}")
        return text


@dataclass(frozen=True)
class Integer:
    """A whole number within bounds: every number has bounds (nan, inf and values that would
    stop or spin the daemon, or silently switch a check off, are errors), and the man page
    gives them (``between LOW and HIGH``, tests/core/test_config_bounds.py)."""

    low: int
    high: int

    def __call__(self, value: object) -> int:
        if isinstance(value, bool) or not isinstance(value, int):
            raise ValueError(f"expected a whole number between {self.low} and {self.high}, "
                             f"got {show(value)}")
        if not self.low <= value <= self.high:
            raise ValueError(f"must be between {self.low} and {self.high}, got {show(value)}")
        return value


@dataclass(frozen=True)
class Duration:
    """A duration within bounds, so a typo like ``0.000001ms`` or ``1e308`` is caught; 0 is
    accepted only where the lower bound is 0."""

    low: float
    high: float

    def __call__(self, value: object) -> float:
        seconds = parse_duration(value, allow_zero=self.low == 0)
        if not self.low <= seconds <= self.high:
            raise ValueError(f"must be between {format_duration(self.low)} and "
                             f"{format_duration(self.high)}, got {show(value)}")
        return seconds


def hint(key: str, known: Iterable[str]) -> str:
    """`` (did you mean 'pollingInterval'?)`` for a near miss, else ``""``."""
    import difflib  # only for a configuration with an unknown key

    by_lower = {k.lower(): k for k in known}
    close = difflib.get_close_matches(key.lower(), list(by_lower), n=1, cutoff=0.6)
    return f" (did you mean {by_lower[close[0]]!r}?)" if close else ""


def key_label(key: str) -> str:
    """A key as it appears in a message (an absurd key from a fuzzer stays short)."""
    return key if len(key) <= 60 and key.isprintable() else show(key)


# ------------------------------------------------------------- declarations

@dataclass(frozen=True)
class Flag:
    """A key that is also a flag of the daemon's command line (nichealthd(8)); the flag wins
    over the file. The daemon adds one for every declared key that has it
    (``runtime/daemon.py``), so a surface's key and its flag are declared together."""

    name: str  # --platform-connector-socket
    metavar: str
    help: str  # its line in ``nichealthd --help``

    @property
    def dest(self) -> str:
        """Its attribute in the parsed command line."""
        return self.name.lstrip("-").replace("-", "_")


@dataclass(frozen=True)
class Key:
    """What a field made by :func:`setting` or :func:`table` declares."""

    name: str  # the TOML key, top level
    doc: str  # the one line of its paragraph in nichealthd.toml(5)
    parse: Callable[[object], object] = string  # a scalar key's parser
    merge: Optional[Merge] = None  # a table's merger (then ``parse`` is unused)
    flag: Optional[Flag] = None  # its command-line flag, if it has one


def setting(name: str, default: T, parse: Callable[[Any], T], doc: str,
            flag: Optional[Flag] = None) -> T:
    """A dataclass field that is the top-level key ``name`` (and ``flag``, if given)."""
    declared: T = field(default=default, metadata={_DECLARED: Key(name, doc, parse, flag=flag)})
    return declared


def table(name: str, default: T, merge: Callable[[Any, Optional[str], KeyLines, Collector], T],
          doc: str) -> T:
    """A dataclass field that is the array of tables ``name``, merged over ``default``."""
    declared: T = field(default=default, metadata={_DECLARED: Key(name, doc, merge=merge)})
    return declared


@dataclass(frozen=True)
class Declared:
    """A key with its owner: the class that declares it and the field that holds it."""

    owner: type
    attr: str
    key: Key
    section: str  # the man page section that documents it

    @property
    def name(self) -> str:
        return self.key.name

    @property
    def bounds(self) -> Optional[Tuple[float, float]]:
        """``(low, high)`` of a numeric key."""
        parse = self.key.parse
        return (parse.low, parse.high) if isinstance(parse, (Integer, Duration)) else None


def declared(owner: type) -> Tuple[Declared, ...]:
    """The keys ``owner`` (a dataclass) declares, in field order."""
    section = getattr(owner, "man_section", GENERAL_KEYS)
    return tuple(Declared(owner, f.name, f.metadata[_DECLARED], section)
                 for f in dataclasses.fields(owner) if _DECLARED in f.metadata)


class AllSettings(Protocol):
    """What a family's cross-key rule (:meth:`Settings.validate`) reads of the whole
    configuration: any family's settings. :class:`nichealthd.core.config.Config` is one;
    declared here because the Config holds settings, so this module cannot import it."""

    def settings(self, kind: Type[SettingsT]) -> SettingsT:
        """The loaded settings of a family (its class), its defaults when none were set."""


class Settings:
    """Base of a family's settings: a frozen dataclass whose fields are :func:`setting`\\ s.

    A family names its class in ``CheckFamily.settings``; the loaded values are
    ``config.settings(TheClass)`` (the defaults when the file sets none).
    """

    man_section: ClassVar[str] = GENERAL_KEYS

    def validate(self, config: AllSettings, report: Report) -> None:
        """The family's rules across its keys (and others' it depends on): problems and
        notices go to ``report``. ``config`` holds every value that parsed, defaults for the
        rest. The default has none."""

    def commands(self) -> Tuple[Tuple[str, Tuple[str, ...]], ...]:
        """The commands these settings have the daemon run, as (key, argv): the loader
        refuses one run from a place others can change (``sources/config_file.py``). The
        default runs none."""
        return ()


SettingsT = TypeVar("SettingsT", bound=Settings)


# ------------------------------------------------------------- reading

class Report:
    """Where a cross-key rule reports: a problem names the key, and the file and line where
    the key was set, or the command line when a flag set it."""

    def __init__(self, source: Optional[str], lines: KeyLines, errors: Collector,
                 data: Mapping[str, object], flags: Collection[str], notices: List[str]) -> None:
        self.source, self._lines, self._errors = source, lines, errors
        self._data, self._flags, self._notices = data, flags, notices

    def given(self, key: str) -> bool:
        """Whether the file or the command line sets ``key``."""
        return key in self._data or key in self._flags

    def problem(self, key: str, message: str) -> None:
        if key in self._flags:
            self._errors.add(None, key, message, None)
        else:
            self._errors.add(self.source, key, message, self._lines.line("", key))

    def notice(self, message: str) -> None:
        """A warning that does not stop the daemon, prefixed with the file's name."""
        self._notices.append(f"{self.source or 'command line'}: {message}")


class Reader:
    """Reads the top-level keys declared by ``owners`` (each key declared once)."""

    def __init__(self, owners: Sequence[type], others: Collection[str] = ()) -> None:
        self.keys: Dict[str, Declared] = {}
        for owner in owners:
            for item in declared(owner):
                if item.name in self.keys or item.name in others:
                    raise RuntimeError(f"config key {item.name} is declared twice "
                                       f"(again by {owner.__name__})")
                self.keys[item.name] = item
        self.others = tuple(others)  # tables read by their own code ([counterDetection])

    def scalars(self, data: Mapping[str, object], overrides: Mapping[str, object],
                source: Optional[str], lines: KeyLines, errors: Collector
                ) -> Dict[type, Dict[str, Any]]:
        """The values of the scalar keys of ``data`` (in file order) and then of
        ``overrides`` (the command line's, which win), by owner and field."""
        values: Dict[type, Dict[str, Any]] = {}
        for key, raw in data.items():
            if key not in self.others and not self._is_table(key):
                self._scalar(values, errors, source, key, raw, lines.line("", key))
        for key, raw in overrides.items():
            self._scalar(values, errors, None, key, raw, None)
        return values

    def tables(self, data: Mapping[str, object], source: Optional[str], lines: KeyLines,
               errors: Collector) -> Dict[type, Dict[str, Any]]:
        """The merged values of the declared tables that ``data`` holds."""
        values: Dict[type, Dict[str, Any]] = {}
        for item in self.keys.values():
            if item.key.merge is not None and item.name in data:
                merged = item.key.merge(data[item.name], source, lines, errors)
                values.setdefault(item.owner, {})[item.attr] = merged
        return values

    def _is_table(self, key: str) -> bool:
        item = self.keys.get(key)
        return item is not None and item.key.merge is not None

    def _scalar(self, values: Dict[type, Dict[str, Any]], errors: Collector,
                source: Optional[str], key: str, raw: object, line: Optional[int]) -> None:
        item = self.keys.get(key)
        if item is None or item.key.merge is not None:  # a table is no flag's
            errors.add(source, key_label(key),
                       f"unknown key{hint(key, [*self.keys, *self.others])}; the keys "
                       f"are listed in nichealthd.toml(5)", line)
            return
        value = errors.convert(source, key, item.key.parse, raw, line)
        if value is not None:
            values.setdefault(item.owner, {})[item.attr] = value

