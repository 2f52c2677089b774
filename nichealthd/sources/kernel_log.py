"""Reads the kernel log for the kernel-log family: the journal, or /dev/kmsg as fallback.

A source is read once per poll from the position the last committed poll left (the cursor in
the kernel-log section of the state): when that is not where the source stands (the first
poll, a commit that failed), it seeks back to it, so no line is lost and none is read twice.
It returns at most ``kernelLogMaxLines`` lines per poll and the position after them.

- Journal: python3-systemd's ``systemd.journal.Reader``, kernel transport only, entries of the
  current boot (``_BOOT_ID``); the cursor is the journal's own (``s=...;i=...;b=<boot>;...``).
  A cursor of another boot starts at the first line of the current boot.
- /dev/kmsg: one record per read (``<prio>,<seq>,<usec>,<flags>;<text>``, continuation lines
  start with a space, Documentation/ABI/testing/dev-kmsg); the cursor is
  ``kmsg:<boot id>:<seq>``. A regular file of such records stands in for it in tests.
  The shipped unit hides /dev/kmsg; when it cannot be opened the error says which drop-in
  grants it (:data:`KMSG_DROPIN`, shipped as an example), and the monitor logs it once.

A cursor of this boot that cannot be followed heals, with one warning that says how many lines
may be read again or are taken as read; it never leaves the reader stuck or silent. One the
journal rejects (``Invalid cursor``), or one past the end of what the journal holds (nothing at
or after it: a corrupt or restored state file), resumes at the position it implies in this boot
(its monotonic time ``m=``, when the journal reaches that far), else at the journal's end. A
kmsg sequence number past the last record, or one that is not a number, resumes after the last
record. The healed position is what the next commit stores.
"""

from __future__ import annotations

import errno
import importlib
import logging
import os
import stat
import time
from datetime import datetime, timezone
from typing import Any, Callable, Optional, Protocol, Sequence

from ..core.checks.kernel_log import KERNEL_LOG, KernelLogSettings
from ..core.config import Config
from ..core.failure import describe_exception
from ..core.model import HostSnapshot, KernelLine
from ..core.numbers import KMSG_SEQUENCE, KMSG_USEC, U64, Kind, value
from ..core.state import MonitorState
from .kernel_log_facts import KERNEL_LINES, KernelBatch
from .seam import Source

log = logging.getLogger("nichealthd.kernel_log")

JOURNAL_DIRS = ("/run/log/journal", "/var/log/journal")
KMSG = "/dev/kmsg"
KMSG_RECORD_MAX = 8192
# The drop-in that lets the service read /dev/kmsg (systemd/examples/kmsg.conf, installed by
# the packages as an example) and where an operator puts it.
KMSG_DROPIN = "/usr/share/doc/nichealthd/examples/kmsg.conf"
KMSG_DROPIN_TARGET = "/etc/systemd/system/nichealthd.service.d/kmsg.conf"
# Why open(/dev/kmsg) fails: kernel/printk/printk.c devkmsg_open() -> check_syslog_permissions()
# refuses readers without CAP_SYSLOG when kernel.dmesg_restrict = 1 (EPERM), the unit's device
# cgroup (DevicePolicy=closed) refuses the node (EPERM), PrivateDevices=yes leaves it out of
# the service's /dev (ENOENT).
_KMSG_WHY = {
    errno.ENOENT: "there is no /dev/kmsg in the service's /dev (PrivateDevices=yes)",
    errno.EPERM: "not permitted (the unit's DevicePolicy=, or kernel.dmesg_restrict = 1 "
                 "without CAP_SYSLOG)",
    errno.EACCES: "access denied",
}
MISSING_MODULE = ("python3-systemd is not installed (no module systemd.journal): reading "
                  "kernel messages from /dev/kmsg instead; install python3-systemd (Debian/"
                  "Ubuntu) or python3-systemd (Fedora/RHEL) to read the journal with a cursor")

Batch = tuple[tuple[KernelLine, ...], Optional[str]]
# A journal cursor's monotonic time (``m=``, microseconds in hex): a 64-bit value.
CURSOR_USEC = Kind("cursor time in µs", 0, U64, base=16)
# Lines counted for a heal's warning at most (a count, not a read: it costs a pass over them).
COUNT_LIMIT = 10_000


class KernelLogSource(Protocol):
    """What the monitor reads each poll."""

    description: str

    def read(self, committed: str, boot_id: Optional[str], limit: int) -> Batch:
        """Lines after ``committed`` (the start of the boot if it is empty or of another
        boot), at most ``limit``, and the position after them (None: nothing new)."""

    def close(self) -> None:
        """Release the journal or the device."""


def _boot_hex(boot_id: Optional[str]) -> Optional[str]:
    return boot_id.replace("-", "").strip().lower() if boot_id else None


def _text(value: object) -> str:
    if isinstance(value, bytes):
        return value.decode("utf-8", "replace")
    return str(value)


class JournalSource:
    """The kernel messages of the systemd journal (or of a journal directory or file)."""

    def __init__(self, path: str = "", journal_module: Any = None) -> None:
        if journal_module is None:
            journal_module = importlib.import_module("systemd.journal")  # python3-systemd
        self._journal = journal_module
        self.path = path
        self.description = f"journal {path}" if path else "the systemd journal"
        self._reader: Any = None
        self._boot: Optional[str] = None
        self._position: Optional[str] = None
        self._pushed: Optional[dict[str, Any]] = None
        # A committed cursor that was healed -> where the heal resumed (a cursor; "" for the
        # first line of the boot; None to heal again, silently): a poll whose commit failed
        # passes the old cursor again, and is neither warned about twice nor moved on.
        self._healed: dict[str, Optional[str]] = {}

    def _open(self, boot: Optional[str]) -> None:
        self.close()
        converters: dict[str, Callable[[Any], Any]] = {"__REALTIME_TIMESTAMP": int,
                                                       "MESSAGE": _text}
        if self.path and os.path.isfile(self.path):
            reader = self._journal.Reader(files=[self.path], converters=converters)
        elif self.path:
            reader = self._journal.Reader(path=self.path, converters=converters)
        else:
            reader = self._journal.Reader(converters=converters)
        reader.add_match(_TRANSPORT="kernel")
        if boot:
            reader.add_match(_BOOT_ID=boot)
        reader.fileno()  # the inotify watch: process() then sees rotated and new files
        self._reader, self._boot, self._position, self._pushed = reader, boot, None, None

    def _seek(self, committed: str) -> None:
        reader = self._reader
        self._pushed = None
        fields = cursor_fields(committed)
        if not committed or (self._boot is not None and fields.get("b") != self._boot):
            if self._boot is None:  # no boot ID to match on: never replay older boots
                reader.seek_tail()
                reader.get_previous()  # new lines from here on
            else:
                reader.seek_head()  # the first line of this boot (the match is on it)
            self._position = None
            return
        try:
            reader.seek_cursor(committed)
        except (OSError, ValueError) as exc:  # "Invalid cursor" (EINVAL)
            self._heal(committed, fields, f"the journal rejects it ({exc})")
            return
        entry = reader.get_next()
        if entry:
            if not reader.test_cursor(committed):
                self._pushed = entry  # the committed line is gone (vacuumed): this one is new
            self._position = committed
            return
        # Nothing at or after it: with no line of this boot in the journal, the first line
        # to come is new (a vacuumed boot); with some, the cursor is past the journal's end.
        self._heal(committed, fields, None)

    def _heal(self, committed: str, fields: dict[str, str], rejected: Optional[str]) -> None:
        """Resume after a cursor of this boot that cannot be followed (module doc)."""
        reader = self._reader
        warned = committed in self._healed
        reader.seek_tail()
        last = reader.get_previous()  # the last kernel line of this boot
        what = (f"the committed kernel-log cursor {committed[:120]!r} cannot be followed in "
                f"{self.description}: " + (rejected or "it is past the end of the journal"))
        if not last:
            reader.seek_head()
            self._position = committed if rejected is None else None
            self._healed[committed] = None if rejected is None else ""
            if rejected is not None and not warned:
                log.warning("%s; the journal holds no kernel line of this boot yet: reading "
                            "from its first", what)
            return
        last_fields = cursor_fields(_text(last.get("__CURSOR", "")))
        mark = value(fields.get("m"), CURSOR_USEC)
        end = value(last_fields.get("m"), CURSOR_USEC)
        boot = fields.get("b")
        if mark is not None and end is not None and mark <= end and boot == last_fields.get("b"):
            again = self._count_at(mark, boot)
            reader.seek_monotonic(mark / 1e6, boot)
            self._position = None
            self._healed[committed] = None  # heal again (to the same time) after a failure
            if not warned:
                log.warning("%s; resuming at its time in this boot (%.6f s after boot): %d "
                            "line(s) logged at that time may be read again", what, mark / 1e6,
                            again)
            return
        tail = _text(last.get("__CURSOR", ""))
        if not warned:
            count = self._count_all()
            log.warning("%s; resuming at the end of the journal: %s kernel line(s) of this "
                        "boot already in it are taken as read (skipped, if they were not)",
                        what, count if count < COUNT_LIMIT else f"more than {COUNT_LIMIT}")
            reader.seek_tail()
            reader.get_previous()
        self._position = tail
        self._healed[committed] = tail

    def _count_at(self, mark: int, boot: Optional[str]) -> int:
        """Lines of this boot logged at monotonic time ``mark`` (moves the reader)."""
        reader = self._reader
        reader.seek_monotonic(mark / 1e6, boot)
        count = 0
        while count < COUNT_LIMIT:
            entry = reader.get_next()
            if not entry or value(cursor_fields(_text(entry.get("__CURSOR", ""))).get("m"),
                                  CURSOR_USEC) != mark:
                break
            count += 1
        return count

    def _count_all(self) -> int:
        """Kernel lines of this boot in the journal, up to COUNT_LIMIT (moves the reader)."""
        reader = self._reader
        reader.seek_head()
        count = 0
        while count < COUNT_LIMIT and reader.get_next():
            count += 1
        return count

    def read(self, committed: str, boot_id: Optional[str], limit: int) -> Batch:
        resume = self._healed.get(committed) if committed else None
        if resume is not None:  # a heal whose commit failed: where it resumed, no new warning
            committed = resume
        boot = _boot_hex(boot_id)
        if self._reader is None or boot != self._boot:
            self._open(boot)
            self._seek(committed)
        elif committed != (self._position or ""):
            self._seek(committed)
        else:
            self._reader.process()
        lines: list[KernelLine] = []
        while len(lines) < limit:
            entry, self._pushed = self._pushed or self._reader.get_next(), None
            if not entry:
                break
            self._position = entry["__CURSOR"]
            text = entry.get("MESSAGE")
            if text is None:
                continue
            usec = entry.get("__REALTIME_TIMESTAMP") or 0
            at = datetime.fromtimestamp(usec / 1_000_000, timezone.utc)
            lines.append(KernelLine(_text(text), at))
        return tuple(lines), self._position

    def close(self) -> None:
        if self._reader is not None:
            try:
                self._reader.close()
            finally:
                self._reader = None


class KmsgUnavailable(OSError):
    """/dev/kmsg cannot be opened; the message tells the operator how to grant it."""

    def __str__(self) -> str:
        return str(self.strerror)


def kmsg_unavailable(exc: OSError) -> KmsgUnavailable:
    why = _KMSG_WHY.get(exc.errno or 0, exc.strerror or str(exc))
    return KmsgUnavailable(
        exc.errno, f"{KMSG} cannot be opened: {why}. The shipped unit hides it: to read the "
        f"kernel log from {KMSG} install the drop-in {KMSG_DROPIN} as {KMSG_DROPIN_TARGET}, "
        f"then systemctl daemon-reload and systemctl restart nichealthd (nichealthd(8), "
        f"KERNEL LOG), or use kernelLog = \"journal\" with python3-systemd")


class KmsgSource:
    """/dev/kmsg records (or a file of them), sequence numbers as the cursor."""

    def __init__(self, path: str = KMSG,
                 clock: Callable[[], float] = time.time,
                 monotonic: Callable[[], float] = time.monotonic) -> None:
        self.path = path
        self.description = path
        self._clock, self._monotonic = clock, monotonic
        self._fd: Optional[int] = None
        self._device = False
        self._buffer = b""
        self._boot: Optional[str] = None
        self._seq = -1  # the last sequence number read
        self._lost = 0
        self._healed: dict[str, str] = {}  # a committed cursor healed -> the cursor healed to

    def _open(self) -> None:
        self.close()
        try:
            self._fd = os.open(self.path, os.O_RDONLY | os.O_NONBLOCK | os.O_CLOEXEC)
        except OSError as exc:
            if self.path == KMSG:
                raise kmsg_unavailable(exc) from None
            raise
        self._device = stat.S_ISCHR(os.fstat(self._fd).st_mode)
        self._buffer, self._seq = b"", -1

    def _records(self) -> Any:
        """Raw records in order; a device gives one per read, a file one per line."""
        assert self._fd is not None
        while True:
            if self._device:
                try:
                    data = os.read(self._fd, KMSG_RECORD_MAX)
                except BlockingIOError:
                    return
                except OSError as exc:
                    if exc.errno == errno.EPIPE:  # overwritten before we read it
                        self._lost += 1
                        continue
                    raise
                if not data:
                    return
                yield data
            else:
                while b"\n" not in self._buffer:
                    data = os.read(self._fd, 65536)
                    if not data:
                        return  # a partial last line is read when it is complete
                    self._buffer += data
                record, _, self._buffer = self._buffer.partition(b"\n")
                if record.startswith(b" ") or not record:
                    continue  # a continuation line (KEY=value) of the record before
                yield record

    def _take(self, want: int, limit: int) -> tuple[list[KernelLine], int, bool]:
        """The records after sequence number ``want``, at most ``limit``; how many at or
        before it were skipped, and whether the buffer was read to its end."""
        lines: list[KernelLine] = []
        offset = self._clock() - self._monotonic()  # wall time of monotonic 0 (the boot)
        skipped = 0
        for raw in self._records():
            parsed = parse_kmsg(raw)
            if parsed is None:
                continue
            seq, usec, text = parsed
            if seq <= want:
                self._seq = max(self._seq, seq)
                skipped += 1
                continue
            self._seq = seq
            lines.append(KernelLine(text, datetime.fromtimestamp(offset + usec / 1e6,
                                                                  timezone.utc)))
            if len(lines) >= limit:
                return lines, skipped, False
        return lines, skipped, True

    def read(self, committed: str, boot_id: Optional[str], limit: int) -> Batch:
        boot = (boot_id or "").strip()
        committed = self._healed.get(committed, committed)  # a heal whose commit failed
        found = _kmsg_seq(committed, boot)
        # Not a sequence number: every record now in the buffer is taken as read (below).
        want = U64 if found is None else found
        if self._fd is None or boot != self._boot or want < self._seq:
            self._open()
            self._boot = boot
        lines, skipped, complete = self._take(want, limit)
        if self._lost:
            log.warning("/dev/kmsg: %d kernel message(s) were overwritten before they could "
                        "be read", self._lost)
            self._lost = 0
        if complete and want > self._seq:  # past the last record (or not a number)
            if self._seq >= 0:
                self._heal(committed, found is None, skipped)
                want = self._seq
            elif found is None:
                want = -1  # no record yet: say nothing of the position
        seq = max(self._seq, want)
        return tuple(lines), (f"kmsg:{boot}:{seq}" if seq >= 0 else None)

    def _heal(self, committed: str, rejected: bool, skipped: int) -> None:
        """Resume after the last record for a cursor past it (module doc), warned once."""
        healed = f"kmsg:{self._boot}:{self._seq}"
        if committed not in self._healed:
            why = "its sequence number is not one" if rejected else (
                f"it is past the last record (sequence number {self._seq})")
            log.warning("the committed kernel-log cursor %r cannot be followed in %s: %s; "
                        "resuming after the last record: the %d record(s) now in the buffer "
                        "are taken as read (skipped, if they were not)", committed[:120],
                        self.description, why, skipped)
        self._healed[committed] = healed

    def close(self) -> None:
        if self._fd is not None:
            os.close(self._fd)
            self._fd = None


def _kmsg_seq(cursor: str, boot: str) -> Optional[int]:
    """The sequence number a kmsg cursor of this boot stands at; -1 for no cursor or one of
    another boot (read from the first record); None for one of this boot whose sequence
    number is not one."""
    parts = cursor.split(":")
    if len(parts) != 3 or parts[0] != "kmsg" or parts[1] != boot:
        return -1
    return value(parts[2], KMSG_SEQUENCE)


def cursor_fields(cursor: str) -> dict[str, str]:
    """A journal cursor (``s=…;i=…;b=…;m=…;t=…;x=…``, sd_journal_get_cursor) as a mapping."""
    return dict(part.partition("=")[::2] for part in cursor.split(";") if "=" in part)


def parse_kmsg(raw: bytes) -> Optional[tuple[int, int, str]]:
    """(sequence, microseconds since boot, text) of one /dev/kmsg record; None if malformed.

    ``6,1234,5678901,-;mlx5_core 0000:19:00.0: ...`` (prefix fields: facility/priority,
    sequence, timestamp, flags, optional more fields; Documentation/ABI/testing/dev-kmsg).
    """
    head, sep, body = raw.partition(b";")
    if not sep:
        return None
    fields = head.split(b",")
    if len(fields) < 4:
        return None
    seq, usec = value(fields[1], KMSG_SEQUENCE), value(fields[2], KMSG_USEC)
    if seq is None or usec is None:
        return None
    text = body.split(b"\n", 1)[0].decode("utf-8", "replace")
    return seq, usec, _unescape(text)


def _unescape(text: str) -> str:
    r"""/dev/kmsg escapes non-printable bytes as ``\xNN``."""
    if "\\x" not in text:
        return text
    out, i = [], 0
    while i < len(text):
        if text.startswith("\\x", i) and i + 4 <= len(text):
            try:
                out.append(chr(int(text[i + 2:i + 4], 16)))
                i += 4
                continue
            except ValueError:
                pass
        out.append(text[i])
        i += 1
    return "".join(out)


def journal_available() -> bool:
    return any(os.path.isdir(d) for d in JOURNAL_DIRS)


def open_kernel_log(config: Config) -> Optional[KernelLogSource]:
    """The source ``kernelLog`` asks for, or its fallback; None when off. Logs the choice."""
    kernel = config.settings(KernelLogSettings)
    mode, path = kernel.kernel_log, kernel.kernel_log_path
    if mode == "off":
        log.info("kernel log: off (kernelLog = \"off\")")
        return None
    if not path and not config.host_sysfs:
        log.info("kernel log: not read (sysfsRoot is not /sys: a simulated host; set "
                 "kernelLogPath to read its journal)")
        return None
    if mode == "journal":
        if path or journal_available():
            try:
                source: KernelLogSource = JournalSource(path)
            except ImportError:
                log.warning("%s", MISSING_MODULE)
            else:
                log.info("kernel log: %s (kernel transport, cursor in the state file)",
                         source.description)
                return source
            if path:
                return None  # a journal path cannot be read as kmsg
        else:
            log.info("kernel log: no journal in %s, reading %s", " or ".join(JOURNAL_DIRS),
                     KMSG)
    source = KmsgSource(path or KMSG)
    log.info("kernel log: %s (sequence numbers as the cursor)", source.description)
    return source


class KernelLogLines(Source):
    """The seam's reader of the kernel log: each poll, the lines after the position the state
    holds (the kernel-log family's section, committed with the poll's events: a poll that
    fails, or whose commit fails, reads them again).

    Its failure policy is its own: a log that cannot be read is logged once, with what to do,
    and gives no lines (None), and the family is judged as usual. It does not make its family
    "not judged" (unknown ports, a degraded host) as the boundary of the other sources does:
    the shipped unit hides /dev/kmsg and a host without python3-systemd falls back to it, so
    that would degrade every such host from its first start for an optional input, and the
    family has no lines to judge.
    """

    fact = KERNEL_LINES
    description = "the kernel log"

    def __init__(self, config: Config) -> None:
        super().__init__(config)
        self.log = open_kernel_log(config) if KERNEL_LOG.enabled(config) else None
        self._committed = ""
        self._problem = ""

    def resume(self, state: MonitorState) -> None:
        self._committed = state.section(KERNEL_LOG).cursor

    def read(self, snapshot: HostSnapshot, devices: Sequence[str]) -> Optional[KernelBatch]:
        if self.log is None:
            return None
        limit = self.config.settings(KernelLogSettings).kernel_log_max_lines
        try:
            lines, cursor = self.log.read(self._committed, snapshot.boot_id, limit)
        except Exception as exc:  # its failure policy (see the class)
            problem = describe_exception(exc)
            if problem != self._problem:
                _poll_log.warning("cannot read the kernel log (%s): %s; trying again each "
                                  "poll", self.log.description, problem)
                self._problem = problem
            self.log.close()
            return None
        if self._problem:
            _poll_log.info("kernel log (%s) readable again", self.log.description)
            self._problem = ""
        if len(lines) >= limit:
            _poll_log.debug("kernel log: %d lines this poll (kernelLogMaxLines), the rest next "
                            "poll", len(lines))
        return KernelBatch(lines, cursor)

    def reconfigure(self, config: Config) -> None:
        """Opens the log again when the mode, its path or the sysfs root changed."""
        old = self.config
        super().reconfigure(config)
        was, now = old.settings(KernelLogSettings), config.settings(KernelLogSettings)
        if (was.kernel_log, was.kernel_log_path, old.sysfs_root) != (
                now.kernel_log, now.kernel_log_path, config.sysfs_root):
            self.close()
            self.log = open_kernel_log(config) if KERNEL_LOG.enabled(config) else None

    def close(self) -> None:
        if self.log is not None:
            self.log.close()


SOURCE = KernelLogLines
# What the poll could not read is the poll's to say, as the monitor logs the other sources'.
_poll_log = logging.getLogger("nichealthd.monitor")
