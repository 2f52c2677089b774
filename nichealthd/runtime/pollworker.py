"""The poll thread: the one thread that reads sysfs and runs the monitor, and waits for its tick.

Sysfs reads run off the event loop so that a read that never returns cannot freeze D-Bus,
varlink or the stop sequence (:mod:`nichealthd.runtime.service`). A ``ThreadPoolExecutor``
did that at a price paid on every cycle: the loop woke for a timer, handed the poll over
(a work item, a concurrent future chained to an asyncio one) and woke again for the result.
Here the wait before a poll happens in this thread, and a result goes back with one
``call_soon_threadsafe``: the loop wakes once per cycle, for the outcome.

A poll says when the next one is due (``next_due``), and the thread rests until then before
it looks for it. So handing that job over wakes no thread: without the rest, the thread blocked
on the queue woke at once and fought the event loop for the GIL, seven futex calls and two
context switches a cycle for nothing.

A job may also ``repeat``: a result that changed nothing any surface shows is absorbed in
this thread, which then runs the job again at the next tick, without waking the loop at all.
Waking an asyncio loop costs 0.33 ms of CPU once a second on the 2-core bench VM (a plain
thread's wake 0.1 ms), the loop's own work after a poll as much again; on a steady host
that was a seventh of the daemon's cycle (bench/README.md, "The loop's share").
"""

from __future__ import annotations

import asyncio
import logging
import queue
import threading
import time
from typing import Any, Callable, Optional, TypeVar, Union

T = TypeVar("T")
log = logging.getLogger("nichealthd")


class Woken:
    """The wait before a job was ended by :meth:`PollWorker.wake`: the job did not run."""


WOKEN = Woken()

# Called in the thread with a result: None to hand it to the loop, or (due, next_due) of the
# job's next run once the result is absorbed (a poll that changed nothing, runtime/service.py).
Repeat = Callable[[Any], Optional[tuple[float, float]]]
_Job = tuple[Callable[..., Any], tuple[Any, ...], Optional[float], Optional[float],
             Optional[Repeat], "asyncio.Future[Any]"]


class PollWorker:
    """One thread running jobs in order, each optionally not before a monotonic time.

    The thread starts with the first job; each job's result goes to the event loop that asked
    for it (:meth:`run` is called from a coroutine).
    """

    def __init__(self, name: str = "poll") -> None:
        self._jobs: queue.SimpleQueue[Optional[_Job]] = queue.SimpleQueue()
        self._wake = threading.Event()
        # While the thread rests until a job's next_due: when, and what ends the rest early
        # (a wake, a shutdown, or a job wanted before then).
        self._resting_until: Optional[float] = None
        self._nudge = threading.Event()
        self._thread = threading.Thread(target=self._serve, name=name, daemon=True)

    def run(self, function: Callable[..., T], *args: Any, due: Optional[float] = None,
            next_due: Optional[float] = None, repeat: Optional[Repeat] = None
            ) -> asyncio.Future[Union[T, Woken]]:
        """``function(*args)`` in the thread, once ``time.monotonic()`` reaches ``due`` (None:
        at once); the future gives its result or exception, or :data:`WOKEN` when
        :meth:`wake` ended the wait first. A wake before this call is forgotten: callers
        check their own reasons to wake before they ask for a wait. ``next_due``: when the
        caller will want the next job; the thread rests until then (a job wanted earlier
        ends the rest). ``repeat``: each result goes to it first, in the thread; while it
        absorbs them and no wake comes, the job runs again when it says, and the future
        waits for the first result it does not absorb (or :data:`WOKEN`)."""
        future: asyncio.Future[Union[T, Woken]] = asyncio.get_running_loop().create_future()
        self._wake.clear()
        self._jobs.put((function, args, due, next_due, repeat, future))
        resting_until = self._resting_until
        if resting_until is not None and (due is None or due < resting_until):
            self._nudge.set()
        if self._thread.ident is None:
            self._thread.start()
        return future

    def wake(self) -> None:
        """End the wait of the job waiting for its time (a stop or reload request)."""
        self._wake.set()
        self._nudge.set()

    def shutdown(self) -> None:
        """Let the thread end after the jobs already given (a hung job keeps it: it is a
        daemon thread, so it never holds up the exit of the process)."""
        self._jobs.put(None)
        self._nudge.set()

    def _serve(self) -> None:
        while True:
            job = self._jobs.get()
            if job is None:
                return
            function, args, due, next_due, repeat, future = job
            while True:
                result, error = self._run_at(function, args, due)
                if repeat is None or error is not None or result is WOKEN or self._wake.is_set():
                    break
                again = _absorbed(repeat, result)
                if again is None:
                    break
                due, next_due = again
                result = None  # absorbed: freed here, not kept while the thread waits
            try:
                future.get_loop().call_soon_threadsafe(_settle, future, result, error)
            except RuntimeError:  # the loop is closed: nobody is waiting any more
                return
            del job, function, args, future, result, error
            if next_due is not None:
                self._rest(next_due)

    def _run_at(self, function: Callable[..., Any], args: tuple[Any, ...],
                due: Optional[float]) -> tuple[Any, Optional[BaseException]]:
        """``function(*args)`` once ``due`` comes: its result or exception, or WOKEN."""
        delay = 0.0 if due is None else due - time.monotonic()
        if delay > 0 and self._wake.wait(delay):
            return WOKEN, None
        try:
            return function(*args), None
        except BaseException as exc:  # the awaiting coroutine gets it (as from an executor)
            return None, exc

    def _rest(self, until: float) -> None:
        """Sleep until ``until`` unless a job is waiting or one wanted earlier comes."""
        self._resting_until = until
        self._nudge.clear()
        if self._jobs.empty():  # after the clear: a job given since then nudges
            delay = until - time.monotonic()
            if delay > 0:
                self._nudge.wait(delay)
        self._resting_until = None


def _absorbed(repeat: Repeat, result: Any) -> Optional[tuple[float, float]]:
    """What ``repeat`` says of ``result``; a failure in it hands the result to the loop."""
    try:
        return repeat(result)
    except Exception:  # the loop then handles the poll as any other
        log.exception("judging whether a poll changed anything failed; handing it over")
        return None


def _settle(future: asyncio.Future[Any], result: Any, error: Optional[BaseException]) -> None:
    if future.cancelled():  # a stop abandoned the job (service.Daemon._abandon)
        return
    if error is not None:
        future.set_exception(error)
    else:
        future.set_result(result)
