"""Varlink replies held to the interface: every field declared, of its type, none missing.

The stock PyPI client drops fields the interface does not name, so a reply can carry one no
interface file declares and no client notices. :class:`Replies` checks each reply of the
interface file (parsed by :mod:`systemd_idl`, systemd 255's grammar) against the method's
output, or an error's parameters against the error: field names, ``?`` optional (absent or
null), ``[]`` arrays, ``[string]`` maps and named types, recursively. ``vlhelpers.Raw`` runs
every reply of the varlink tests through it.
"""

from __future__ import annotations

from typing import Any, Optional

from systemd_idl import Field, Interface, Symbol, validate

from nichealthd.surfaces.varlink_protocol import SERVICE_DESCRIPTION

NATIVE_TYPES: dict[str, tuple[type, ...]] = {
    "bool": (bool,), "int": (int,), "float": (int, float), "string": (str,)}


class ReplyMismatch(AssertionError):
    """A reply the interface does not describe."""


def type_text(field: Field) -> str:
    """A field's type as the interface file writes it: ``?[]PcieHop``, ``int``."""
    container = {"": "", "array": "[]", "map": "[string]"}[field.container]
    name = field.named_type or field.kind
    return ("?" if field.nullable else "") + container + name


def struct_types(interface: Interface, name: str) -> dict[str, str]:
    """Field name -> type text of the type ``name``."""
    return {f.name: type_text(f) for f in symbol(interface, name).fields}


def symbol(interface: Interface, name: str) -> Symbol:
    found = next((s for s in interface.symbols if s.name == name), None)
    if found is None:
        raise KeyError(f"{interface.name} declares no {name}")
    return found


class Replies:
    """Checks the replies of one interface (and of ``org.varlink.service``)."""

    def __init__(self, text: str) -> None:
        self.interface = validate(text, 255)
        self.service = validate(SERVICE_DESCRIPTION, 255)

    def _of(self, qualified: str) -> Optional[tuple[Interface, str]]:
        interface, _, member = qualified.rpartition(".")
        for known in (self.interface, self.service):
            if known.name == interface:
                return known, member
        return None

    def check(self, method: str, error: Optional[str], parameters: dict[str, Any]) -> None:
        """Raise :class:`ReplyMismatch` unless ``parameters`` is what the interface says a
        reply to ``method`` carries (or, with ``error``, what that error carries). A method
        or error of another interface is not checked."""
        found = self._of(error or method)
        if found is None:
            return
        interface, member = found
        target = next((s for s in interface.symbols if s.name == member
                       and s.kind == ("error" if error else "method")), None)
        if target is None:
            return  # the daemon answers MethodNotFound; nothing to check here
        wanted = [f for f in target.fields if error or f.direction == "output"]
        self._struct(interface, wanted, parameters, error or method)

    def _struct(self, interface: Interface, fields: list[Field], value: Any, where: str
                ) -> None:
        if not isinstance(value, dict):
            raise ReplyMismatch(f"{where}: {value!r} is not an object")
        known = {f.name: f for f in fields}
        for key in value:
            if key not in known:
                raise ReplyMismatch(
                    f"{where}.{key}: not declared in {interface.name} (add it to the type "
                    f"with its type, and declare it where the record is made: "
                    f"port_field_types / device_field_types of its family)")
        for name, f in known.items():
            self._value(interface, f, value.get(name), f"{where}.{name}")

    def _value(self, interface: Interface, f: Field, value: Any, where: str) -> None:
        if value is None:
            if not f.nullable:
                raise ReplyMismatch(f"{where}: missing, and its type {type_text(f)} is not "
                                    f"optional")
            return
        if f.container == "array":
            if not isinstance(value, list):
                raise ReplyMismatch(f"{where}: {value!r} is not an array")
            for i, item in enumerate(value):
                self._item(interface, f, item, f"{where}[{i}]")
        elif f.container == "map":
            if not isinstance(value, dict):
                raise ReplyMismatch(f"{where}: {value!r} is not a map")
            for key, item in value.items():
                self._item(interface, f, item, f"{where}[{key!r}]")
        else:
            self._item(interface, f, value, where)

    def _item(self, interface: Interface, f: Field, value: Any, where: str) -> None:
        if f.kind in NATIVE_TYPES:
            if isinstance(value, bool) != (f.kind == "bool") or \
                    not isinstance(value, NATIVE_TYPES[f.kind]):
                raise ReplyMismatch(f"{where}: {value!r} is not {f.kind}")
        elif f.kind == "object":
            return
        else:
            target = f.symbol or symbol(interface, f.named_type)
            if target.kind == "enum":
                if value not in [v.name for v in target.fields]:
                    raise ReplyMismatch(f"{where}: {value!r} is not one of {f.named_type}")
            else:
                self._struct(interface, target.fields, value, where)
