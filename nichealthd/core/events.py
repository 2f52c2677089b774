"""The health event model: NVSentinel's ``datamodels.HealthEvent`` as an immutable value.

Events are built by the pure checks and serialised here in one place, in the protobuf JSON
mapping with every field present (health_event.proto), so the event log, the D-Bus history,
``nichealthctl --json`` and the gRPC sender all agree on what an event is.
"""

from __future__ import annotations

import functools
from dataclasses import dataclass, field, replace
from datetime import datetime, timedelta, timezone
from typing import Any, Mapping

AGENT = "nic-health-monitor"
COMPONENT_CLASS = "NIC"
EVENT_ID_KEY = "nichealthd.event_id"
# The suspect part of an unhealthy event and what decided it (core/suspect.py), set by the
# evaluation; the committed message ends with them (:meth:`HealthEvent.stamped`).
SUSPECT_KEY = "nichealthd.suspect"
SUSPECT_EVIDENCE_KEY = "nichealthd.suspect_evidence"
SUSPECT_SUFFIX = " - suspect: "  # how the committed message says it

ENTITY_NIC = "NIC"
ENTITY_PORT = "NICPort"
ENTITY_PCI = "PCI"  # a PCI address (the function or hop an event is about)

# errorCode of conditions that are not counters: each condition keeps its own identity so that
# only the matching recovery clears it (so a port recovery never clears a counter's latched breach).
CODE_PORT_STATE = "port_state"
CODE_DEVICE_MISSING = "device_missing"
CODE_PORT_MISSING = "port_missing"
CODE_CARD_PORTS = "card_active_ports"
CODE_REBOOT_CLEAR = "reboot_clear"


@dataclass(frozen=True)
class HealthEvent:
    """One health event; field names follow the proto (NVSentinel's health_event.proto)."""

    check_name: str
    is_fatal: bool
    is_healthy: bool
    message: str
    recommended_action: str
    error_code: tuple[str, ...]
    entities: tuple[tuple[str, str], ...]
    generated_at: datetime
    metadata: Mapping[str, str] = field(default_factory=dict)
    node_name: str = ""
    processing_strategy: str = "EXECUTE_REMEDIATION"
    version: int = 1

    @property
    def severity(self) -> str:
        """``healthy``, ``fatal`` or ``degraded``: link-counter-detection §11.2's routing class."""
        if self.is_healthy:
            return "healthy"
        return "fatal" if self.is_fatal else "degraded"

    @property
    def event_id(self) -> str:
        return self.metadata.get(EVENT_ID_KEY, "")

    def stamped(self, node_name: str, processing_strategy: str, event_id: str) -> HealthEvent:
        """The event as committed: node, strategy and its stable id (set at commit time),
        its message ending with its suspect part (``- suspect: module (Tx bias ...)``)."""
        metadata = dict(self.metadata)
        metadata[EVENT_ID_KEY] = event_id
        message = self.message
        part = metadata.get(SUSPECT_KEY)
        if part:
            evidence = metadata.get(SUSPECT_EVIDENCE_KEY, "")
            told = f"{part} ({evidence})" if evidence else part
            message = f"{message}{SUSPECT_SUFFIX}{told}".replace(";", ",")
        return replace(self, node_name=node_name, processing_strategy=processing_strategy,
                       metadata=metadata, message=message)

    def to_json(self) -> dict[str, Any]:
        """Protobuf JSON mapping, proto field names, defaults included."""
        return {
            "version": self.version,
            "agent": AGENT,
            "componentClass": COMPONENT_CLASS,
            "checkName": self.check_name,
            "isFatal": self.is_fatal,
            "isHealthy": self.is_healthy,
            "message": self.message,
            "recommendedAction": self.recommended_action,
            "errorCode": list(self.error_code),
            "entitiesImpacted": [{"entityType": t, "entityValue": v} for t, v in self.entities],
            "metadata": dict(self.metadata),
            "generatedTimestamp": format_timestamp(self.generated_at),
            "nodeName": self.node_name,
            "processingStrategy": self.processing_strategy,
            "id": "",
            "customRecommendedAction": "",
        }

    @classmethod
    def from_json(cls, data: Mapping[str, Any]) -> HealthEvent:
        """Inverse of :meth:`to_json` (used to reload the outbox and history)."""
        return cls(
            check_name=data["checkName"],
            is_fatal=bool(data["isFatal"]),
            is_healthy=bool(data["isHealthy"]),
            message=data["message"],
            recommended_action=data["recommendedAction"],
            error_code=tuple(data.get("errorCode", ())),
            entities=tuple((e["entityType"], e["entityValue"])
                           for e in data.get("entitiesImpacted", ())),
            generated_at=parse_timestamp(data["generatedTimestamp"]),
            metadata=dict(data.get("metadata", {})),
            node_name=data.get("nodeName", ""),
            processing_strategy=data.get("processingStrategy", "EXECUTE_REMEDIATION"),
            version=int(data.get("version", 1)),
        )


def make_event(check_name: str, *, fatal: bool, healthy: bool, message: str,
               error_code: str, entities: tuple[tuple[str, str], ...],
               at: datetime) -> HealthEvent:
    """Build an event with the action the severity implies (REPLACE_VM only when fatal)."""
    return HealthEvent(
        check_name=check_name,
        is_fatal=fatal,
        is_healthy=healthy,
        message=message.replace(";", ","),  # NVSentinel's connector splits on ';'
        recommended_action="REPLACE_VM" if fatal and not healthy else "NONE",
        error_code=(error_code,),
        entities=entities,
        generated_at=at,
    )


def port_entities(device: str, port: int) -> tuple[tuple[str, str], ...]:
    return ((ENTITY_NIC, device), (ENTITY_PORT, str(port)))


def device_entities(device: str) -> tuple[tuple[str, str], ...]:
    return ((ENTITY_NIC, device),)


@functools.lru_cache(maxsize=1024)
def format_timestamp(moment: datetime) -> str:
    """RFC 3339 in UTC with 0, 3, 6 fractional digits, as protobuf's JSON printer does.

    Remembered: a state file holds a few hundred timestamps but only a handful of distinct
    moments (every velocity window of a poll closes at the poll's time), and formatting was
    two thirds of writing it. Formatted by hand, not with ``strftime``: glibc's runs
    ``tzset``, a ``stat`` of /etc/localtime at each call, where TZ is not set (the status's
    ``last_poll``, a new moment every poll, paid 56 µs for it)."""
    moment = moment.astimezone(timezone.utc)
    base = (f"{moment.year:04d}-{moment.month:02d}-{moment.day:02d}T"
            f"{moment.hour:02d}:{moment.minute:02d}:{moment.second:02d}")
    micros = moment.microsecond
    if micros == 0:
        return base + "Z"
    if micros % 1000 == 0:
        return f"{base}.{micros // 1000:03d}Z"
    return f"{base}.{micros:06d}Z"


def parse_timestamp(text: str) -> datetime:
    """Parse RFC 3339 (``Z`` or an offset, up to nanoseconds); returns an aware UTC datetime."""
    text = text.strip()
    if text.endswith(("Z", "z")):
        text = text[:-1] + "+00:00"
    if "." in text:
        head, _, rest = text.partition(".")
        digits = ""
        while rest and rest[0].isdigit():
            digits, rest = digits + rest[0], rest[1:]
        text = f"{head}.{(digits + '000000')[:6]}{rest}"
    moment = datetime.fromisoformat(text)
    if moment.tzinfo is None:
        moment = moment.replace(tzinfo=timezone.utc)
    return moment.astimezone(timezone.utc)


def local_clock(text: str) -> str:
    """``15:37:46``: the local time of day of an RFC 3339 stamp, as ``systemctl status``
    shows times; "" when it is empty or not a time."""
    try:
        return f"{parse_timestamp(text).astimezone():%H:%M:%S}" if text else ""
    except ValueError:
        return ""


BACKDATE = timedelta(milliseconds=1)
