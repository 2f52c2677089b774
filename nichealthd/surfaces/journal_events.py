"""Each committed event as a journal entry with fields: ``journalctl NICHEALTHD_DEVICE=mlx5_3``.

A line on standard error becomes a journal entry with a message and a priority only. An event
is sent instead as the native journal protocol of systemd's ``sd_journal_send`` (a datagram of
``FIELD=value`` lines to ``/run/systemd/journal/socket``, ``systemd.journal-fields(7)``), with
the fields an admin filters on: the NIC (``NICHEALTHD_DEVICE``, its kernel name or, for a lost
NIC, its PCI address), the port, the check, the severity, the error code, the recommended
action, the event's id and sequence number, and a ``MESSAGE_ID`` per kind of event: the key of
the journal catalog (``systemd/nichealthd.catalog``, installed to /usr/lib/systemd/catalog/),
whose entry ``journalctl -x`` prints under the message (what it means and what to do).

The MESSAGE_IDs are fixed here, once: a kind keeps its id in every version, as the catalog and
an admin's saved queries (``journalctl MESSAGE_ID=...``) rely on it. The message text is the
one the daemon logged before (``event fatal: ...``). Built without a library (python3-systemd
is optional): the protocol is a few lines, like the daemon's own sd_notify.
"""

from __future__ import annotations

import os
import socket
import struct
import time
from dataclasses import dataclass
from typing import Callable, Iterable, Optional, Sequence

from ..core.checks.kernel_log import CHECK_NAME as DRIVER_FAULT_CHECK
from ..core.config import CHAR_DEVICE_CHECK
from ..core.events import ENTITY_NIC, ENTITY_PCI, ENTITY_PORT, HealthEvent

JOURNAL_SOCKET = "/run/systemd/journal/socket"
IDENTIFIER = "nichealthd"
PRIORITY_UNHEALTHY = 4  # warning: what the daemon logged an event at before
PRIORITY_HEALTHY = 6  # info
# The daemon's loop sends: a journald that stops reading costs it this long once, then the
# events are plain lines for RETRY_AFTER seconds before the socket is tried again.
SEND_TIMEOUT = 1.0
RETRY_AFTER = 30.0

Fields = Sequence[tuple[str, str]]


@dataclass(frozen=True)
class Kind:
    """A kind of event: its catalog entry's key and the events it covers."""
    name: str
    message_id: str  # 128 bits, lower-case hex, as journalctl prints MESSAGE_ID
    codes: frozenset[str] = frozenset()  # errorCodes of this kind
    prefix: str = ""  # or an errorCode prefix
    checks: frozenset[str] = frozenset()  # or the checks whose every event is of this kind


def _kind(name: str, message_id: str, *codes: str, prefix: str = "",
          checks: Iterable[str] = ()) -> Kind:
    return Kind(name, message_id, frozenset(codes), prefix, frozenset(checks))


# In the order they are tried: the checks first (their codes vary), then the codes.
KINDS = (
    _kind("char_device", "f5f53e67ba754bd68cff37b23a72f960", checks=(CHAR_DEVICE_CHECK,)),
    _kind("driver_fault", "bc9a756af0804fa3bd27f0864dc2203d", checks=(DRIVER_FAULT_CHECK,)),
    _kind("port_state", "e4d1236323b445e7b615159f07bf4f98", "port_state", "netdev_down"),
    _kind("nic_missing", "bc0b3ab88c8945f4ae8bc90df61bdb94",
          "device_missing", "port_missing", "nic_unregistered"),
    _kind("driver_event", "941bce54c06e4e8b84bfce8d996c5d5e", "driver_event"),
    _kind("card_ports", "e3e31c982e5143b7a5c623a4576fec4d", "card_active_ports"),
    _kind("link_flap", "8041892b7bc54e839b2420aa924e6e5b", "link_flap"),
    _kind("link_rate", "058232576f894acda65bb23fd7e81cfb", "link_rate"),
    _kind("link_ber", "0986f30b23d04995b0df6307cb92cf7d", "link_ber", "link_fec_uncorrectable"),
    _kind("optics", "a074c9e1d4444cf79d7aa7eff7729401", prefix="optics_"),
    _kind("pcie", "22297c77226347528128a8db0bfb729d", "pcie_link", prefix="aer_"),
    _kind("temperature", "fd5705d45d1e402b8861625a11312a60", "temperature"),
    _kind("firmware", "e06e4fa08d304ef49366ecbe67f46e07", "firmware_drift"),
    _kind("fabric", "3432cfae272c4e28ad09efc6d88f42cb", "fabric_event"),
    _kind("baseline", "5164c3625e9f46b9bfb519525254900f", "reboot_clear"),
)
# The error counters: their codes are the counter names of the configuration, so they are what
# is left of the state and degradation checks' events.
COUNTER = _kind("counter", "ef2c7c1f1caf498c8ae997e756229a84")
OTHER = _kind("other", "975abac8bec44623aa4cee7412f798da")
ALL_KINDS = (*KINDS, COUNTER, OTHER)


def kind_of(event: HealthEvent) -> Kind:
    """The kind of an event: by its check where a check has one kind, else by its code."""
    for kind in KINDS:
        if event.check_name in kind.checks:
            return kind
    for code in event.error_code:
        for kind in KINDS:
            if code in kind.codes or (kind.prefix and code.startswith(kind.prefix)):
                return kind
    # a breach of an older version may be filed under the state check (checks/counters.py)
    return COUNTER if event.check_name.endswith(("DegradationCheck", "StateCheck")) else OTHER


def entry_fields(event: HealthEvent, seq: int) -> list[tuple[str, str]]:
    """The journal entry of a committed event, field by field."""
    entities = dict(event.entities)
    device = entities.get(ENTITY_NIC) or entities.get(ENTITY_PCI, "")
    fields = [
        ("MESSAGE", f"event {event.severity}: {event.message}"),
        ("PRIORITY", str(PRIORITY_HEALTHY if event.is_healthy else PRIORITY_UNHEALTHY)),
        ("SYSLOG_IDENTIFIER", IDENTIFIER),
        ("MESSAGE_ID", kind_of(event).message_id),
        ("NICHEALTHD_KIND", kind_of(event).name),
        ("NICHEALTHD_CHECK", event.check_name),
        ("NICHEALTHD_SEVERITY", event.severity),
        ("NICHEALTHD_ACTION", event.recommended_action),
    ]
    if device:
        fields.append(("NICHEALTHD_DEVICE", device))
    if entities.get(ENTITY_PORT):
        fields.append(("NICHEALTHD_PORT", entities[ENTITY_PORT]))
    if entities.get(ENTITY_PCI):
        fields.append(("NICHEALTHD_PCI", entities[ENTITY_PCI]))
    fields.extend(("NICHEALTHD_ERROR_CODE", code) for code in event.error_code)
    if event.event_id:
        fields.append(("NICHEALTHD_EVENT_ID", event.event_id))
    fields.append(("NICHEALTHD_SEQ", str(seq)))
    return fields


def encode(fields: Fields) -> bytes:
    """The native protocol: ``NAME=value\\n``, or for a value with a newline ``NAME\\n``, its
    length as 64-bit little-endian, the value and ``\\n`` (systemd's journal-send.c)."""
    out = bytearray()
    for name, value in fields:
        data = value.encode("utf-8", "replace")
        if b"\n" in data:
            out += name.encode() + b"\n" + struct.pack("<Q", len(data)) + data + b"\n"
        else:
            out += name.encode() + b"=" + data + b"\n"
    return bytes(out)


def decode(datagram: bytes) -> list[tuple[str, str]]:
    """What journald reads from a datagram (tests; the inverse of :func:`encode`)."""
    fields, pos = [], 0
    while pos < len(datagram):
        end = datagram.index(b"\n", pos)
        line = datagram[pos:end]
        if b"=" in line:
            name, _, value = line.partition(b"=")
            pos = end + 1
        else:
            name = line
            (size,) = struct.unpack("<Q", datagram[end + 1:end + 9])
            value = datagram[end + 9:end + 9 + size]
            pos = end + 9 + size + 1
        fields.append((name.decode(), value.decode("utf-8", "replace")))
    return fields


class JournalSender:
    """Sends entries to journald's native socket; says why not once, then the caller logs."""

    def __init__(self, path: str = JOURNAL_SOCKET,
                 clock: Callable[[], float] = time.monotonic) -> None:
        self.path = path
        self.clock = clock
        self._sock: Optional[socket.socket] = None
        self._retry_at = 0.0
        self.failure = ""  # why the last send failed, "" while it works

    def send(self, fields: Fields) -> bool:
        """True when journald took the entry; False at once while a failure is recent."""
        if self.failure and self.clock() < self._retry_at:
            return False
        data = encode(fields)
        try:
            if self._sock is None:
                self._sock = socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM | socket.SOCK_CLOEXEC)
                self._sock.settimeout(SEND_TIMEOUT)
            self._sock.sendto(data, self.path)
        except OSError as exc:  # no socket, a full queue past the timeout, too big
            why = os.strerror(exc.errno) if exc.errno else "journald did not take it in time"
            self.failure = f"{self.path}: {why}"
            self._retry_at = self.clock() + RETRY_AFTER
            self.close()
            return False
        self.failure = ""
        return True

    def close(self) -> None:
        if self._sock is not None:
            self._sock.close()
            self._sock = None
