"""Forwarding committed events to NVSentinel's platform connector over gRPC.

A surface on the seam (``surfaces/seam.py``): found by its ``SURFACE``, it keeps the
``connector`` journal cursor while a connector is configured; without grpcio the outbox is
kept (``held.py``) and delivered after a restart with the library installed. Its keys
(and two daemon flags) are declared in ``settings.py``.
"""

from ..seam import Surface
from .settings import ConnectorSettings

SURFACE = Surface(
    "forwarding to the platform connector", "nichealthd.surfaces.connector.service",
    "ConnectorService", lambda config: bool(config.settings(ConnectorSettings).socket),
    libraries=("grpc", "google.protobuf"),
    install="python3-grpcio and python3-protobuf (pip: grpcio protobuf)",
    without="events are kept in the outbox (bounded by outboxMaxEvents/outboxMaxBytes) and "
            "sent after a restart with the library installed",
    fallback="nichealthd.surfaces.connector.held:HeldOutbox",
    cursor="connector", settings=ConnectorSettings, order=10)
