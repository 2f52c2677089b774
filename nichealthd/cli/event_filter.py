"""Which events ``nichealthctl events --since/--device`` keeps: after a moment, about one NIC.

A filter of the client, over the history the daemon keeps (``eventHistorySize``) and over
the events that follow: the D-Bus and varlink APIs stay as they are, and the same rules apply
to both. ``--since`` reads as ``journalctl --since`` does for the forms an operator types
after a page: a time of day or a date and time (local time unless it says its zone, RFC 3339
too), or how long ago (``30m``, ``2h``, ``1d``, ``-2h``, ``2h ago``). ``--device`` takes the
kernel name of the NIC (the ``NIC`` entity of an event), ``DEV/PORT`` for one port, or the PCI
address of a lost NIC (its ``PCI`` entity).
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from datetime import datetime, timedelta, timezone
from typing import Optional

from ..core.events import ENTITY_NIC, ENTITY_PCI, ENTITY_PORT, parse_timestamp
from ..core.jsontypes import JsonRecord

_AGO = re.compile(r"^-?\s*(\d+(?:\.\d+)?)\s*(s|m|min|h|d)\s*(?:ago)?$")
_UNIT = {"s": 1.0, "m": 60.0, "min": 60.0, "h": 3600.0, "d": 86400.0}
_CLOCK = re.compile(r"^\d{1,2}:\d{2}(?::\d{2})?$")
_ZONE = re.compile(r"(?:[zZ]|[+-]\d{2}:\d{2})$")
SINCE_FORMS = ("30m, 2h, 1d (ago), 14:05 (today), 2026-05-01, 2026-05-01 14:05 or an RFC "
               "3339 time")


def parse_since(text: str, now: datetime) -> datetime:
    """The moment ``--since TEXT`` names, as an aware UTC datetime; ValueError saying the
    accepted forms. ``now`` is aware; times without a zone are local, as journalctl reads
    them."""
    text = text.strip()
    ago = _AGO.match(text)
    if ago:
        return now - timedelta(seconds=float(ago.group(1)) * _UNIT[ago.group(2)])
    local = now.astimezone()
    if _CLOCK.match(text):
        hour, minute, *second = (int(part) for part in text.split(":"))
        try:
            moment = local.replace(hour=hour, minute=minute, second=second[0] if second else 0,
                                   microsecond=0)
        except ValueError:
            raise ValueError(f"--since {text!r}: not a time of day") from None
        return moment.astimezone(timezone.utc)
    try:
        if ":" in text and _ZONE.search(text):
            return parse_timestamp(text)
        moment = datetime.fromisoformat(text.replace("T", " ").replace("t", " "))
    except ValueError:
        raise ValueError(f"--since {text!r}: expected {SINCE_FORMS}") from None
    if moment.tzinfo is None:
        moment = moment.replace(tzinfo=local.tzinfo)
    return moment.astimezone(timezone.utc)


@dataclass(frozen=True)
class EventFilter:
    """What to keep: events at or after ``since``, about ``device`` (and its ``port``)."""
    since: Optional[datetime] = None
    device: str = ""
    port: int = 0

    def __bool__(self) -> bool:
        return self.since is not None or bool(self.device)

    def keeps(self, event: JsonRecord) -> bool:
        if self.since is not None:
            try:
                if parse_timestamp(str(event.get("generatedTimestamp", ""))) < self.since:
                    return False
            except ValueError:
                return False  # no time: it cannot be shown to be after
        if not self.device:
            return True
        entities = event.get("entitiesImpacted") or []
        pairs = {(str(e.get("entityType", "")), str(e.get("entityValue", "")))
                 for e in entities if isinstance(e, dict)} if isinstance(entities, list) \
            else set()
        if (ENTITY_NIC, self.device) not in pairs and (ENTITY_PCI, self.device) not in pairs:
            return False
        return not self.port or (ENTITY_PORT, str(self.port)) in pairs
