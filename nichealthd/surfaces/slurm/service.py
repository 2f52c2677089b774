"""The Slurm consumer as a daemon service: a thread woken by every commit.

A thread, as the connector's sender (:mod:`..connector.service`): scontrol may wait for a
slurmctld that is down for its whole timeout, and that must never delay a poll or the
watchdog. The service exists whatever the configuration says, so a reload can switch
``slurmDrain`` on or off; while it is off the thread is not started or idles.
"""

from __future__ import annotations

import asyncio
import logging
import threading
import time
from typing import TYPE_CHECKING, Optional

from ...core.config import Config
from ..context import PollOutcome
from .consumer import SlurmConsumer

if TYPE_CHECKING:  # pragma: no cover
    from ..context import ServiceContext

log = logging.getLogger("nichealthd.slurm")

STOP_SECONDS = 4.0  # the daemon bounds a service's stop at 5 s


class SlurmService:
    """Drains (and resumes) this node in Slurm on committed events (``slurmDrain``)."""

    name = "Slurm drain"

    def __init__(self, context: ServiceContext) -> None:
        self._stop = threading.Event()
        self._wake = threading.Event()
        self._thread: Optional[threading.Thread] = None
        self.consumer = SlurmConsumer(context.config(), context.journal,
                                      sleep=self._sleep, on_status=context.publish_slurm)

    def _sleep(self, seconds: float) -> bool:
        return not self._stop.wait(seconds)

    async def start(self) -> None:
        self._start_thread(self.consumer.config)

    def _start_thread(self, config: Config) -> None:
        if self._thread is not None or not config.slurm_drain:
            return
        log.info("Slurm drain on for node %s%s", config.slurm_node_name or config.node_name,
                 " (dry run: commands are logged, not run)" if config.slurm_dry_run else "")
        self._thread = threading.Thread(target=self._run, name="slurm", daemon=True)
        self._thread.start()

    def _run(self) -> None:
        while not self._stop.is_set():
            try:
                delay = self.consumer.step()
            except Exception:  # a bug here must not end draining for the daemon's lifetime
                log.exception("Slurm consumer step failed; retrying")
                delay = self.consumer.pause
            if delay > 0:
                self._wake.wait(delay)
            self._wake.clear()

    def on_poll(self, outcome: PollOutcome) -> None:
        if outcome.committed and self._thread is not None:
            self._wake.set()

    def on_reload(self, config: Config) -> None:
        self.consumer.reconfigure(config)  # taken by the thread at its next step
        self._start_thread(config)
        self._wake.set()

    async def stop(self) -> None:
        if self._thread is None:
            return
        self._stop.set()
        self._wake.set()
        deadline = time.monotonic() + STOP_SECONDS
        while self._thread.is_alive() and time.monotonic() < deadline:
            await asyncio.sleep(0.02)
        if self._thread.is_alive():
            log.warning("Slurm consumer did not finish its command within %.0f s; the event "
                        "stays pending for the next start", STOP_SECONDS)
