"""The Slurm consumer as a daemon service: a thread woken by every commit (``..seam``).

A thread, as the connector's sender: scontrol may wait for a slurmctld that is down for its
whole timeout, and that must never delay a poll or the watchdog. The service exists whatever
the configuration says, so a reload can switch ``slurmDrain`` on or off; while it is off the
thread is not started or idles.
"""

from __future__ import annotations

import logging
from typing import TYPE_CHECKING

from ...core.config import Config
from ..seam import STOP_SECONDS, ConsumerService
from .consumer import CONSUMER, SlurmConsumer, node_of, settings_of

if TYPE_CHECKING:  # pragma: no cover
    from ..context import ServiceContext

log = logging.getLogger("nichealthd.slurm")


class SlurmService(ConsumerService):
    """Drains (and resumes) this node in Slurm on committed events (``slurmDrain``)."""

    name = "Slurm drain"

    def __init__(self, context: ServiceContext) -> None:
        super().__init__(SlurmConsumer(context.config(), context.journal,
                                       on_status=context.publisher(CONSUMER)))

    def wanted(self, config: Config) -> bool:
        return settings_of(config).drain

    def starting(self, config: Config) -> None:
        log.info("Slurm drain on for node %s%s", node_of(config),
                 " (dry run: commands are logged, not run)" if settings_of(config).dry_run
                 else "")

    def late(self) -> None:
        log.warning("Slurm consumer did not finish its command within %.0f s; the event "
                    "stays pending for the next start", STOP_SECONDS)
