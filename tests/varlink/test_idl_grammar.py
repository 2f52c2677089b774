"""The interface file parses in every systemd's varlinkctl that has one (255 and later), and its
comments read well in ``varlinkctl introspect``.

systemd 255 (Ubuntu 24.04) refuses a comment inside the parentheses of a type, method or error
("Bad message" from ``introspect``, a failing ``validate-idl``); 257 (Debian 13) takes it.
``systemd_idl`` re-does both parsers from systemd's sources; tests/e2e/test_e2e_varlink_idl.py
runs Debian 13's real ``varlinkctl validate-idl`` on the same file.
"""

from __future__ import annotations

import re

import pytest
from systemd_idl import IdlError, Interface, validate

from nichealthd.surfaces.varlink import DESCRIPTION_FILE, INTERFACE
from nichealthd.surfaces.varlink_protocol import SERVICE_DESCRIPTION, method_names

# varlinkctl introspect (257) re-breaks each comment line on its own to the terminal's width
# (varlink_idl_format_comment: strv_rebreak_lines of the text after "# "): a line longer than
# the terminal is cut in two and the next one follows short, the ragged look. Every line is
# kept to what a standard 80-column terminal shows whole.
COLUMNS = 80
VERSIONS = (255, 257)


def read_description() -> str:
    with open(DESCRIPTION_FILE, encoding="utf-8") as handle:
        return handle.read()


def members(interface: Interface) -> dict:
    return {s.name: s.kind for s in interface.symbols}


@pytest.mark.parametrize("systemd", VERSIONS)
def test_the_interface_file_is_valid_idl_for_systemd(systemd: int) -> None:
    text = read_description()
    parsed = validate(text, systemd)
    assert parsed.name == INTERFACE
    kinds = members(parsed)
    assert [n for n, k in kinds.items() if k == "method"] == method_names(text)
    assert {n for n, k in kinds.items() if k == "struct"} == {
        "Port", "ModuleLane", "Device", "PcieHop", "Counter", "Entity", "Event", "Status",
        "SurfaceStatus"}
    assert {n for n, k in kinds.items() if k == "error"} == {
        "PermissionDenied", "NotReady", "UnknownDevice", "NotMonitored", "UnknownPort",
        "ShuttingDown", "Failed"}
    port = next(s for s in parsed.symbols if s.name == "Port")
    lanes = next(f for f in port.fields if f.name == "module_lanes")
    assert (lanes.nullable, lanes.container, lanes.named_type) == (True, "array", "ModuleLane")


@pytest.mark.parametrize("systemd", VERSIONS)
def test_the_service_description_is_valid_idl_for_systemd(systemd: int) -> None:
    """varlinkctl introspect without an interface asks for org.varlink.service too."""
    assert validate(SERVICE_DESCRIPTION, systemd).name == "org.varlink.service"


FIELD_COMMENT = """\
interface a.b
# A type.
type T (
  # Its field.
  x: int
)
"""

# text, accepted by 255, accepted by 257, what the refusal says
CASES = [
    (FIELD_COMMENT, False, True, "4:3: Couldn't find token of allowed chars"),  # its count
    (FIELD_COMMENT.replace("  # Its field.\n", ""), True, True, ""),
    ("interface a.b\ntype T (x: int # after\n)\n", False, False, "Couldn't find token"),
    ("interface a.b\ntype T (x: int,\n # last\n)\n", False, False, "Couldn't find token"),
    ("interface a.b\ntype T (x: int,)\n", False, False, "Couldn't find token"),
    ("interface a.b\ntype T ()\n", False, False, "Ambiguous empty ()"),
    ("interface a.b\ntype T (x: ? int)\n", False, False, "Failed to find type 'int'"),
    ("interface a.b\ntype T (x: integer)\n", False, False, "Couldn't find token"),
    ("interface a.b\ntype T (x: U)\n", False, False, "Failed to find type 'U'"),
    ("interface a.b\ntype T (x__y: int)\n", False, False, "Field name 'x__y'"),
    ("interface a.b\ntype T (x: int, x: int)\n", False, False, "defined twice"),
    ("interface a.b\nmethod M (x: int) -> (x: int)\n", True, True, ""),
    ("interface a.b\ntype E (one, two)\ntype T (e: ?[]E, m: [string]E)\n", True, True, ""),
    ("interface a.b\nerror Gone ()\n", True, True, ""),
    ("# before\ninterface a.b\n\n# between\n\nerror Gone ()\n# at the end\n", True, True, ""),
]


@pytest.mark.parametrize("text,ok255,ok257,why", CASES)
def test_the_grammar_of_255_and_257(text: str, ok255: bool, ok257: bool, why: str) -> None:
    """The port refuses what systemd's parser refuses, with its words (a sample of its rules,
    the one that broke 255 first)."""
    for systemd, ok in ((255, ok255), (257, ok257)):
        if ok:
            validate(text, systemd)
            continue
        with pytest.raises(IdlError) as refused:
            validate(text, systemd)
        assert why in str(refused.value), (systemd, str(refused.value))


def test_the_comments_read_well_in_introspect() -> None:
    """Only top-level comments (the ones 255 parses), none blank, each line whole on an
    80-column terminal; every field is named in the comment of its type."""
    text = read_description()
    comments = [line for line in text.splitlines() if line.lstrip().startswith("#")]
    assert comments and all(line.startswith("#") for line in comments)
    for line in comments:
        assert line.rstrip() != "#", "a blank comment line"
        assert len(line) <= COLUMNS, f"{len(line)} columns: {line}"
    for doc, name, body in re.findall(r"((?:#[^\n]*\n)+)type (\w+) \(\n(.*?)\n\)", text, re.S):
        for field in re.findall(r"^\s*(\w+):", body, re.M):
            assert re.search(rf"\b{field}\b", doc), f"{name}.{field} is not described"
