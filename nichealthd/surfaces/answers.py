"""What the D-Bus and varlink APIs answer, built once for both from the pure views.

The records themselves are :mod:`nichealthd.core.views`; this module adds what both API
surfaces say beyond them: an event as the APIs send it (DESIGN §2.4 plus ``seq`` and
``severity``) and why a ``ListCounters`` for one device or port has nothing to list.
"""

from __future__ import annotations

from typing import Any, Dict, Optional, Tuple

from ..core.evaluate import CycleResult
from ..core.model import HostSnapshot
from ..storage.store import JournalEntry


def event_record(entry: JournalEntry) -> Dict[str, Any]:
    """An event as the APIs send it: DESIGN §2.4 JSON plus ``seq`` and ``severity``."""
    record: Dict[str, Any] = {"seq": entry.seq, "severity": entry.event.severity}
    record.update(entry.event.to_json())
    return record


def counters_problem(snapshot: HostSnapshot, result: CycleResult, device: str,
                     port: int) -> Optional[Tuple[str, str]]:
    """Why a device/port filter lists no counters, as (error name, message), or None.

    Names: ``UnknownDevice``, ``NotMonitored``, ``UnknownPort`` (D-Bus prefixes them with
    ``org.nichealthd.NicHealth1.Error.``, varlink with ``io.nichealthd.Monitor.``).
    """
    if not device:
        return None
    dev = next((d for d in snapshot.devices if d.name == device), None)
    if dev is None:
        known = ", ".join(d.name for d in snapshot.devices) or "none"
        return "UnknownDevice", f"no NIC named {device} on this host (present: {known})"
    role = result.roles.get(device)
    if not (role and role.monitored):
        reason = f"{role.role}: {role.reason}" if role else "not classified"
        return "NotMonitored", f"{device} is not monitored ({reason}); its counters are not read"
    if port and port not in [p.port for p in dev.ports]:
        ports = ", ".join(str(p.port) for p in dev.ports) or "none"
        return "UnknownPort", f"{device} has no port {port} (ports: {ports})"
    return None
