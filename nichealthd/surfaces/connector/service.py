"""The platform connector as a daemon service: a sender thread woken by every commit.

The sender runs in its own thread with the synchronous gRPC API rather than ``grpc.aio`` on
the event loop: its journal I/O (cursor fsyncs, an occasional rewrite of a large outbox) and
any call to a hung connector then stay off the loop, so neither can delay a poll or the
watchdog. The loop only sets an event (``on_poll``); the sender publishes its status as an
immutable :class:`~nichealthd.surfaces.connector.status.ConnectorStatus` through the context.
"""

from __future__ import annotations

import asyncio
import logging
import threading
import time
from typing import TYPE_CHECKING, Optional

from ...core.config import Config
from ..context import PollOutcome
from .outbox import CONSUMER
from .sender import Sender
from .status import ConnectorStatus

if TYPE_CHECKING:  # pragma: no cover
    from ..context import ServiceContext

log = logging.getLogger("nichealthd.connector")

STOP_DRAIN_SECONDS = 4.0  # the daemon bounds a service's stop at 5 s


class ConnectorService:
    """Forwards committed events to the platform connector (disabled by an empty target)."""

    name = "platform connector"

    def __init__(self, context: ServiceContext) -> None:
        self.journal = context.journal
        config = context.config()
        self.enabled = bool(config.platform_connector_socket)
        self.sender: Optional[Sender] = None
        self._thread: Optional[threading.Thread] = None
        if not self.enabled:
            context.publish_connector(ConnectorStatus())
            return
        # The sender publishes every change of its status through the context's callback.
        self.sender = Sender(config, self.journal, on_status=context.publish_connector)

    async def start(self) -> None:
        if self.sender is None:
            return
        self._thread = threading.Thread(target=self.sender.run, args=(STOP_DRAIN_SECONDS,),
                                        name="connector", daemon=True)
        self._thread.start()

    def on_poll(self, outcome: PollOutcome) -> None:
        if self.sender is None:
            return
        self.sender.update(outbox_depth=self.journal.depth(CONSUMER))
        if outcome.committed:
            self.sender.wake()

    def on_reload(self, config: Config) -> None:
        if self.sender is not None:
            self.sender.reconfigure(config)

    async def stop(self) -> None:
        """Let the sender deliver what is pending for a bounded time, then return."""
        if self.sender is None or self._thread is None:
            return
        self.sender.request_stop()
        deadline = time.monotonic() + STOP_DRAIN_SECONDS + 0.5
        while self._thread.is_alive() and time.monotonic() < deadline:
            await asyncio.sleep(0.02)
        if self._thread.is_alive():
            log.warning("platform connector did not finish within %.0f s; %d event(s) stay "
                        "in the outbox for the next start", STOP_DRAIN_SECONDS,
                        self.journal.depth(CONSUMER))
