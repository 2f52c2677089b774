"""The gRPC side of the link to the platform connector, imported at the first connect only.

gRPC and the generated modules hold about 26 MiB of a daemon's memory (half of it, measured
with ``bench/run.py``): a host without NVSentinel, where the connector's socket never exists,
never imports them. The sender (``sender.py``) keeps everything else: batching, retries,
tokens, the status.
"""

from __future__ import annotations

from typing import Iterable

import grpc

from ...core.events import HealthEvent
from . import health_event_pb2_grpc as pb_grpc
from .convert import to_batch

RpcError = grpc.RpcError


class Channel:
    """One gRPC channel to the connector and its stub."""

    def __init__(self, target: str) -> None:
        self._channel = grpc.insecure_channel(target)
        self._stub = pb_grpc.PlatformConnectorStub(self._channel)  # type: ignore[no-untyped-call]

    def call(self, events: Iterable[HealthEvent], timeout: float,
             metadata: list[tuple[str, str]]) -> None:
        """One ``HealthEventOccurredV1`` call; raises :data:`RpcError`."""
        self._stub.HealthEventOccurredV1(to_batch(events), timeout=timeout, metadata=metadata)

    def ready(self, timeout: float) -> bool:
        """Whether the channel connects within ``timeout`` seconds (no call is made)."""
        try:
            grpc.channel_ready_future(self._channel).result(timeout=timeout)
        except grpc.FutureTimeoutError:
            return False
        return True

    def close(self) -> None:
        self._channel.close()


def status_of(exc: grpc.RpcError) -> tuple[str, str]:
    """The status code's name and the detail of a failed call."""
    code = exc.code() if hasattr(exc, "code") else grpc.StatusCode.UNKNOWN
    detail = exc.details() if hasattr(exc, "details") else str(exc)
    return code.name, detail or ""
