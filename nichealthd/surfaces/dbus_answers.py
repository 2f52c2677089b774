"""The D-Bus API's read-only answers, marshalled once and shared by every caller.

``ListPorts``, ``ListDevices``, ``ListCounters``, ``ListEvents``, ``GetStatus``, the
properties (``Get``, ``GetAll``) and ``Introspect`` are answered from
:class:`~.dbus_wire.Prepared` bytes: the records come from the poll's
:class:`~nichealthd.core.picture.PollPicture` (built once per poll for every surface), and
are marshalled here at most once per poll, so a client hammering ``ListCounters`` costs one
build per poll and can never delay or see half of a poll. Answers that say themselves when
they change (events, introspection) are kept across polls.
"""

from __future__ import annotations

import time
from typing import Callable, Dict, Hashable, List, Mapping, Optional, Sequence, Tuple, Union

from ..core.picture import PollPicture
from ..storage.store import JournalEntry
from .answers import event_record
from .context import ServiceContext
from .dbus_common import (
    DBUS_LIBRARY,
    ERROR_PREFIX,
    INTERFACE,
    OBJECT_PATH,
    DBusError,
    Message,
    MessageBus,
    Variant,
    VariantRecord,
    to_variants,
)
from .dbus_interface import (
    PROPERTIES,
    SIGNATURES,
    UNSIGNALLED_PROPERTIES,
    PropValue,
    prop_value,
)
from .dbus_wire import Prepared

REBUILD_FACTOR = 10.0  # an answer is rebuilt at most every 10x its build time
MAX_WIRE_ENTRIES = 256  # prepared answers kept per poll (ListCounters has one per argument)
PROPERTIES_IFACE = "org.freedesktop.DBus.Properties"
INTROSPECTABLE_IFACE = "org.freedesktop.DBus.Introspectable"
# The properties never signalled, read as they are now: (signature, status key) by name.
_LIVE = {name: (sig, key) for name, sig, key in PROPERTIES if name in UNSIGNALLED_PROPERTIES}
# Read-only members answered from prepared bytes, with their input signatures.
READ_METHODS = {"ListPorts": "", "ListDevices": "", "ListCounters": "su", "ListEvents": "u",
                "GetStatus": ""}


class DbusAnswers:
    """The answers to read-only calls, from the daemon's picture of the last poll."""

    def __init__(self, context: ServiceContext,
                 props: Callable[[], Mapping[str, PropValue]]) -> None:
        self.context = context
        self._props = props  # the property values last signalled (dbus_signals.Signals)
        # answers marshalled once per poll: key -> (answer, poll number, built at, build time)
        self._wire: Dict[Hashable, Tuple[Prepared, int, float, float]] = {}
        self._poll_no = 0
        self._picture: object = None  # the picture of poll number _poll_no
        self._lasting: Dict[Hashable, Prepared] = {}  # answers whose key says when they change
        self._event_cache: Dict[int, VariantRecord] = {}

    def _this_poll(self) -> int:
        """The number of the last poll's picture. A new picture (a poll completed; the
        daemon's picture changes with every poll, told to the loop or not): answers of the
        last one are built again when next asked (a big one only once it is
        :data:`REBUILD_FACTOR` times its build time old)."""
        picture = self.context.view()
        if picture is not self._picture:
            self._picture = picture
            self._poll_no += 1
            now = time.monotonic()
            self._wire = {k: v for k, v in self._wire.items()
                          if now - v[2] < REBUILD_FACTOR * v[3]}
        return self._poll_no

    def new_config(self) -> None:
        """A reload: the event history's size may have changed."""
        self._lasting.clear()

    # ------------------------------------------------------------ the wire

    def is_readonly(self, call: Message, bus: Optional[MessageBus]) -> bool:
        """Calls :meth:`prepared` answers (the library answers a wrong signature)."""
        if call.path != OBJECT_PATH:
            return False
        if call.interface in (INTERFACE, None):
            return READ_METHODS.get(call.member or "") == call.signature
        body = call.body
        if call.interface == PROPERTIES_IFACE:
            if call.member == "Get" and call.signature == "ss":
                return bool(body[0] == INTERFACE and body[1] in SIGNATURES)
            return call.member == "GetAll" and call.signature == "s" and body[0] == INTERFACE
        return call.interface == INTROSPECTABLE_IFACE and call.member == "Introspect" and \
            hasattr(bus, "_introspect_export_path")

    def prepared(self, call: Message, bus: Optional[MessageBus]) -> Optional[Prepared]:
        """The marshalled answer to a read-only call, built at most once per poll."""
        if call.path != OBJECT_PATH:
            return None
        member, signature, body = call.member, call.signature, call.body
        if call.interface in (INTERFACE, None) and member in READ_METHODS:
            if READ_METHODS[member] != signature:
                return None  # the library answers a wrong signature with its error
            key: Hashable = (member, *body)
            if member == "ListEvents":  # events change only when one is committed
                key = (member, self._event_limit(_whole(body[0])),
                       self.context.journal.last_seq)
                return self._lasting_answer(key, lambda: Prepared.of(
                    "aa{sv}", [self._read_answer(member, body)]))
            if member == "GetStatus":
                key = (member, *self._status_key())
            return self._wire_answer(key, lambda: Prepared.of("aa{sv}" if member != "GetStatus"
                                                              else "a{sv}",
                                                              [self._read_answer(member, body)]))
        if call.interface == PROPERTIES_IFACE and member in ("Get", "GetAll") and \
                body and body[0] == INTERFACE:
            if member == "Get" and signature == "ss" and body[1] in SIGNATURES:
                return self._wire_answer(("Get", body[1]), lambda: Prepared.of(
                    "v", [self._prop_variant(body[1])]))
            if member == "GetAll" and signature == "s":
                return self._wire_answer(("GetAll",), lambda: Prepared.of(
                    "a{sv}", [{name: self._prop_variant(name) for name, _, _ in PROPERTIES}]))
            return None
        if call.interface == INTROSPECTABLE_IFACE and member == "Introspect" and \
                bus is not None and hasattr(bus, "_introspect_export_path"):
            return self._lasting_answer(("Introspect",), lambda: Prepared.of(
                "s", [bus._introspect_export_path(OBJECT_PATH).tostring()]))
        return None

    def _wire_answer(self, key: Hashable, build: Callable[[], Prepared]) -> Prepared:
        """Built once per poll; on a big host, where building ListCounters costs tens of ms,
        an answer is also kept until it is REBUILD_FACTOR times its build time old, so
        rebuilding answers never takes more than ~1/REBUILD_FACTOR of the loop."""
        poll_no = self._this_poll()
        now = time.monotonic()
        entry = self._wire.get(key)
        if entry is not None:
            prepared, poll, built_at, cost = entry
            if poll == poll_no or now - built_at < REBUILD_FACTOR * cost:
                return prepared
        prepared = build()
        cost = time.monotonic() - now
        if len(self._wire) < MAX_WIRE_ENTRIES or key in self._wire:
            self._wire[key] = (prepared, poll_no, now, cost)
        return prepared

    def _lasting_answer(self, key: Hashable, build: Callable[[], Prepared]) -> Prepared:
        """An answer whose key says when it changes (kept across polls; marshalling 1000
        events takes ~9 ms, which polls every 100 ms must not pay for nothing)."""
        prepared = self._lasting.get(key)
        if prepared is None:
            if len(self._lasting) >= MAX_WIRE_ENTRIES // 4:
                self._lasting.clear()
            prepared = self._lasting[key] = build()
        return prepared

    def _read_answer(self, member: str, body: Sequence[object]
                     ) -> Union[List[VariantRecord], VariantRecord]:
        if member == "ListPorts":
            return self.list_ports()
        if member == "ListDevices":
            return self.list_devices()
        if member == "ListCounters":
            return self.list_counters(str(body[0]), _whole(body[1]))
        if member == "ListEvents":
            return self.list_events(_whole(body[0]))
        return self.get_status()

    def _event_limit(self, limit: int) -> int:
        size = max(int(self.context.config().event_history_size), 1)
        return min(limit, size) if limit else size

    def _status_key(self) -> Tuple[Hashable, ...]:
        """What GetStatus depends on between two polls (the surfaces report on their own)."""
        connector = self.context.connector()
        return (connector.state, connector.outbox_depth, connector.dead_letters,
                connector.last_error, self.context.reload_error(), self.context.stats().failing,
                self.context.surfaces())

    def prop(self, name: str) -> PropValue:
        """A signalled property as last signalled; LastPoll and PollCount as they are now
        (polls that change nothing reach no surface: runtime/service.py)."""
        live = _LIVE.get(name)
        if live is not None:
            return prop_value(live[0], self.context.status().get(live[1]))
        return self._props()[name]

    def _prop_variant(self, name: str) -> Variant:
        return Variant(SIGNATURES[name], self.prop(name))

    # ------------------------------------------------------------- answers

    def picture(self) -> PollPicture:
        """The daemon's picture of the last completed poll; NotReady before the first."""
        picture = self.context.view()
        if picture is None:
            raise DBusError(ERROR_PREFIX + "NotReady",
                            "nichealthd has not completed its first poll yet")
        return picture

    def list_ports(self) -> List[VariantRecord]:
        return [to_variants(r) for r in self.picture().ports]

    def list_devices(self) -> List[VariantRecord]:
        return [to_variants(r) for r in self.picture().devices]

    def list_counters(self, device: str, port: int) -> List[VariantRecord]:
        picture = self.picture()
        records = picture.counters(device, port)
        if not records and device:
            problem = picture.counters_problem(device, port)
            if problem is not None:
                raise DBusError(ERROR_PREFIX + problem[0], problem[1])
        return [to_variants(r) for r in records]

    def list_events(self, limit: int) -> List[VariantRecord]:
        size = max(int(self.context.config().event_history_size), 1)
        entries = self.context.journal.history(self._event_limit(limit))
        if len(self._event_cache) > 4 * size:
            keep = {e.seq for e in entries}
            self._event_cache = {s: v for s, v in self._event_cache.items() if s in keep}
        return [self.event_variants(e) for e in entries]

    def event_variants(self, entry: JournalEntry) -> VariantRecord:
        """An event as ``ListEvents`` and ``EventEmitted`` send it (made once per event)."""
        cached = self._event_cache.get(entry.seq)
        if cached is None:
            cached = self._event_cache[entry.seq] = to_variants(event_record(entry))
        return cached

    def get_status(self) -> VariantRecord:
        status = dict(self.context.status())
        status["dbus_library"] = DBUS_LIBRARY
        return to_variants(status)


def _whole(argument: object) -> int:
    """An unsigned argument of a read method (the library checked the signature first,
    :data:`READ_METHODS`)."""
    if isinstance(argument, int):
        return argument
    raise TypeError(f"not an integer argument: {argument!r}")
