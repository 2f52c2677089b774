"""Every key a family gives a port or device record is declared, with the type of its value.

A family declares the keys it adds (``port_field_types``, ``device_field_types``,
core/family.py); a key of the daemon's own record that it replaces takes the daemon's type
(``PORT_FIELD_TYPES``, ``DEVICE_FIELD_TYPES``, core/views.py). :func:`hold_families` makes
each family's record hooks check what they return, in every test that builds records in
this process (tests/conftest.py installs it for the session); the interface files are held
to the same declarations by tests/varlink/interface_check.py, so a key given and not declared
fails where it is made, with the family and the place to declare it.
"""

from __future__ import annotations

import functools
import sys
from typing import Any, Callable, Iterable, Mapping

from nichealthd.core.checks import families
from nichealthd.core.family import Family, supplies
from nichealthd.core.views import DEVICE_FIELD_TYPES, PORT_FIELD_TYPES

# The record hooks of a family, and the record their keys belong to.
HOOKS = {"port_fields": "port", "absent_port_fields": "port", "device_fields": "device",
         "device_rows": "device"}
NATIVE: dict[str, tuple[type, ...]] = {
    "bool": (bool,), "int": (int,), "float": (int, float), "string": (str,)}


class UndeclaredField(AssertionError):
    """A family gave a record key it does not declare, or a value not of its type."""


def matches(kind: str, value: Any) -> bool:
    """Whether a Python value is of a declared varlink type (``?[]string``, ``int``...); a
    named type is a record (a dict)."""
    if kind.startswith("?"):
        return value is None or matches(kind[1:], value)
    if kind.startswith("[]"):
        return isinstance(value, (list, tuple)) and all(matches(kind[2:], v) for v in value)
    if kind.startswith("[string]"):
        return isinstance(value, Mapping) and all(matches(kind[8:], v)
                                                  for v in value.values())
    if kind in NATIVE:
        return isinstance(value, NATIVE[kind]) and isinstance(value, bool) == (kind == "bool")
    return kind == "object" or isinstance(value, Mapping)


def check(family: Family, record: str, keys: Mapping[str, Any]) -> None:
    """Raise :class:`UndeclaredField` unless every key is declared, its value of its type."""
    own = family.port_field_types if record == "port" else family.device_field_types
    daemon = PORT_FIELD_TYPES if record == "port" else DEVICE_FIELD_TYPES
    for key, value in keys.items():
        kind = own.get(key) or daemon.get(key)
        module = sys.modules[type(family).__module__].__name__.replace(".", "/") + ".py"
        if kind is None:
            raise UndeclaredField(
                f"family {family.id} gives the {record} field {key!r} ({value!r}) and does "
                f"not declare it: add it with its type to {record}_field_types of "
                f"{type(family).__name__} ({module}) and to type {record.title()} of "
                f"io.nichealthd.Monitor.varlink")
        if not matches(kind, value):
            raise UndeclaredField(f"family {family.id} gives the {record} field {key!r} "
                                  f"{value!r}, declared {kind} ({module})")


def _checked(family: Family, hook: str, method: Callable[..., Any]) -> Callable[..., Any]:
    record = HOOKS[hook]

    @functools.wraps(method)
    def checked(*args: Any, **kwargs: Any) -> Any:
        out = method(*args, **kwargs)
        if hook == "device_rows":
            rows = list(out)
            for row in rows:
                check(family, record, row)
            return rows
        check(family, record, out)
        return out
    return checked


def hold_families(found: Iterable[Family] = ()) -> None:
    """Make each family's record hooks check their keys (on the instance: the registry's
    ``supplies`` still sees what its class overrides)."""
    for family in found or families():
        for hook in HOOKS:
            if supplies(family, hook) and hook not in vars(family):
                setattr(family, hook, _checked(family, hook, getattr(family, hook)))
