"""A netdev link change of a monitored port wakes a poll at once (the kernel's rtnetlink
notification), so a RoCE or Ethernet port going down is reported within milliseconds whatever
the polling interval.

Polling stays the source of truth: a notification only asks for an early poll, which reads
sysfs like any other (and the interval's schedule is kept, :mod:`runtime.service`). A burst of
messages (admin down, then the carrier, then the operstate from linkwatch) asks once
(``BURST_SECONDS``), and early polls are rationed (:class:`EarlyPolls`) so that a storm
cannot turn into a poll per message. A socket that cannot be opened (a sandbox without
AF_NETLINK) is one log line, and polling goes on.

On by default only on the real host (``sysfsRoot`` = /sys): a simulated tree has no kernel
netdevs; ``linkEvents = "on"`` ties a simulated host's netdev names to real interfaces of the
daemon's network namespace (the test of this path uses veths named like the tree's netdevs).
"""

from __future__ import annotations

import asyncio
import errno
import logging
import socket
from typing import Callable, Iterable, Optional

from ..core.config import Config
from ..sources.rtnetlink import RECV_BYTES, open_link_socket, parse
from ..surfaces.context import PollOutcome

log = logging.getLogger("nichealthd")

# A change's messages come within a fraction of a millisecond of each other (admin down, then
# carrier and operstate; up: the flags, then operstate up): the wake waits this long so that
# they make one early poll even when the event loop reads them in two turns.
BURST_SECONDS = 0.002


class EarlyPolls:
    """How often link changes may poll early: ``burst`` at once (a card whose ports go down
    one after another is reported port by port), then ``per_second`` (a link flapping many
    times a second costs two extra polls a second). A token bucket."""

    def __init__(self, burst: int = 5, per_second: float = 2.0) -> None:
        self.burst, self.per_second = float(burst), per_second
        self._tokens, self._at = self.burst, float("-inf")

    def take(self, now: float, due: Optional[float]) -> Optional[float]:
        """When the early poll wanted at ``now`` may run, spending a token; None when the
        tick ``due`` (None: a poll at once) comes no later, and then nothing is spent."""
        tokens = min(self.burst, self._tokens + (now - self._at) * self.per_second)
        self._tokens, self._at = tokens, now
        at = now if tokens >= 1 else now + (1 - tokens) / self.per_second
        if due is None or at >= due:
            return None
        self._tokens -= 1
        return at


def enabled(config: Config) -> bool:
    """``linkEvents``: on, off, or auto (on when sysfs is the kernel's)."""
    if config.link_events == "auto":
        return config.host_sysfs
    return config.link_events == "on"


def watched_netdevs(outcome: PollOutcome) -> frozenset[str]:
    """The netdevs of the monitored devices' ports in a poll."""
    roles = outcome.result.roles
    return frozenset(port.netdev for device in outcome.snapshot.devices
                     if device.name in roles and roles[device.name].monitored
                     for port in device.ports if port.netdev)


class LinkWake:
    """Reads link notifications on the event loop; calls ``wake`` when a watched netdev's
    flags or operstate changed (or the kernel dropped notifications: ENOBUFS)."""

    def __init__(self, wake: Callable[[], None],
                 opener: Callable[[], socket.socket] = open_link_socket) -> None:
        self._wake = wake
        self._opener = opener
        self._sock: Optional[socket.socket] = None
        self._loop: Optional[asyncio.AbstractEventLoop] = None
        self.watched: frozenset[str] = frozenset()
        # name -> (flags, operstate) last seen; an index -> name for RTM_DELLINK without one
        self._links: dict[str, tuple[int, Optional[int]]] = {}
        self._names: dict[int, str] = {}
        self._pending: Optional[asyncio.TimerHandle] = None
        self.wakes = 0

    @property
    def listening(self) -> bool:
        return self._sock is not None

    def start(self, loop: asyncio.AbstractEventLoop) -> bool:
        """Open the socket and read it on ``loop``; False (logged once) when it cannot be."""
        if self._sock is not None:
            return True
        try:
            self._sock = self._opener()
        except OSError as exc:
            log.warning("cannot listen for link changes (rtnetlink: %s); a port going down is "
                        "seen at the next poll", exc.strerror or exc)
            return False
        self._loop = loop
        loop.add_reader(self._sock.fileno(), self._readable)
        return True

    def watch(self, names: Iterable[str]) -> None:
        names = frozenset(names)
        if names != self.watched:
            self.watched = names
            self._links = {k: v for k, v in self._links.items() if k in names}

    def close(self) -> None:
        if self._sock is None:
            return
        if self._pending is not None:
            self._pending.cancel()
            self._pending = None
        if self._loop is not None and not self._loop.is_closed():
            self._loop.remove_reader(self._sock.fileno())
        self._sock.close()
        self._sock = None

    def _readable(self) -> None:
        """Drain the socket (one burst, one wake)."""
        assert self._sock is not None
        changed = False
        while True:
            try:
                data = self._sock.recv(RECV_BYTES)
            except BlockingIOError:
                break
            except OSError as exc:
                if exc.errno == errno.ENOBUFS:  # notifications were lost: look now
                    changed = True
                    continue
                log.warning("link notifications stopped (rtnetlink: %s); a port going down "
                            "is seen at the next poll", exc.strerror or exc)
                self.close()
                break
            if not data:
                break
            changed = self.changed(data) or changed
        if changed and self._pending is None and self._loop is not None:
            self._pending = self._loop.call_later(BURST_SECONDS, self._fire)

    def _fire(self) -> None:
        self._pending = None
        self.wakes += 1
        self._wake()

    def changed(self, data: bytes) -> bool:
        """Whether a datagram says a watched link changed (and remember what it says)."""
        changed = False
        for message in parse(data):
            name = message.name or self._names.get(message.ifindex)
            if name is None:
                continue
            if name not in self.watched:
                continue
            self._names[message.ifindex] = name
            if message.deleted:
                self._links.pop(name, None)
                self._names.pop(message.ifindex, None)
                changed = True
            elif self._links.get(name) != message.link:
                self._links[name] = message.link
                changed = True
        return changed
