"""systemd's varlink IDL parser, re-done in Python: what ``varlinkctl`` of 255 and of 257 accepts.

``varlinkctl introspect`` parses the description a service returns and ``validate-idl`` parses a
file, both with ``varlink_idl_parse`` and ``varlink_idl_consistent`` of systemd's
``src/shared/varlink-idl.c``. Ubuntu 24.04 ships systemd 255, whose parser is stricter than the
varlink.org grammar: it is a state machine over tokens in which a comment (``#`` to the end of
the line) is a token only before ``interface`` and between two members; anywhere inside the
parentheses of a type, method or error a ``#`` is "Couldn't find token of allowed chars",
EBADMSG, which varlinkctl prints as "Bad message". 256 is the same; systemd 257 (its pull
request 32559) also takes a comment before each field (state ``STATE_NAME``) and keeps it for
``introspect``. Ubuntu's archive cannot be
reached from the build machines, so this module is the test of the 255 grammar: a line-by-line
port of that state machine (v255.2's ``varlink-idl.c``: ``varlink_idl_subparse_token``,
``varlink_idl_subparse_struct_or_enum``, ``varlink_idl_subparse_field_type``,
``varlink_idl_parse``, ``varlink_idl_resolve_types``, ``varlink_idl_consistent``), with
``field_comments=True`` for 257's one difference. Where Debian 13's real varlinkctl (257) can be
run, tests/e2e checks the same file with it.
"""

from __future__ import annotations

import string
from dataclasses import dataclass, field
from typing import List, Optional, Set

WHITESPACE = " \t\n\r"
NEWLINE = "\n\r"
ALPHANUMERICAL = string.ascii_letters + string.digits
IDENTIFIER = ALPHANUMERICAL + "_"
RESERVED = string.ascii_lowercase
INTERFACE_NAME = ALPHANUMERICAL + ".-"
NATIVE = ("bool", "int", "float", "string", "object")


class IdlError(ValueError):
    """What varlinkctl refuses, with systemd's own wording and the line:column it reports."""


@dataclass
class Field:
    """One field of a struct, method or error, or one value of an enum (``kind`` "enum")."""
    name: str
    kind: str = ""  # bool int float string object named struct enum; "value" for an enum's
    direction: str = "regular"  # regular, input, output
    nullable: bool = False
    container: str = ""  # "", "array", "map"
    named_type: str = ""
    symbol: Optional[Symbol] = None  # an anonymous struct or enum


@dataclass
class Symbol:
    """A type (``struct`` or ``enum``), ``method`` or ``error`` with its fields."""
    kind: str  # "" until the first field says struct or enum
    name: str = ""
    fields: List[Field] = field(default_factory=list)


@dataclass
class Interface:
    name: str = ""
    symbols: List[Symbol] = field(default_factory=list)
    comments: List[str] = field(default_factory=list)  # every comment line, in order


def _span(text: str, pos: int, chars: str) -> int:
    """strspn(text + pos, chars)."""
    end = pos
    while end < len(text) and text[end] in chars:
        end += 1
    return end - pos


class Parser:
    """``varlink_idl_parse`` of systemd 255 (``field_comments=False``) or 257 (True)."""

    def __init__(self, text: str, field_comments: bool = False) -> None:
        self.text = text
        self.pos = 0
        self.line = 0  # as varlink_idl_parse starts it
        self.column = 1
        self.field_comments = field_comments
        self.interface = Interface()

    def _fail(self, why: str) -> IdlError:
        return IdlError(f"{self.line}:{self.column}: {why}")

    def _advance(self, n: int) -> None:
        for ch in self.text[self.pos:self.pos + n]:
            if ch == "\n":
                self.line += 1
                self.column = 1
            else:
                self.column += 1
        self.pos += n

    def _match(self, delimiters: Optional[str], chars: Optional[str]) -> int:
        """token_match(): one delimiter character, or a run of allowed characters."""
        if self.pos < len(self.text) and delimiters and self.text[self.pos] in delimiters:
            return 1
        return _span(self.text, self.pos, chars) if chars else 0

    def token(self, delimiters: Optional[str], chars: Optional[str]) -> Optional[str]:
        """varlink_idl_subparse_token(): None at the end of the text."""
        if self.pos >= len(self.text):
            return None
        n = self._match(delimiters, chars)
        if n == 0:
            self._advance(_span(self.text, self.pos, WHITESPACE))
            if self.pos >= len(self.text):
                return None
            n = self._match(delimiters, chars)
            if n == 0:
                raise self._fail(f"Couldn't find token of allowed chars '{chars or ''}' or "
                                 f"allowed delimiters '{delimiters or ''}'.")
        token = self.text[self.pos:self.pos + n]
        self._advance(n)
        return token

    def comment(self) -> None:
        """varlink_idl_subparse_comment(): the rest of the line (its newline stays)."""
        end = self.pos
        while end < len(self.text) and self.text[end] not in NEWLINE:
            end += 1
        body = self.text[self.pos:end]
        self.interface.comments.append(body[1:] if body.startswith(" ") else body)
        self.line += 1  # advance_line_column(l + 1) counts the newline it leaves
        self.column = 1
        self.pos = end

    def field_type(self, f: Field, depth: int) -> None:
        """varlink_idl_subparse_field_type()."""
        self._advance(_span(self.text, self.pos, WHITESPACE))
        rest = self.text[self.pos:]
        if rest.startswith("?"):
            f.nullable = True
            self._advance(1)
        rest = self.text[self.pos:]
        if rest.startswith("[]"):
            f.container = "array"
            self._advance(2)
        elif rest.startswith("[string]"):
            f.container = "map"
            self._advance(8)
        rest = self.text[self.pos:]
        for native in NATIVE:  # startswith(): "integer" is "int" and then a bad token
            if rest.startswith(native):
                f.kind = native
                self._advance(len(native))
                return
        if rest.startswith("("):
            anonymous = Symbol(kind="")
            self.struct_or_enum(anonymous, "regular", depth + 1)
            f.kind = anonymous.kind
            f.symbol = anonymous
            return
        name = self.token(None, IDENTIFIER)
        if name is None:
            raise self._fail("Premature EOF.")
        f.kind = "named"
        f.named_type = name

    def struct_or_enum(self, symbol: Symbol, direction: str, depth: int) -> None:
        """varlink_idl_subparse_struct_or_enum(): ``( ... )`` of a type, method or error."""
        if depth > 64:
            raise self._fail("Maximum nesting depth reached (64).")
        state, name = "open", ""
        delimiters: Optional[str] = "("
        chars: Optional[str] = None
        name_delimiters = ")#" if self.field_comments else ")"
        while state != "done":
            token = self.token(delimiters, chars)
            if token is None:
                raise self._fail("Premature EOF.")
            if state == "open":
                if token != "(":
                    raise self._fail(f"Unexpected token '{token}'.")
                state, delimiters, chars = "name", name_delimiters, IDENTIFIER
            elif state == "name":
                if token == "#":  # only reachable with 257's field comments
                    self.comment()
                elif token == ")":
                    state = "done"
                else:
                    name, state, delimiters, chars = token, "colon", ":,)", None
            elif state == "colon":
                if token == ":":
                    if not symbol.kind:
                        symbol.kind = "struct"
                    if symbol.kind == "enum":
                        raise self._fail("Enum with struct fields, refusing.")
                    f = Field(name=name, direction=direction)
                    symbol.fields.append(f)
                    self.field_type(f, depth)
                    state, delimiters, chars = "comma", ",)", None
                elif token in (",", ")"):
                    if not symbol.kind:
                        symbol.kind = "enum"
                    if symbol.kind != "enum":
                        raise self._fail("Struct with enum fields, refusing.")
                    symbol.fields.append(Field(name=name, kind="value"))
                    if token == ",":
                        state, chars = "name", IDENTIFIER
                        delimiters = "#" if self.field_comments else None
                    else:
                        state = "done"
                else:
                    raise self._fail(f"Unexpected token '{token}'.")
                name = "" if state != "colon" else name
            elif state == "comma":
                if token == ",":
                    state, chars = "name", IDENTIFIER
                    delimiters = "#" if self.field_comments else None
                elif token == ")":
                    state = "done"
                else:
                    raise self._fail(f"Unexpected token '{token}'.")
        if not symbol.kind:
            raise self._fail("Ambiguous empty () enum/struct is not permitted.")

    def parse(self) -> Interface:
        """varlink_idl_parse() and varlink_idl_resolve_types()."""
        state = "pre_interface"
        delimiters: Optional[str] = "#"
        chars: Optional[str] = RESERVED
        symbol: Optional[Symbol] = None
        while state != "done":
            token = self.token(delimiters, chars)
            if state == "pre_interface":
                if token is None:
                    raise self._fail("Premature EOF.")
                if token == "#":
                    self.comment()
                elif token == "interface":
                    state, delimiters, chars = "interface", None, INTERFACE_NAME
                else:
                    raise self._fail(f"Unexpected token '{token}'.")
            elif state == "interface":
                if token is None:
                    raise self._fail("Premature EOF.")
                self.interface.name = token
                state, delimiters, chars = "pre_symbol", "#", RESERVED
            elif state == "pre_symbol":
                if token is None:
                    state = "done"
                elif token == "#":
                    self.comment()
                elif token in ("method", "type", "error"):
                    state, chars = token, IDENTIFIER
                else:
                    raise self._fail(f"Unexpected token '{token}'.")
            elif state in ("method", "type", "error"):
                if token is None:
                    raise self._fail("Premature EOF.")
                symbol = Symbol(kind="" if state == "type" else state, name=token)
                self.struct_or_enum(symbol, "input" if state == "method" else "regular", 0)
                if state == "method":
                    state, chars = "method_arrow", "->"
                else:
                    self.interface.symbols.append(symbol)
                    state, chars = "pre_symbol", RESERVED + "#"
            elif state == "method_arrow":
                assert symbol is not None
                if token is None:
                    raise self._fail("Premature EOF.")
                if token != "->":
                    raise self._fail(f"Unexpected token '{token}'.")
                self.struct_or_enum(symbol, "output", 0)
                self.interface.symbols.append(symbol)
                state, chars = "pre_symbol", RESERVED + "#"
        self._resolve()
        return self.interface

    def _find(self, name: str) -> Optional[Symbol]:
        return next((s for s in self.interface.symbols if s.name == name), None)

    def _resolve(self) -> None:
        """varlink_idl_resolve_types(): a named type is a type of this interface (ENETUNREACH)."""
        for symbol in self.interface.symbols:
            for f in symbol.fields:
                if f.kind != "named":
                    continue
                found = self._find(f.named_type)
                if found is None:
                    raise IdlError(f"Failed to find type '{f.named_type}'.")
                if found.kind not in ("struct", "enum"):
                    raise IdlError(f"Symbol '{f.named_type}' is referenced as type but is "
                                   "not a type.")


def field_name_is_valid(name: str) -> bool:
    """varlink_idl_field_name_is_valid(): a letter, then alphanumerics and single inner '_'."""
    if not name or name[0] not in string.ascii_letters:
        return False
    underscore = False
    for ch in name[1:]:
        if ch == "_":
            if underscore:
                return False
            underscore = True
        elif ch in ALPHANUMERICAL:
            underscore = False
        else:
            return False
    return not underscore


def symbol_name_is_valid(name: str) -> bool:
    """varlink_idl_symbol_name_is_valid(): an upper-case letter, then alphanumerics."""
    return (bool(name) and name not in NATIVE and name[0] in string.ascii_uppercase
            and all(ch in ALPHANUMERICAL for ch in name[1:]))


def interface_name_is_valid(name: str) -> bool:
    """varlink_idl_interface_name_is_valid(): dot-separated labels, single inner dashes."""
    if not name or name[0] not in string.ascii_letters:
        return False
    dot = dash = False
    for ch in name[1:]:
        if ch in ".-":
            if dot or dash:
                return False
            dot, dash = ch == ".", ch == "-"
        elif ch in ALPHANUMERICAL:
            dot = dash = False
        else:
            return False
    return not (dot or dash)


def _consistent_symbol(symbol: Symbol) -> None:
    """varlink_idl_symbol_consistent(): valid, unique field names (per direction); no empty
    type; anonymous structs and enums checked the same way."""
    where = symbol.name or "<anonymous>"
    if symbol.kind in ("struct", "enum") and not symbol.fields:
        raise IdlError(f"Symbol '{where}' is empty, refusing.")
    seen: dict = {"input": set(), "output": set(), "regular": set()}
    for f in symbol.fields:
        names: Set[str] = seen["output" if f.direction == "output" else "input"]
        if not field_name_is_valid(f.name):
            raise IdlError(f"Field name '{f.name}' in symbol '{where}' not valid, refusing.")
        if f.name in names:
            raise IdlError(f"Field '{f.name}' defined twice in symbol '{where}', refusing.")
        names.add(f.name)
        if f.symbol is not None:
            _consistent_symbol(f.symbol)


def consistent(interface: Interface) -> None:
    """varlink_idl_consistent(), which ``validate-idl`` runs after parsing."""
    if not interface_name_is_valid(interface.name):
        raise IdlError(f"Interface name '{interface.name}' is not valid, refusing.")
    names: Set[str] = set()
    for symbol in interface.symbols:
        if not symbol_name_is_valid(symbol.name):
            raise IdlError(f"Symbol name '{symbol.name}' is not valid, refusing.")
        if symbol.name in names:
            raise IdlError(f"Symbol '{symbol.name}' defined twice in interface, refusing.")
        names.add(symbol.name)
        _consistent_symbol(symbol)


def validate(text: str, systemd: int) -> Interface:
    """What ``varlinkctl validate-idl`` of that systemd version does with TEXT: the parsed
    interface, or IdlError. 255 and 256 refuse comments inside parentheses; 257 takes them."""
    interface = Parser(text, field_comments=systemd >= 257).parse()
    consistent(interface)
    return interface
