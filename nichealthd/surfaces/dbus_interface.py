"""The exported D-Bus interface ``org.nichealthd.NicHealth1``: its methods, signals and
properties as the bus sees them (the interface XML beside this module).

The D-Bus libraries read member signatures from annotations (``-> "aa{sv}"``); those are not
Python types, so :func:`dbus_signature` sets them explicitly and the real annotations stay
valid for linters and type checkers. Every member only delegates: the answers are
:mod:`.dbus_answers`', the signals' values :mod:`.dbus_signals`'.
"""

from __future__ import annotations

import logging
import os
from typing import Callable, List, Optional, Protocol, Tuple, TypeVar, Union

from .dbus_common import (
    INTERFACE,
    PropertyAccess,
    ServiceInterface,
    VariantRecord,
    dbus_property,
    intr,
    method,
    signal,
)

log = logging.getLogger("nichealthd.dbus")

INTROSPECTION_XML = os.path.join(os.path.dirname(__file__), "org.nichealthd.NicHealth1.xml")
F = TypeVar("F", bound=Callable[..., object])
# A property's value: what ``s``, ``t``/``u`` and ``d`` hold (:func:`prop_value`).
PropValue = Union[str, int, float]

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

    def list_ports(self) -> List[VariantRecord]: ...

    def list_devices(self) -> List[VariantRecord]: ...

    def list_counters(self, device: str, port: int) -> List[VariantRecord]: ...

    def list_events(self, limit: int) -> List[VariantRecord]: ...

    def get_status(self) -> VariantRecord: ...

    async def reload(self) -> Tuple[bool, str]: ...

    def prop(self, name: str) -> PropValue: ...


def dbus_signature(returns: str = "", **params: str) -> Callable[[F], F]:
    """Give a member the D-Bus signature annotations the library reads (in and out)."""
    def decorate(fn: F) -> F:
        fn.__annotations__ = {**params, "return": returns}
        return fn
    return decorate


def prop_value(signature: str, value: object) -> PropValue:
    """A status value as the property's D-Bus type holds it."""
    if signature == "d":
        return float(_number(value)) if value else 0.0
    if signature in ("t", "u"):
        return max(int(_number(value)), 0) if value else 0
    return "" if value is None else str(value)


def _number(value: object) -> Union[int, float, str]:
    """A status number as ``float``/``int`` read it; TypeError for anything else, as they
    raise it."""
    if isinstance(value, (int, float, str)):
        return value
    raise TypeError(f"not a number: {type(value).__name__}")


def _load_introspection() -> Optional[intr.Interface]:
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

    _documented: Union[intr.Interface, bool, None] = None  # False: the XML did not load

    def __init__(self, service: Backend) -> None:
        super().__init__(INTERFACE)
        self._service = service

    def introspect(self) -> intr.Interface:
        """Serve the documented XML (arg names, doc strings) when it loads."""
        if NicHealthInterface._documented is None:
            NicHealthInterface._documented = _load_introspection() or False
        documented = NicHealthInterface._documented
        return documented if isinstance(documented, intr.Interface) else super().introspect()

    # ------------------------------------------------------------- methods

    @method()
    @dbus_signature("aa{sv}")
    def ListPorts(self) -> List[VariantRecord]:
        return self._service.list_ports()

    @method()
    @dbus_signature("aa{sv}")
    def ListDevices(self) -> List[VariantRecord]:
        return self._service.list_devices()

    @method()
    @dbus_signature("aa{sv}", device="s", port="u")
    def ListCounters(self, device: str, port: int) -> List[VariantRecord]:
        return self._service.list_counters(device, port)

    @method()
    @dbus_signature("aa{sv}", limit="u")
    def ListEvents(self, limit: int) -> List[VariantRecord]:
        return self._service.list_events(limit)

    @method()
    @dbus_signature("a{sv}")
    def GetStatus(self) -> VariantRecord:
        return self._service.get_status()

    @method()
    @dbus_signature("bs")
    async def Reload(self) -> List[Union[bool, str]]:
        accepted, message = await self._service.reload()
        return [accepted, message]

    # ------------------------------------------------------------- signals

    @signal()
    @dbus_signature("susbs")
    def PortHealthChanged(self, device: str, port: int, health: str, fatal: bool,
                          message: str) -> List[Union[str, int, bool]]:
        return [device, port, health, fatal, message]

    @signal()
    @dbus_signature("a{sv}")
    def EventEmitted(self, event: VariantRecord) -> VariantRecord:
        return event

    # ---------------------------------------------------------- properties

    @dbus_property(access=PropertyAccess.READ)
    @dbus_signature("s")
    def Version(self) -> str:
        return str(self._service.prop("Version"))

    @dbus_property(access=PropertyAccess.READ)
    @dbus_signature("s")
    def NodeName(self) -> str:
        return str(self._service.prop("NodeName"))

    @dbus_property(access=PropertyAccess.READ)
    @dbus_signature("s")
    def BootId(self) -> str:
        return str(self._service.prop("BootId"))

    @dbus_property(access=PropertyAccess.READ)
    @dbus_signature("s")
    def LastPoll(self) -> str:
        return str(self._service.prop("LastPoll"))

    @dbus_property(access=PropertyAccess.READ)
    @dbus_signature("t")
    def PollCount(self) -> int:
        return int(self._service.prop("PollCount"))

    @dbus_property(access=PropertyAccess.READ)
    @dbus_signature("d")
    def PollingInterval(self) -> float:
        return float(self._service.prop("PollingInterval"))

    @dbus_property(access=PropertyAccess.READ)
    @dbus_signature("s")
    def ConnectorState(self) -> str:
        return str(self._service.prop("ConnectorState"))

    @dbus_property(access=PropertyAccess.READ)
    @dbus_signature("u")
    def OutboxDepth(self) -> int:
        return int(self._service.prop("OutboxDepth"))

    @dbus_property(access=PropertyAccess.READ)
    @dbus_signature("u")
    def DeadLetters(self) -> int:
        return int(self._service.prop("DeadLetters"))

    @dbus_property(access=PropertyAccess.READ)
    @dbus_signature("s")
    def Health(self) -> str:
        return str(self._service.prop("Health"))

    @dbus_property(access=PropertyAccess.READ)
    @dbus_signature("s")
    def TopologySource(self) -> str:
        return str(self._service.prop("TopologySource"))

    @dbus_property(access=PropertyAccess.READ)
    @dbus_signature("s")
    def Topology(self) -> str:
        return str(self._service.prop("Topology"))
