"""The D-Bus API service: the daemon's live view on the system bus (org.nichealthd.NicHealth1.xml).

This module keeps the connection (connect, own the name, reconnect with backoff) and ties the
parts together, each in its own module:

* :mod:`.dbus_interface` — the exported interface: methods, signals, properties (the
  introspection XML beside it is the contract);
* :mod:`.dbus_answers` — the read-only answers, from the daemon's picture of the last poll
  (:class:`~nichealthd.core.picture.PollPicture`), marshalled once and shared;
* :mod:`.dbus_gate` — the event loop's budget for the bus: every call passes there first;
* :mod:`.dbus_signals` — what a poll changed: PropertiesChanged, PortHealthChanged.

Everything here runs on the event loop, and nothing here runs a poll: polls run in the
daemon's worker thread and :meth:`DbusService.on_poll` only takes the finished outcome. A bus
that is absent, a policy that forbids the name, or a name already owned is logged once and
retried with backoff: the D-Bus API is optional, monitoring is not.
"""

from __future__ import annotations

import asyncio
import logging
from typing import List, Optional, Tuple

from ..core.config import Config
from .answers import ReloadWaiters
from .context import PollOutcome, ServiceContext
from .dbus_answers import DbusAnswers
from .dbus_common import (
    BUS_NAME,
    OBJECT_PATH,
    POLICY_FILE,
    DBusError,
    Message,
    MessageBus,
    NameFlag,
    RequestNameReply,
    VariantRecord,
    bus_address,
    bus_type,
    harden_writer,
)
from .dbus_gate import CallGate, HandlerReply
from .dbus_interface import NicHealthInterface, PropValue
from .dbus_signals import Signals

log = logging.getLogger("nichealthd.dbus")

CONNECT_TIMEOUT = 5.0
RETRY_MIN, RETRY_MAX = 1.0, 60.0


class NameTaken(Exception):
    """Another connection owns the bus name."""


class DbusService:
    """The plug-in service (see :class:`nichealthd.runtime.service.Service`)."""

    name = "D-Bus API"

    def __init__(self, context: ServiceContext) -> None:
        self.context = context
        self.mode = context.config().dbus
        self.enabled = self.mode != "none"
        self.bus: Optional[MessageBus] = None
        self.interface: Optional[NicHealthInterface] = None
        self.signals = Signals({})
        self.answers = DbusAnswers(context, lambda: self.signals.props)
        self.gate = CallGate(lambda: self.bus, self.answers)
        self.reloads = ReloadWaiters(lambda: context.stats().polls, context.request_reload)
        self._task: Optional[asyncio.Future[None]] = None
        self._stopping = False
        self._last_problem = ""

    # ------------------------------------------------------- service hooks

    async def start(self) -> None:
        """Connect (waiting at most CONNECT_TIMEOUT), then keep the connection up."""
        self.signals = Signals(self.context.status())
        first = asyncio.Event()
        self._task = asyncio.ensure_future(self._supervise(first))
        try:
            await asyncio.wait_for(first.wait(), CONNECT_TIMEOUT + 1)
        except asyncio.TimeoutError:
            pass

    def on_poll(self, outcome: PollOutcome) -> None:
        picture = self.context.view()
        if picture is not None:  # after a completed poll, always
            changes = self.signals.ports_changed(picture, outcome.committed)
            if self.interface is not None:
                for change in changes:
                    self.interface.PortHealthChanged(*change)
        if self.interface is not None:
            for entry in outcome.committed:
                self.interface.EventEmitted(self.answers.event_variants(entry))
        changed = self.signals.properties_changed(self.context.status())
        if changed and self.interface is not None:
            self.interface.emit_properties_changed(changed)
        self.reloads.settle(self.context.reload_error())

    def idle(self) -> bool:
        return self.reloads.idle()

    def on_reload(self, config: Config) -> None:
        self.answers.new_config()
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
                if bus is not None:  # (dbus-fast leaves wait_for_disconnect unannotated)
                    await bus.wait_for_disconnect()  # type: ignore[no-untyped-call]
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
        self.gate.drop()
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

    def _on_call(self, call: Message) -> HandlerReply:
        """Every incoming call passes the loop's bus budget first (:mod:`.dbus_gate`)."""
        return self.gate.on_call(call)

    # ------------------------------------------------- the interface's members

    def list_ports(self) -> List[VariantRecord]:
        return self.answers.list_ports()

    def list_devices(self) -> List[VariantRecord]:
        return self.answers.list_devices()

    def list_counters(self, device: str, port: int) -> List[VariantRecord]:
        return self.answers.list_counters(device, port)

    def list_events(self, limit: int) -> List[VariantRecord]:
        return self.answers.list_events(limit)

    def get_status(self) -> VariantRecord:
        return self.answers.get_status()

    def prop(self, name: str) -> PropValue:
        return self.answers.prop(name)

    async def reload(self) -> Tuple[bool, str]:
        log.info("reload requested over D-Bus")
        return await self.reloads.request()


__all__ = ["DbusService"]
