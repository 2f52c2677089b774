"""Puts the libraries a distribution package carries first on the import path (packaging/README.md).

A package built for a target whose archive lacks a library, or ships one too old, carries it
in a private directory (/usr/lib/nichealthd/vendor, listed in
/usr/share/doc/nichealthd/BUNDLED) and writes the file ``carried-libraries`` beside this
module: the CPython minor its wheels are built for and the directory, relative to this
package (packaging/targets.py). Importing nichealthd, which every entry point does before
any library, puts that directory at the front of ``sys.path`` when this is that CPython, so
the carried libraries win over the system's and no other program sees them. Without the
file (a pip or source install, a package that carries nothing) nothing changes; under
another CPython the carried binaries could not load, so they are left out and a missing
library is reported as such (nichealthd.runtime.libraries).
"""

from __future__ import annotations

import os
import sys
from typing import Optional

MARKER = os.path.join(os.path.dirname(os.path.abspath(__file__)), "carried-libraries")


def carried_directory(marker: str = MARKER) -> Optional[str]:
    """The directory of carried libraries for this CPython, or None."""
    try:
        with open(marker, encoding="utf-8") as fh:
            text = fh.read()
    except OSError:
        return None
    fields = dict(line.split("=", 1) for line in text.splitlines()
                  if "=" in line and not line.startswith("#"))
    here = f"{sys.version_info[0]}.{sys.version_info[1]}"
    if fields.get("python") != here or not fields.get("path"):
        return None
    directory = os.path.normpath(os.path.join(os.path.dirname(marker), fields["path"]))
    return directory if os.path.isdir(directory) else None


def use_carried_libraries(marker: str = MARKER) -> None:
    """Put the carried libraries' directory first on ``sys.path`` (once)."""
    directory = carried_directory(marker)
    if directory and directory not in sys.path:
        sys.path.insert(0, directory)
