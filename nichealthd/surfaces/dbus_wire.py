"""Replies marshalled once per poll, and a per-client call budget.

Twenty local clients hammering the D-Bus API used to slow the poll loop (the loop marshalled
every answer again, 1-4 ms of CPU for ``ListCounters`` or ``ListEvents``) and so flip
``/healthz`` to 503. Two things keep the bus load from reaching the poller:

* :class:`Prepared` holds an answer's body marshalled once; :class:`PreparedReply` is a
  method return that only marshals its small header per caller and reuses those bytes.
* :class:`CallLimiter` is a token bucket per sender and one for all senders together, so
  the work the loop does for the bus is bounded however many calls or connections arrive.
  A read-only call over budget waits in a short per-client queue (a client waiting for its
  answers sends no more: back-pressure); a call that does not fit the queue, or waits too
  long, gets ``org.freedesktop.DBus.Error.LimitsExceeded``. Root's calls spend only from their
  own bucket (:meth:`CallLimiter.take` with ``privileged``): a flood of other users' calls,
  which empties the shared one, never refuses root.
"""

from __future__ import annotations

import time
from dataclasses import dataclass
from typing import Callable, Dict, NamedTuple, Optional, Sequence

from .dbus_common import Message, MessageType, Variant

try:
    from dbus_fast._private.marshaller import Marshaller
except ImportError:  # pragma: no cover - dbus-next
    from dbus_next._private.marshaller import Marshaller  # type: ignore[no-redef]

LIMITS_EXCEEDED = "org.freedesktop.DBus.Error.LimitsExceeded"
# A client (one bus connection) may make 20 calls/s with bursts of 60: `nichealthctl` makes a
# handful per command. All clients together get 200 calls/s, about 5 % of a core for the loop.
SENDER_RATE, SENDER_BURST = 20.0, 60.0
TOTAL_RATE, TOTAL_BURST = 200.0, 200.0
SENDER_QUEUE = 16  # calls of one client waiting for budget; more are refused
MAX_QUEUED = 1024  # calls of all clients waiting; more are refused
QUEUE_WAIT = 10.0  # seconds a call may wait (clients give up after 25 s by default)
DRAIN_PERIOD = 0.05
# Big answers cost more: 1 token per 64 KiB on top of 1 per call, so a 1 MiB ListCounters of
# a 128-device host costs 17 and the bus, the clients and we are not flooded with bytes.
REPLY_UNIT = 64 * 1024
MAX_SENDERS = 4096  # buckets kept; full (idle) ones are forgotten first
OVER_SENDER, OVER_TOTAL = "sender", "total"  # whose budget refused a call (CallLimiter.take)

_HEADER_SIGNATURE = "yyyyuua(yv)"
_LITTLE_ENDIAN = ord("l")
_PROTOCOL_VERSION = 1
_FIELD_REPLY_SERIAL, _FIELD_DESTINATION, _FIELD_SIGNATURE = 5, 6, 8


@dataclass(frozen=True)
class Prepared:
    """An answer's body as bytes on the wire, with its signature."""

    signature: str
    body: bytes

    @classmethod
    def of(cls, signature: str, body: Sequence[object]) -> Prepared:
        return cls(signature, bytes(Marshaller(signature, list(body)).marshall()))


def _wire_body(message: Message, negotiate_unix_fd: bool) -> bytes:
    """The complete message: a fresh header for this caller, then the shared body bytes."""
    prepared: Prepared = message._prepared  # type: ignore[attr-defined]
    fields = [(_FIELD_REPLY_SERIAL, Variant("u", message.reply_serial))]
    if message.destination:
        fields.append((_FIELD_DESTINATION, Variant("s", message.destination)))
    if prepared.signature:
        fields.append((_FIELD_SIGNATURE, Variant("g", prepared.signature)))
    header = bytes(Marshaller(_HEADER_SIGNATURE, [
        _LITTLE_ENDIAN, MessageType.METHOD_RETURN.value, 0, _PROTOCOL_VERSION,
        len(prepared.body), message.serial, fields]).marshall())
    return header + b"\0" * (-len(header) % 8) + prepared.body


class PreparedReply(Message):  # type: ignore[misc]
    """The method return to ``call`` carrying a :class:`Prepared` body (sent with bus.send)."""

    def __init__(self, call: Message, prepared: Prepared) -> None:
        super().__init__(message_type=MessageType.METHOD_RETURN, reply_serial=call.serial,
                         destination=call.sender, signature=prepared.signature)
        self._prepared = prepared

    def _marshall(self, negotiate_unix_fd: bool) -> bytearray:  # the asyncio writer calls it
        return bytearray(_wire_body(self, negotiate_unix_fd))


class _Bucket:
    __slots__ = ("tokens", "stamp")

    def __init__(self, tokens: float, stamp: float) -> None:
        self.tokens, self.stamp = tokens, stamp

    def take(self, now: float, rate: float, burst: float, cost: float = 1.0) -> bool:
        self.tokens = min(burst, self.tokens + (now - self.stamp) * rate)
        self.stamp = now
        if self.tokens < cost:
            return False
        self.tokens -= cost
        return True


class Budget(NamedTuple):
    """A token bucket's budget: ``rate`` calls per second, in bursts of ``burst``."""

    rate: float
    burst: float


PER_SENDER, IN_ALL = Budget(SENDER_RATE, SENDER_BURST), Budget(TOTAL_RATE, TOTAL_BURST)


class CallLimiter:
    """Token buckets: one per sender and one shared; :meth:`allow` spends from both."""

    def __init__(self, per_sender: Budget = PER_SENDER, in_all: Budget = IN_ALL,
                 max_senders: int = MAX_SENDERS,
                 clock: Callable[[], float] = time.monotonic) -> None:
        self.rate, self.burst = per_sender
        self.total_rate, self.total_burst = in_all
        self.max_senders = max_senders
        self._clock = clock
        self._total = _Bucket(in_all.burst, clock())
        self._senders: Dict[str, _Bucket] = {}

    def allow(self, sender: Optional[str], size: int = 0, privileged: bool = False) -> bool:
        """Whether a call from ``sender`` may be answered now with ``size`` bytes: a call
        costs 1 plus 1 per REPLY_UNIT bytes, at most a full burst (so any answer fits)."""
        return not self.take(sender, size, privileged)

    def take(self, sender: Optional[str], size: int = 0, privileged: bool = False) -> str:
        """Spend the call's cost: "" when it may be answered, else whose budget refused it:
        :data:`OVER_SENDER` (its own) or :data:`OVER_TOTAL` (the one all clients share,
        which a ``privileged`` sender, root, does not spend from)."""
        cost = min(1.0 + size / REPLY_UNIT, self.burst, self.total_burst)
        now = self._clock()
        key = sender or ""
        bucket = self._senders.get(key)
        if bucket is None:
            if len(self._senders) >= self.max_senders:
                self._forget(now)
            bucket = self._senders[key] = _Bucket(self.burst, now)
        if not bucket.take(now, self.rate, self.burst, cost):
            return OVER_SENDER
        if privileged:
            return ""
        if not self._total.take(now, self.total_rate, self.total_burst, cost):
            bucket.tokens += cost  # not this client's fault: give its tokens back
            return OVER_TOTAL
        return ""

    def _forget(self, now: float) -> None:
        """Drop the buckets that have refilled (idle clients); if none, the oldest half."""
        refill = self.burst / self.rate if self.rate > 0 else 0.0
        idle = [k for k, b in self._senders.items() if now - b.stamp >= refill]
        if not idle:
            idle = sorted(self._senders, key=lambda k: self._senders[k].stamp)
            idle = idle[:max(1, len(idle) // 2)]
        for key in idle:
            del self._senders[key]

    def senders(self) -> int:
        return len(self._senders)


def limits_exceeded(call: Message, limiter: CallLimiter) -> Message:
    """The error a refused call gets (small; costs the loop next to nothing)."""
    return Message.new_error(call, LIMITS_EXCEEDED,
                             f"too many calls: nichealthd answers {limiter.rate:g} calls/s per "
                             f"client (bursts of {limiter.burst:g}) and "
                             f"{limiter.total_rate:g} calls/s in all; retry later")


__all__ = ["Prepared", "PreparedReply", "CallLimiter", "limits_exceeded", "LIMITS_EXCEEDED",
           "OVER_SENDER", "OVER_TOTAL"]
