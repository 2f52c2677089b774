"""Each committed event POSTed as JSON to a URL: a surface on the seam (surfaces/seam.py).

The worked example of ARCHITECTURE.md, "Adding a surface": copied into
``nichealthd/surfaces/`` it is found by its ``SURFACE``; its keys (``webhookUrl``,
``webhookTimeout``) are declared by :class:`WebhookSettings`, its journal cursor ``webhook``
is kept while a URL is set, and the shared loop delivers at least once: an event whose POST
fails is tried again (three attempts with backoff), then after a pause, or after a restart,
before any later one. It supplies only :meth:`WebhookConsumer.act`; its status (ok, failing with
the last error, off; the events pending on its cursor; its last success) is the seam's, published
through the context, so ``nichealthctl status``, D-Bus, varlink and ``/metrics`` show it.
"""

from __future__ import annotations

import json
import logging
import urllib.error
import urllib.request
from dataclasses import dataclass
from typing import TYPE_CHECKING, Optional, Sequence

from nichealthd.core.config import Config
from nichealthd.core.settings import Duration, Settings, setting, string
from nichealthd.storage.store import Journal, JournalEntry
from nichealthd.surfaces.seam import ConsumerService, JournalConsumer, Pace, Surface

if TYPE_CHECKING:  # pragma: no cover
    from nichealthd.surfaces.context import ServiceContext

log = logging.getLogger("nichealthd.webhook")

CURSOR = "webhook"
ATTEMPTS = 3


@dataclass(frozen=True)
class WebhookSettings(Settings):
    """nichealthd.toml(5): webhookUrl, webhookTimeout."""

    url: str = setting("webhookUrl", "", string,
                       "URL each committed event is POSTed to as JSON; empty switches it off.")
    timeout: float = setting("webhookTimeout", 5.0, Duration(0.1, 60.0),
                             "Deadline of one POST to webhookUrl")


def post(settings: WebhookSettings, body: bytes) -> Optional[str]:
    """POST ``body``; None when the server took it (2xx), else why not."""
    request = urllib.request.Request(settings.url, data=body, method="POST",
                                     headers={"Content-Type": "application/json"})
    try:
        with urllib.request.urlopen(request, timeout=settings.timeout) as response:
            response.read()
    except (OSError, ValueError) as exc:  # URLError and HTTPError are OSErrors
        return str(exc)
    return None


class WebhookConsumer(JournalConsumer):
    """POSTs each event of the ``webhook`` cursor, in commit order."""

    cursor = CURSOR
    log = log

    def __init__(self, config: Config, journal: Journal) -> None:
        super().__init__(config, journal, Pace(backoff_base=0.5, backoff_cap=5.0, pause=5.0))

    def active(self) -> bool:
        return bool(self.config.settings(WebhookSettings).url)

    def act(self, entry: JournalEntry, following: Sequence[JournalEntry]) -> bool:
        settings = self.config.settings(WebhookSettings)
        body = json.dumps({"seq": entry.seq, "event": entry.event.to_json()}).encode()
        error = self.attempts(lambda: post(settings, body), lambda e: e is not None, ATTEMPTS)
        if error is not None:
            log.warning("webhook %s: %s; event %d stays pending", settings.url, error,
                        entry.seq)
            self.last_error = error  # its status says why it is failing
            return False
        return True


class WebhookService(ConsumerService):
    """Posts committed events to ``webhookUrl`` (off while it is empty)."""

    name = "webhook"

    def __init__(self, context: ServiceContext) -> None:
        super().__init__(WebhookConsumer(context.config(), context.journal), context.publish)

    def wanted(self, config: Config) -> bool:
        return bool(config.settings(WebhookSettings).url)


SURFACE = Surface("posting events to a webhook", __name__, "WebhookService",
                  lambda config: bool(config.settings(WebhookSettings).url),
                  cursor=CURSOR, settings=WebhookSettings)
