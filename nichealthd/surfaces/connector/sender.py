"""The link to the platform connector: batching, retries and dead letters over the journal.

The journal (``store.Journal``) is the durable outbox; this module is its ``connector``
consumer. A batch is always a prefix of what is pending, in commit order, and the cursor moves
past it only after the connector acknowledged it (or refused it for good, which moves it to
``deadletter.jsonl``): delivery is at-least-once, and every event carries its stable
``nichealthd.event_id`` so a receiver can drop duplicates.

Everything here is synchronous and runs in the connector's own thread (see ``service.py``), so
a hung connector, a slow disk or a 64 MiB journal rewrite can never delay a poll or the
watchdog on the event loop. ``deliver_pending_once`` reuses it for ``nichealthd --once``.
"""

from __future__ import annotations

import importlib.util
import json
import logging
import os
import stat
import threading
from dataclasses import replace
from datetime import datetime
from types import ModuleType
from typing import TYPE_CHECKING, Any, Callable, Optional, Sequence

from ...core.config import Config
from ...core.events import HealthEvent, format_timestamp
from ...storage.appendfile import append as append_file
from ...storage.store import Journal, JournalEntry
from ..seam import JournalConsumer, Pace
from .outbox import CONSUMER, trim_outbox
from .settings import settings_of
from .status import ConnectorStatus

if TYPE_CHECKING:
    from .wire import Channel


def _require(*modules: str) -> None:
    """Raise the ImportError that importing a missing one of ``modules`` would, without
    importing them (their packages are found, not loaded)."""
    for name in modules:
        if importlib.util.find_spec(name) is None:
            raise ModuleNotFoundError(f"No module named {name!r}", name=name)


# gRPC is loaded at the first connect (``wire.py``); a host without it is told so at start,
# and keeps its events in the outbox (runtime/libraries.py, ``held.py``), as if imported here.
_require("grpc", "google.protobuf")

log = logging.getLogger("nichealthd.connector")

DEADLETTER_NAME = "deadletter.jsonl"
MAX_BATCH = 500
# A missing socket file costs one stat() to re-check, so it is probed more eagerly (within
# ``pause``) than a socket that exists but refuses or fails calls (within ``backoff_cap``).
PACE = Pace(backoff_base=0.5, backoff_cap=30.0, pause=5.0)
IDLE_SECONDS = 60.0
PROBE_TIMEOUT = 2.0

# Codes that say "this request is wrong or not allowed": retrying the same batch cannot help,
# so it goes to the dead-letter file. Every other code is retried: UNAVAILABLE,
# DEADLINE_EXCEEDED and CANCELLED are the transport (reset, EOF, hang), and UNKNOWN / INTERNAL /
# RESOURCE_EXHAUSTED / ABORTED are what a server returns when its own backend (the Kubernetes
# API) fails — dead-lettering those would lose events during a control-plane outage.
PERMANENT_CODES = frozenset({
    "INVALID_ARGUMENT", "PERMISSION_DENIED", "UNAUTHENTICATED", "UNIMPLEMENTED",
    "FAILED_PRECONDITION", "OUT_OF_RANGE", "NOT_FOUND", "ALREADY_EXISTS",
})


NOT_INSTALLED = "not installed"


def socket_path(target: str) -> Optional[str]:
    """The filesystem path of a ``unix:`` target (``unix:///abs`` or ``unix:path``), else None."""
    if target.startswith("unix://"):
        return target[len("unix://"):]
    if target.startswith("unix:"):
        return target[len("unix:"):]
    return None


class SendError(Exception):
    """A failed call: ``code`` is the gRPC status name (or TOKEN / SOCKET for local causes)."""

    def __init__(self, code: str, detail: str, transient: bool) -> None:
        super().__init__(f"{code}: {detail}" if detail else code)
        self.code = code
        self.detail = detail
        self.transient = transient


MAX_TOKEN_BYTES = 64 * 1024  # a bearer token is a few KiB; more is not a token file
_FILE_KINDS = ((stat.S_ISFIFO, "a FIFO"), (stat.S_ISDIR, "a directory"),
               (stat.S_ISCHR, "a character device"), (stat.S_ISBLK, "a block device"),
               (stat.S_ISSOCK, "a socket"))


def read_token(path: str, warned: set[tuple[str, int]]) -> str:
    """The token file's text, read without ever blocking.

    Opened ``O_NONBLOCK`` and checked with ``fstat`` on the open fd (no race with a swap):
    a FIFO, device, socket or directory is refused with a clear ``SendError`` (delivery is
    marked down with that reason and retried, so replacing the file resumes it), where a
    plain ``open`` of a FIFO used to block delivery for good without a word. A token that
    group or others may read is used, with one warning per path and mode, as ssh warns
    about private keys.
    """
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK | os.O_NOCTTY | os.O_CLOEXEC)
    except OSError as exc:
        raise SendError("TOKEN", f"cannot read token file {path}: {exc.strerror}",
                        transient=True) from None
    try:
        info = os.fstat(fd)
        if not stat.S_ISREG(info.st_mode):
            kind = next((name for test, name in _FILE_KINDS if test(info.st_mode)),
                        "not a regular file")
            raise SendError("TOKEN", f"token file {path} is {kind}, not a regular file; "
                            f"refusing to read it (point platformConnectorTokenPath at a "
                            f"regular file)", transient=True)
        mode = stat.S_IMODE(info.st_mode)
        if mode & 0o044 and (path, mode) not in warned:
            warned.add((path, mode))
            log.warning("token file %s is readable by %s (mode %04o): anyone who can read it "
                        "can send health events as this node; chmod 600 %s", path,
                        "others" if mode & 0o004 else "its group", mode, path)
        data = os.read(fd, MAX_TOKEN_BYTES + 1)
    except OSError as exc:
        raise SendError("TOKEN", f"cannot read token file {path}: {exc.strerror}",
                        transient=True) from None
    finally:
        os.close(fd)
    if len(data) > MAX_TOKEN_BYTES:
        raise SendError("TOKEN", f"token file {path} is larger than {MAX_TOKEN_BYTES} bytes; "
                        f"not a token", transient=True)
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError:
        raise SendError("TOKEN", f"token file {path} is not UTF-8 text",
                        transient=True) from None


def _wire() -> ModuleType:
    """The gRPC side (``wire.py``), imported at the first connect: a host whose connector
    socket never exists never loads gRPC."""
    from . import wire
    return wire


class Link:
    """One gRPC channel to the connector, made lazily and dropped after a transport failure
    (a fresh channel next time, so gRPC's own reconnect backoff never stacks on ours)."""

    def __init__(self, target: str, token_path: str) -> None:
        self.target = target
        self.token_path = token_path
        self.path = socket_path(target)
        self.connects = 0  # channels made: lets tests prove a missing socket costs none
        self._warned_modes: set[tuple[str, int]] = set()  # (path, mode) already warned about
        self._channel: Optional[Channel] = None

    def unavailable(self) -> Optional[str]:
        """Why the connector is certainly down without trying to connect, or None."""
        if self.path is not None and not os.path.exists(self.path):
            return f"socket {self.path} does not exist (connector not running)"
        return None

    def _connect(self) -> Channel:
        if self._channel is None:
            try:
                self._channel = _wire().Channel(self.target)
            except ImportError as exc:  # installed at start (runtime/libraries.py), gone now
                raise SendError("LIBRARY", f"cannot load gRPC: {exc}", transient=True) from None
            self.connects += 1
        return self._channel

    def _metadata(self) -> list[tuple[str, str]]:
        if not self.token_path:
            return []
        token = read_token(self.token_path, self._warned_modes).strip()
        if not token:
            raise SendError("TOKEN", f"token file {self.token_path} is empty", transient=True)
        return [("authorization", f"Bearer {token}")]

    def send(self, events: Sequence[HealthEvent], timeout: float) -> None:
        """One ``HealthEventOccurredV1`` call carrying ``events``; raises :class:`SendError`."""
        metadata = self._metadata()  # re-read for every call (rotated tokens)
        channel = self._connect()
        wire = _wire()
        try:
            channel.call(events, timeout, metadata)
        except wire.RpcError as exc:
            code, detail = wire.status_of(exc)
            permanent = code in PERMANENT_CODES
            if not permanent:
                self.close()
            raise SendError(code, detail, transient=not permanent) from None

    def probe(self, timeout: float) -> None:
        """Connect without a call (to tell connected from down when nothing is pending)."""
        if not self._connect().ready(timeout):
            self.close()
            raise SendError("UNAVAILABLE", f"cannot connect to {self.target}",
                            transient=True)

    def close(self) -> None:
        if self._channel is not None:
            self._channel.close()
        self._channel = None


def cut_batch(entries: list[JournalEntry]) -> list[JournalEntry]:
    """The longest prefix that the connector's sort cannot reorder.

    NVSentinel's platform connector sorts a batch by ``generatedTimestamp`` with an unstable
    sort. A batch therefore ends before an event older than one already in it (the wall clock
    stepped back), and before a tie that involves a check-scoped clear (healthy, no entities)
    of the same check — so such a clear stays strictly older than everything after it.
    """
    batch: list[JournalEntry] = []
    newest: Optional[datetime] = None
    at_newest: list[tuple[str, bool]] = []  # (checkName, is clear-all) of events at ``newest``
    for entry in entries:
        event = entry.event
        clear_all = event.is_healthy and not event.entities
        if newest is not None:
            if event.generated_at < newest:
                break
            if event.generated_at == newest:
                if any(check == event.check_name and (clear or clear_all)
                       for check, clear in at_newest):
                    break
            else:
                at_newest = []
        batch.append(entry)
        newest = event.generated_at
        at_newest.append((event.check_name, clear_all))
    return batch


class Sender(JournalConsumer):
    """Delivers the journal's ``connector`` backlog; call :meth:`run` in a thread, or
    :meth:`drain` for a bounded one-shot delivery. It delivers in batches (a prefix of
    what is pending, :func:`cut_batch`), so it has its own :meth:`step`."""

    cursor = CONSUMER
    batch = MAX_BATCH
    idle = IDLE_SECONDS
    log = log

    def __init__(self, config: Config, journal: Journal, *, pace: Pace = PACE,
                 on_status: Callable[[ConnectorStatus], None] = lambda status: None) -> None:
        super().__init__(config, journal, pace)
        settings = settings_of(config)
        self.link = Link(settings.socket, settings.token_path)
        self.deadletter_path = os.path.join(config.state_dir, DEADLETTER_NAME)
        self.on_status = on_status
        self._status_lock = threading.Lock()  # the loop (outbox depth) and this thread update
        self.status = ConnectorStatus(
            state="down" if self.link.unavailable() is None else NOT_INSTALLED,
            since=format_timestamp(pace.wall()),
            outbox_depth=journal.depth(CONSUMER),
            dead_letters=_count_lines(self.deadletter_path),
            target=settings.socket)
        on_status(self.status)
        self.calls = 0
        self._verified = False  # state "connected" was confirmed by a call or a probe
        self._limit = self.batch
        self._logged: tuple[str, str] = ("", "")
        self._socket_seen = False  # the connector's socket existed at some time since start
        self._trim_told = False  # a trim while "not installed" was logged (later: debug)
        self._lock = threading.Lock()  # one step at a time (thread loop vs. stop's drain)

    # ----------------------------------------------------------------- control

    def update(self, **changes: Any) -> None:
        """Replace the status value with one that has ``changes`` and publish it."""
        with self._status_lock:
            status = self.status = replace(self.status, **changes)
        self.on_status(status)

    def report(self) -> ConnectorStatus:
        return self.status

    def reconfigure(self, config: Config) -> None:
        """Apply a reloaded config at once (a new target or token path takes a fresh
        channel)."""
        settings = settings_of(config)
        with self._lock:
            if (settings.socket, settings.token_path) != (self.link.target,
                                                          self.link.token_path):
                self.link.close()
                self.link = Link(settings.socket, settings.token_path)
                self.recovered()
                self._verified = self._socket_seen = False
                self.update(target=settings.socket)
            self.config = config
        self.wake()

    def after_error(self) -> float:
        return self.backoff(self.pace.backoff_cap)

    def finish(self, stop_deadline: float) -> None:
        """Deliver what is pending for at most ``stop_deadline`` s, then close the channel."""
        self.drain(self.pace.clock() + stop_deadline)
        self.link.close()

    # -------------------------------------------------------------- one step

    def step(self) -> float:
        """Do what is due now; return the seconds until something may be due."""
        with self._lock:
            return self._step()

    def _step(self) -> float:
        self.trim()
        self.update(outbox_depth=self.journal.depth(CONSUMER))
        if not settings_of(self.config).socket:
            self._set_state("disabled", "")
            return IDLE_SECONDS
        now = self.pace.clock()
        if now < self._retry_at:
            return self._retry_at - now
        reason = self.link.unavailable()
        if reason is not None:
            # A socket that never existed since start is a host without NVSentinel: "not
            # installed" (one info line), not a connector that went down.
            state = "down" if self._socket_seen else NOT_INSTALLED
            self._set_state(state, reason, code="SOCKET")
            # Looking for the socket file is one stat on this host, with no server to spare
            # from a herd: not jittered, so a host without NVSentinel wakes every probe_cap,
            # not twice as often (the file is still found within probe_cap of appearing).
            return self.backoff(self.pace.pause, jittered=False)
        self._socket_seen = True
        batch, wait = self.next_batch()
        if not batch:
            if not self._verified:
                try:
                    self.link.probe(min(PROBE_TIMEOUT, settings_of(self.config).timeout))
                except SendError as exc:
                    self._set_state("down", str(exc), code=exc.code)
                    return self.backoff(self.pace.backoff_cap)
                self._connected()
            return wait if wait is not None else IDLE_SECONDS
        if self._deliver(batch, settings_of(self.config).timeout) is not None:
            return 0.0
        return self.backoff(self.pace.backoff_cap)

    def next_batch(self, flush: bool = False) -> tuple[list[JournalEntry], Optional[float]]:
        """The batch to send now, or ``([], seconds until the held degraded events are due)``.

        Fatal and healthy events go at once, with everything committed before them (a batch
        never reorders). When only degraded events are pending they are held until the oldest
        is ``connectorBatchInterval`` old (link-counter-detection §11.2), or until a full batch
        is waiting.
        """
        pending = self.journal.pending(CONSUMER, self._limit)
        self.update(outbox_depth=self.journal.depth(CONSUMER))
        if not pending:
            return [], None
        if not flush and len(pending) < self._limit and all(
                e.event.severity == "degraded" for e in pending):
            age = (self.pace.wall() - pending[0].event.generated_at).total_seconds()
            hold = settings_of(self.config).batch_interval - age
            if age >= 0 and hold > 0:  # a negative age is a clock step: do not hold on it
                return [], hold
        return cut_batch(pending), None

    def _deliver(self, batch: list[JournalEntry], timeout: float) -> Optional[int]:
        """Send one batch. None: nothing moved (retry later); else the cursor moved past it
        and the result is how many events the connector accepted (0: dead-lettered)."""
        self.calls += 1
        try:
            self.link.send([e.event for e in batch], timeout)
        except SendError as exc:
            self.update(errors=self.status.errors + 1)
            if exc.transient:
                if exc.code == "RESOURCE_EXHAUSTED" and self._limit > 1:
                    self._limit = max(1, self._limit // 2)  # perhaps the message is too big
                self._set_state("down", str(exc), code=exc.code)
                return None
            if not self._dead_letter(batch, exc):
                return None
            accepted = 0
            self._connected(error=str(exc))  # the connector answered: the link is up
        else:
            accepted = len(batch)
            self.update(sent=self.status.sent + len(batch),
                        last_sent=format_timestamp(self.pace.wall()))
            self._limit = self.batch
            self._connected()
        self.journal.advance(CONSUMER, batch[-1].seq)
        self.update(outbox_depth=self.journal.depth(CONSUMER))
        return accepted

    def drain(self, deadline: float) -> int:
        """Deliver everything pending, ignoring the batching delay, until done, the first
        transient failure, or ``deadline`` (monotonic). Returns how many were accepted.
        Does nothing when the socket is missing."""
        sent = 0
        with self._lock:
            self.trim()
            if not settings_of(self.config).socket:
                return 0
            reason = self.link.unavailable()
            if reason is not None:
                depth = self.journal.depth(CONSUMER)
                if depth:
                    log.info("platform connector is down (%s): %d event(s) stay in the outbox "
                             "for the next run", reason, depth)
                return 0
            while True:
                remaining = deadline - self.pace.clock()
                batch, _ = self.next_batch(flush=True)
                if not batch or remaining <= 0:
                    break
                accepted = self._deliver(batch, min(settings_of(self.config).timeout, remaining))
                if accepted is None:
                    break
                sent += accepted
        return sent

    # ------------------------------------------------------------- the bound

    def trim(self) -> None:
        """Apply the outbox bound (oldest degraded events go first; see Journal)."""
        level = logging.WARNING
        if self.status.state == NOT_INSTALLED:  # no NVSentinel here: expected, said once
            level = logging.DEBUG if self._trim_told else logging.INFO
        dropped = trim_outbox(self.journal, self.config, self.status.state,
                              self.status.dropped, log, level)
        if not dropped:
            return
        self._trim_told = self._trim_told or self.status.state == NOT_INSTALLED
        self.update(dropped=self.status.dropped + len(dropped),
                    outbox_depth=self.journal.depth(CONSUMER))

    # ---------------------------------------------------------- dead letters

    def _dead_letter(self, batch: list[JournalEntry], exc: SendError) -> bool:
        """Append a refused batch to ``deadletter.jsonl`` (one line per event)."""
        now = format_timestamp(self.pace.wall())
        lines = "".join(json.dumps({
            "deadLetteredAt": now, "code": exc.code, "error": exc.detail,
            "batch": [batch[0].seq, batch[-1].seq], "seq": e.seq, "event": e.event.to_json(),
        }, separators=(",", ":")) + "\n" for e in batch)
        try:
            self._rotate_deadletters()
            append_file(self.deadletter_path, lines.encode(), 0o666)  # all or none, fsynced
        except OSError as exc2:
            self._set_state("down", f"cannot write {self.deadletter_path}: {exc2.strerror}",
                            code="DEADLETTER")
            return False
        self.update(dead_letters=self.status.dead_letters + len(batch))
        log.error("platform connector refused %d event(s) (seq %d..%d) with %s: %s; moved them "
                  "to %s and continuing with later events", len(batch), batch[0].seq,
                  batch[-1].seq, exc.code, exc.detail, self.deadletter_path)
        return True

    def _rotate_deadletters(self) -> None:
        """Keep the dead-letter file bounded like the outbox (one old generation kept)."""
        try:
            size = os.stat(self.deadletter_path).st_size
        except FileNotFoundError:
            return
        if size > self.config.outbox_max_bytes:
            os.replace(self.deadletter_path, self.deadletter_path + ".1")

    # ----------------------------------------------------------------- state

    def _connected(self, error: str = "") -> None:
        self.recovered()
        self._verified = True
        self._set_state("connected", error)

    def _set_state(self, state: str, error: str, code: str = "") -> None:
        if state != "connected":
            self._verified = False
        if error:
            self.update(last_error=error)
        if state != self.status.state:
            self.update(state=state, since=format_timestamp(self.pace.wall()))
        key = (state, code)
        if key == self._logged:
            return
        previous, self._logged = self._logged, key
        depth = self.journal.depth(CONSUMER)
        if state == "connected" and previous[0] != "connected":
            log.info("platform connector %s connected; %d event(s) pending",
                     self.link.target, depth)
        elif state == NOT_INSTALLED:
            log.info("platform connector not installed (%s since start): events are kept in "
                     "the outbox (bounded by outboxMaxEvents/outboxMaxBytes) and sent when it "
                     "appears; set platformConnectorSocket = \"\" to disable forwarding",
                     error)
        elif state == "down":
            log.warning("platform connector %s down: %s; %d event(s) kept in the outbox and "
                        "retried with backoff", self.link.target, error, depth)


def _count_lines(path: str) -> int:
    try:
        with open(path, "rb") as handle:
            return sum(chunk.count(b"\n") for chunk in iter(lambda: handle.read(1 << 20), b""))
    except OSError:
        return 0


def deliver_pending_once(config: Config, journal: Journal) -> int:
    """``nichealthd --once``: if the connector's socket exists, deliver what is pending with
    one bounded attempt (at most ``connectorTimeout``); otherwise leave it in the outbox."""
    settings = settings_of(config)
    if not settings.socket:
        return 0
    sender = Sender(config, journal)
    try:
        return sender.drain(sender.pace.clock() + settings.timeout)
    finally:
        sender.link.close()
