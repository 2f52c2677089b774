"""The event loop's budget for the bus: every incoming D-Bus call passes here first.

A read-only call is answered from the bytes :mod:`.dbus_answers` prepared if its client is
within budget (:class:`~.dbus_wire.CallLimiter`), else it waits in the client's short queue
and is answered as the budget allows; a call that does not fit is refused at once with
``LimitsExceeded``. Anything else (Reload, Ping, other paths) goes on to the library's own
dispatch if within budget. When the shared budget refuses a client whose uid is not known,
the bus is asked whose it is (root's calls spend only from their own bucket), and its calls
wait, in order, until the answer. So a flood of clients bounds the loop's work for the bus
and never delays a poll (bench/README.md, "D-Bus flood").
"""

from __future__ import annotations

import asyncio
import collections
import logging
from typing import Callable, Deque, Dict, List, Optional, Set, Tuple, Union

from .admission import ROOT_UID
from .dbus_answers import DbusAnswers
from .dbus_common import ERROR_PREFIX, DBusError, Message, MessageBus, MessageType
from .dbus_wire import (
    DRAIN_PERIOD,
    MAX_QUEUED,
    MAX_SENDERS,
    OVER_TOTAL,
    QUEUE_WAIT,
    SENDER_QUEUE,
    CallLimiter,
    PreparedReply,
    limits_exceeded,
)

log = logging.getLogger("nichealthd.dbus")

REFUSED_LOG_SECONDS = 60.0  # at most one line per minute about clients over their budget
MAX_WRITER_BACKLOG = 32  # replies waiting for the bus socket; beyond, calls wait (memory)
BUS_DRIVER = "org.freedesktop.DBus"
BUS_DRIVER_PATH = "/org/freedesktop/DBus"
UID_TIMEOUT = 5.0  # seconds the bus gets to say who a client is
# What a message handler returns to the library: a reply for it to send, True when the call
# is taken here, False for its own dispatch to answer.
HandlerReply = Union[Message, bool]


def _wants_reply(call: Message) -> bool:
    return not (call.flags.value & 1)  # MessageFlag.NO_REPLY_EXPECTED


class CallGate:
    """Admits, queues, answers or refuses the calls of one bus connection's clients."""

    def __init__(self, bus: Callable[[], Optional[MessageBus]], answers: DbusAnswers) -> None:
        self._bus = bus  # the connection serving now (None while there is none)
        self.answers = answers
        self.limiter = CallLimiter()
        self._queued: Dict[str, Deque[Tuple[float, Message]]] = {}  # calls waiting for budget
        self._queued_total = 0
        # Whose connection is whose (unique name -> uid, from the bus), asked only when the
        # shared budget refuses a call: root's calls do not spend from it. The calls of a
        # client whose uid is being asked wait, in order, until the answer.
        self._uids: Dict[str, int] = {}
        self._awaiting: Dict[str, List[Message]] = {}
        self._awaiting_total = 0
        self._lookups: Set[asyncio.Future[None]] = set()
        self._drain_timer: Optional[asyncio.TimerHandle] = None
        self._refused_logged_at: Optional[float] = None
        self._refused_since_log = 0

    @property
    def bus(self) -> Optional[MessageBus]:
        return self._bus()

    def on_call(self, call: Message) -> HandlerReply:
        """The bus connection's message handler (see the module's docstring): True when the
        call is taken here (answered, queued or refused), False for the library to answer."""
        if self.bus is None or call.message_type is not MessageType.METHOD_CALL \
                or call.sender == BUS_DRIVER:
            # Not serving yet (a call that arrives while request_name is answered, before
            # the service's _connect has set its bus): the library's own dispatch answers
            # it, so no call is ever swallowed without a reply.
            return False
        sender = call.sender or ""
        waiting = self._awaiting.get(sender)
        if waiting is not None:  # its uid is being asked: after the calls before it
            if len(waiting) < SENDER_QUEUE and self._awaiting_total < MAX_QUEUED:
                waiting.append(call)
                self._awaiting_total += 1
                return True
            return self._refuse(call)
        readonly = self.answers.is_readonly(call, self.bus)
        queue = self._queued.get(sender)
        if queue is None and not (readonly and self._writer_full()):
            refused = self.limiter.take(sender, self._reply_size(call) if readonly else 0,
                                        self._uids.get(sender) == ROOT_UID)
            if not refused:
                return self._answer(call) if readonly else False
            if refused == OVER_TOTAL and sender not in self._uids and sender \
                    and self._awaiting_total < MAX_QUEUED:
                return self._ask_uid(sender, call)
        if readonly and (queue is None or len(queue) < SENDER_QUEUE) \
                and self._queued_total < MAX_QUEUED:
            loop = asyncio.get_running_loop()
            self._queued.setdefault(sender, collections.deque()).append((loop.time(), call))
            self._queued_total += 1
            if self._drain_timer is None:
                self._drain_timer = loop.call_later(DRAIN_PERIOD, self._drain)
            return True
        return self._refuse(call)

    def _ask_uid(self, sender: str, call: Message) -> bool:
        """The shared budget refused ``call``: ask the bus whose it is (once per client), and
        hold its calls meanwhile; then judge them again, root's within its own budget only."""
        self._awaiting[sender] = [call]
        self._awaiting_total += 1
        task = asyncio.ensure_future(self._lookup(sender))
        self._lookups.add(task)
        task.add_done_callback(self._lookups.discard)
        return True

    async def _lookup(self, sender: str) -> None:
        uid = -1
        bus = self.bus
        try:
            if bus is not None:
                reply = await asyncio.wait_for(bus.call(Message(
                    destination=BUS_DRIVER, path=BUS_DRIVER_PATH, interface=BUS_DRIVER,
                    member="GetConnectionUnixUser", signature="s", body=[sender])), UID_TIMEOUT)
                if reply.message_type is MessageType.METHOD_RETURN:
                    uid = int(reply.body[0])
        except asyncio.CancelledError:
            raise
        except Exception as exc:  # the client is gone, the bus is slow: not root
            log.debug("could not ask the bus for the uid of %s: %s", sender, exc)
        if len(self._uids) >= MAX_SENDERS:  # unique names are never reused: forget the oldest
            del self._uids[next(iter(self._uids))]
        self._uids[sender] = uid
        calls = self._awaiting.pop(sender, [])
        self._awaiting_total -= len(calls)
        dispatch = getattr(self.bus, "_process_message", None)
        for call in calls:  # as if they arrived now, in order: through on_call again
            if dispatch is not None and self.bus is bus:
                dispatch(call)
            elif self.bus is not None and _wants_reply(call):
                self.bus.send(limits_exceeded(call, self.limiter))

    def _answer(self, call: Message) -> bool:
        # A DBusError here is sent back by the library.
        prepared = self.answers.prepared(call, self.bus)
        if prepared is None:
            return False
        if _wants_reply(call) and self.bus is not None:
            self.bus.send(PreparedReply(call, prepared))
        return True

    def _refuse(self, call: Message) -> HandlerReply:
        self._note_refused(call.sender)
        return limits_exceeded(call, self.limiter) if _wants_reply(call) else True

    def _drain(self) -> None:
        """Answer waiting calls as their clients' budget allows, oldest first per client."""
        self._drain_timer = None
        loop = asyncio.get_running_loop()
        now = loop.time()
        progressed = True
        while progressed and self._queued:
            progressed = False
            for sender in list(self._queued):
                queue = self._queued[sender]
                queued_at, call = queue[0]
                if self._writer_full() and now - queued_at <= QUEUE_WAIT:
                    continue  # replies are not leaving: hold the rest (bounded memory)
                if now - queued_at > QUEUE_WAIT:
                    reply: HandlerReply = self._refuse(call)
                elif self.limiter.allow(sender, self._reply_size(call),
                                        self._uids.get(sender) == ROOT_UID):
                    try:
                        reply = self._answer(call)
                    except DBusError as exc:
                        reply = exc._as_message(call)
                    except Exception as exc:  # never let one call stop the others
                        log.error("D-Bus %s failed: %s", call.member, exc)
                        reply = Message.new_error(call, ERROR_PREFIX + "Failed",
                                                  f"{call.member} failed: {exc}")
                else:
                    continue
                if isinstance(reply, Message) and self.bus is not None:
                    self.bus.send(reply)
                queue.popleft()
                self._queued_total -= 1
                progressed = True
                if not queue:
                    del self._queued[sender]
        if self._queued:
            self._drain_timer = loop.call_later(DRAIN_PERIOD, self._drain)

    def _reply_size(self, call: Message) -> int:
        """Bytes of the prepared answer (built now if need be; an error answer is small)."""
        try:
            prepared = self.answers.prepared(call, self.bus)
        except DBusError:
            return 0
        return len(prepared.body) if prepared is not None else 0

    def _writer_full(self) -> bool:
        """Whether MAX_WRITER_BACKLOG replies already wait for the bus socket (each holds
        its own copy of the bytes; a bus that reads slowly must not make memory grow)."""
        messages = getattr(getattr(self.bus, "_writer", None), "messages", None)
        return messages is not None and len(messages) >= MAX_WRITER_BACKLOG

    def drop(self) -> None:
        """Forget every waiting call and client (the bus connection is gone)."""
        if self._drain_timer is not None:
            self._drain_timer.cancel()
            self._drain_timer = None
        self._queued.clear()
        self._queued_total = 0
        for task in list(self._lookups):
            task.cancel()
        self._awaiting.clear()
        self._awaiting_total = 0
        self._uids.clear()  # unique names belong to one bus connection

    def _note_refused(self, sender: Optional[str]) -> None:
        """One warning at the first refusal, then at most one a minute with the count."""
        self._refused_since_log += 1
        now = asyncio.get_running_loop().time()
        last = self._refused_logged_at
        if last is not None and now - last < REFUSED_LOG_SECONDS:
            return
        log.warning("D-Bus clients exceed the call budget (%g calls/s per client, %g in all): "
                    "%d call(s) refused with LimitsExceeded%s, the latest from %s; polling is "
                    "not affected", self.limiter.rate, self.limiter.total_rate,
                    self._refused_since_log,
                    "" if last is None else f" in the last {now - last:.0f} s", sender)
        self._refused_logged_at, self._refused_since_log = now, 0
