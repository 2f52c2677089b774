"""The public interfaces against the record fields the daemon and the check families declare.

Each key of a port or device record is declared with its type where it is made: the daemon's
own in ``PORT_FIELD_TYPES`` / ``DEVICE_FIELD_TYPES`` (nichealthd/core/views.py), a family's
in its ``port_field_types`` / ``device_field_types`` (core/family.py). :func:`problems` holds
the varlink interface file's ``Port`` and ``Device`` to them, field for field and type for
type (parsed with systemd 255's grammar), and the keys the D-Bus introspection lists for
``ListPorts`` and ``ListDevices`` to their D-Bus signatures (surfaces/dbus_common.py).

Run as a script it checks the nichealthd it imports (a copy of the package, in
tests/daemon/test_adding_a_family.py) and prints each problem; ``--call SOCKET METHOD``
calls a method of a running daemon instead and checks the reply against that interface.
"""

from __future__ import annotations

import json
import os
import socket
import sys
import xml.etree.ElementTree as ET

from idl_values import Replies, struct_types
from systemd_idl import validate

from nichealthd.core.checks import families
from nichealthd.core.views import DAEMON, declared_fields
from nichealthd.surfaces.dbus_interface import INTROSPECTION_XML
from nichealthd.surfaces.varlink import DESCRIPTION_FILE, INTERFACE
from nichealthd.surfaces.varlink_protocol import encode_call, parse_reply

RECORDS = (("port", "Port", "ListPorts"), ("device", "Device", "ListDevices"))
# A varlink type (without its "?") as D-Bus carries it in an a{sv} record.
DBUS_OF = {"bool": "b", "int": "x", "float": "d", "string": "s", "[]string": "as",
           "[string]string": "a{ss}"}


def dbus_signature(varlink_type: str) -> str:
    """The D-Bus signature of a record field of this varlink type (``aa{ss}``: a list of
    records of text, as ``to_variants`` sends ``pcie_hops`` and ``module_lanes``)."""
    bare = varlink_type.lstrip("?")
    return DBUS_OF.get(bare, "aa{ss}" if bare.startswith("[]") else "?")


def declarer(who: str, record: str) -> str:
    """Where a declaration is written, for a message."""
    if who == DAEMON:
        return f"the daemon (nichealthd/core/views.py, {record.upper()}_FIELD_TYPES)"
    family = next(f for f in families() if f.id == who)
    path = sys.modules[type(family).__module__].__file__ or "?"
    where = os.path.join(*path.split(os.sep)[-4:]) if "nichealthd" in path else path
    return f"family {who} ({where}, {record}_field_types)"


def declared(record: str, out: list[str]) -> dict[str, tuple[str, str]]:
    """key -> (type, who declares it first); a key declared twice with two types is a
    problem."""
    found: dict[str, tuple[str, str]] = {}
    for who, key, kind in declared_fields(record):
        where = declarer(who, record)
        if key in found and found[key][0] != kind:
            out.append(f"{record} field {key}: {where} declares it {kind}, "
                       f"{found[key][1]} {found[key][0]}: a field has one type")
        found.setdefault(key, (kind, where))
    return found


def problems() -> list[str]:
    """Everything the interface files say otherwise than the declarations; [] when none."""
    with open(DESCRIPTION_FILE, encoding="utf-8") as handle:
        interface = validate(handle.read(), 255)
    out: list[str] = []
    docs = dbus_keys()
    for record, type_name, method in RECORDS:
        have = struct_types(interface, type_name)
        fields = declared(record, out)
        for key, (kind, where) in fields.items():
            if key not in have:
                out.append(f"{type_name}.{key}: {where} declares it {kind}; type {type_name} "
                           f"of {INTERFACE}.varlink lacks it: add `  {key}: {kind}` there "
                           f"and a line for it in the comment above the type")
            elif have[key] != kind:
                out.append(f"{type_name}.{key}: {where} declares it {kind}, "
                           f"{INTERFACE}.varlink says {have[key]}")
        for key, kind in have.items():
            if key not in fields:
                out.append(f"{type_name}.{key} ({kind}) of {INTERFACE}.varlink is declared "
                           f"by no family nor the daemon: declare it where it is made "
                           f"({record}_field_types) or take it out")
        for key, signature in docs[method].items():
            if key not in fields:
                out.append(f"D-Bus {method} lists {key} ({signature}), which no family nor "
                           f"the daemon declares")
            elif dbus_signature(fields[key][0]) != signature:
                out.append(f"D-Bus {method} lists {key} as {signature}; declared "
                           f"{fields[key][0]} by {fields[key][1]}, sent as "
                           f"{dbus_signature(fields[key][0])}")
    return out


def dbus_keys() -> dict[str, dict[str, str]]:
    """The keys and signatures each ``List*`` method's doc string names after ``Keys:``:
    ``device s, port x`` or, grouped, ``is_vf, monitored, present b; missing_polls x``."""
    root = ET.parse(INTROSPECTION_XML).getroot()
    out: dict[str, dict[str, str]] = {}
    for method in root.iter("method"):
        doc = next((a.get("value", "") for a in method.iter("annotation")
                    if a.get("name") == "org.gtk.GDBus.DocString"), "")
        if "Keys: " in doc:
            out[str(method.get("name"))] = _keys(doc.split("Keys: ", 1)[1])
    return out


def _keys(text: str) -> dict[str, str]:
    """``name sig (note), name sig; a, b sig.`` -> name -> sig; a name without one takes the
    next of its ``;`` group."""
    groups: list[list[str]] = [[""]]
    depth = 0
    for i, char in enumerate(text):
        if char == "(":
            depth += 1
        elif char == ")":
            depth -= 1
        elif depth == 0 and char == "." and text[i + 1:i + 2] in ("", " "):
            break
        elif depth == 0 and char in ",;":
            if char == ";":
                groups.append([])
            groups[-1].append("")
            continue
        if depth == 0 and char not in "()":
            groups[-1][-1] += char
    keys: dict[str, str] = {}
    for group in groups:
        waiting: list[str] = []
        for item in group:
            words = item.split()
            if not words:
                continue
            waiting.append(words[0])
            if len(words) > 1:
                keys.update((name, words[1]) for name in waiting)
                waiting = []
    return keys


def call(path: str, method: str) -> dict[str, object]:
    """One call on a running daemon, its reply checked against the package's interface."""
    with open(DESCRIPTION_FILE, encoding="utf-8") as handle:
        replies = Replies(handle.read())
    with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as sock:
        sock.settimeout(30)
        sock.connect(path)
        sock.sendall(encode_call(f"{INTERFACE}.{method}"))
        data = b""
        while not data.endswith(b"\0"):
            chunk = sock.recv(1 << 16)
            if not chunk:
                raise ConnectionError("closed by the daemon")
            data += chunk
    error, parameters, _ = parse_reply(data[:-1])
    replies.check(f"{INTERFACE}.{method}", error, parameters)
    return parameters


def main(argv: list[str]) -> int:
    if argv[:1] == ["--call"]:
        print(json.dumps(call(argv[1], argv[2])))
        return 0
    found = problems()
    for line in found:
        print(line)
    return 1 if found else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
