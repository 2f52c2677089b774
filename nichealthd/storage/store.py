"""Durable storage: the state file and the event journal, committed together.

A poll's events and the state advance that produced them are one commit (ARCHITECTURE.md):

1. the events are appended to the journal (``outbox.jsonl``) with consecutive sequence
   numbers and fsynced;
2. the state file, which records the last committed sequence number, is replaced atomically
   (temp file, fsync, rename, fsync of the directory).

A crash between the two leaves journal lines beyond the state's sequence number; they are
dropped on the next start and the poll is evaluated again, so an event is never lost and
never committed twice with different content. If step 2 fails (a full disk), step 1 is
undone and the daemon keeps running on the old state. Every consumer of events (the event
log, the platform connector) reads the journal from its own persisted cursor, and the
journal keeps the newest events as the history that ``ListEvents`` serves after a restart.

The journal is shared by threads (the poller appends, the connector's sender advances and
trims it): every change holds one lock, and a rewrite of the file that falls between an append
and its state commit is deferred until that commit resolves, so it can neither drop the
appended lines nor confuse :meth:`Journal.truncate`.
"""

from __future__ import annotations

import contextlib
import json
import logging
import os
import stat
import threading
import time
from dataclasses import dataclass
from typing import Any, Iterable, Optional

from ..core.events import HealthEvent
from ..core.state import MonitorState, StateCorrupt, parse_state
from .appendfile import append as append_file

log = logging.getLogger("nichealthd.store")

JOURNAL_NAME = "outbox.jsonl"
CURSORS_NAME = "cursors.json"
MAX_SEQ = 2**63  # sequence numbers are int64 on the wire (and plausible far below this)
TEMP_PREFIX = ".tmp-"  # atomic_write's temporary files, beside the file they replace


class CommitError(Exception):
    """The commit did not happen; the previous state and journal are intact."""


def atomic_write(path: str, data: bytes, mode: int = 0o640) -> None:
    """Replace ``path`` with ``data`` so that readers see the old or the new file, whole."""
    directory = os.path.dirname(os.path.abspath(path))
    fd, tmp = _make_temporary(directory)
    try:
        with os.fdopen(fd, "wb") as handle:
            handle.write(data)
            handle.flush()
            os.fsync(handle.fileno())
        os.chmod(tmp, mode)
        os.replace(tmp, path)
    except BaseException:
        with contextlib.suppress(OSError):
            os.unlink(tmp)
        raise
    _fsync_dir(directory)


def _make_temporary(directory: str) -> tuple[int, str]:
    """A new file of mode 0600 in ``directory`` named ``TEMP_PREFIX`` and 12 random hex
    digits, open for writing: ``tempfile.mkstemp`` without the tempfile module, whose imports
    (shutil, bz2, lzma, random) are a megabyte of the daemon's memory."""
    flags = os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC
    for _ in range(100):
        path = os.path.join(directory, TEMP_PREFIX + os.urandom(6).hex())
        try:
            return os.open(path, flags, 0o600), path
        except FileExistsError:
            continue
    raise FileExistsError(f"no free temporary file name in {directory}")


def event_id() -> str:
    """A random (version 4) UUID in hex, as ``uuid.uuid4().hex`` gives it, without the uuid
    module (and the platform module it imports)."""
    raw = bytearray(os.urandom(16))
    raw[6] = (raw[6] & 0x0F) | 0x40  # version 4
    raw[8] = (raw[8] & 0x3F) | 0x80  # the RFC 4122 variant
    return raw.hex()


def remove_stray_temporaries(directory: str) -> list[str]:
    """Remove the temporary files of writes that a kill interrupted (``.tmp-*``, regular
    files only) and return their names.

    :func:`atomic_write` unlinks its temporary file on any error, but a SIGKILL or a power
    loss between its creation and ``rename`` leaves it behind; nothing ever reads one. Called at
    start, before anything of this process writes there (the directory is the daemon's own:
    one daemon per state directory).
    """
    try:
        names = os.listdir(directory)
    except OSError:
        return []
    removed = []
    for name in sorted(n for n in names if n.startswith(TEMP_PREFIX)):
        path = os.path.join(directory, name)
        with contextlib.suppress(OSError):
            if stat.S_ISREG(os.lstat(path).st_mode):
                os.unlink(path)
                removed.append(name)
    if removed:
        _fsync_dir(directory)
    return removed


def _fsync_dir(directory: str) -> None:
    with contextlib.suppress(OSError):
        fd = os.open(directory, os.O_RDONLY | os.O_DIRECTORY)
        try:
            os.fsync(fd)
        finally:
            os.close(fd)


@dataclass(frozen=True)
class LoadedState:
    """The state read at start; ``fresh`` when there was none usable (first boot semantics)."""

    state: MonitorState
    fresh: bool
    problem: Optional[str] = None
    notes: tuple[str, ...] = ()  # sections that start fresh (written by a newer version)


def load_state(path: str) -> LoadedState:
    """Read the state file. Missing or unusable gives a fresh state and says why
    (link-counter-detection §6.6); an unusable one (corrupt, implausible, not a regular file) is
    moved aside to
    ``<path>.corrupt-<time>`` so that it is reported once, not at every start."""
    try:
        info = os.stat(path)
    except FileNotFoundError:
        return LoadedState(MonitorState(), True, None)
    except OSError as exc:
        return LoadedState(MonitorState(), True, f"cannot read {path}: {exc.strerror}")
    if not stat.S_ISREG(info.st_mode):  # a directory, a FIFO (open would block), a device
        return _corrupt(path, "not a regular file")
    try:
        with open(path, "rb") as handle:
            raw = handle.read()
    except OSError as exc:
        return LoadedState(MonitorState(), True, f"cannot read {path}: {exc.strerror}")
    try:
        state, notes = parse_state(json.loads(raw))
        return LoadedState(state, False, notes=notes)
    except RecursionError:
        return _corrupt(path, "nested too deeply")
    except (ValueError, StateCorrupt) as exc:  # UnicodeDecodeError is a ValueError
        return _corrupt(path, str(exc))


def _corrupt(path: str, reason: str) -> LoadedState:
    where = move_aside(path)
    kept = f"; moved aside to {where}" if where else ""
    return LoadedState(MonitorState(), True, f"{path} is corrupt ({reason}){kept}")


def move_aside(path: str) -> Optional[str]:
    """Rename an unusable file to ``<path>.corrupt-<time>``; None if that fails."""
    target = f"{path}.corrupt-{_stamp()}"
    try:
        os.replace(path, target)
    except OSError as exc:
        log.warning("cannot move %s aside: %s", path, exc.strerror)
        return None
    _fsync_dir(os.path.dirname(os.path.abspath(path)))
    return target


def save_state(path: str, state: MonitorState) -> None:
    atomic_write(path, state_text(state).encode())


def state_text(state: MonitorState) -> str:
    """The state file's text: one top-level key per line. ``json.dumps`` with ``indent``
    takes the pure-Python encoder: 4.4 ms against 1.8 ms this way for a state of 34 devices,
    paid once a minute and at every commit with events."""
    items = state.to_json().items()
    return "{\n" + ",\n".join(f" {json.dumps(key)}: {json.dumps(value, separators=_SPACED)}"
                               for key, value in items) + "\n}\n"


_SPACED = (", ", ": ")  # the separators of an indented file, without the line breaks


@dataclass(frozen=True)
class Recovery:
    """What :meth:`Journal.recover` found: lines of an unfinished commit (the torn tail and
    lines past the state's sequence number: that poll is evaluated again), damaged committed
    lines (unreadable or out of order: lost, a copy of the file is kept), the entries kept, and
    whether the state's sequence number contradicts the journal (the state is then corrupt)."""

    unfinished: int = 0
    damaged: int = 0
    kept: int = 0
    mismatch: Optional[str] = None
    copy: Optional[str] = None

    @property
    def dropped(self) -> int:
        return self.unfinished + self.damaged


@dataclass(frozen=True)
class JournalEntry:
    """A committed event and its position in the journal."""

    seq: int
    event: HealthEvent


class Journal:
    """Append-only JSON-lines file of committed events, with per-consumer cursors."""

    def __init__(self, directory: str, history_size: int = 1000) -> None:
        self.path = os.path.join(directory, JOURNAL_NAME)
        self.cursors_path = os.path.join(directory, CURSORS_NAME)
        self.history_size = history_size
        self._entries: list[JournalEntry] = []
        self._pending: list[JournalEntry] = []
        self._cursors: dict[str, int] = {}
        self._sizes: dict[int, int] = {}  # seq -> encoded size (for the outbox byte bound)
        self._lock = threading.RLock()
        self._rewrite_deferred = False
        self._high_seq = 0  # newest seq ever committed: trimming the newest entry keeps it
        self.last_recovery = Recovery()
        self._cursors_lost = False  # cursors.json gone or unreadable: restart from the oldest

    # ------------------------------------------------------------ recovery

    def recover(self, committed_seq: Optional[int]) -> int:
        """Load the journal, dropping lines past ``committed_seq`` (an unfinished commit;
        None when the state file was lost and every whole line counts) and lines that cannot
        be read. Returns how many lines were dropped; :attr:`last_recovery` says which kind."""
        with self._lock:
            self.last_recovery = self._recover(committed_seq)
            return self.last_recovery.dropped

    def _recover(self, committed_seq: Optional[int]) -> Recovery:
        try:
            with open(self.path, "rb") as handle:
                raw = handle.read()
        except FileNotFoundError:
            raw = b""
        entries, sizes, damaged, torn = _parse_journal(raw)
        entries, unfinished, mismatch = _drop_unfinished(entries, sizes, committed_seq)
        if torn:
            # A torn last line is the unfinished commit when the state never advanced past
            # the readable entries; otherwise a committed line was cut later: damage.
            last = entries[-1].seq if entries else 0
            if unfinished or committed_seq is None or committed_seq <= last:
                unfinished += 1
            else:
                damaged += 1
        self._entries = entries
        self._sizes = sizes
        self._high_seq = entries[-1].seq if entries else 0
        recovery = Recovery(unfinished, damaged, len(entries), mismatch)
        if damaged:
            recovery = Recovery(unfinished, damaged, len(entries), mismatch,
                                self._keep_copy(raw))
        if recovery.dropped:
            self._rewrite()
        self._cursors = self._load_cursors()
        return recovery

    def _keep_copy(self, raw: bytes) -> Optional[str]:
        """Keep the damaged journal as it was, for whoever investigates the damage."""
        copy = f"{self.path}.corrupt-{_stamp()}"
        try:
            atomic_write(copy, raw)
        except OSError as exc:
            log.warning("cannot keep a copy of the damaged %s: %s", self.path, exc.strerror)
            return None
        return copy

    def _load_cursors(self) -> dict[str, int]:
        """Read the cursors. Missing (with a journal to deliver) or unreadable marks them
        lost: every consumer then restarts from the oldest entry, as the warning says."""
        self._cursors_lost = False
        problem: Optional[str] = None
        cursors: dict[str, int] = {}
        try:
            with open(self.cursors_path, "rb") as handle:
                data = json.loads(handle.read())
            if not isinstance(data, dict):
                raise TypeError("not a JSON object")
            for key, value in data.items():
                if isinstance(value, bool) or not isinstance(value, int):
                    raise TypeError(f"cursor {key!r} is not an integer")
                if 0 <= value <= self.last_seq:
                    cursors[str(key)] = value
                else:  # implausible: beyond the newest entry it would skip pending events
                    problem = f"cursor {key!r} = {value} is outside 0..{self.last_seq}"
        except FileNotFoundError:
            if self._entries:
                problem = "it is missing"
        except IsADirectoryError:
            # Moved aside, or no cursor could ever be saved again: every run of ``--once``
            # would restart from the oldest entry and never reach the newest ones.
            where = move_aside(self.cursors_path)
            problem = "it is a directory" + (f"; moved aside to {where}" if where else "")
        except (OSError, ValueError, RecursionError, AttributeError, TypeError) as exc:
            problem = str(exc)
            cursors = {}
        if problem is not None:
            self._cursors_lost = True
            log.warning("%s is unreadable (%s); consumers restart from the oldest journal "
                        "entry (events may be delivered twice, never lost)",
                        self.cursors_path, problem)
        return cursors

    # -------------------------------------------------------------- commit

    def stamp(self, events: Iterable[HealthEvent], first_seq: int, node_name: str,
              processing_strategy: str) -> list[JournalEntry]:
        """Give each event its sequence number and stable id (``nichealthd.event_id``)."""
        return [JournalEntry(first_seq + i,
                             e.stamped(node_name, processing_strategy, event_id()))
                for i, e in enumerate(events)]

    def append(self, entries: list[JournalEntry]) -> int:
        """Append and fsync; returns the file size before, for :meth:`truncate`."""
        encoded = [_encode(e) for e in entries]
        data = b"".join(encoded)
        with self._lock:
            before = append_file(self.path, data)  # all or nothing, fsynced
            self._pending = entries
            for entry, line in zip(entries, encoded):
                self._sizes[entry.seq] = len(line)
            return before

    def truncate(self, size: int) -> None:
        """Undo an append whose state commit failed."""
        with self._lock:
            for entry in self._pending:
                self._sizes.pop(entry.seq, None)
            self._pending = []
            if self._rewrite_deferred:  # the file changed meanwhile: write what is committed
                self._rewrite()
                return
            with contextlib.suppress(OSError):
                os.truncate(self.path, size)

    def committed(self) -> list[JournalEntry]:
        """Make the last append visible to consumers (after the state commit succeeded)."""
        with self._lock:
            entries, self._pending = self._pending, []
            self._entries = self._entries + entries
            if entries:
                self._high_seq = max(self._high_seq, entries[-1].seq)
            if self._rewrite_deferred:
                self._rewrite()
            return entries

    # ----------------------------------------------------------- consumers

    def register(self, consumers: Iterable[str]) -> None:
        """Declare this process's consumers. A new one starts after the newest entry; one
        that is no longer configured is forgotten so it cannot pin the journal forever."""
        with self._lock:
            self._register(set(consumers))

    def _register(self, wanted: set[str]) -> None:
        changed = False
        for name in list(self._cursors):
            if name not in wanted:
                del self._cursors[name]
                changed = True
        # A consumer new to a healthy cursors file starts after the newest entry; when the
        # file was lost, nobody knows what was delivered: start before the oldest.
        start = (self._entries[0].seq - 1 if self._entries else self.last_seq) \
            if self._cursors_lost else self.last_seq
        for name in wanted:
            if name not in self._cursors:
                self._cursors[name] = start
                changed = True
        self._cursors_lost = False
        if changed:
            self._save_cursors()

    def cursor(self, consumer: str) -> int:
        """Last sequence number ``consumer`` has finished with."""
        return self._cursors.get(consumer, self.last_seq)

    def pending(self, consumer: str, limit: Optional[int] = None) -> list[JournalEntry]:
        """Entries after the consumer's cursor, oldest first."""
        entries = self._entries  # replaced, never mutated in place: a consistent snapshot
        first = _index_after(entries, self.cursor(consumer))
        end = len(entries) if limit is None else min(len(entries), first + max(limit, 0))
        return entries[first:end]

    def advance(self, consumer: str, seq: int) -> None:
        """Persist that ``consumer`` is done up to ``seq``; then trim what nobody needs."""
        with self._lock:
            if seq <= self._cursors.get(consumer, 0):
                return
            self._cursors[consumer] = seq
            self._save_cursors()
            self.compact()

    def _save_cursors(self) -> None:
        try:
            atomic_write(self.cursors_path, json.dumps(self._cursors, sort_keys=True).encode())
        except OSError as exc:
            log.warning("cannot save %s: %s (events may be delivered again after a restart)",
                        self.cursors_path, exc.strerror)

    def history(self, limit: int) -> list[JournalEntry]:
        """The newest ``limit`` committed events, oldest first."""
        return self._entries[-limit:] if limit > 0 else []

    @property
    def last_seq(self) -> int:
        """The newest committed sequence number (never goes back when entries are dropped)."""
        return max(self._high_seq, self._entries[-1].seq if self._entries else 0)

    def depth(self, consumer: str) -> int:
        entries = self._entries
        return len(entries) - _index_after(entries, self.cursor(consumer))

    def backlog_bytes(self, consumer: str) -> int:
        """Journal bytes of the entries ``consumer`` has not finished with."""
        sizes = self._sizes
        return sum(sizes.get(e.seq, 0) for e in self.pending(consumer))

    def trim_backlog(self, consumer: str, max_events: int, max_bytes: int,
                     low_water: float = 0.9) -> list[JournalEntry]:
        """Bound ``consumer``'s backlog: when it holds more than ``max_events`` entries or
        ``max_bytes`` bytes, remove the oldest degraded (non-fatal unhealthy) entries until it
        is back under ``low_water`` of both bounds. Fatal and healthy entries are never
        removed, so the backlog may stay above the bound if they alone exceed it.

        The entries leave the journal (every consumer and the history lose them): the bound
        exists to cap the journal's disk and memory use. The low-water mark makes a full
        outbox rewrite the file once per burst of drops, not once per new event. Returns the
        removed entries, oldest first.
        """
        if self.depth(consumer) <= max_events and _file_size(self.path) <= max_bytes:
            return []  # the cheap, common case: the whole journal fits
        with self._lock:
            pending = self.pending(consumer)
            count = len(pending)
            total = sum(self._sizes.get(e.seq, 0) for e in pending)
            if count <= max_events and total <= max_bytes:
                return []
            target_events = int(max_events * low_water)
            target_bytes = int(max_bytes * low_water)
            dropped: list[JournalEntry] = []
            for entry in pending:
                if count <= target_events and total <= target_bytes:
                    break
                if entry.event.severity != "degraded":
                    continue
                dropped.append(entry)
                count -= 1
                total -= self._sizes.get(entry.seq, 0)
            if not dropped:
                return []
            gone = {e.seq for e in dropped}
            self._entries = [e for e in self._entries if e.seq not in gone]
            for seq in gone:
                self._sizes.pop(seq, None)
            self._rewrite()
            return dropped

    def compact(self) -> None:
        """Drop entries every consumer is done with, beyond the history window.

        While a large backlog remains, the file is rewritten only when at least half of it
        goes, so draining it batch by batch costs linear, not quadratic, disk writes."""
        with self._lock:
            entries = self._entries
            if len(entries) <= 2 * self.history_size:
                return
            done = min(self._cursors.values(), default=self.last_seq)
            keep_from = max(len(entries) - self.history_size, 0)
            cut = min(keep_from, _index_after(entries, done))
            if cut <= 0 or (2 * cut < len(entries)
                            and len(entries) - cut > 2 * self.history_size):
                return
            for entry in entries[:cut]:
                self._sizes.pop(entry.seq, None)
            self._entries = entries[cut:]
            self._rewrite()

    def _rewrite(self) -> None:
        if self._pending:  # an append awaits its state commit: rewrite once that resolves
            self._rewrite_deferred = True
            return
        self._rewrite_deferred = False
        try:
            atomic_write(self.path, b"".join(_encode(e) for e in self._entries))
        except OSError as exc:
            log.warning("cannot rewrite %s: %s", self.path, exc.strerror)


def _file_size(path: str) -> int:
    try:
        return os.stat(path).st_size
    except OSError:
        return 0


def _index_after(entries: list[JournalEntry], seq: int) -> int:
    """Index of the first entry with a sequence number above ``seq`` (entries are sorted)."""
    low, high = 0, len(entries)
    while low < high:
        mid = (low + high) // 2
        if entries[mid].seq <= seq:
            low = mid + 1
        else:
            high = mid
    return low


def _parse_journal(raw: bytes) -> tuple[list[JournalEntry], dict[int, int], int, bool]:
    """The readable entries in sequence order with each one's size in bytes, the damaged
    whole lines, and whether the last line is torn (no newline, not a whole record)."""
    lines = raw.split(b"\n")
    unterminated = lines.pop()  # b"" when the file ends with a newline
    entries: list[JournalEntry] = []
    sizes: dict[int, int] = {}
    damaged = 0
    for line in lines:
        entry = _decode(line)
        if entry is None or (entries and entry.seq <= entries[-1].seq):
            damaged += 1  # a whole (newline-terminated) line: it was written completely
            continue
        entries.append(entry)
        sizes[entry.seq] = len(line) + 1
    torn = bool(unterminated.strip())
    if torn:
        entry = _decode(unterminated)  # a whole record whose newline is missing
        if entry is not None and not (entries and entry.seq <= entries[-1].seq):
            entries.append(entry)
            sizes[entry.seq] = len(unterminated) + 1
            torn = False
    return entries, sizes, damaged, torn


def _drop_unfinished(entries: list[JournalEntry], sizes: dict[int, int],
                     committed_seq: Optional[int]
                     ) -> tuple[list[JournalEntry], int, Optional[str]]:
    """The entries less those past the state's sequence number (an unfinished commit: their
    sizes are dropped too), how many those were, and why none were dropped although some
    lie past it (they do not start right after it: the state does not match the journal)."""
    beyond = [e for e in entries if committed_seq is not None and e.seq > committed_seq]
    if not beyond or committed_seq is None:
        return entries, 0, None
    if beyond[0].seq != committed_seq + 1:
        # An unfinished commit always starts right after the committed sequence number:
        # the state cannot be right, and it must not cost the journal anything.
        return entries, 0, (f"event_seq {committed_seq} does not match the journal (its "
                            f"next entry is {beyond[0].seq})")
    for entry in beyond:
        sizes.pop(entry.seq, None)
    return entries[:-len(beyond)], len(beyond), None


def _decode(line: bytes) -> Optional[JournalEntry]:
    """One journal line, or None when it cannot be read (damaged or torn)."""
    try:
        record = json.loads(line)
        seq = record["seq"]
        if isinstance(seq, bool) or not isinstance(seq, int) or not 0 < seq < MAX_SEQ:
            return None
        return JournalEntry(seq, HealthEvent.from_json(record["event"]))
    except (ValueError, KeyError, TypeError, AttributeError, OverflowError, RecursionError):
        return None


def _stamp() -> str:
    """A UTC time for the names of files moved aside (``state.json.corrupt-<time>``)."""
    return time.strftime("%Y%m%dT%H%M%SZ", time.gmtime())


def _encode(entry: JournalEntry) -> bytes:
    record: dict[str, Any] = {"seq": entry.seq, "event": entry.event.to_json()}
    return json.dumps(record, separators=(",", ":")).encode() + b"\n"
