"""The D-Bus API: the daemon's live view on the system bus (DESIGN §2.6, interface XML beside).

Everything here runs on the event loop, and nothing here runs a poll: polls run in the
daemon's worker thread and :meth:`DbusService.on_poll` only takes the finished outcome. Each
poll's picture (snapshot, evaluation, committed state, config) is kept as one consistent
view; answers are built from it lazily with :mod:`nichealthd.core.views` and cached until the next
poll, so a client hammering ``ListCounters`` costs one build per poll and can never delay or
see half of a poll. A bus that is absent, a policy that forbids the name, or a name already
owned is logged once and retried with backoff: the D-Bus API is optional, monitoring is not.

The D-Bus libraries read member signatures from annotations (``-> "aa{sv}"``); those are not
Python types, so :func:`dbus_signature` sets them explicitly and the real annotations stay
valid for linters and type checkers.
"""

from __future__ import annotations

import asyncio
import collections
import logging
import os
import time
from typing import Any, Callable, Deque, Dict, List, Optional, Set, Tuple, TypeVar

from ..core.events import CODE_PORT_MISSING, CODE_PORT_STATE, ENTITY_NIC, ENTITY_PORT
from ..core.views import counter_records, device_records, port_health, port_records
from ..storage.store import JournalEntry
from .admission import ROOT_UID
from .answers import ReloadWaiters, counters_problem, event_record
from .context import ServiceContext
from .dbus_common import (
    BUS_NAME,
    DBUS_LIBRARY,
    ERROR_PREFIX,
    INTERFACE,
    OBJECT_PATH,
    POLICY_FILE,
    DBusError,
    Message,
    MessageBus,
    MessageType,
    NameFlag,
    PropertyAccess,
    RequestNameReply,
    ServiceInterface,
    Variant,
    bus_address,
    bus_type,
    dbus_property,
    harden_writer,
    intr,
    method,
    signal,
    to_variants,
)
from .dbus_wire import (
    DRAIN_PERIOD,
    MAX_QUEUED,
    MAX_SENDERS,
    OVER_TOTAL,
    QUEUE_WAIT,
    SENDER_QUEUE,
    CallLimiter,
    Prepared,
    PreparedReply,
    limits_exceeded,
)

log = logging.getLogger("nichealthd.dbus")

INTROSPECTION_XML = os.path.join(os.path.dirname(__file__), "org.nichealthd.NicHealth1.xml")
CONNECT_TIMEOUT = 5.0
RETRY_MIN, RETRY_MAX = 1.0, 60.0
REFUSED_LOG_SECONDS = 60.0  # at most one line per minute about clients over their budget
REBUILD_FACTOR = 10.0  # an answer is rebuilt at most every 10x its build time
MAX_WRITER_BACKLOG = 32  # replies waiting for the bus socket; beyond, calls wait (memory)
MAX_WIRE_ENTRIES = 256  # prepared answers kept per poll (ListCounters has one per argument)
BUS_DRIVER = "org.freedesktop.DBus"
BUS_DRIVER_PATH = "/org/freedesktop/DBus"
UID_TIMEOUT = 5.0  # seconds the bus gets to say who a client is
PROPERTIES_IFACE = "org.freedesktop.DBus.Properties"
INTROSPECTABLE_IFACE = "org.freedesktop.DBus.Introspectable"
F = TypeVar("F", bound=Callable[..., Any])

# property name, signature, key of Daemon.status()
PROPERTIES = (
    ("Version", "s", "version"),
    ("NodeName", "s", "node_name"),
    ("BootId", "s", "boot_id"),
    ("LastPoll", "s", "last_poll"),
    ("PollCount", "t", "poll_count"),
    ("PollingInterval", "d", "polling_interval"),
    ("ConnectorState", "s", "connector_state"),
    ("OutboxDepth", "u", "outbox_depth"),
    ("DeadLetters", "u", "dead_letters"),
    ("Health", "s", "health"),
    ("TopologySource", "s", "topology_source"),
    ("Topology", "s", "topology"),
)
# Properties that change at every poll are not signalled (EmitsChangedSignal=false in the
# XML, as systemd marks its own counters): a PropertiesChanged every second would wake every
# subscriber and fill `busctl monitor`; clients read them with Get.
UNSIGNALLED_PROPERTIES = frozenset({"LastPoll", "PollCount"})
_PORT_EVENT_CODES = {CODE_PORT_STATE, CODE_PORT_MISSING}
# Read-only members answered from prepared bytes, with their input signatures.
_READ_METHODS = {"ListPorts": "", "ListDevices": "", "ListCounters": "su", "ListEvents": "u",
                 "GetStatus": ""}


def _wants_reply(call: Message) -> bool:
    return not (call.flags.value & 1)  # MessageFlag.NO_REPLY_EXPECTED


def dbus_signature(returns: str = "", **params: str) -> Callable[[F], F]:
    """Give a member the D-Bus signature annotations the library reads (in and out)."""
    def decorate(fn: F) -> F:
        fn.__annotations__ = {**params, "return": returns}
        return fn
    return decorate


class NameTaken(Exception):
    """Another connection owns the bus name."""


def _prop_value(signature: str, value: Any) -> Any:
    if signature == "d":
        return float(value or 0.0)
    if signature in ("t", "u"):
        return max(int(value or 0), 0)
    return "" if value is None else str(value)


def _load_introspection() -> Optional[Any]:
    """The documented interface definition (names and doc annotations), or None."""
    try:
        with open(INTROSPECTION_XML, encoding="utf-8") as handle:
            node = intr.Node.parse(handle.read())
    except (OSError, ValueError, Exception) as exc:  # a broken data file must not stop us
        log.warning("cannot load %s (%s); serving generated introspection", INTROSPECTION_XML,
                    exc)
        return None
    return next((i for i in node.interfaces if i.name == INTERFACE), None)


class NicHealthInterface(ServiceInterface):
    """``org.nichealthd.NicHealth1``; every member delegates to the :class:`DbusService`."""

    _documented: Optional[Any] = None

    def __init__(self, service: DbusService) -> None:
        super().__init__(INTERFACE)
        self._service = service

    def introspect(self) -> Any:
        """Serve the documented XML (arg names, doc strings) when it loads."""
        if NicHealthInterface._documented is None:
            NicHealthInterface._documented = _load_introspection() or False
        return NicHealthInterface._documented or super().introspect()

    # ------------------------------------------------------------- methods

    @method()
    @dbus_signature("aa{sv}")
    def ListPorts(self) -> Any:  # noqa: N802
        return self._service.list_ports()

    @method()
    @dbus_signature("aa{sv}")
    def ListDevices(self) -> Any:  # noqa: N802
        return self._service.list_devices()

    @method()
    @dbus_signature("aa{sv}", device="s", port="u")
    def ListCounters(self, device: str, port: int) -> Any:  # noqa: N802
        return self._service.list_counters(device, port)

    @method()
    @dbus_signature("aa{sv}", limit="u")
    def ListEvents(self, limit: int) -> Any:  # noqa: N802
        return self._service.list_events(limit)

    @method()
    @dbus_signature("a{sv}")
    def GetStatus(self) -> Any:  # noqa: N802
        return self._service.get_status()

    @method()
    @dbus_signature("bs")
    async def Reload(self) -> Any:  # noqa: N802
        accepted, message = await self._service.reload()
        return [accepted, message]

    # ------------------------------------------------------------- signals

    @signal()
    @dbus_signature("susbs")
    def PortHealthChanged(self, device: str, port: int, health: str, fatal: bool,  # noqa: N802
                          message: str) -> Any:
        return [device, port, health, fatal, message]

    @signal()
    @dbus_signature("a{sv}")
    def EventEmitted(self, event: Dict[str, Any]) -> Any:  # noqa: N802
        return event

    # ---------------------------------------------------------- properties

    @dbus_property(access=PropertyAccess.READ)
    @dbus_signature("s")
    def Version(self) -> Any:  # noqa: N802
        return self._service.prop("Version")

    @dbus_property(access=PropertyAccess.READ)
    @dbus_signature("s")
    def NodeName(self) -> Any:  # noqa: N802
        return self._service.prop("NodeName")

    @dbus_property(access=PropertyAccess.READ)
    @dbus_signature("s")
    def BootId(self) -> Any:  # noqa: N802
        return self._service.prop("BootId")

    @dbus_property(access=PropertyAccess.READ)
    @dbus_signature("s")
    def LastPoll(self) -> Any:  # noqa: N802
        return self._service.prop("LastPoll")

    @dbus_property(access=PropertyAccess.READ)
    @dbus_signature("t")
    def PollCount(self) -> Any:  # noqa: N802
        return self._service.prop("PollCount")

    @dbus_property(access=PropertyAccess.READ)
    @dbus_signature("d")
    def PollingInterval(self) -> Any:  # noqa: N802
        return self._service.prop("PollingInterval")

    @dbus_property(access=PropertyAccess.READ)
    @dbus_signature("s")
    def ConnectorState(self) -> Any:  # noqa: N802
        return self._service.prop("ConnectorState")

    @dbus_property(access=PropertyAccess.READ)
    @dbus_signature("u")
    def OutboxDepth(self) -> Any:  # noqa: N802
        return self._service.prop("OutboxDepth")

    @dbus_property(access=PropertyAccess.READ)
    @dbus_signature("u")
    def DeadLetters(self) -> Any:  # noqa: N802
        return self._service.prop("DeadLetters")

    @dbus_property(access=PropertyAccess.READ)
    @dbus_signature("s")
    def Health(self) -> Any:  # noqa: N802
        return self._service.prop("Health")

    @dbus_property(access=PropertyAccess.READ)
    @dbus_signature("s")
    def TopologySource(self) -> Any:  # noqa: N802
        return self._service.prop("TopologySource")

    @dbus_property(access=PropertyAccess.READ)
    @dbus_signature("s")
    def Topology(self) -> Any:  # noqa: N802
        return self._service.prop("Topology")


class DbusService:
    """The plug-in service (see :class:`nichealthd.runtime.service.Service`)."""

    name = "D-Bus API"

    def __init__(self, context: ServiceContext) -> None:
        self.context = context
        self.mode = context.config().dbus
        self.enabled = self.mode != "none"
        self.bus: Optional[Any] = None
        self.interface: Optional[NicHealthInterface] = None
        self._view: Optional[Tuple[Any, Any, Any, Any]] = None  # snapshot, result, state, config
        self._cache: Dict[Any, Any] = {}
        # answers marshalled once per poll: key -> (answer, poll number, built at, build time)
        self._wire: Dict[Any, Tuple[Prepared, int, float, float]] = {}
        self._poll_no = 0
        self._lasting: Dict[Any, Prepared] = {}  # answers whose key says when they change
        self.limiter = CallLimiter()
        self._queued: Dict[str, Deque[Tuple[float, Message]]] = {}  # calls waiting for budget
        self._queued_total = 0
        # Whose connection is whose (unique name -> uid, from the bus), asked only when the
        # shared budget refuses a call: root's calls do not spend from it. The calls of a
        # client whose uid is being asked wait, in order, until the answer.
        self._uids: Dict[str, int] = {}
        self._awaiting: Dict[str, List[Message]] = {}
        self._awaiting_total = 0
        self._lookups: Set[asyncio.Future[None]] = set()
        self._drain_timer: Optional[asyncio.TimerHandle] = None
        self._refused_logged_at: Optional[float] = None
        self._refused_since_log = 0
        self._event_cache: Dict[int, Dict[str, Any]] = {}
        self._status: Dict[str, Any] = {}
        self._props: Dict[str, Any] = {}
        self._port_health: Dict[Tuple[str, int], Tuple[str, bool, str]] = {}
        self.reloads = ReloadWaiters(lambda: context.stats().polls, context.request_reload)
        self._task: Optional[asyncio.Future[None]] = None
        self._stopping = False
        self._last_problem = ""

    # ------------------------------------------------------- service hooks

    async def start(self) -> None:
        """Connect (waiting at most CONNECT_TIMEOUT), then keep the connection up."""
        self._status = self.context.status()
        self._props = self._prop_values(self._status)
        first = asyncio.Event()
        self._task = asyncio.ensure_future(self._supervise(first))
        try:
            await asyncio.wait_for(first.wait(), CONNECT_TIMEOUT + 1)
        except asyncio.TimeoutError:
            pass

    def on_poll(self, outcome: Any) -> None:
        view = self.context.view()
        if view is not None:  # after a completed poll, always
            self._view = (outcome.snapshot, outcome.result, view.state, view.config)
        self._cache.clear()
        self._poll_no += 1
        now = time.monotonic()
        self._wire = {k: v for k, v in self._wire.items()
                      if now - v[2] < REBUILD_FACTOR * v[3]}
        self._status = self.context.status()
        self._signal_ports(outcome.committed)
        if self.interface is not None:
            for entry in outcome.committed:
                self.interface.EventEmitted(self._event_variants(entry))
        self._signal_properties()
        self.reloads.settle(self.context.reload_error())

    def on_reload(self, config: Any) -> None:
        self._lasting.clear()
        if config.dbus != self.mode:
            log.warning("dbus = %r takes effect at the next restart (serving on the %s bus)",
                        config.dbus, self.mode)
        self.reloads.resolve(True, f"configuration reloaded from {self.context.config_path}")

    async def stop(self) -> None:
        self._stopping = True
        self.reloads.resolve(False, "nichealthd is stopping")
        if self._task is not None:
            self._task.cancel()
            try:
                await self._task
            except (asyncio.CancelledError, Exception):
                pass
        self._drop_bus()

    # -------------------------------------------------------------- connection

    async def _supervise(self, first: asyncio.Event) -> None:
        delay = RETRY_MIN
        while not self._stopping:
            try:
                await asyncio.wait_for(self._connect(), CONNECT_TIMEOUT)
            except asyncio.CancelledError:
                raise
            except Exception as exc:
                self._report(exc, delay)
                first.set()
                await asyncio.sleep(delay)
                delay = min(delay * 2, RETRY_MAX)
                continue
            first.set()
            delay = RETRY_MIN
            log.info("D-Bus API serving %s on the %s bus (%s)", BUS_NAME, self.mode,
                     bus_address(self.mode))
            self._last_problem = ""
            bus = self.bus
            try:
                if bus is not None:
                    await bus.wait_for_disconnect()
            except asyncio.CancelledError:
                raise
            except Exception:
                pass
            self._drop_bus()
            if not self._stopping:
                log.warning("lost the connection to the %s bus; reconnecting", self.mode)

    async def _connect(self) -> None:
        bus = MessageBus(bus_type=bus_type(self.mode))
        try:
            await bus.connect()
            if not harden_writer(bus):
                log.debug("could not guard the D-Bus writer against EAGAIN (library changed?)")
            interface = NicHealthInterface(self)
            bus.add_message_handler(self._on_call)  # before the library's own dispatch
            bus.export(OBJECT_PATH, interface)
            reply = await bus.request_name(BUS_NAME, NameFlag.DO_NOT_QUEUE)
            if reply not in (RequestNameReply.PRIMARY_OWNER, RequestNameReply.ALREADY_OWNER):
                raise NameTaken(f"{BUS_NAME} is already owned by another process on the "
                                f"{self.mode} bus (is another nichealthd running?)")
        except BaseException:
            try:
                bus.disconnect()
            except Exception:
                pass
            raise
        self.bus, self.interface = bus, interface

    def _drop_bus(self) -> None:
        self._drop_queue()
        bus, self.bus, self.interface = self.bus, None, None
        if bus is not None:
            try:
                bus.disconnect()
            except Exception:
                pass

    def _report(self, exc: BaseException, delay: float) -> None:
        """One clear error per distinct problem; repeats of it go to debug."""
        address = bus_address(self.mode)
        if isinstance(exc, NameTaken):
            problem = str(exc)
        elif isinstance(exc, DBusError) and exc.type.endswith(".AccessDenied"):
            problem = (f"the {self.mode} bus refuses to let this user own {BUS_NAME} "
                       f"({exc.text}); install the policy file {POLICY_FILE} (root and the "
                       f"user nichealthd may own the name) and reload dbus")
        elif isinstance(exc, asyncio.TimeoutError):
            problem = f"no answer from the {self.mode} bus at {address} within " \
                      f"{CONNECT_TIMEOUT:.0f} s"
        elif isinstance(exc, OSError):
            problem = (f"cannot connect to the {self.mode} bus at {address}: "
                       f"{exc.strerror or exc} (is dbus running?)")
        else:
            problem = f"cannot serve on the {self.mode} bus at {address}: {exc}"
        if problem != self._last_problem:
            log.error("D-Bus API unavailable: %s; monitoring continues, retrying with "
                      "backoff (next in %.0f s)", problem, delay)
            self._last_problem = problem
        else:
            log.debug("D-Bus API still unavailable: %s (next try in %.0f s)", problem, delay)

    # ------------------------------------------------- the loop's bus budget

    def _on_call(self, call: Message) -> Any:
        """Every incoming call passes here first (issue 12.11). A read-only call is answered
        from the bytes prepared this poll if its client is within budget, else it waits in
        the client's short queue; a call that does not fit is refused at once. Anything else
        (Reload, Ping, other paths) goes on to the library if within budget."""
        if self.bus is None or call.message_type is not MessageType.METHOD_CALL \
                or call.sender == BUS_DRIVER:
            # Not serving yet (a call that arrives while request_name is answered, before
            # _connect has set self.bus): the library's own dispatch answers it, so no call
            # is ever swallowed without a reply.
            return False
        sender = call.sender or ""
        waiting = self._awaiting.get(sender)
        if waiting is not None:  # its uid is being asked: after the calls before it
            if len(waiting) < SENDER_QUEUE and self._awaiting_total < MAX_QUEUED:
                waiting.append(call)
                self._awaiting_total += 1
                return True
            return self._refuse(call)
        readonly = self._is_readonly(call)
        queue = self._queued.get(sender)
        if queue is None and not (readonly and self._writer_full()):
            refused = self.limiter.take(sender, self._reply_size(call) if readonly else 0,
                                        self._uids.get(sender) == ROOT_UID)
            if not refused:
                return self._answer(call) if readonly else False
            if refused == OVER_TOTAL and sender not in self._uids and sender \
                    and self._awaiting_total < MAX_QUEUED:
                return self._ask_uid(sender, call)
        if readonly and (queue is None or len(queue) < SENDER_QUEUE) \
                and self._queued_total < MAX_QUEUED:
            loop = asyncio.get_running_loop()
            self._queued.setdefault(sender, collections.deque()).append((loop.time(), call))
            self._queued_total += 1
            if self._drain_timer is None:
                self._drain_timer = loop.call_later(DRAIN_PERIOD, self._drain)
            return True
        return self._refuse(call)

    def _ask_uid(self, sender: str, call: Message) -> bool:
        """The shared budget refused ``call``: ask the bus whose it is (once per client), and
        hold its calls meanwhile; then judge them again, root's within its own budget only."""
        self._awaiting[sender] = [call]
        self._awaiting_total += 1
        task = asyncio.ensure_future(self._lookup(sender))
        self._lookups.add(task)
        task.add_done_callback(self._lookups.discard)
        return True

    async def _lookup(self, sender: str) -> None:
        uid = -1
        bus = self.bus
        try:
            if bus is not None:
                reply = await asyncio.wait_for(bus.call(Message(
                    destination=BUS_DRIVER, path=BUS_DRIVER_PATH, interface=BUS_DRIVER,
                    member="GetConnectionUnixUser", signature="s", body=[sender])), UID_TIMEOUT)
                if reply.message_type is MessageType.METHOD_RETURN:
                    uid = int(reply.body[0])
        except asyncio.CancelledError:
            raise
        except Exception as exc:  # the client is gone, the bus is slow: not root
            log.debug("could not ask the bus for the uid of %s: %s", sender, exc)
        if len(self._uids) >= MAX_SENDERS:  # unique names are never reused: forget the oldest
            del self._uids[next(iter(self._uids))]
        self._uids[sender] = uid
        calls = self._awaiting.pop(sender, [])
        self._awaiting_total -= len(calls)
        dispatch = getattr(self.bus, "_process_message", None)
        for call in calls:  # as if they arrived now, in order: through _on_call again
            if dispatch is not None and self.bus is bus:
                dispatch(call)
            elif self.bus is not None and _wants_reply(call):
                self.bus.send(limits_exceeded(call, self.limiter))

    def _answer(self, call: Message) -> Any:
        prepared = self._prepared(call)  # a DBusError here is sent back by the library
        if prepared is None:
            return False
        if _wants_reply(call) and self.bus is not None:
            self.bus.send(PreparedReply(call, prepared))
        return True

    def _refuse(self, call: Message) -> Any:
        self._note_refused(call.sender)
        return limits_exceeded(call, self.limiter) if _wants_reply(call) else True

    def _drain(self) -> None:
        """Answer waiting calls as their clients' budget allows, oldest first per client."""
        self._drain_timer = None
        loop = asyncio.get_running_loop()
        now = loop.time()
        progressed = True
        while progressed and self._queued:
            progressed = False
            for sender in list(self._queued):
                queue = self._queued[sender]
                queued_at, call = queue[0]
                if self._writer_full() and now - queued_at <= QUEUE_WAIT:
                    continue  # replies are not leaving: hold the rest (bounded memory)
                if now - queued_at > QUEUE_WAIT:
                    reply: Any = self._refuse(call)
                elif self.limiter.allow(sender, self._reply_size(call),
                                        self._uids.get(sender) == ROOT_UID):
                    try:
                        reply = self._answer(call)
                    except DBusError as exc:
                        reply = exc._as_message(call)
                    except Exception as exc:  # never let one call stop the others
                        log.error("D-Bus %s failed: %s", call.member, exc)
                        reply = Message.new_error(call, ERROR_PREFIX + "Failed",
                                                  f"{call.member} failed: {exc}")
                else:
                    continue
                if isinstance(reply, Message) and self.bus is not None:
                    self.bus.send(reply)
                queue.popleft()
                self._queued_total -= 1
                progressed = True
                if not queue:
                    del self._queued[sender]
        if self._queued:
            self._drain_timer = loop.call_later(DRAIN_PERIOD, self._drain)

    def _reply_size(self, call: Message) -> int:
        """Bytes of the prepared answer (built now if need be; an error answer is small)."""
        try:
            prepared = self._prepared(call)
        except DBusError:
            return 0
        return len(prepared.body) if prepared is not None else 0

    def _writer_full(self) -> bool:
        """Whether MAX_WRITER_BACKLOG replies already wait for the bus socket (each holds
        its own copy of the bytes; a bus that reads slowly must not make memory grow)."""
        messages = getattr(getattr(self.bus, "_writer", None), "messages", None)
        return messages is not None and len(messages) >= MAX_WRITER_BACKLOG

    def _drop_queue(self) -> None:
        if self._drain_timer is not None:
            self._drain_timer.cancel()
            self._drain_timer = None
        self._queued.clear()
        self._queued_total = 0
        for task in list(self._lookups):
            task.cancel()
        self._awaiting.clear()
        self._awaiting_total = 0
        self._uids.clear()  # unique names belong to one bus connection

    def _is_readonly(self, call: Message) -> bool:
        """Calls :meth:`_prepared` answers (the library answers a wrong signature)."""
        if call.path != OBJECT_PATH:
            return False
        if call.interface in (INTERFACE, None):
            return _READ_METHODS.get(call.member or "") == call.signature
        body = call.body
        if call.interface == PROPERTIES_IFACE:
            if call.member == "Get" and call.signature == "ss":
                return bool(body[0] == INTERFACE and body[1] in self._props)
            return call.member == "GetAll" and call.signature == "s" and body[0] == INTERFACE
        return call.interface == INTROSPECTABLE_IFACE and call.member == "Introspect" and \
            hasattr(self.bus, "_introspect_export_path")

    def _note_refused(self, sender: Optional[str]) -> None:
        """One warning at the first refusal, then at most one a minute with the count."""
        self._refused_since_log += 1
        now = asyncio.get_running_loop().time()
        last = self._refused_logged_at
        if last is not None and now - last < REFUSED_LOG_SECONDS:
            return
        log.warning("D-Bus clients exceed the call budget (%g calls/s per client, %g in all): "
                    "%d call(s) refused with LimitsExceeded%s, the latest from %s; polling is "
                    "not affected", self.limiter.rate, self.limiter.total_rate,
                    self._refused_since_log,
                    "" if last is None else f" in the last {now - last:.0f} s", sender)
        self._refused_logged_at, self._refused_since_log = now, 0

    def _prepared(self, call: Message) -> Optional[Prepared]:
        """The marshalled answer to a read-only call, built at most once per poll."""
        if call.path != OBJECT_PATH:
            return None
        member, signature, body = call.member, call.signature, call.body
        if call.interface in (INTERFACE, None) and member in _READ_METHODS:
            if _READ_METHODS[member] != signature:
                return None  # the library answers a wrong signature with its error
            key: Any = (member, *body)
            if member == "ListEvents":  # events change only when one is committed
                key = (member, self._event_limit(int(body[0])),
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
            if member == "Get" and signature == "ss" and body[1] in self._props:
                return self._wire_answer(("Get", body[1]), lambda: Prepared.of(
                    "v", [self._prop_variant(body[1])]))
            if member == "GetAll" and signature == "s":
                return self._wire_answer(("GetAll",), lambda: Prepared.of(
                    "a{sv}", [{name: self._prop_variant(name) for name, _, _ in PROPERTIES}]))
            return None
        if call.interface == INTROSPECTABLE_IFACE and member == "Introspect" and \
                self.bus is not None and hasattr(self.bus, "_introspect_export_path"):
            return self._lasting_answer(("Introspect",), lambda: Prepared.of(
                "s", [self.bus._introspect_export_path(OBJECT_PATH).tostring()]))  # type: ignore[union-attr]
        return None

    def _wire_answer(self, key: Any, build: Callable[[], Prepared]) -> Prepared:
        """Built once per poll; on a big host, where building ListCounters costs tens of ms,
        an answer is also kept until it is REBUILD_FACTOR times its build time old, so
        rebuilding answers never takes more than ~1/REBUILD_FACTOR of the loop."""
        now = time.monotonic()
        entry = self._wire.get(key)
        if entry is not None:
            prepared, poll, built_at, cost = entry
            if poll == self._poll_no or now - built_at < REBUILD_FACTOR * cost:
                return prepared
        prepared = build()
        cost = time.monotonic() - now
        if len(self._wire) < MAX_WIRE_ENTRIES or key in self._wire:
            self._wire[key] = (prepared, self._poll_no, now, cost)
        return prepared

    def _lasting_answer(self, key: Any, build: Callable[[], Prepared]) -> Prepared:
        """An answer whose key says when it changes (kept across polls; marshalling 1000
        events takes ~9 ms, which polls every 100 ms must not pay for nothing)."""
        prepared = self._lasting.get(key)
        if prepared is None:
            if len(self._lasting) >= MAX_WIRE_ENTRIES // 4:
                self._lasting.clear()
            prepared = self._lasting[key] = build()
        return prepared

    def _read_answer(self, member: str, body: List[Any]) -> Any:
        if member == "ListPorts":
            return self.list_ports()
        if member == "ListDevices":
            return self.list_devices()
        if member == "ListCounters":
            return self.list_counters(str(body[0]), int(body[1]))
        if member == "ListEvents":
            return self.list_events(int(body[0]))
        return self.get_status()

    def _event_limit(self, limit: int) -> int:
        size = max(int(self.context.config().event_history_size), 1)
        return min(limit, size) if limit else size

    def _status_key(self) -> Tuple[Any, ...]:
        """What GetStatus depends on between two polls (the connector reports on its own)."""
        connector = self.context.connector()
        return (connector.state, connector.outbox_depth, connector.dead_letters,
                connector.last_error, self.context.reload_error(), self.context.stats().failing)

    def _prop_variant(self, name: str) -> Any:
        signature = next(sig for prop, sig, _ in PROPERTIES if prop == name)
        return Variant(signature, self._props[name])

    # --------------------------------------------------------------- answers

    def _require_view(self) -> Tuple[Any, Any, Any, Any]:
        if self._view is None:
            view = self.context.view()
            if view is None:
                raise DBusError(ERROR_PREFIX + "NotReady",
                                "nichealthd has not completed its first poll yet")
            self._view = (view.outcome.snapshot, view.outcome.result, view.state,
                          self.context.config())
        return self._view

    def _port_records(self) -> List[Dict[str, Any]]:
        if "ports" not in self._cache:
            snapshot, result, state, _ = self._require_view()
            self._cache["ports"] = port_records(snapshot, result, state)
        records: List[Dict[str, Any]] = self._cache["ports"]
        return records

    def list_ports(self) -> List[Dict[str, Any]]:
        if "ports-v" not in self._cache:
            self._cache["ports-v"] = [to_variants(r) for r in self._port_records()]
        return self._cache["ports-v"]  # type: ignore[no-any-return]

    def list_devices(self) -> List[Dict[str, Any]]:
        if "devices-v" not in self._cache:
            snapshot, result, state, _ = self._require_view()
            self._cache["devices-v"] = [to_variants(r)
                                        for r in device_records(snapshot, result, state)]
        return self._cache["devices-v"]  # type: ignore[no-any-return]

    def list_counters(self, device: str, port: int) -> List[Dict[str, Any]]:
        key = ("counters", device, port)
        if key not in self._cache:
            snapshot, result, state, config = self._require_view()
            records = counter_records(snapshot, result, state, config, device, port)
            if not records and device:
                self._explain_no_counters(snapshot, result, device, port)
            self._cache[key] = [to_variants(r) for r in records]
        return self._cache[key]  # type: ignore[no-any-return]

    @staticmethod
    def _explain_no_counters(snapshot: Any, result: Any, device: str, port: int) -> None:
        problem = counters_problem(snapshot, result, device, port)
        if problem is not None:
            raise DBusError(ERROR_PREFIX + problem[0], problem[1])

    def list_events(self, limit: int) -> List[Dict[str, Any]]:
        journal = self.context.journal
        size = max(int(self.context.config().event_history_size), 1)
        entries = journal.history(self._event_limit(limit))
        if len(self._event_cache) > 4 * size:
            keep = {e.seq for e in entries}
            self._event_cache = {s: v for s, v in self._event_cache.items() if s in keep}
        return [self._event_variants(e) for e in entries]

    def _event_variants(self, entry: JournalEntry) -> Dict[str, Any]:
        cached = self._event_cache.get(entry.seq)
        if cached is None:
            cached = self._event_cache[entry.seq] = to_variants(event_record(entry))
        return cached

    def get_status(self) -> Dict[str, Any]:
        status = dict(self.context.status())
        status["dbus_library"] = DBUS_LIBRARY
        return to_variants(status)

    def prop(self, name: str) -> Any:
        return self._props[name]

    # ----------------------------------------------------------- signals

    @staticmethod
    def _prop_values(status: Dict[str, Any]) -> Dict[str, Any]:
        return {name: _prop_value(sig, status.get(key)) for name, sig, key in PROPERTIES}

    def _signal_properties(self) -> None:
        """One PropertiesChanged for a poll that changed a signalled property, with only the
        values that changed."""
        values = self._prop_values(self._status)
        changed = {k: v for k, v in values.items()
                   if k not in UNSIGNALLED_PROPERTIES and self._props.get(k) != v}
        self._props = values
        if changed and self.interface is not None:
            self.interface.emit_properties_changed(changed)

    def _signal_ports(self, committed: List[JournalEntry]) -> None:
        """PortHealthChanged for port-state events and for any change of reported health."""
        snapshot, result, state, _ = self._require_view()
        current = port_health(snapshot, result, state)
        messages: Dict[Tuple[str, int], str] = {}
        for entry in committed:
            event = entry.event
            if not _PORT_EVENT_CODES.intersection(event.error_code):
                continue
            entities = dict(event.entities)
            if ENTITY_NIC in entities and ENTITY_PORT in entities:
                try:
                    messages[(entities[ENTITY_NIC], int(entities[ENTITY_PORT]))] = event.message
                except ValueError:
                    continue
        previous, self._port_health = self._port_health, current
        changed = set(messages)
        if previous:
            # health and fatal, not the reasons' wording (a "not seen (N polls)" count)
            changed.update(k for k, v in current.items()
                           if previous.get(k, ("", False, ""))[:2] != v[:2])
        if self.interface is None:
            return
        for key in sorted(changed):
            # The one health model (nichealthd.core.health), as in ListPorts and the metric.
            health, fatal, reasons = current.get(key, ("", False, ""))
            message = messages.get(key)
            if not health:  # the event names a port that is gone from the view
                health = "fatal" if message and "missing" in message else "unknown"
                fatal = health == "fatal"
            if message is None:
                record = next((r for r in self._port_records()
                               if (r["device"], r["port"]) == key), {})
                message = (f"{key[0]} port {key[1]}: {health} "
                           f"({record.get('state', '?')}, {record.get('phys_state', '?')})")
                if reasons:
                    message += f": {reasons}"
            self.interface.PortHealthChanged(key[0], key[1], health, fatal, message)

    # ----------------------------------------------------------- reload

    async def reload(self) -> Tuple[bool, str]:
        log.info("reload requested over D-Bus")
        return await self.reloads.request()


__all__ = ["DbusService", "NicHealthInterface", "event_record", "PROPERTIES", "Variant"]
