"""The HTTP server of ``/metrics`` and ``/healthz``: bounded, and never blinded by clients.

A threading HTTP/1.0 server (a slow scraper or the work of building the families never
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

It answers one ``GET`` per connection, as ``wsgiref`` did, through the same calling convention
(an application called with the request's ``environ`` and ``start_response``), but reads the
request itself (:class:`_Handler`): ``wsgiref``, ``http.server`` and the ``email`` package they
parse headers with are megabytes of the daemon's memory for three fixed paths.
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

from .admission import METRICS_CLIENTS

log = logging.getLogger("nichealthd.metrics")

CLOSE_WAIT_SECONDS = 5.0  # for the HTTP thread to leave its wait when the server closes
# A normal listen backlog (socketserver's default is 5); the kernel caps it at somaxconn.
LISTEN_BACKLOG = max(128, socket.SOMAXCONN)
REQUEST_DEADLINE = 5.0  # seconds from accept to the end of the request's headers
EVICT_AFTER = 1.0  # a connection waiting this long for its request may be closed at the cap
CLIENT_TIMEOUT = 10.0  # writing an answer to a client that reads nothing
MAX_CLIENTS = METRICS_CLIENTS
MAX_LINE = 65536  # bytes of the request line or of one header line (as http.server)
MAX_HEADERS = 100  # header lines of one request (as http.client)
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


App = Callable[[dict[str, Any], Callable[..., Any]], Iterable[bytes]]


class Server(socketserver.ThreadingMixIn, socketserver.TCPServer):
    """Threading HTTP server; each connection in its own daemon thread, admitted as the
    module says, answered by :attr:`app`."""

    daemon_threads = True
    allow_reuse_address = True
    request_queue_size = LISTEN_BACKLOG
    client_errors: Optional[ClientErrors] = None
    max_clients = MAX_CLIENTS
    app: App
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
        # Not HTTPServer's, which resolves the FQDN of the bind address: that can stall
        # start-up for seconds on a host with broken reverse DNS, and the name is not needed.
        super().server_bind()
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


class BadRequest(ValueError):
    """A request that is not HTTP: answered with ``status`` and closed."""

    def __init__(self, status: str) -> None:
        super().__init__(status)
        self.status = status


class _Handler(socketserver.StreamRequestHandler):
    """One request per connection: read it whole (telling the server, which stops counting
    it against the request deadline), then answer it by the server's application."""

    timeout = CLIENT_TIMEOUT
    server: Server

    def handle(self) -> None:
        try:
            environ = self._read_request()
        except BadRequest as exc:
            if self.server.request_read(self.connection):
                self._reply(exc.status, [], str(exc.status).encode() + b"\n")
            return
        if environ is None or not self.server.request_read(self.connection):
            return  # closed before a whole request, or closed by the server
        answer: list[tuple[str, list[tuple[str, str]]]] = []

        def start_response(status: str, headers: list[tuple[str, str]]) -> None:
            answer.append((status, headers))

        try:
            body = b"".join(self.server.app(environ, start_response))
        except Exception:
            log.exception("metrics HTTP: error answering %s %s", environ["REQUEST_METHOD"],
                          environ["PATH_INFO"])
            self._reply("500 Internal Server Error", [], b"internal error\n")
            return
        status, headers = answer[-1]
        self._reply(status, headers, b"" if environ["REQUEST_METHOD"] == "HEAD" else body)

    def _read_request(self) -> Optional[dict[str, Any]]:
        """The request as a WSGI ``environ`` (what the application reads of it), or None when
        the connection ends before its request line."""
        line = self.rfile.readline(MAX_LINE + 1)
        if not line:
            return None
        if len(line) > MAX_LINE:
            raise BadRequest("414 URI Too Long")
        words = line.decode("latin-1").split()
        if len(words) != 3 or not words[2].startswith("HTTP/"):
            raise BadRequest("400 Bad Request")
        method, target, version = words
        path, _, query = target.partition("?")
        environ: dict[str, Any] = {"REQUEST_METHOD": method, "PATH_INFO": path,
                                   "QUERY_STRING": query, "SERVER_PROTOCOL": version}
        for _ in range(MAX_HEADERS + 1):
            header = self.rfile.readline(MAX_LINE + 1)
            if len(header) > MAX_LINE:
                raise BadRequest("431 Request Header Fields Too Large")
            if header in (b"\r\n", b"\n", b""):
                return environ
            name, colon, value = header.decode("latin-1").partition(":")
            if not colon:
                raise BadRequest("400 Bad Request")
            environ["HTTP_" + name.strip().upper().replace("-", "_")] = value.strip()
        raise BadRequest("431 Request Header Fields Too Large")

    def _reply(self, status: str, headers: list[tuple[str, str]], body: bytes) -> None:
        if not any(name.lower() == "content-length" for name, _ in headers):
            headers = [*headers, ("Content-Length", str(len(body)))]
        head = "".join(f"{name}: {value}\r\n" for name, value in headers)
        self.wfile.write(f"HTTP/1.0 {status}\r\nServer: nichealthd\r\nConnection: close\r\n"
                         f"{head}\r\n".encode("latin-1") + body)


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


def make_http_server(listen: str, app: App) -> Server:
    """Bind ``[HOST]:PORT``; an empty host means every address (IPv6 and IPv4 when possible)."""
    parsed = parse_listen(listen)
    if parsed is None:
        raise ValueError("metrics listen address is empty")
    host, port = parsed
    if not host:
        try:
            server: Server = Server6(("::", port), _Handler)
        except OSError:
            server = Server(("0.0.0.0", port), _Handler)
    else:
        server = (Server6 if ":" in host else Server)((host, port), _Handler)
    server.app = app
    return server
