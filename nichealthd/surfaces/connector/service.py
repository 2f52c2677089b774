"""The platform connector as a daemon service: a sender thread woken by every commit (``..seam``).

The sender runs in its own thread with the synchronous gRPC API rather than ``grpc.aio`` on
the event loop: its journal I/O (cursor fsyncs, an occasional rewrite of a large outbox) and
any call to a hung connector then stay off the loop, so neither can delay a poll or the
watchdog. The loop only sets an event (``on_poll``); the sender publishes its status as an
immutable :class:`~nichealthd.surfaces.connector.status.ConnectorStatus` through the context's
status channel (``..status``), under the name ``connector``.
"""

from __future__ import annotations

import logging
from typing import TYPE_CHECKING, Callable

from ..seam import STOP_SECONDS, ConsumerService, Outcome
from .outbox import CONSUMER
from .sender import Sender
from .settings import settings_of
from .status import ConnectorStatus

if TYPE_CHECKING:  # pragma: no cover
    from ..context import ServiceContext

log = logging.getLogger("nichealthd.connector")


class ConnectorService(ConsumerService):
    """Forwards committed events to the platform connector (disabled by an empty target);
    when stopped, the sender delivers what is pending for a bounded time first."""

    name = "platform connector"

    def __init__(self, context: ServiceContext) -> None:
        config = context.config()
        self.enabled = bool(settings_of(config).socket)
        # The sender publishes every change of its status through the status channel; a
        # disabled one (the daemon leaves this service out) publishes nothing.
        publish: Callable[[ConnectorStatus], None] = context.publisher(CONSUMER)
        if not self.enabled:
            publish(ConnectorStatus())
            publish = _unpublished
        self.sender = Sender(config, context.journal, on_status=publish)
        super().__init__(self.sender)

    def on_poll(self, outcome: Outcome) -> None:
        depth = self.sender.journal.depth(CONSUMER)
        if depth != self.sender.report().outbox_depth:  # published only as it changes
            self.sender.update(outbox_depth=depth)
        super().on_poll(outcome)

    def idle(self) -> bool:
        """The depth the sender published is the outbox's (the sender publishes it at each
        step; a poll publishes a change the sender has not)."""
        return self.sender.journal.depth(CONSUMER) == self.sender.report().outbox_depth

    def late(self) -> None:
        log.warning("platform connector did not finish within %.0f s; %d event(s) stay "
                    "in the outbox for the next start", STOP_SECONDS,
                    self.sender.journal.depth(CONSUMER))


def _unpublished(status: ConnectorStatus) -> None:
    """The status callback of a disabled connector."""
