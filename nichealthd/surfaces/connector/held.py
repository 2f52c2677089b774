"""The connector's place on a host without grpcio: the outbox kept and bounded, nothing sent.

:mod:`nichealthd.runtime.libraries` runs this instead of the connector service when the gRPC
library is missing and a connector is configured. Every committed event stays in the outbox
(the journal keeps what the connector's cursor has not passed), so a restart with the library
installed delivers it; the outbox is bounded as while the connector is down, and the status
says ``unavailable`` with the reason.
"""

from __future__ import annotations

import logging
from dataclasses import replace
from datetime import datetime, timezone
from typing import TYPE_CHECKING

from ...core.config import Config
from ...core.events import format_timestamp
from ..context import PollOutcome
from .outbox import CONSUMER, trim_outbox
from .settings import settings_of
from .status import UNAVAILABLE, ConnectorStatus

if TYPE_CHECKING:  # pragma: no cover
    from ..context import ServiceContext

log = logging.getLogger("nichealthd.connector")

WHY = "the Python gRPC library (grpcio, protobuf) is not installed: events stay in the outbox"


class HeldOutbox:
    """Keeps the connector's outbox without sending it."""

    name = "platform connector (outbox only)"

    def __init__(self, context: ServiceContext) -> None:
        self.journal = context.journal
        self.config = context.config()
        self.publish = context.publisher(CONSUMER)
        self.status = ConnectorStatus(
            state=UNAVAILABLE, since=format_timestamp(datetime.now(timezone.utc)),
            last_error=WHY, outbox_depth=self.journal.depth(CONSUMER),
            target=settings_of(self.config).socket)
        self.publish(self.status)

    async def start(self) -> None:
        return None

    def on_poll(self, outcome: PollOutcome) -> None:
        if not outcome.committed:
            return
        dropped = trim_outbox(self.journal, self.config, UNAVAILABLE, self.status.dropped, log)
        depth = self.journal.depth(CONSUMER)
        if dropped or depth != self.status.outbox_depth:
            self.status = replace(self.status, outbox_depth=depth,
                                  dropped=self.status.dropped + len(dropped))
            self.publish(self.status)

    def idle(self) -> bool:
        """A poll that commits nothing changes nothing here."""
        return True

    def on_reload(self, config: Config) -> None:
        self.config = config

    async def stop(self) -> None:
        return None
