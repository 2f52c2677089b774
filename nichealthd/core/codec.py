"""The one codec of the state file's sections: their JSON is read off the dataclass declarations.

A family's section (ARCHITECTURE.md, :mod:`nichealthd.core.family`) is a dataclass that derives from
:class:`Section` and gives every field a default; its records are (frozen) dataclasses or
NamedTuples. Each field is written under its name (or the key of its :func:`stored` metadata)
as its type hint says:

- ``int`` (non-negative, below :data:`MAX_INT` or the field's ``high``), ``float``, ``bool``,
  ``str`` as themselves; ``datetime`` as RFC 3339 in UTC (:func:`events.format_timestamp`,
  read back only within years 1970-9999);
- ``Optional[X]`` as X or null; ``list[X]``, ``tuple[X, ...]`` and ``tuple[X, Y]`` as arrays;
  ``dict[str, X]`` and ``Mapping[str, X]`` as objects with sorted keys;
- a dataclass or NamedTuple as an object of its fields (a :class:`Layout` ``order`` where its
  keys are not in the order of the fields).

Reading is strict (tests/core/test_state_files.py and test_codec.py): a value of the wrong
kind, out of its bounds or a record without one of its keys raises ``TypeError``,
``ValueError`` or ``KeyError``, which :func:`nichealthd.core.state.parse_state` turns into
``StateCorrupt``. Unknown keys are read past and not written back. A section's key that is
absent gives its field's default (a family whose keys are all absent starts fresh); a record's
key that is absent is an error unless its field has a ``legacy`` value (a file of an older
nichealthd). Anything irregular is said per field: ``parse`` and ``format`` replace the reader
and the writer of its value, ``after`` checks or filters what was read, ``omit`` leaves it out
of the record.

Each class's plan (its type hints resolved, a reader and a writer per field) is made once and
kept: a large host's state holds thousands of records, written within a minute of a change.
"""

from __future__ import annotations

import collections.abc
import dataclasses
import functools
import math
import typing
from datetime import datetime
from typing import Any, Callable, ClassVar, Mapping, NamedTuple, Optional, TypeVar, Union

from .events import format_timestamp, parse_timestamp
from .jsontypes import Json, JsonObject

# Plausible bounds: a value outside them is a corrupt state file, never a reason to drop
# journal entries or to write back what the next start rejects (tests/core/test_state_files.py).
MAX_INT = 2**64  # counters are at most 64-bit; sequence numbers and counts far less
MAX_SEQ = 2**63
MIN_YEAR, MAX_YEAR = 1970, 9999

T = TypeVar("T")
SectionT = TypeVar("SectionT", bound="Section")
# A reader takes a decoded JSON value (unchecked: it checks it) and gives the field's value;
# a writer takes a field's value and gives its JSON.
Reader = Callable[[object], Any]
Writer = Callable[[Any], Json]


# ----------------------------------------------------------------- the strict value readers

def _short(value: object) -> str:
    text = repr(value)
    return text if len(text) <= 40 else text[:37] + "..."


def parse_int(value: object, high: int = MAX_INT) -> int:
    """A non-negative integer below ``high``; nothing in the state is negative."""
    if type(value) is not int:  # bool is not an integer here
        raise TypeError(f"expected an integer, got {_short(value)}")
    if not 0 <= value < high:
        raise ValueError(f"implausible number {_short(value)}")
    return value


def parse_float(value: object) -> float:
    """A finite number (an integer is one too)."""
    if isinstance(value, bool) or not isinstance(value, (int, float)) \
            or not math.isfinite(value):
        raise TypeError(f"expected a number, got {_short(value)}")
    return float(value)


def parse_bool(value: object) -> bool:
    if type(value) is not bool:
        raise TypeError(f"expected true or false, got {_short(value)}")
    return value


def parse_str(value: object) -> str:
    if type(value) is not str:
        raise TypeError(f"expected a string, got {_short(value)}")
    return value


def parse_when(value: object) -> datetime:
    """A timestamp the writer can write back as it was read (years 1970-9999, UTC)."""
    moment = parse_timestamp(parse_str(value))
    if not MIN_YEAR <= moment.year <= MAX_YEAR:
        raise ValueError(f"implausible timestamp {_short(value)}")
    return moment


def parse_list(value: object, what: str = "value") -> list[object]:
    if type(value) is not list:
        raise TypeError(f"{what} must be a list, got {_short(value)}")
    return value


def parse_object(value: object, what: str = "value") -> dict[str, object]:
    if type(value) is not dict:
        raise TypeError(f"{what} must be an object, got {_short(value)}")
    return value


def parse_table(data: Mapping[str, object], key: str) -> dict[str, object]:
    """The object under ``key`` (absent: empty)."""
    return parse_object(data.get(key, {}), key)


# ----------------------------------------------------------------- declarations

_REQUIRED: Any = object()  # a record's field without a legacy value: its key must be there


class Stored(NamedTuple):
    """How one field is stored (``dataclasses.field(metadata=stored(...))``)."""

    key: str = ""  # its JSON key ("": the field's name)
    high: int = MAX_INT  # every integer in it is below this
    legacy: Any = _REQUIRED  # a record's value when the key is absent (an older file)
    legacy_from: Optional[Callable[[Mapping[str, object]], Any]] = None  # ... from the fields
    null: bool = True  # an Optional field reads null as None (False: only absent is None)
    sort: bool = False  # a list is written sorted
    omit: Optional[Callable[[Any], bool]] = None  # record -> leave the key out
    parse: Optional[Reader] = None  # reads the JSON value instead of the type's reader
    format: Optional[Writer] = None  # writes the value instead of the type's writer
    after: Optional[Callable[[Any], Any]] = None  # checks or filters the value read


META = "nichealthd.codec"  # the key of a field's Stored in its dataclass metadata


def stored(*, key: str = "", high: int = MAX_INT, legacy: Any = _REQUIRED,
           legacy_from: Optional[Callable[[Mapping[str, object]], Any]] = None,
           null: bool = True, sort: bool = False, omit: Optional[Callable[[Any], bool]] = None,
           parse: Optional[Reader] = None, format: Optional[Writer] = None,
           after: Optional[Callable[[Any], Any]] = None) -> dict[str, Stored]:
    """Field metadata: ``field(default=..., metadata=stored(key="check_name"))``."""
    return {META: Stored(key, high, legacy, legacy_from, null, sort, omit, parse, format,
                          after)}


@dataclasses.dataclass(frozen=True)
class Layout:
    """Where a class's fields lie in the JSON (``LAYOUT`` of a section or record class).

    A section's keys are ``prefix`` + each field's key, at the top level of the state file or
    inside the one object under ``nest``; ``omit_empty`` leaves out a key whose value is empty
    (null, false, 0, "", [] or {}). ``order`` names the fields in the order their keys are
    written, where that is not the order of the fields.
    """

    prefix: str = ""
    nest: str = ""
    order: tuple[str, ...] = ()
    omit_empty: bool = False


class Section:
    """The base of a family's section: a dataclass whose fields all have defaults.

    A section is a value of one poll: the family evaluates into a :meth:`copy`, whose
    containers (the dict and list fields) it may change without touching the previous one.
    """

    LAYOUT: ClassVar[Layout] = Layout()

    def copy(self: SectionT) -> SectionT:
        made = object.__new__(type(self))
        fields = made.__dict__
        fields.update(self.__dict__)
        for name, kind in _plan(type(self)).containers:
            fields[name] = kind(fields[name])
        return made

    def to_json(self) -> JsonObject:
        """Its keys of the state file (:meth:`keys`)."""
        return dump(self)

    @classmethod
    def from_json(cls: type[SectionT], data: Mapping[str, object]) -> SectionT:
        """Read from the state file's top level; raises on anything malformed."""
        return load(cls, data)

    @classmethod
    def keys(cls) -> tuple[str, ...]:
        """Its top-level keys of the state file."""
        return _plan(cls).keys


# ----------------------------------------------------------------- plans


class _Field(NamedTuple):
    name: str
    key: str
    read: Reader
    write: Optional[Writer]  # None: the value as it is
    missing: Any  # the value when the key is absent (_REQUIRED: none)
    legacy_from: Optional[Callable[[Mapping[str, object]], Any]]
    omit: Optional[Callable[[Any], bool]]
    default: Callable[[], Any]  # a section's value when its key is absent


class _Plan(NamedTuple):
    fields: tuple[_Field, ...]  # in the order of the class (its constructor's)
    written: tuple[_Field, ...]  # in the order of the JSON
    layout: Layout
    keys: tuple[str, ...]
    containers: tuple[tuple[str, Callable[[Any], Any]], ...]
    read: Reader  # a record's reader (of a JSON object)
    write: Writer  # a record's writer


_plans: dict[type, _Plan] = {}


def _plan(cls: type) -> _Plan:
    plan = _plans.get(cls)
    if plan is None:
        plan = _plans[cls] = _make_plan(cls)
    return plan


def _is_named_tuple(tp: Any) -> bool:
    return isinstance(tp, type) and issubclass(tp, tuple) and hasattr(tp, "_fields")


def _constant(value: object) -> Callable[[], Any]:
    return lambda: value


def _copied(value: Any) -> Callable[[Mapping[str, object]], Any]:
    return lambda _: type(value)(value)


def _declared(cls: type) -> list[tuple[str, Any, Stored, Callable[[], Any]]]:
    """(name, type, how stored, default factory) of each field of a dataclass or NamedTuple."""
    hints = typing.get_type_hints(cls)
    out: list[tuple[str, Any, Stored, Callable[[], Any]]] = []
    if _is_named_tuple(cls):
        defaults = getattr(cls, "_field_defaults", {})
        for name in getattr(cls, "_fields", ()):
            out.append((name, hints[name], Stored(),
                        _constant(defaults.get(name, _REQUIRED))))
        return out
    for item in dataclasses.fields(cls):
        how = item.metadata.get(META, Stored())
        if isinstance(how.legacy, (dict, list)):  # a container of its own for each record
            how = how._replace(legacy=_REQUIRED, legacy_from=_copied(how.legacy))
        if item.default_factory is not dataclasses.MISSING:
            default: Callable[[], Any] = item.default_factory
        else:
            default = _constant(_REQUIRED if item.default is dataclasses.MISSING
                                else item.default)
        out.append((item.name, hints[item.name], how, default))
    return out


def _make_plan(cls: type) -> _Plan:
    if not (dataclasses.is_dataclass(cls) or _is_named_tuple(cls)):
        raise TypeError(f"{cls.__name__} is neither a dataclass nor a NamedTuple")
    layout: Layout = getattr(cls, "LAYOUT", Layout())
    fields = []
    containers = []
    for name, tp, how, default in _declared(cls):
        key = layout.prefix + (how.key or name)
        read = how.parse or _reader(tp, how)
        if how.after is not None:
            read = _then(read, how.after)
        write = how.format or _writer(tp, how)
        fields.append(_Field(name, key, read, write, how.legacy, how.legacy_from, how.omit,
                             default))
        origin = typing.get_origin(tp)
        if origin in (dict, list):
            containers.append((name, origin))
    by_name = {f.name: f for f in fields}
    if layout.order and sorted(layout.order) != sorted(by_name):
        raise TypeError(f"{cls.__name__}.LAYOUT.order must name every field once")
    written = tuple(by_name[n] for n in layout.order) if layout.order else tuple(fields)
    keys = (layout.nest,) if layout.nest else tuple(f.key for f in written)
    return _Plan(tuple(fields), written, layout, keys, tuple(containers),
                 _record_reader(cls, tuple(fields)), _record_writer(written))


def _then(read: Reader, after: Callable[[Any], Any]) -> Reader:
    return lambda raw: after(read(raw))


# ----------------------------------------------------------------- readers


def _reader(tp: Any, how: Stored) -> Reader:
    """The strict reader of a JSON value of type ``tp``."""
    origin, args = typing.get_origin(tp), typing.get_args(tp)
    if tp is int:
        return parse_int if how.high == MAX_INT else functools.partial(parse_int, high=how.high)
    simple: dict[type, Reader] = {bool: parse_bool, str: parse_str, float: parse_float,
                                 datetime: parse_when}
    if tp in simple:
        return simple[tp]
    if origin is Union and len(args) == 2 and type(None) in args:
        inner = _reader(args[0] if args[1] is type(None) else args[1], how)
        if not how.null:
            return inner
        return lambda raw: None if raw is None else inner(raw)
    if origin in (dict, collections.abc.Mapping):
        return _dict_reader(_reader(args[1], how))
    if origin is list:
        item = _reader(args[0], how)
        return lambda raw: [item(v) for v in parse_list(raw)]
    if origin is tuple:
        return _tuple_reader(args, how)
    if dataclasses.is_dataclass(tp) or _is_named_tuple(tp):
        return _plan(tp).read
    raise TypeError(f"the state codec cannot read {tp!r}")


def _dict_reader(item: Reader) -> Reader:
    def read(raw: object) -> dict[str, object]:
        return {k: item(v) for k, v in parse_object(raw).items()}
    return read


def _tuple_reader(args: tuple[Any, ...], how: Stored) -> Reader:
    if len(args) == 2 and args[1] is Ellipsis:
        item = _reader(args[0], how)
        return lambda raw: tuple([item(v) for v in parse_list(raw)])
    items = tuple(_reader(a, how) for a in args)

    def read(raw: object) -> tuple[object, ...]:
        values = parse_list(raw)
        if len(values) != len(items):
            raise ValueError(f"expected {len(items)} items, got {_short(values)}")
        return tuple([r(v) for r, v in zip(items, values)])
    return read


def _compiled(name: str, lines: list[str], namespace: dict[str, Any]) -> Callable[[Any], Any]:
    """The function ``name`` of source ``lines``: a record's reader or writer written out
    for its fields, as ``dataclasses`` writes ``__init__`` (a loop over the fields per record
    costs a sixth of the state's write time)."""
    exec("\n".join(lines), namespace)  # the source is made here, of field names only
    made: Callable[[Any], Any] = namespace[name]
    return made


def _record_reader(cls: type, fields: tuple[_Field, ...]) -> Reader:
    """A record from its JSON object: absent keys take their legacy value, or raise."""
    if any(f.legacy_from is not None for f in fields):
        return _derived_reader(cls, fields)
    namespace: dict[str, Any] = {"parse_object": parse_object, "name": cls.__name__,
                                 "new": tuple.__new__, "cls": cls}
    values = []
    for i, f in enumerate(fields):
        namespace[f"read_{i}"], namespace[f"key_{i}"] = f.read, f.key
        value = f"read_{i}(data[key_{i}])"
        if f.missing is not _REQUIRED:
            namespace[f"missing_{i}"] = f.missing
            value = f"({value} if key_{i} in data else missing_{i})"
        values.append(value)
    made = (f"new(cls, ({', '.join(values)},))" if _is_named_tuple(cls)
            else f"cls({', '.join(values)})")
    return _compiled("read", ["def read(raw):",
                              "    data = parse_object(raw, name)",
                              f"    return {made}"], namespace)


def _derived_reader(cls: type, fields: tuple[_Field, ...]) -> Reader:
    """The reader of a record with a legacy value made of its other fields."""
    def read(raw: object) -> object:
        data = parse_object(raw, cls.__name__)
        values: dict[str, object] = {}
        for f in fields:
            if f.key in data:
                values[f.name] = f.read(data[f.key])
            elif f.legacy_from is not None:
                values[f.name] = f.legacy_from(values)
            elif f.missing is _REQUIRED:
                raise KeyError(f.key)
            else:
                values[f.name] = f.missing
        return cls(**values)
    return read


# ----------------------------------------------------------------- writers


def _writer(tp: Any, how: Stored) -> Optional[Writer]:
    """The writer of a value of type ``tp``; None where the value is its own JSON."""
    origin, args = typing.get_origin(tp), typing.get_args(tp)
    if tp in (int, bool, str, float):
        return None
    if tp is datetime:
        return format_timestamp
    if origin is Union and len(args) == 2 and type(None) in args:
        inner = _writer(args[0] if args[1] is type(None) else args[1], how)
        return None if inner is None else _optional_writer(inner)
    if origin in (dict, collections.abc.Mapping):
        return _dict_writer(_writer(args[1], how))
    if origin is list or (origin is tuple and len(args) == 2 and args[1] is Ellipsis):
        return _sequence_writer(_writer(args[0], how), sorted if how.sort else list)
    if origin is tuple:
        items = tuple(_writer(a, how) for a in args)
        return lambda value: [w(v) if w else v for w, v in zip(items, value)]
    if dataclasses.is_dataclass(tp) or _is_named_tuple(tp):
        return _plan(tp).write
    raise TypeError(f"the state codec cannot write {tp!r}")


def _optional_writer(inner: Writer) -> Writer:
    return lambda value: None if value is None else inner(value)


def _dict_writer(item: Optional[Writer]) -> Writer:
    if item is None:
        return lambda value: dict(sorted(value.items()))
    write: Writer = item
    return lambda value: {k: write(v) for k, v in sorted(value.items())}


def _sequence_writer(item: Optional[Writer], order: Callable[[Any], list[Any]]) -> Writer:
    if item is None:
        return order
    write: Writer = item
    return lambda value: order([write(v) for v in value])


def _record_writer(written: tuple[_Field, ...]) -> Writer:
    """A record's JSON object, its keys in the written order (a key left out where its
    field's ``omit`` says so)."""
    namespace: dict[str, Any] = {}
    literal: list[str] = []
    lines: list[str] = []
    for i, f in enumerate(written):
        namespace[f"key_{i}"] = f.key
        value = f"record.{f.name}"
        if f.write is not None:
            namespace[f"write_{i}"] = f.write
            value = f"write_{i}({value})"
        if f.omit is None and not lines:
            literal.append(f"key_{i}: {value}")
        elif f.omit is None:
            lines.append(f"    out[key_{i}] = {value}")
        else:
            namespace[f"omit_{i}"] = f.omit
            lines += [f"    if not omit_{i}(record):", f"        out[key_{i}] = {value}"]
    return _compiled("write", ["def write(record):", f"    out = {{{', '.join(literal)}}}",
                               *lines, "    return out"], namespace)


# ----------------------------------------------------------------- entry points


def load_record(cls: type[T], raw: object) -> T:
    """A record (a dataclass or NamedTuple) from its JSON object (a field's ``parse`` hook
    that reads one in its own way)."""
    record: T = _plan(cls).read(raw)
    return record


def dump_record(record: object) -> JsonObject:
    """A record's JSON object (a field's ``format`` hook that writes one in its own way)."""
    written = _plan(type(record)).write(record)
    assert isinstance(written, dict)  # a record is written as an object
    return written


def load(cls: type[T], data: Mapping[str, object]) -> T:
    """The section ``cls`` from the state file's top level ``data``: a key absent gives the
    field's default. Raises ``TypeError``, ``ValueError`` or ``KeyError`` on anything
    malformed (the key it was under named in the message)."""
    plan = _plan(cls)
    layout = plan.layout
    table = parse_table(data, layout.nest) if layout.nest else data
    values = {}
    for f in plan.fields:
        if f.key in table:
            try:
                values[f.name] = f.read(table[f.key])
            except (TypeError, ValueError, KeyError) as exc:
                raise type(exc)(f"{f.key}: {exc}") from None
        else:
            values[f.name] = f.default()
            if values[f.name] is _REQUIRED:  # a section's field without a default
                raise KeyError(f.key)
    return cls(**values)


def dump(section: object) -> JsonObject:
    """The top-level keys of the state file for ``section`` (:meth:`Section.keys`)."""
    plan = _plan(type(section))
    layout = plan.layout
    out: JsonObject = {}
    for f in plan.written:
        value = getattr(section, f.name)
        if f.write is not None:
            value = f.write(value)
        if layout.omit_empty and not value:
            continue
        out[f.key] = value
    return {layout.nest: out} if layout.nest else out
