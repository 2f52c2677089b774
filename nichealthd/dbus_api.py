"""The D-Bus API: the daemon's live view on the system bus (DESIGN §2.6, interface XML beside).

Everything here runs on the event loop, and nothing here runs a poll: polls run in the
daemon's worker thread and :meth:`DbusService.on_poll` only takes the finished outcome. Each
poll's picture (snapshot, evaluation, committed state, config) is kept as one consistent
view; answers are built from it lazily with :mod:`nichealthd.views` and cached until the next
poll, so a client hammering ``ListCounters`` costs one build per poll and can never delay or
see half of a poll. A bus that is absent, a policy that forbids the name, or a name already
owned is logged once and retried with backoff: the D-Bus API is optional, monitoring is not.

The D-Bus libraries read member signatures from annotations (``-> "aa{sv}"``); those are not
Python types, so :func:`dbus_signature` sets them explicitly and the real annotations stay
valid for linters and type checkers.
"""

from __future__ import annotations

import asyncio
import logging
import os
from typing import Any, Callable, Dict, List, Optional, Tuple, TypeVar

from .context import ServiceContext
from .dbus_common import (
    BUS_NAME,
    DBUS_LIBRARY,
    ERROR_PREFIX,
    INTERFACE,
    OBJECT_PATH,
    POLICY_FILE,
    DBusError,
    MessageBus,
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
from .events import CODE_PORT_MISSING, CODE_PORT_STATE, ENTITY_NIC, ENTITY_PORT
from .store import JournalEntry
from .views import counter_records, device_records, port_health, port_records

log = logging.getLogger("nichealthd.dbus")

INTROSPECTION_XML = os.path.join(os.path.dirname(__file__), "org.nichealthd.NicHealth1.xml")
CONNECT_TIMEOUT = 5.0
RETRY_MIN, RETRY_MAX = 1.0, 60.0
RELOAD_WAIT = 10.0
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
)
_PORT_EVENT_CODES = {CODE_PORT_STATE, CODE_PORT_MISSING}


def dbus_signature(returns: str = "", **params: str) -> Callable[[F], F]:
    """Give a member the D-Bus signature annotations the library reads (in and out)."""
    def decorate(fn: F) -> F:
        fn.__annotations__ = {**params, "return": returns}
        return fn
    return decorate


class NameTaken(Exception):
    """Another connection owns the bus name."""


def event_record(entry: JournalEntry) -> Dict[str, Any]:
    """An event as sent on the bus: DESIGN §2.4 JSON plus ``seq`` and ``severity``."""
    record: Dict[str, Any] = {"seq": entry.seq, "severity": entry.event.severity}
    record.update(entry.event.to_json())
    return record


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


class DbusService:
    """The plug-in service (see :class:`nichealthd.service.Service`)."""

    name = "D-Bus API"

    def __init__(self, context: ServiceContext) -> None:
        self.context = context
        self.mode = context.config().dbus
        self.enabled = self.mode != "none"
        self.bus: Optional[Any] = None
        self.interface: Optional[NicHealthInterface] = None
        self._view: Optional[Tuple[Any, Any, Any, Any]] = None  # snapshot, result, state, config
        self._cache: Dict[Any, Any] = {}
        self._event_cache: Dict[int, Dict[str, Any]] = {}
        self._status: Dict[str, Any] = {}
        self._props: Dict[str, Any] = {}
        self._port_health: Dict[Tuple[str, int], Tuple[str, bool, str]] = {}
        self._reload_waiters: List[Tuple[int, asyncio.Future[Tuple[bool, str]]]] = []
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
        self._status = self.context.status()
        self._signal_ports(outcome.committed)
        if self.interface is not None:
            for entry in outcome.committed:
                self.interface.EventEmitted(self._event_variants(entry))
        self._signal_properties()
        self._settle_reloads(self.context.reload_error())

    def on_reload(self, config: Any) -> None:
        if config.dbus != self.mode:
            log.warning("dbus = %r takes effect at the next restart (serving on the %s bus)",
                        config.dbus, self.mode)
        self._resolve_reloads(True, f"configuration reloaded from {self.context.config_path}")

    async def stop(self) -> None:
        self._stopping = True
        self._resolve_reloads(False, "nichealthd is stopping")
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
        dev = next((d for d in snapshot.devices if d.name == device), None)
        if dev is None:
            known = ", ".join(d.name for d in snapshot.devices) or "none"
            raise DBusError(ERROR_PREFIX + "UnknownDevice",
                            f"no NIC named {device} on this host (present: {known})")
        role = result.roles.get(device)
        if not (role and role.monitored):
            reason = f"{role.role}: {role.reason}" if role else "not classified"
            raise DBusError(ERROR_PREFIX + "NotMonitored",
                            f"{device} is not monitored ({reason}); its counters are not read")
        if port and port not in [p.port for p in dev.ports]:
            ports = ", ".join(str(p.port) for p in dev.ports) or "none"
            raise DBusError(ERROR_PREFIX + "UnknownPort",
                            f"{device} has no port {port} (ports: {ports})")

    def list_events(self, limit: int) -> List[Dict[str, Any]]:
        journal = self.context.journal
        size = max(int(self.context.config().event_history_size), 1)
        entries = journal.history(min(limit, size) if limit else size)
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
        """One PropertiesChanged per poll, with only the values that changed."""
        values = self._prop_values(self._status)
        changed = {k: v for k, v in values.items() if self._props.get(k) != v}
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
            # The one health model (nichealthd.health), as in ListPorts and the metric.
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
        loop = asyncio.get_running_loop()
        future: asyncio.Future[Tuple[bool, str]] = loop.create_future()
        self._reload_waiters.append((self.context.stats().polls, future))
        log.info("reload requested over D-Bus")
        self.context.request_reload()
        try:
            return await asyncio.wait_for(asyncio.shield(future), RELOAD_WAIT)
        except asyncio.TimeoutError:
            return True, ("reload requested; it is applied after the poll in progress "
                          "completes (check `nichealthctl status`)")

    def _settle_reloads(self, reload_error: str) -> None:
        """A reload is attempted right after the poll that follows the request; by the
        second poll after it, a waiter that on_reload did not resolve was rejected."""
        polls = self.context.stats().polls
        still = []
        for requested_at, future in self._reload_waiters:
            if future.done():
                continue
            if polls >= requested_at + 2:
                if reload_error:
                    future.set_result((False, f"reload rejected, the running configuration "
                                              f"is kept: {reload_error}"))
                else:
                    future.set_result((True, "reload requested"))
            else:
                still.append((requested_at, future))
        self._reload_waiters = still

    def _resolve_reloads(self, accepted: bool, message: str) -> None:
        for _, future in self._reload_waiters:
            if not future.done():
                future.set_result((accepted, message))
        self._reload_waiters = []


__all__ = ["DbusService", "NicHealthInterface", "event_record", "PROPERTIES", "Variant"]
