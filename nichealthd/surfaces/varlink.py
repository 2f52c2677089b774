"""The varlink API: interface ``io.nichealthd.Monitor`` on a unix socket (nichealthd(8)).

The same live view as the D-Bus API, for hosts and containers without a system bus and for
``varlinkctl``. The interface file ``io.nichealthd.Monitor.varlink`` beside this module is
the contract: it is what ``org.varlink.service.GetInterfaceDescription`` returns, verbatim,
and the methods it declares are the ones dispatched here.

Why an in-tree implementation: the protocol is small (NUL-framed JSON, :mod:`.varlink_protocol`)
and this service must run on the daemon's one asyncio loop beside D-Bus. No asyncio varlink
library is packaged in Debian 12 or RHEL 9; PyPI ``varlink`` (python3-varlink in Debian 13
and Fedora) is the thread-per-connection reference implementation, whose server would put
client threads beside the poller and leave no bound on memory or connections. So the server
is written here with the bounds an operator needs, and interoperability is proven by tests
that drive it with the stock PyPI ``varlink`` client and with systemd's ``varlinkctl``.

Bounds (a bad or slow client never affects polling or other clients):

* a message is at most :data:`MAX_MESSAGE` bytes; more without a NUL closes the connection;
* at most :data:`MAX_CONNECTIONS` connections (fewer when the open-file limit cannot hold
  them: the daemon's open-file plan, :mod:`nichealthd.runtime.fdplan`), shared out per uid
  (``SO_PEERCRED``, :mod:`.admission`): one non-root user holds at most an eighth of them,
  all non-root users together leave an eighth to root, so no local user can lock out
  another or root;
* a connection that neither sends a call nor is answered for :data:`IDLE_TIMEOUT` seconds is
  closed (a ``WatchEvents`` stream and a ``Reload`` being answered are not idle);
* bytes that are not a varlink call (bad JSON, no method) close the connection, with one
  log line a minute at most; a call with bad parameters gets ``InvalidParameter``;
* replies are built at most once per poll and shared by every caller; a connection whose
  replies are not read stops being read (the kernel's socket buffer then stops the client);
* a ``WatchEvents`` client with more than :data:`WATCH_BACKLOG` bytes unread is dropped
  with a logged reason, so a reader that stops cannot grow the daemon's memory;
* a connection is answered at most :data:`BATCH` calls per turn of the loop.

``Reload`` is for uid 0, checked with ``SO_PEERCRED``. Calls run on the event loop and never
run a poll: :meth:`VarlinkService.on_poll` only takes the finished picture.
"""

from __future__ import annotations

import asyncio
import errno
import logging
import os
import socket
import stat
import struct
from dataclasses import dataclass
from typing import Callable, Dict, Hashable, List, Optional, Protocol, Set, Tuple

from .. import __version__
from ..core.config import Config
from ..core.jsontypes import JsonRecord
from ..core.picture import PollPicture
from ..storage.store import JournalEntry
from .admission import VARLINK_CONNECTIONS, Admission, Caps
from .answers import ReloadWaiters, event_record
from .context import CONNECTIONS_VARLINK, PollOutcome, ServiceContext
from .varlink_protocol import (
    EXPECTED_MORE,
    INTERFACE_NOT_FOUND,
    INVALID_PARAMETER,
    METHOD_NOT_FOUND,
    METHOD_NOT_IMPLEMENTED,
    SERVICE_DESCRIPTION,
    SERVICE_INTERFACE,
    Call,
    Framer,
    FrameTooLarge,
    NotACall,
    VarlinkError,
    encode_error,
    encode_reply,
    interface_name,
    method_names,
    parse_call,
)

log = logging.getLogger("nichealthd.varlink")

INTERFACE = "io.nichealthd.Monitor"
DESCRIPTION_FILE = os.path.join(os.path.dirname(__file__), INTERFACE + ".varlink")
VENDOR = "nichealthd"
PRODUCT = "nichealthd"
URL = "https://github.com/nichealthd/nichealthd"
ERROR_PREFIX = INTERFACE + "."

MAX_MESSAGE = 64 * 1024  # a call is a few hundred bytes; 64 KiB leaves room for any
MAX_CONNECTIONS = VARLINK_CONNECTIONS  # the most the open-file plan gives varlink
IDLE_TIMEOUT = 60.0  # seconds without a call or an answer before a connection is closed
WATCH_BACKLOG = 4 * 1024 * 1024  # unread WatchEvents bytes before the client is dropped
# (the first poll of a 256-NIC host commits ~3800 baselines, 2.5 MB: a reader keeps up)
BATCH = 32  # calls answered per connection per turn of the loop
MAX_CACHED = 256  # prepared answers kept per poll (ListCounters has one per argument)
LOG_EVERY = 60.0  # at most one line a minute about misbehaving clients
LISTEN_BACKLOG = 64


class PeerSocket(Protocol):
    """What :func:`peer_credentials` reads: a socket, or the transport's view of one
    (``asyncio.trsock.TransportSocket``)."""

    def getsockopt(self, level: int, option: int, buflen: int) -> bytes: ...


def peer_credentials(sock: Optional[PeerSocket]) -> Tuple[int, int, int]:
    """(pid, uid, gid) of a unix socket's peer (SO_PEERCRED); -1s when unknown."""
    if sock is None:
        return -1, -1, -1
    try:
        data = sock.getsockopt(socket.SOL_SOCKET, socket.SO_PEERCRED, struct.calcsize("3i"))
        pid, uid, gid = struct.unpack("3i", data)
        return pid, uid, gid
    except (OSError, AttributeError, struct.error):
        return -1, -1, -1


class _Connection(asyncio.Protocol):
    """One client: frames its bytes, answers its calls in order, streams its watch."""

    def __init__(self, service: VarlinkService) -> None:
        self.service = service
        self.framer = Framer(MAX_MESSAGE)
        self.transport: Optional[asyncio.Transport] = None
        self.pid = self.uid = -1
        self.active_at = 0.0  # the loop's time of the last bytes in or out (idle timeout)
        self.busy = False  # an asynchronous call (Reload) is being answered
        self.watching = False
        self.history_seq: Optional[int] = None  # the last event of a ListEvents answer
        self.sent_seq = 0  # the last event a watch sent
        self.write_paused = False
        self.reading_paused = False
        self.closed = False
        self.ignored = 0  # bytes received while watching (nothing more is answered)
        self._scheduled = False

    # ------------------------------------------------------------ asyncio

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        assert isinstance(transport, asyncio.Transport)
        self.transport = transport
        self.pid, self.uid, _ = peer_credentials(transport.get_extra_info("socket"))
        self.active_at = asyncio.get_running_loop().time()
        self.service.admit(self)

    def data_received(self, data: bytes) -> None:
        if self.closed:
            return
        self.active_at = asyncio.get_running_loop().time()
        if self.watching:  # a watch never ends, so later calls would never be answered
            self.ignored += len(data)
            if self.ignored > MAX_MESSAGE:
                self.drop("sent more than a message after WatchEvents (calls after it are "
                          "never answered; use another connection)")
            return
        try:
            self.framer.feed(data)
        except FrameTooLarge as exc:
            self.drop(str(exc))
            return
        self.process()

    def eof_received(self) -> Optional[bool]:
        return False  # close our side too

    def connection_lost(self, exc: Optional[Exception]) -> None:
        self.closed = True
        self.service.forget(self)

    def pause_writing(self) -> None:
        self.write_paused = True
        self._flow()

    def resume_writing(self) -> None:
        self.write_paused = False
        self.process()

    # ------------------------------------------------------------ calls

    def process(self) -> None:
        """Answer the complete calls received, in order, while the client reads."""
        self._scheduled = False
        handled = 0
        while not (self.closed or self.busy or self.watching or self.write_paused):
            if handled >= BATCH:  # let the loop (and other clients) run, then go on
                self._scheduled = True
                asyncio.get_running_loop().call_soon(self.process)
                break
            try:
                raw = self.framer.next()
            except FrameTooLarge as exc:
                self.drop(str(exc))
                return
            if raw is None:
                break
            handled += 1
            try:
                call = parse_call(raw)
            except NotACall as exc:
                self.drop(str(exc))
                return
            self.service.dispatch(self, call)
        self._flow()

    def _flow(self) -> None:
        """Read only while calls can be answered (watchers are always read: EOF)."""
        if self.closed or self.transport is None:
            return
        stop = not self.watching and (self.busy or self.write_paused or self._scheduled)
        if stop and not self.reading_paused:
            self.transport.pause_reading()
            self.reading_paused = True
        elif not stop and self.reading_paused:
            self.transport.resume_reading()
            self.reading_paused = False

    def send(self, data: bytes) -> None:
        if not self.closed and self.transport is not None:
            self.active_at = asyncio.get_running_loop().time()
            self.transport.write(data)

    def backlog(self) -> int:
        return self.transport.get_write_buffer_size() if self.transport is not None else 0

    def drop(self, reason: str) -> None:
        """Close a client that broke the protocol or a bound (logged, rate-limited)."""
        if self.closed:
            return
        self.service.note_dropped(self, reason)
        self.close(abort=True)

    def close(self, abort: bool = False) -> None:
        if self.closed:
            return
        self.closed = True
        if self.transport is not None:
            if abort:
                self.transport.abort()
            else:
                self.transport.close()
        self.service.forget(self)

    def describe(self) -> str:
        return f"pid {self.pid} uid {self.uid}" if self.pid >= 0 else "an unknown peer"


Handler = Callable[[_Connection, Call], Optional[JsonRecord]]


@dataclass
class _LogCount:
    """Misbehaving clients of one kind since the last log line (:meth:`VarlinkService._note`)."""

    count: int = 0
    logged_at: Optional[float] = None  # the loop's time of the last line


class VarlinkService:
    """The plug-in service (see :class:`nichealthd.runtime.service.Service`)."""

    name = "varlink API"

    def __init__(self, context: ServiceContext) -> None:
        self.context = context
        self.path = context.config().varlink_socket
        self.enabled = bool(self.path)
        self.description = ""
        self.declared: List[str] = []
        self._server: Optional[asyncio.AbstractServer] = None
        self._inode: Optional[Tuple[int, int]] = None
        self._connections: Set[_Connection] = set()
        self._watchers: Set[_Connection] = set()
        self.admission = Admission(Caps.of(
            context.connection_limits.get(CONNECTIONS_VARLINK, MAX_CONNECTIONS)))
        self.idle_timeout = IDLE_TIMEOUT
        self._sweeper: Optional[asyncio.TimerHandle] = None
        self._cache: Dict[Hashable, bytes] = {}  # encoded answers of this poll's picture
        self._cached_of: object = None  # that picture
        self._published_seq = context.journal.last_seq
        self.reloads = ReloadWaiters(lambda: context.stats().polls, context.request_reload)
        self._dropped = _LogCount()
        self._refused = _LogCount()
        self._idle = _LogCount()
        self._handlers: Dict[str, Handler] = {
            "GetStatus": self._get_status,
            "ListPorts": self._list_ports,
            "ListDevices": self._list_devices,
            "ListCounters": self._list_counters,
            "ListEvents": self._list_events,
            "WatchEvents": self._watch_events,
            "Reload": self._reload,
        }

    # ------------------------------------------------------- service hooks

    async def start(self) -> None:
        with open(DESCRIPTION_FILE, encoding="utf-8") as handle:
            self.description = handle.read()
        if interface_name(self.description) != INTERFACE:
            raise ValueError(f"{DESCRIPTION_FILE} does not describe {INTERFACE}")
        self.declared = method_names(self.description)
        try:
            await self._serve(self.path)
        except OSError as exc:
            log.error("varlink API unavailable: cannot listen on %s: %s; monitoring "
                      "continues (set varlinkSocket to a writable path, or \"\" to disable "
                      "it)", self.path, exc.strerror or exc)

    def on_poll(self, outcome: PollOutcome) -> None:
        self._publish(outcome.committed)
        self.reloads.settle(self.context.reload_error())

    def idle(self) -> bool:
        return self.reloads.idle()

    def on_reload(self, config: Config) -> None:
        self.reloads.resolve(True, f"configuration reloaded from {self.context.config_path}")
        if config.varlink_socket != self.path:
            asyncio.ensure_future(self._move(config.varlink_socket))

    async def stop(self) -> None:
        self.reloads.resolve(False, "nichealthd is stopping")
        self._close_server()
        goodbye = encode_error(ERROR_PREFIX + "ShuttingDown",
                               {"message": "nichealthd is stopping"})
        for conn in list(self._connections):
            if conn.watching:
                conn.send(goodbye)
            conn.close()

    # ------------------------------------------------------------ socket

    async def _serve(self, path: str) -> None:
        sock = _bind(path)
        try:
            server = await asyncio.get_running_loop().create_unix_server(
                lambda: _Connection(self), sock=sock)
        except BaseException:
            sock.close()
            raise
        info = os.stat(path)
        self._server, self._inode, self.path = server, (info.st_dev, info.st_ino), path
        if self._sweeper is None:
            self._sweeper = asyncio.get_running_loop().call_later(self._sweep_every(),
                                                                  self._sweep)
        caps = self.admission.caps
        log.info("varlink API serving %s on %s (at most %d connections, %d per non-root "
                 "user, %d kept for root; idle ones closed after %g s)", INTERFACE, path,
                 caps.total, caps.per_uid, caps.total - caps.unprivileged, self.idle_timeout)

    async def _move(self, path: str) -> None:
        """A reload changed varlinkSocket: serve on the new path (or stop serving)."""
        old = self.path
        self._close_server()
        self.path = path
        if not path:
            log.info("varlink API disabled (varlinkSocket is empty); was on %s", old)
            return
        try:
            await self._serve(path)
        except OSError as exc:
            log.error("varlink API unavailable: cannot listen on %s: %s", path,
                      exc.strerror or exc)

    def _close_server(self) -> None:
        server, self._server = self._server, None
        if self._sweeper is not None:
            self._sweeper.cancel()
            self._sweeper = None
        if server is None:
            return
        server.close()
        try:  # only our own socket: a newer daemon may have bound the path since
            info = os.stat(self.path)
            if stat.S_ISSOCK(info.st_mode) and (info.st_dev, info.st_ino) == self._inode:
                os.unlink(self.path)
        except OSError:
            pass

    # ------------------------------------------------------- connections

    def admit(self, conn: _Connection) -> None:
        """Count a new connection against its uid's share, or close it at once."""
        refused = self.admission.admit(conn.uid)
        if refused:
            caps = self.admission.caps
            self._note(self._refused, f"refused varlink connection(s) over the limit "
                       f"({caps.total} in all, {caps.per_uid} per non-root user, "
                       f"{caps.total - caps.unprivileged} kept for root; latest: {refused})",
                       conn)
            conn.closed = True
            if conn.transport is not None:
                conn.transport.abort()
            return
        self._connections.add(conn)

    def forget(self, conn: _Connection) -> None:
        if conn in self._connections:
            self._connections.discard(conn)
            self.admission.release(conn.uid)
        self._watchers.discard(conn)

    def _sweep_every(self) -> float:
        return max(self.idle_timeout / 4, 0.05)

    def _sweep(self) -> None:
        """Close the connections idle for ``idle_timeout``: no call, no answer, no watch."""
        loop = asyncio.get_running_loop()
        self._sweeper = loop.call_later(self._sweep_every(), self._sweep)
        deadline = loop.time() - self.idle_timeout
        for conn in [c for c in self._connections
                     if c.active_at <= deadline and not (c.watching or c.busy)]:
            self._note(self._idle, f"closed varlink connection(s) idle for "
                       f"{self.idle_timeout:g} s", conn, logging.INFO)
            conn.close()

    def note_dropped(self, conn: _Connection, reason: str) -> None:
        self._note(self._dropped, f"closed varlink connection(s) that broke the protocol "
                   f"or a limit (latest: {reason})", conn)

    def _note(self, counter: _LogCount, what: str, conn: _Connection,
              level: int = logging.WARNING) -> None:
        """One line at once, then at most one a minute with the count."""
        counter.count += 1
        now = asyncio.get_running_loop().time()
        last = counter.logged_at
        if last is not None and now - last < LOG_EVERY:
            return
        log.log(level, "%d %s, the latest from %s%s; polling is not affected",
                counter.count, what, conn.describe(), "" if last is None else
                f", in the last {now - last:.0f} s")
        counter.count, counter.logged_at = 0, now

    @property
    def connections(self) -> int:
        return len(self._connections)

    # ------------------------------------------------------------ dispatch

    def dispatch(self, conn: _Connection, call: Call) -> None:
        try:
            answer = self._answer(conn, call)
        except VarlinkError as exc:
            answer = encode_error(exc.name, exc.parameters)
        except Exception as exc:  # a bug must not take the service down
            log.exception("varlink %s failed", call.method)
            answer = encode_error(ERROR_PREFIX + "Failed",
                                  {"message": f"{call.member} failed: {exc}"})
        if answer is not None and not call.oneway:
            conn.send(answer)

    def _answer(self, conn: _Connection, call: Call) -> Optional[bytes]:
        interface, member = call.interface, call.member
        if interface == SERVICE_INTERFACE:
            if member == "GetInfo":
                _parameters(call)
                return encode_reply({"vendor": VENDOR, "product": PRODUCT,
                                     "version": __version__, "url": URL,
                                     "interfaces": [SERVICE_INTERFACE, INTERFACE]})
            if member == "GetInterfaceDescription":
                wanted = _string("interface", _parameters(call, "interface").get("interface"))
                if wanted is None:
                    raise VarlinkError(INVALID_PARAMETER, {"parameter": "interface"})
                if wanted == INTERFACE:
                    return encode_reply({"description": self.description})
                if wanted == SERVICE_INTERFACE:
                    return encode_reply({"description": SERVICE_DESCRIPTION})
                raise VarlinkError(INTERFACE_NOT_FOUND, {"interface": wanted})
            raise VarlinkError(METHOD_NOT_FOUND, {"method": call.method})
        if interface != INTERFACE:
            raise VarlinkError(INTERFACE_NOT_FOUND, {"interface": interface})
        if member not in self.declared:
            raise VarlinkError(METHOD_NOT_FOUND, {"method": call.method})
        handler = self._handlers.get(member)
        if handler is None:
            raise VarlinkError(METHOD_NOT_IMPLEMENTED, {"method": call.method})
        result = handler(conn, call)
        return None if result is None else encode_reply(result)

    # --------------------------------------------------------------- methods

    def _require_picture(self) -> PollPicture:
        picture = self.context.view()
        if picture is None:
            raise VarlinkError(ERROR_PREFIX + "NotReady", {
                "message": "nichealthd has not completed its first poll yet"})
        return picture

    def _this_poll(self) -> Dict[Hashable, bytes]:
        """The answers cached for the picture of the last poll (a new picture: none yet;
        polls that changed nothing reach no surface, so the picture itself says)."""
        picture = self.context.view()
        if picture is not self._cached_of:
            self._cache.clear()
            self._cached_of = picture
        return self._cache

    def _cached(self, key: Hashable, build: Callable[[], JsonRecord]) -> bytes:
        """The encoded answer for ``key``, built at most once per poll."""
        answer = self._this_poll().get(key)
        if answer is None:
            answer = encode_reply(build())
            if len(self._cache) < MAX_CACHED:
                self._cache[key] = answer
        return answer

    def _get_status(self, conn: _Connection, call: Call) -> JsonRecord:
        _parameters(call)
        return {"status": self.context.status()}

    def _list_ports(self, conn: _Connection, call: Call) -> None:
        _parameters(call)
        picture = self._require_picture()
        self._send_cached(conn, call, ("ports",), lambda: {"ports": picture.ports})

    def _list_devices(self, conn: _Connection, call: Call) -> None:
        _parameters(call)
        picture = self._require_picture()
        self._send_cached(conn, call, ("devices",), lambda: {"devices": picture.devices})

    def _list_counters(self, conn: _Connection, call: Call) -> None:
        params = _parameters(call, "device", "port")
        device = _string("device", params.get("device")) or ""
        port = _count("port", params.get("port")) or 0
        picture = self._require_picture()
        problem = picture.counters_problem(device, port)
        if problem is not None:
            details: Dict[str, object] = {"device": device, "message": problem[1]}
            if problem[0] == "UnknownPort":
                details["port"] = port
            raise VarlinkError(ERROR_PREFIX + problem[0], details)
        self._send_cached(conn, call, ("counters", device, port), lambda: {
            "counters": picture.counters(device, port)})

    def _send_cached(self, conn: _Connection, call: Call, key: Hashable,
                     build: Callable[[], JsonRecord]) -> None:
        if not call.oneway:
            conn.send(self._cached(key, build))

    def _list_events(self, conn: _Connection, call: Call) -> None:
        limit = _count("limit", _parameters(call, "limit").get("limit")) or 0
        journal = self.context.journal
        size = max(int(self.context.config().event_history_size), 1)
        count = min(limit, size) if limit else size
        last = journal.last_seq
        key = ("events", count, last)
        answer = self._this_poll().get(key)
        if answer is None:
            entries = journal.history(count)
            last = entries[-1].seq if entries else last
            answer = encode_reply({"events": [event_record(e) for e in entries]})
            if key == ("events", count, last) and len(self._cache) < MAX_CACHED:
                self._cache[key] = answer
        conn.history_seq = last
        if not call.oneway:
            conn.send(answer)

    def _watch_events(self, conn: _Connection, call: Call) -> None:
        _parameters(call)
        if call.oneway:
            return None
        if not call.more:
            raise VarlinkError(EXPECTED_MORE, {})
        conn.watching = True
        self._watchers.add(conn)
        if conn.history_seq is None:
            conn.sent_seq = self._published_seq  # from the next committed event on
        else:  # right after the ListEvents answer on this connection, nothing skipped
            conn.sent_seq = conn.history_seq
            size = max(int(self.context.config().event_history_size), 1)
            self._send_events(conn, [e for e in self.context.journal.history(size)
                                     if e.seq > conn.history_seq])
        return None

    def _reload(self, conn: _Connection, call: Call) -> None:
        _parameters(call)
        if conn.uid != 0:
            raise VarlinkError(ERROR_PREFIX + "PermissionDenied", {
                "message": "Reload is for root only (try: sudo nichealthctl --varlink "
                           "reload, or systemctl reload nichealthd)"})
        log.info("reload requested over varlink by %s", conn.describe())
        if call.oneway:
            self.context.request_reload()
            return None
        conn.busy = True
        task = asyncio.ensure_future(self.reloads.request())

        def done(finished: asyncio.Future[Tuple[bool, str]]) -> None:
            conn.busy = False
            if finished.cancelled():
                accepted, message = False, "nichealthd is stopping"
            elif finished.exception() is not None:
                accepted, message = False, f"reload failed: {finished.exception()}"
            else:
                accepted, message = finished.result()
            conn.send(encode_reply({"accepted": accepted, "message": message}))
            conn.process()

        task.add_done_callback(done)
        return None

    # ------------------------------------------------------------ watching

    def _publish(self, committed: List[JournalEntry]) -> None:
        if committed:
            self._published_seq = max(self._published_seq, committed[-1].seq)
        if not committed or not self._watchers:
            return
        encoded: Dict[int, bytes] = {}
        for conn in list(self._watchers):
            self._send_events(conn, committed, encoded)

    def _send_events(self, conn: _Connection, entries: List[JournalEntry],
                     encoded: Optional[Dict[int, bytes]] = None) -> None:
        encoded = {} if encoded is None else encoded
        for entry in entries:
            if entry.seq <= conn.sent_seq:
                continue
            waiting = conn.backlog()
            if waiting > WATCH_BACKLOG:
                conn.drop(f"a WatchEvents client stopped reading ({waiting} bytes of events "
                          f"unread, at most {WATCH_BACKLOG})")
                return
            data = encoded.get(entry.seq)
            if data is None:
                data = encoded[entry.seq] = encode_reply({"event": event_record(entry)},
                                                         continues=True)
            conn.send(data)
            conn.sent_seq = entry.seq


# ------------------------------------------------------------------ helpers

def _string(name: str, value: object) -> Optional[str]:
    if value is None or isinstance(value, str):
        return value
    raise VarlinkError(INVALID_PARAMETER, {"parameter": name})


def _count(name: str, value: object) -> Optional[int]:
    """A whole number >= 0 (JSON numbers like 2.0 are accepted, true is not)."""
    if value is None:
        return None
    if isinstance(value, float) and value.is_integer():
        value = int(value)
    if isinstance(value, bool) or not isinstance(value, int) or not 0 <= value < 2 ** 63:
        raise VarlinkError(INVALID_PARAMETER, {"parameter": name})
    return value


def _parameters(call: Call, *names: str) -> Dict[str, object]:
    """The call's parameters, none but the method's ``names`` (an unknown one is invalid);
    each is then narrowed by :func:`_string` or :func:`_count`."""
    for name in call.parameters:
        if name not in names:
            raise VarlinkError(INVALID_PARAMETER, {"parameter": name})
    return call.parameters


def _bind(path: str) -> socket.socket:
    """A listening unix socket at ``path`` that every local user may connect to.

    A stale socket of a previous run is replaced; one that a live process answers on, or a
    file that is not a socket, is left alone (the error says which).
    """
    directory = os.path.dirname(path) or "."
    os.makedirs(directory, mode=0o755, exist_ok=True)
    try:
        info = os.lstat(path)
    except FileNotFoundError:
        info = None
    if info is not None:
        if not stat.S_ISSOCK(info.st_mode):
            raise OSError(errno.EEXIST, f"{path} exists and is not a socket; remove it")
        if _answers(path):
            raise OSError(errno.EADDRINUSE, f"another process serves on {path} (is another "
                                            f"nichealthd running?)")
        os.unlink(path)
    sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    try:
        sock.bind(path)
        os.chmod(path, 0o666)  # readable by every local user, like the D-Bus API
        sock.listen(LISTEN_BACKLOG)
        sock.setblocking(False)
    except BaseException:
        sock.close()
        raise
    return sock


def _answers(path: str) -> bool:
    probe = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    probe.setblocking(False)
    try:
        probe.connect(path)
    except BlockingIOError:
        return True  # listening, its backlog full
    except OSError:
        return False
    finally:
        probe.close()
    return True


__all__ = ["VarlinkService", "INTERFACE", "DESCRIPTION_FILE", "peer_credentials"]
