"""The surface seam: a surface that acts on committed events is one module or one folder.

A surface declares itself with a module-level ``SURFACE`` (a :class:`Surface`): its service
class, the Python libraries it needs (``runtime/libraries.py`` leaves it out, said once,
when one is missing), whether a configuration wants it, its own journal cursor (registered
in the journal's cursors file by ``runtime/startup.py`` whenever it is wanted, so no event
committed while it runs is lost) and its settings class (a :class:`~nichealthd.core.settings.
Settings`, plugged into the config's declarations by :func:`surfaces`). Surfaces are found,
not listed, as the check families and sources are: every module of this package, and every
package's ``__init__``, whose text defines ``SURFACE`` at its top level (the text is read
first, so a surface whose library is missing is never imported to be found).

:class:`JournalConsumer` is the at-least-once loop every such surface shares: a thread woken
by each commit reads the journal from the surface's cursor, acts on each event (bounded
attempts with exponential backoff, see :meth:`JournalConsumer.attempts`) and moves the cursor
only past what was done; what failed stays pending and is tried again after a pause, or after
a restart. A surface supplies :meth:`JournalConsumer.act`; its status (state, last error,
events pending on its cursor, last success: :class:`~.status.SurfaceStatus`, or a richer value
of its own from :meth:`JournalConsumer.report`) is published after every step through the
daemon's status channel (``surfaces/status.py``) under its cursor's name, so ``nichealthctl
status``, D-Bus, varlink and ``/metrics`` show it with no edit of theirs.
:class:`ConsumerService` runs it as a daemon service.
"""

from __future__ import annotations

import asyncio
import importlib
import logging
import pkgutil
import random
import re
import threading
import time
from dataclasses import dataclass
from datetime import datetime, timezone
from pathlib import Path
from typing import TYPE_CHECKING, Callable, ClassVar, Optional, Protocol, Sequence, TypeVar

from ..core.config import Config
from ..core.config_build import plug_settings
from ..core.events import format_timestamp
from ..storage.store import Journal, JournalEntry
from .status import FAILING, OFF, OK, Reported, SurfaceStatus

if TYPE_CHECKING:  # pragma: no cover
    from ..core.settings import Settings

T = TypeVar("T")
Publish = Callable[[str, Reported], None]  # the daemon's status channel (ServiceContext.publish)


class Outcome(Protocol):
    """What a service's ``on_poll`` reads of a cycle (``context.PollOutcome``)."""

    committed: list[JournalEntry]


MARKER = "SURFACE"
_DECLARES = re.compile(rb"^SURFACE\b\s*(:[^=\n]*)?=", re.MULTILINE)
STOP_SECONDS = 4.0  # the daemon bounds a service's stop at 5 s


@dataclass(frozen=True)
class Surface:
    """One surface: where its service class lives, what it needs and what it consumes."""

    what: str  # for the log line: "the D-Bus API"
    module: str
    factory: str  # the service class in ``module``
    wanted: Callable[[Config], bool]  # whether the configuration asks for it
    libraries: tuple[str, ...] = ()  # module names whose absence leaves it out
    install: str = ""  # what to install (distribution packages, then pip)
    without: str = ""  # what the host gets meanwhile
    fallback: Optional[str] = None  # "module:Class" to run instead, without the library
    cursor: str = ""  # its journal consumer (cursor name) while wanted; "" reads no events
    settings: Optional[type[Settings]] = None  # the config keys it declares
    order: int = 50  # start order among the surfaces
    always: bool = False  # made even when switched off (a reload may switch it on)


_found: Optional[tuple[Surface, ...]] = None


def _declares(path: Path) -> bool:
    try:
        return _DECLARES.search(path.read_bytes()) is not None
    except OSError:
        return False


def surfaces() -> tuple[Surface, ...]:
    """Every surface of this package that declares ``SURFACE``, in start order; their
    settings classes are plugged into the config's declarations (idempotent)."""
    global _found
    if _found is None:
        here = Path(__file__).parent
        found: list[Surface] = []
        for info in sorted(pkgutil.iter_modules([str(here)]), key=lambda m: m.name):
            path = here / info.name / "__init__.py" if info.ispkg else here / f"{info.name}.py"
            if not _declares(path):
                continue
            surface = getattr(importlib.import_module(f"{__package__}.{info.name}"), MARKER)
            if not isinstance(surface, Surface):
                raise RuntimeError(f"{path}: SURFACE is not a Surface")
            found.append(surface)
        found.sort(key=lambda s: (s.order, s.module))
        for surface in found:
            if surface.settings is not None:
                plug_settings(surface.settings)
        _found = tuple(found)
    return _found


def cursors(config: Config) -> list[str]:
    """The journal cursors of the surfaces ``config`` wants (each keeps its own)."""
    return [s.cursor for s in surfaces() if s.cursor and s.wanted(config)]


# ------------------------------------------------------------------ the shared loop

def _sleep(seconds: float) -> bool:
    time.sleep(seconds)
    return True


def _now() -> datetime:
    return datetime.now(timezone.utc)


@dataclass(frozen=True)
class Pace:
    """A consumer's timing: its backoff and clocks (tests make them fast or fixed).

    ``pause`` is how long a failed try waits before the whole is tried again; ``sleep``
    waits between attempts and returns False when the consumer is stopping (None: the
    consumer's own stop-aware wait)."""

    backoff_base: float = 1.0
    backoff_cap: float = 30.0
    pause: float = 60.0
    clock: Callable[[], float] = time.monotonic
    wall: Callable[[], datetime] = _now
    jitter: Callable[[], float] = random.random
    sleep: Optional[Callable[[float], bool]] = None


class JournalConsumer:
    """The at-least-once reader of one journal cursor; a subclass supplies :meth:`act`.

    :meth:`run` is the thread body (stepped until :meth:`request_stop`, woken by
    :meth:`wake` on every commit); :meth:`step` does what is due and says when to look
    again. Control methods may be called from any thread."""

    cursor: ClassVar[str] = ""
    batch: ClassVar[int] = 500
    idle: ClassVar[float] = 60.0
    log: ClassVar[logging.Logger] = logging.getLogger("nichealthd")

    def __init__(self, config: Config, journal: Journal, pace: Pace) -> None:
        self.config = config
        self.journal = journal
        self.pace = pace
        self._next_config: Optional[Config] = None
        self._retry_at = 0.0
        self._attempt = 0  # failed tries in a row (:meth:`backoff`)
        self._wake = threading.Event()
        self._stop = threading.Event()
        # Its status (:meth:`report`): the last failure's reason, the last event done.
        self.last_error = ""  # an ``act`` that fails says why here
        self._failing = False
        self._last_success = ""
        self.publisher: Optional[Publish] = None  # set by its ConsumerService
        self._published: Optional[Reported] = None

    @property
    def pause(self) -> float:
        return self.pace.pause

    # ------------------------------------------------------------------ control

    def wake(self) -> None:
        self._wake.set()

    def request_stop(self) -> None:
        self._stop.set()
        self._wake.set()

    def reconfigure(self, config: Config) -> None:
        """Take a reloaded config at the next step (the caller must not wait for a step
        that may be waiting for its target)."""
        self._next_config = config
        self.wake()

    def run(self, stop_deadline: float = STOP_SECONDS) -> None:
        """Thread body: step until :meth:`request_stop`, then :meth:`finish`."""
        while not self._stop.is_set():
            try:
                delay = self.step()
            except Exception as exc:  # a bug must not end the surface for the daemon's life
                self.log.exception("%s consumer step failed; retrying", self.cursor)
                self._failing, self.last_error = True, f"step failed: {exc!r}"
                delay = self.after_error()
            self.publish()
            if delay > 0:
                self._wake.wait(delay)
            self._wake.clear()
        self.finish(stop_deadline)

    # ------------------------------------------------------------------ status

    def report(self) -> Reported:
        """Its status: off while inactive, failing while an event waits for a retry, else ok;
        its cursor's lag in events and its last success. A surface with a richer status of
        its own returns that (it says what it is as a ``SurfaceStatus``)."""
        state = OFF if not self.active() else FAILING if self._failing else OK
        return SurfaceStatus(self.cursor, state, self.last_error,
                             self.journal.depth(self.cursor), self._last_success)

    def publish(self) -> None:
        """Publish :meth:`report` through the status channel when it changed."""
        if self.publisher is None:
            return
        status = self.report()
        if status != self._published:
            self._published = status
            self.publisher(self.cursor, status)

    # ------------------------------------------------------------------ one step

    def step(self) -> float:
        """Act on what is pending, in order; the seconds until something may be due. The
        cursor moves past each event acted on; the first that failed stays pending."""
        config, self._next_config = self._next_config, None
        if config is not None:
            self.apply(config)
        if not self.active():
            return self.idle
        now = self.pace.clock()
        if now < self._retry_at:
            return self._retry_at - now
        self.bound()
        entries = self.journal.pending(self.cursor, self.batch)
        done: Optional[int] = None
        failed = False
        for index, entry in enumerate(entries):
            if not self.act(entry, entries[index + 1:]):
                failed = True
                break
            done = entry.seq
        if done is not None:
            self.journal.advance(self.cursor, done)
            self._last_success = format_timestamp(self.pace.wall())
        self._failing = failed
        if failed:
            self._retry_at = self.pace.clock() + self.pause
            return self.pause
        self.last_error = ""
        self.settled()
        return 0.0 if len(entries) == self.batch else self.idle

    def act(self, entry: JournalEntry, following: Sequence[JournalEntry]) -> bool:
        """Do what ``entry`` calls for (``following``: what the same read holds after it);
        False when it failed and must be tried again."""
        raise NotImplementedError

    # ------------------------------------------------------------------ hooks

    def active(self) -> bool:
        """Whether the configuration has it act now (off: it idles, its events wait)."""
        return True

    def apply(self, config: Config) -> None:
        """Take a reloaded configuration (in the consumer's thread, between steps)."""
        self.config = config
        self._retry_at = 0.0

    def bound(self) -> None:
        """Bound the backlog before reading it (the default keeps everything)."""

    def settled(self) -> None:
        """Everything read was acted on."""

    def after_error(self) -> float:
        """The wait after a step raised."""
        return self.pause

    def finish(self, stop_deadline: float) -> None:
        """After the last step (the thread is stopping): at most ``stop_deadline`` s."""

    # ------------------------------------------------------------------ retries

    def wait(self, seconds: float) -> bool:
        """Wait between attempts; False when stopping (the event is left for the next start)."""
        if self.pace.sleep is not None:
            return self.pace.sleep(seconds)
        return not self._stop.wait(seconds)

    def attempts(self, attempt: Callable[[], T], again: Callable[[T], bool],
                 retries: int) -> T:
        """``attempt()`` up to ``retries`` times while ``again`` says its result may be
        retried, waiting ``backoff_base * 2^n`` (capped at ``backoff_cap``) between."""
        result = attempt()
        for n in range(1, retries):
            if not again(result):
                break
            if not self.wait(min(self.pace.backoff_cap, self.pace.backoff_base * 2.0 ** (n - 1))):
                break
            result = attempt()
        return result

    def backoff(self, cap: float, jittered: bool = True) -> float:
        """The wait after another failed try in a row, due at :meth:`step`: exponential with
        full jitter, uniform(0, min(cap, base * 2^tries)); without jitter, the ceiling."""
        ceiling = min(cap, self.pace.backoff_base * 2.0 ** min(self._attempt, 30))
        self._attempt += 1
        delay = max(0.01, self.pace.jitter() * ceiling if jittered else ceiling)
        self._retry_at = self.pace.clock() + delay
        return delay

    def recovered(self) -> None:
        """A try succeeded: the backoff starts over."""
        self._attempt, self._retry_at = 0, 0.0


class ConsumerService:
    """A :class:`JournalConsumer` as a daemon service: its own thread, woken by every commit,
    so a hung target never delays a poll or the watchdog; started while :meth:`wanted`."""

    name = "journal consumer"

    def __init__(self, consumer: JournalConsumer, publish: Optional[Publish] = None) -> None:
        """``publish``: the daemon's status channel (``ServiceContext.publish``); the consumer
        publishes its status there now and after every step."""
        self.consumer = consumer
        self._thread: Optional[threading.Thread] = None
        if publish is not None:
            consumer.publisher = publish
            consumer.publish()

    def wanted(self, config: Config) -> bool:
        return True

    def starting(self, config: Config) -> None:
        """Say that the thread starts (the default says nothing)."""

    async def start(self) -> None:
        self._start_thread(self.consumer.config)

    def _start_thread(self, config: Config) -> None:
        if self._thread is not None or not self.wanted(config):
            return
        self.starting(config)
        self._thread = threading.Thread(target=self.consumer.run, args=(STOP_SECONDS,),
                                        name=self.consumer.cursor, daemon=True)
        self._thread.start()

    def on_poll(self, outcome: Outcome) -> None:
        if outcome.committed and self._thread is not None:
            self.consumer.wake()

    def idle(self) -> bool:
        """A poll that commits nothing does not wake the thread."""
        return True

    def on_reload(self, config: Config) -> None:
        self.consumer.reconfigure(config)  # taken by the thread at its next step
        self._start_thread(config)

    async def stop(self) -> None:
        """Stop the thread, waiting a bounded time; what is pending stays for the next start."""
        if self._thread is None:
            return
        self.consumer.request_stop()
        deadline = time.monotonic() + STOP_SECONDS + 0.5
        while self._thread.is_alive() and time.monotonic() < deadline:
            await asyncio.sleep(0.02)
        if self._thread.is_alive():
            self.late()

    def late(self) -> None:
        """The thread did not stop in time."""
        self.consumer.log.warning("%s did not finish within %.0f s; what is pending stays "
                                  "for the next start", self.name, STOP_SECONDS)
