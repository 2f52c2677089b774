"""HealthEvent -> ``datamodels.HealthEvent``: the one place that maps our model onto the proto.

Enums travel by name (the event model stores proto enum names) so that the proto's numbers are
only ever looked up here; the JSON contract (``HealthEvent.to_json``) and this mapping are
checked against each other by the tests.
"""

from __future__ import annotations

import calendar
from datetime import timezone
from typing import Any, Iterable

from ...core.events import AGENT, COMPONENT_CLASS, HealthEvent
from . import health_event_pb2 as pb

HEALTH_EVENTS_VERSION = 1


def to_proto(event: HealthEvent) -> pb.HealthEvent:
    """The wire message for one committed event."""
    message = pb.HealthEvent(
        version=event.version,
        agent=AGENT,
        componentClass=COMPONENT_CLASS,
        checkName=event.check_name,
        isFatal=event.is_fatal,
        isHealthy=event.is_healthy,
        message=event.message,
        recommendedAction=_enum(pb.RecommendedAction, event.recommended_action, "UNKNOWN"),
        errorCode=list(event.error_code),
        entitiesImpacted=[pb.Entity(entityType=t, entityValue=v) for t, v in event.entities],
        nodeName=event.node_name,
        processingStrategy=_enum(pb.ProcessingStrategy, event.processing_strategy,
                                 "UNSPECIFIED"),
    )
    message.metadata.update(event.metadata)
    moment = event.generated_at.astimezone(timezone.utc)
    # Computed by hand: Timestamp.FromDatetime treats aware datetimes differently across the
    # protobuf versions we support (3.21 ignores the offset).
    message.generatedTimestamp.seconds = calendar.timegm(moment.utctimetuple())
    message.generatedTimestamp.nanos = moment.microsecond * 1000
    return message


def to_batch(events: Iterable[HealthEvent]) -> pb.HealthEvents:
    """One ``HealthEventOccurredV1`` request, events in the given (commit) order."""
    return pb.HealthEvents(version=HEALTH_EVENTS_VERSION, events=[to_proto(e) for e in events])


def _enum(enum: Any, name: str, fallback: str) -> Any:
    """Enum value by name; an unknown name (never produced by the checks) maps to ``fallback``."""
    try:
        return enum.Value(name)
    except ValueError:
        return enum.Value(fallback)
