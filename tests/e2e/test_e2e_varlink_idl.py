"""Debian 13's real ``varlinkctl validate-idl`` (systemd 257) on the shipped interface file.

No boot: ``varlinkctl validate-idl`` reads the file on standard input, parses and checks it
with systemd's own ``varlink-idl.c`` and prints it back as ``varlinkctl introspect`` prints an
interface (``sd_varlink_idl_dump``), re-breaking each comment line to ``$COLUMNS``. So this
shows what an operator sees on an 80-column terminal: every comment line as written, none cut
in two, and no declaration changed. systemd 255's stricter grammar (no comment inside a type's
parentheses) is tested by tests/varlink/test_idl_grammar.py, its parser ported from systemd's
sources: Ubuntu's archive, where 255 is, is not reachable from the build machines.
"""

from __future__ import annotations

import os
import subprocess

import nspawn
import pytest

from nichealthd.surfaces.varlink import DESCRIPTION_FILE
from nichealthd.surfaces.varlink_protocol import SERVICE_DESCRIPTION

pytestmark = pytest.mark.e2e


def validate_idl(root: str, text: str, columns: int) -> subprocess.CompletedProcess[str]:
    return subprocess.run(["chroot", root, "varlinkctl", "validate-idl"], input=text,
                          capture_output=True, text=True, timeout=60,
                          env={"PATH": "/usr/sbin:/usr/bin:/sbin:/bin", "COLUMNS": str(columns),
                               "SYSTEMD_COLORS": "0", "LANG": "C.UTF-8"})


def comments(text: str) -> list[str]:
    return [line for line in text.splitlines() if line.lstrip().startswith("#")]


def declarations(text: str) -> list[str]:
    return [line for line in text.splitlines() if not line.lstrip().startswith("#")]


@pytest.mark.usefixtures("e2e_ready")
def test_debian13_varlinkctl_validates_and_prints_the_interface_whole() -> None:
    root = str(nspawn.ensure_rootfs("trixie"))
    with open(DESCRIPTION_FILE, encoding="utf-8") as handle:
        ours = handle.read()
    for text in (ours, SERVICE_DESCRIPTION):
        checked = validate_idl(root, text, 80)
        assert checked.returncode == 0, checked.stderr
        assert comments(checked.stdout) == comments(text)
        assert max(len(line) for line in comments(checked.stdout)) <= 80
    printed = validate_idl(root, ours, 80).stdout
    # systemd lays the declarations out its own way ("type Port(", a field per line, tabs):
    # without the white space, the same text
    assert "".join("".join(declarations(printed)).split()) == \
        "".join("".join(declarations(ours)).split())
    refused = validate_idl(root, "interface a.b\ntype T ()\n", 80)
    assert refused.returncode != 0  # it does refuse what systemd cannot parse
    assert os.path.exists(os.path.join(root, "usr/bin/varlinkctl"))
