"""Run a module as on a host that lacks some Python libraries.

    python tests/without.py dbus_fast,dbus_next -m nichealthd.runtime.daemon ARGS...

A finder placed first on ``sys.meta_path`` answers every import of a named module (or of a
module below it: ``google.protobuf`` blocks ``google.protobuf.message``) with the
``ModuleNotFoundError`` a missing package gives, however the package was installed.
"""

from __future__ import annotations

import importlib.abc
import os
import runpy
import sys
from typing import Optional, Sequence


class Without(importlib.abc.MetaPathFinder):
    """Makes the named modules and everything below them missing."""

    def __init__(self, names: Sequence[str]) -> None:
        self.names = tuple(n for n in names if n)

    def find_spec(self, fullname: str, path: Optional[Sequence[str]] = None,
                  target: object = None) -> None:
        if any(fullname == n or fullname.startswith(n + ".") for n in self.names):
            raise ModuleNotFoundError(f"No module named {fullname!r}", name=fullname)
        return None


def main(argv: Sequence[str]) -> None:
    if len(argv) < 3 or argv[1] != "-m":
        raise SystemExit("usage: without.py NAME[,NAME...] -m MODULE [ARG...]")
    sys.meta_path.insert(0, Without(argv[0].split(",")))
    sys.path[0] = os.getcwd()  # as ``python -m`` has it, not this file's directory
    sys.argv = [argv[2], *argv[3:]]
    runpy.run_module(argv[2], run_name="__main__", alter_sys=True)


if __name__ == "__main__":
    main(sys.argv[1:])


def command(names: str, module: str, *args: str) -> list[str]:
    """The command line that runs ``module`` with ``args`` without the modules ``names``
    (comma-separated); nothing left out when ``names`` is empty."""
    if not names:
        return [sys.executable, "-m", module, *args]
    return [sys.executable, __file__, names, "-m", module, *args]
