"""Where keys are in a TOML file, so every config problem can name its line.

``tomllib`` does not report positions; a line scan of headers and ``key =`` lines does, well
enough for error messages (a key it cannot place falls back to its table's header).
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from typing import Dict, Optional, Tuple

_HEADER = re.compile(r"^\s*(\[\[?)([^\]\[#]*)\]\]?\s*(?:#.*)?$")
_KEY = re.compile(r"""^\s*(?:"([^"]*)"|'([^']*)'|([A-Za-z0-9_.\-]+))\s*=""")


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
