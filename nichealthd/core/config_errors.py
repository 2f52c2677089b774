"""Config problems: each names the file, the line where one is known, the key and what is wrong.

Validation collects every problem of a file in one pass (:class:`Collector`) and raises them
together as one :class:`ConfigError`, so an operator fixes a file in one round, not one
error per run.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any, Callable, List, Optional, Sequence, TypeVar, Union

T = TypeVar("T")
COMMAND_LINE = "<command line>"
SUMMARY_PROBLEMS = 5  # in the one-line form (STATUS=, D-Bus replies, logs)


@dataclass(frozen=True)
class Problem:
    """One invalid value or file: ``FILE[:LINE[:COLUMN]]: KEY: PROBLEM``."""

    source: str
    key: str  # "" when the problem is the file itself (unreadable, not TOML)
    problem: str
    line: Optional[int] = None
    column: Optional[int] = None

    def __str__(self) -> str:
        where = self.source
        if self.line is not None:
            where += f":{self.line}"
            if self.column is not None:
                where += f":{self.column}"
        return f"{where}: {self.key}: {self.problem}" if self.key else f"{where}: {self.problem}"


class ConfigError(Exception):
    """An invalid configuration: one or more :class:`Problem`.

    ``str()`` is one line of the first few problems (it goes into STATUS= and D-Bus replies);
    :attr:`messages` has one line per problem for a terminal. ``key`` and ``problem`` are the
    first problem's. ``ConfigError(source, key, problem)`` is the short form for one problem.
    """

    def __init__(self, problems: Union[Sequence[Problem], str, None], key: str = "",
                 problem: str = "") -> None:
        if problems is None or isinstance(problems, str):  # the short form: one problem
            problems = [Problem(problems or COMMAND_LINE, key, problem)]
        if not problems:
            raise ValueError("a ConfigError needs at least one problem")
        self.problems: List[Problem] = list(problems)
        first = self.problems[0]
        self.source, self.key, self.problem, self.line = (first.source, first.key,
                                                          first.problem, first.line)
        shown = self.messages[:SUMMARY_PROBLEMS]
        more = len(self.problems) - len(shown)
        if more:
            shown.append(f"and {more} more (nichealthctl config check lists them all)")
        super().__init__("; ".join(shown))

    @classmethod
    def one(cls, source: Optional[str], key: str, problem: str,
            line: Optional[int] = None, column: Optional[int] = None) -> ConfigError:
        return cls([Problem(source or COMMAND_LINE, key, problem, line, column)])

    @property
    def messages(self) -> List[str]:
        return [str(p) for p in self.problems]


class Collector:
    """Gathers the problems of one validation pass; :meth:`raise_if_any` at the end."""

    def __init__(self) -> None:
        self.problems: List[Problem] = []

    def add(self, source: Optional[str], key: str, problem: str,
            line: Optional[int] = None) -> None:
        self.problems.append(Problem(source or COMMAND_LINE, key, problem, line))

    def convert(self, source: Optional[str], key: str, convert: Callable[[Any], T], raw: object,
                line: Optional[int] = None) -> Optional[T]:
        """``convert(raw)``, or None with the converter's ValueError recorded as a problem."""
        try:
            return convert(raw)
        except ValueError as exc:
            self.add(source, key, str(exc), line)
            return None

    def raise_if_any(self) -> None:
        if self.problems:
            raise ConfigError(self.problems)


def show(value: object) -> str:
    """A short, safe rendering of a TOML value for a message (never a huge or deep repr)."""
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, dict):
        return "a table"
    if isinstance(value, list):
        return "an array"
    if isinstance(value, float):
        return repr(value) if math.isfinite(value) else str(value)
    if isinstance(value, int):
        if abs(value) < 10 ** 30:
            return str(value)
        return f"a number of about {int(value.bit_length() * math.log10(2)) + 1} digits"
    if isinstance(value, str):
        text = repr(value)
        return text if len(text) <= 80 else text[:76] + "...'"
    return f"a {type(value).__name__} ({value})"
