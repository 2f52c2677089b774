"""One completed poll as every surface reads it: a frozen picture with its answers built once.

The daemon makes one :class:`PollPicture` per completed poll (the snapshot, the evaluation,
the state that poll committed and the config it ran under) and hands that same object to
D-Bus, varlink, the metrics and STATUS= (ARCHITECTURE.md, "Surfaces"). What they show of it —
the health assessment (:func:`nichealthd.core.health.assess`), the status keys, the port,
device and counter records of :mod:`nichealthd.core.views` — is worked out here, lazily and
at most once per picture, so no surface keeps its own copy and none can tell a different
story. The metrics read it on their HTTP threads: every attribute is computed from immutable
inputs, so a race at worst computes one twice.

Records are shared by every reader: treat them as read-only.
"""

from __future__ import annotations

import functools
from dataclasses import dataclass, field
from typing import Any, Mapping, Optional

from .config import Config
from .evaluate import CycleResult
from .family import PortId
from .health import UNKNOWN, HostHealth, PortHealth
from .model import HostSnapshot
from .state import MonitorState
from .views import (
    assess_host,
    counter_records,
    device_records,
    health_status,
    port_records,
    status_summary,
)

Record = Mapping[str, Any]
MAX_FILTERED = 256  # ListCounters answers kept per picture (one per device/port argument)


@dataclass(frozen=True, eq=False)
class PollPicture:
    """The last completed poll with the committed state and the config it ran under."""

    snapshot: HostSnapshot
    result: CycleResult
    state: MonitorState
    config: Config
    _counters: dict[tuple[str, int], tuple[Record, ...]] = field(
        default_factory=dict, init=False, repr=False)

    @functools.cached_property
    def health(self) -> HostHealth:
        """The one health model over this poll (the poll thread has usually worked it out
        already: :func:`~nichealthd.core.views.assess_host` keeps that answer)."""
        return assess_host(self.snapshot, self.result, self.state)

    @functools.cached_property
    def status(self) -> Mapping[str, Any]:
        """The health keys of the daemon status (:func:`~nichealthd.core.views.health_status`)."""
        return health_status(self.snapshot, self.result, self.state, self.health)

    @functools.cached_property
    def summary(self) -> str:
        """The health part of STATUS= (:func:`~nichealthd.core.views.status_summary`)."""
        return status_summary(self.status)

    @functools.cached_property
    def ports(self) -> tuple[Record, ...]:
        """``ListPorts`` / ``show ports``: :func:`~nichealthd.core.views.port_records`."""
        return tuple(port_records(self.snapshot, self.result, self.state, self.health))

    @functools.cached_property
    def devices(self) -> tuple[Record, ...]:
        """``ListDevices`` / ``show devices``: :func:`~nichealthd.core.views.device_records`."""
        return tuple(device_records(self.snapshot, self.result, self.state))

    def counters(self, device: str = "", port: int = 0) -> tuple[Record, ...]:
        """``ListCounters(device, port)``: :func:`~nichealthd.core.views.counter_records`,
        built once per argument (at most :data:`MAX_FILTERED` of them are kept)."""
        key = (device, port)
        records = self._counters.get(key)
        if records is None:
            records = tuple(counter_records(self.snapshot, self.result, self.state,
                                            self.config, device, port))
            if len(self._counters) < MAX_FILTERED:
                self._counters[key] = records
        return records

    def health_of(self, key: PortId) -> PortHealth:
        """The model's health of one port; a port it does not judge (not monitored, or no
        longer anywhere in the picture) is ``unknown``, never guessed."""
        judged = self.health.ports.get(key)
        return judged if judged is not None else PortHealth(key[0], key[1], UNKNOWN)

    def port_record(self, key: PortId) -> Optional[Record]:
        """The ``ListPorts`` record of one port, None when it lists none."""
        return self._port_index.get(key)

    @functools.cached_property
    def _port_index(self) -> dict[PortId, Record]:
        return {(r["device"], r["port"]): r for r in self.ports}

    def counters_problem(self, device: str, port: int) -> Optional[tuple[str, str]]:
        """Why a device/port filter lists no counters, as (error name, message), or None.

        Names: ``UnknownDevice``, ``NotMonitored``, ``UnknownPort`` (D-Bus prefixes them with
        ``org.nichealthd.NicHealth1.Error.``, varlink with ``io.nichealthd.Monitor.``).
        """
        if not device:
            return None
        dev = next((d for d in self.snapshot.devices if d.name == device), None)
        if dev is None:
            known = ", ".join(d.name for d in self.snapshot.devices) or "none"
            return "UnknownDevice", f"no NIC named {device} on this host (present: {known})"
        role = self.result.roles.get(device)
        if not (role and role.monitored):
            reason = f"{role.role}: {role.reason}" if role else "not classified"
            return ("NotMonitored",
                    f"{device} is not monitored ({reason}); its counters are not read")
        if port and port not in [p.port for p in dev.ports]:
            ports = ", ".join(str(p.port) for p in dev.ports) or "none"
            return "UnknownPort", f"{device} has no port {port} (ports: {ports})"
        return None
