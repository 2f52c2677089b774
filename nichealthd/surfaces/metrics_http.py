"""The HTTP server of ``/metrics`` and ``/healthz``: bounded, and never blinded by clients.

A threading ``wsgiref`` server (a slow scraper or the work of building the families never
delays the event loop or the poller) that holds at most ``max_clients`` connections, so the
open-file plan (``runtime/fdplan.py``) can count them, and keeps ``/healthz`` answerable by
a newcomer whatever the other clients do:

- A whole request, its line and its headers, must arrive within :data:`REQUEST_DEADLINE`
  of the connection's accept, or the connection is closed: a client that trickles a header
  every few seconds, or sends nothing, holds a slot for that long at most. Once a request
  is whole it is answered at once (the answers are built from the last poll's picture).
- At the cap, the server accepts a newcomer only by closing a connection still waiting
  for its request: the oldest of the peer address that holds the most connections (so one
  address cannot hold every slot against another), once it has waited :data:`EVICT_AFTER`.
  Until there is one, newcomers wait in the kernel's listen backlog (in order, costing the
  daemon no descriptor) rather than being refused: a probe is let in within about
  :data:`EVICT_AFTER` of its turn, and answered in milliseconds, long before it could be
  closed in turn.
- A client's misbehaviour is one rate-limited log line (:class:`ClientErrors`), never a
  traceback.
"""

from __future__ import annotations

import contextlib
import logging
import math
import selectors
import socket
import socketserver
import sys
import threading
import time
from dataclasses import dataclass
from typing import Any, Callable, Iterable, Optional
from wsgiref.simple_server import WSGIRequestHandler, WSGIServer, make_server

from .admission import METRICS_CLIENTS

log = logging.getLogger("nichealthd.metrics")

CLOSE_WAIT_SECONDS = 5.0  # for the HTTP thread to leave its wait when the server closes
# A normal listen backlog (socketserver's default is 5); the kernel caps it at somaxconn.
LISTEN_BACKLOG = max(128, socket.SOMAXCONN)
REQUEST_DEADLINE = 5.0  # seconds from accept to the end of the request's headers
EVICT_AFTER = 1.0  # a connection waiting this long for its request may be closed at the cap
CLIENT_TIMEOUT = 10.0  # writing an answer to a client that reads nothing
MAX_CLIENTS = METRICS_CLIENTS
EVICTING = 16  # connections closed whose threads have not ended yet, beyond the cap
CLIENT_ERROR_LOG_SECONDS = 60.0  # at most one line a minute about clients that misbehave


class RequestDeadline(TimeoutError):
    """The client did not send a whole request within :data:`REQUEST_DEADLINE`."""


class ClientErrors:
    """Client errors (deadlines, resets) as one rate-limited line, never a traceback.

    The stdlib server printed a 15-line traceback for each client it dropped. The first
    error is logged at once, later ones at most every ``CLIENT_ERROR_LOG_SECONDS`` with a
    count.
    """

    def __init__(self, clock: Callable[[], float] = time.monotonic) -> None:
        self._clock = clock
        self._lock = threading.Lock()
        self._logged_at: Optional[float] = None
        self._since = 0
        self.total = 0

    def report(self, client: str, exc: BaseException) -> None:
        now = self._clock()
        with self._lock:
            self.total += 1
            self._since += 1
            last = self._logged_at
            if last is not None and now - last < CLIENT_ERROR_LOG_SECONDS:
                return
            count, self._since, self._logged_at = self._since, 0, now
        if isinstance(exc, RequestDeadline):
            what = f"sent no whole request within {REQUEST_DEADLINE:g} s"
        elif isinstance(exc, TimeoutError):
            what = "timed out"
        else:
            what = f"failed: {type(exc).__name__}: {exc}"
        more = "" if last is None else \
            f" ({count} client errors in the last {now - last:.0f} s)"
        log.warning("metrics HTTP client %s %s; connection closed%s", client, what, more)


@dataclass
class _Connection:
    peer: str
    accepted: float
    waiting: bool = True  # no whole request yet
    closing: bool = False  # closed by the server; its thread has not ended yet


class Server(socketserver.ThreadingMixIn, WSGIServer):
    """Threading WSGI server; each connection in its own daemon thread, admitted as the
    module says."""

    daemon_threads = True
    allow_reuse_address = True
    request_queue_size = LISTEN_BACKLOG
    client_errors: Optional[ClientErrors] = None
    max_clients = MAX_CLIENTS
    # Set in server_bind: every connection whose thread runs (in accept order), and the
    # connections closed for the cap since the last line about them.
    _lock: threading.Lock
    _connections: dict[Any, _Connection]
    _closed: dict[str, int]
    _closed_logged_at: Optional[float]
    _shutting: bool

    @property
    def clients(self) -> int:
        """Connections held (those closed by the server whose threads still run excluded)."""
        with self._lock:
            return sum(not c.closing for c in self._connections.values())

    @property
    def waiting(self) -> int:
        """Connections held that have not sent a whole request yet."""
        with self._lock:
            return sum(c.waiting and not c.closing for c in self._connections.values())

    def verify_request(self, request: Any, client_address: Any) -> bool:
        """Admit the connection just accepted, closing a waiting one for it at the cap (the
        acceptor accepts at the cap only when there is one: :meth:`_tend`)."""
        now = time.monotonic()
        peer = str(client_address[0]) if isinstance(client_address, tuple) else \
            str(client_address)
        with self._lock:
            victim = self._victim(now)[0] if self._held() >= self.max_clients else None
            if self._held() >= self.max_clients and victim is None:
                self._closed_note("closed at once, every connection busy")
                return False
            if victim is not None:
                self._connections[victim].closing = True
                self._closed_note("waiting for their request closed for newer ones")
            self._connections[request] = _Connection(peer, now)
        if victim is not None:
            _shut(victim)
        return True

    def _held(self) -> int:
        return sum(not c.closing for c in self._connections.values())

    def _victim(self, now: float) -> tuple[Any, float]:
        """The connection to close for a newcomer (lock held): the oldest connection still
        waiting for its request of the peer that holds the most connections (and has one
        waiting), once it has waited EVICT_AFTER; (None, seconds until then) before, and
        (None, inf) when every connection is answering."""
        held: dict[str, int] = {}
        oldest: dict[str, tuple[Any, _Connection]] = {}
        for request, connection in self._connections.items():  # in accept order
            if connection.closing:
                continue
            held[connection.peer] = held.get(connection.peer, 0) + 1
            if connection.waiting:
                oldest.setdefault(connection.peer, (request, connection))
        if not oldest:
            return None, math.inf
        request, connection = oldest[max(oldest, key=lambda peer: held[peer])]
        wait = connection.accepted + EVICT_AFTER - now
        return (request, 0.0) if wait <= 0 else (None, wait)

    def request_read(self, request: Any) -> bool:
        """The connection sent a whole request: it is answered, no longer closed for others.
        False when the server closed it first (what was read may be cut short)."""
        with self._lock:
            connection = self._connections.get(request)
            if connection is None or connection.closing:
                return False
            connection.waiting = False
            return True

    def _tend(self, now: float) -> tuple[Optional[float], bool]:
        """Close the connections past their request deadline; (seconds until this needs
        doing again, None for never; whether to accept a newcomer now)."""
        late: list[tuple[Any, str]] = []
        wake: Optional[float] = None
        with self._lock:
            for request, connection in self._connections.items():
                if not connection.waiting or connection.closing:
                    continue
                due = connection.accepted + REQUEST_DEADLINE - now
                if due <= 0:
                    connection.closing = True
                    late.append((request, connection.peer))
                else:
                    wake = due if wake is None else min(wake, due)
            accept = len(self._connections) < self.max_clients + EVICTING
            if accept and self._held() >= self.max_clients:
                victim, wait = self._victim(now)
                accept = victim is not None
                if not accept and wait < math.inf:
                    wake = wait if wake is None else min(wake, wait)
        for request, peer in late:
            _shut(request)
            self._client_error(peer, RequestDeadline())
        return wake, accept

    def _closed_note(self, what: str) -> None:
        """One line a minute at most about connections closed for the cap (lock held)."""
        self._closed[what] = self._closed.get(what, 0) + 1
        now = time.monotonic()
        if self._closed_logged_at is not None and \
                now - self._closed_logged_at < CLIENT_ERROR_LOG_SECONDS:
            return
        closed = self._closed
        self._closed = {}
        self._closed_logged_at = now
        log.warning("metrics HTTP: %s (at most %d connections at a time); polling is not "
                    "affected", "; ".join(f"{count} connection(s) {why}"
                                          for why, count in closed.items()),
                    self.max_clients)

    def process_request(self, request: Any, client_address: Any) -> None:
        try:
            super().process_request(request, client_address)
        except BaseException:
            self._release(request)
            raise

    def process_request_thread(self, request: Any, client_address: Any) -> None:
        try:
            super().process_request_thread(request, client_address)
        finally:
            self._release(request)

    def _release(self, request: Any) -> None:
        with self._lock:
            self._connections.pop(request, None)
        with contextlib.suppress(OSError):  # the acceptor may take a newcomer now
            self._wake_write.send(b"r")

    def handle_error(self, request: Any, client_address: Any) -> None:
        """A client's error is the client's: one rate-limited line, no traceback."""
        exc = sys.exc_info()[1]
        if exc is None or not isinstance(exc, (OSError, ValueError)):
            log.exception("metrics HTTP: unexpected error serving %s", client_address)
            return
        with self._lock:
            connection = self._connections.get(request)
            if connection is not None and connection.closing:
                return  # closed by the server, which said so
        host = client_address[0] if isinstance(client_address, tuple) else client_address
        self._client_error(str(host), exc)

    def _client_error(self, peer: str, exc: BaseException) -> None:
        if self.client_errors is None:
            self.client_errors = ClientErrors()
        self.client_errors.report(peer, exc)

    def server_bind(self) -> None:
        # HTTPServer.server_bind resolves the FQDN of the bind address, which can stall
        # start-up for seconds on a host with broken reverse DNS; the name is not needed.
        socketserver.TCPServer.server_bind(self)
        self.server_name = "nichealthd"
        self.server_port = self.server_address[1]
        self.setup_environ()
        self._lock = threading.Lock()
        self._connections = {}
        self._closed = {}
        self._closed_logged_at = None
        self._shutting = False
        self._wake_read, self._wake_write = socket.socketpair()
        self._wake_write.setblocking(False)  # a full pipe already wakes the acceptor
        self._stopped = threading.Event()

    def serve_until_closed(self) -> None:
        """Serve until :meth:`close`. Unlike ``serve_forever``, which wakes every 0.5 s to
        look for a shutdown request, this sleeps until a newcomer may be accepted, a request
        deadline passes, a connection ends or the close arrives."""
        try:
            with selectors.DefaultSelector() as selector:
                selector.register(self._wake_read, selectors.EVENT_READ)
                listening = False
                while True:
                    wake, accept = self._tend(time.monotonic())
                    if accept != listening:
                        if accept:
                            selector.register(self, selectors.EVENT_READ)
                        else:
                            selector.unregister(self)
                        listening = accept
                    for key, _ in selector.select(wake):
                        if key.fileobj is not self._wake_read:
                            self._handle_request_noblock()  # type: ignore[attr-defined]
                            continue
                        with contextlib.suppress(OSError):
                            self._wake_read.recv(4096)
                        if self._shutting:
                            return
        finally:
            self._stopped.set()

    def close(self) -> None:
        """Stop serving (from any thread, once) and close the sockets."""
        self._shutting = True
        with contextlib.suppress(OSError):
            self._wake_write.send(b"x")
        self._stopped.wait(CLOSE_WAIT_SECONDS)
        self.server_close()
        self._wake_write.close()
        self._wake_read.close()


class Server6(Server):
    address_family = socket.AF_INET6


class _QuietHandler(WSGIRequestHandler):
    """No access log on stderr; tells the server when the request is whole."""

    timeout = CLIENT_TIMEOUT

    def parse_request(self) -> bool:
        whole = bool(super().parse_request())  # the request line was read; now the headers
        return self.server.request_read(self.connection) and whole  # type: ignore[attr-defined,no-any-return]

    def log_message(self, format: str, *args: Any) -> None:  # the stdlib's signature
        log.debug("%s %s", self.address_string(), format % args)


def _shut(request: Any) -> None:
    """Close a connection under its thread: its read ends at once and the thread with it."""
    with contextlib.suppress(OSError):
        request.shutdown(socket.SHUT_RDWR)


def parse_listen(listen: str) -> Optional[tuple[str, int]]:
    """``:2112``, ``127.0.0.1:2112``, ``[::1]:2112`` -> (host, port); ``''`` -> None."""
    text = listen.strip()
    if not text:
        return None
    host, _, port = text.rpartition(":")
    if host.startswith("[") and host.endswith("]"):
        host = host[1:-1]
    return host, int(port)


def make_http_server(listen: str, app: Callable[..., Iterable[bytes]]) -> Server:
    """Bind ``[HOST]:PORT``; an empty host means every address (IPv6 and IPv4 when possible)."""
    parsed = parse_listen(listen)
    if parsed is None:
        raise ValueError("metrics listen address is empty")
    host, port = parsed
    if not host:
        try:
            return make_server("::", port, app, Server6, _QuietHandler)  # type: ignore[return-value]
        except OSError:
            host = "0.0.0.0"
    server_class = Server6 if ":" in host else Server
    return make_server(host, port, app, server_class, _QuietHandler)  # type: ignore[return-value]
