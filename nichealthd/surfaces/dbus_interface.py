"""The exported D-Bus interface ``org.nichealthd.NicHealth1``: its methods, signals and
properties as the bus sees them (DESIGN §2.6, the interface XML beside this module).

The D-Bus libraries read member signatures from annotations (``-> "aa{sv}"``); those are not
Python types, so :func:`dbus_signature` sets them explicitly and the real annotations stay
valid for linters and type checkers. Every member only delegates: the answers are
:mod:`.dbus_answers`', the signals' values :mod:`.dbus_signals`'.
"""

from __future__ import annotations

import logging
import os
from typing import Any, Callable, Dict, List, Optional, Protocol, Tuple, TypeVar

from .dbus_common import (
    INTERFACE,
    PropertyAccess,
    ServiceInterface,
    dbus_property,
    intr,
    method,
    signal,
)

log = logging.getLogger("nichealthd.dbus")

INTROSPECTION_XML = os.path.join(os.path.dirname(__file__), "org.nichealthd.NicHealth1.xml")
F = TypeVar("F", bound=Callable[..., Any])

# property name, signature, key of the daemon status (ServiceContext.status)
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
SIGNATURES = {name: signature for name, signature, _ in PROPERTIES}
# Properties that change at every poll are not signalled (EmitsChangedSignal=false in the
# XML, as systemd marks its own counters): a PropertiesChanged every second would wake every
# subscriber and fill `busctl monitor`; clients read them with Get.
UNSIGNALLED_PROPERTIES = frozenset({"LastPoll", "PollCount"})


class Backend(Protocol):
    """What the interface's members delegate to (:class:`~.dbus_api.DbusService`)."""

    def list_ports(self) -> List[Dict[str, Any]]: ...

    def list_devices(self) -> List[Dict[str, Any]]: ...

    def list_counters(self, device: str, port: int) -> List[Dict[str, Any]]: ...

    def list_events(self, limit: int) -> List[Dict[str, Any]]: ...

    def get_status(self) -> Dict[str, Any]: ...

    async def reload(self) -> Tuple[bool, str]: ...

    def prop(self, name: str) -> Any: ...


def dbus_signature(returns: str = "", **params: str) -> Callable[[F], F]:
    """Give a member the D-Bus signature annotations the library reads (in and out)."""
    def decorate(fn: F) -> F:
        fn.__annotations__ = {**params, "return": returns}
        return fn
    return decorate


def prop_value(signature: str, value: Any) -> Any:
    """A status value as the property's D-Bus type holds it."""
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
    """``org.nichealthd.NicHealth1``; every member delegates to the service behind it."""

    _documented: Optional[Any] = None

    def __init__(self, service: Backend) -> None:
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
