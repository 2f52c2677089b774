"""Install the wheel in the layout of the rpm's target, not of the Python running the build.

Used by nichealthd.spec where %pyproject_install does not exist (Debian's rpmbuild, called by
packaging/build-rpm.sh): ``python3 -m installer`` would use the running Python's scheme
(Debian: /usr/lib/python3/dist-packages, 3.11 bytecode), which RHEL's or Fedora's Python
never reads. Here the package goes to the target's site-packages, scripts get the target's
``#!/usr/bin/python3``, and bytecode is made by the target's interpreter or not at all. The
tree of what the package carries (``--carried``, packaging/targets.py carry: BUNDLED, and the
carried libraries with their marker) is unpacked into the build root and compiled alike.
"""

from __future__ import annotations

import argparse
import subprocess
import sys
import tarfile
from pathlib import Path

from installer import install
from installer.destinations import SchemeDictionaryDestination
from installer.sources import WheelFile


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--destdir", required=True, help="the rpm build root")
    p.add_argument("--sitelib", required=True, help="e.g. /usr/lib/python3.9/site-packages")
    p.add_argument("--bindir", default="/usr/bin")
    p.add_argument("--compile", default="", help="target interpreter for bytecode; '' = none")
    p.add_argument("--carried", default="", help="tarball of the carried tree (Source1)")
    p.add_argument("wheel")
    a = p.parse_args()
    scheme = {"purelib": a.sitelib, "platlib": a.sitelib, "scripts": a.bindir,
              "data": "/usr", "headers": "/usr/include"}  # fmt: skip
    dest = SchemeDictionaryDestination(
        scheme, interpreter="/usr/bin/python3", script_kind="posix",
        bytecode_optimization_levels=(), destdir=a.destdir,
    )  # fmt: skip
    with WheelFile.open(a.wheel) as wheel:
        install(wheel, dest, {"INSTALLER": b"rpm\n"})
    # RECORD lists paths and hashes rpm verifies itself; Fedora's %pyproject_install drops it.
    for record in Path(a.destdir + a.sitelib).glob("*.dist-info/RECORD"):
        record.unlink()
    trees = [a.destdir + a.sitelib]
    if a.carried:
        with tarfile.open(a.carried) as tar:
            if hasattr(tarfile, "data_filter"):  # Python 3.11.4 and later
                tar.extractall(a.destdir, filter="data")
            else:
                tar.extractall(a.destdir)
        vendor = Path(a.destdir + "/usr/lib/nichealthd/vendor")
        if vendor.is_dir():
            trees.append(str(vendor))
    if a.compile:
        for level in ([], ["-O"]):  # opt levels 0 and 1, as Fedora's brp-python-bytecompile
            subprocess.run(
                [a.compile, *level, "-m", "compileall", "-q", "-f", "-s", a.destdir, "-p", "/",
                 *trees],
                check=True,
            )  # fmt: skip
    return 0


if __name__ == "__main__":
    sys.exit(main())
