"""The runtime: a drift-free poll loop, sd_notify, signals, and the plug-in services.

One asyncio loop runs everything. The poll itself runs in the poll thread
(:mod:`~nichealthd.runtime.pollworker`), which also waits for its tick, so that a sysfs read
that hangs cannot freeze the D-Bus API — and so that the watchdog can tell: the
keepalive is sent only while polls keep completing, so systemd restarts a stuck poller even
though the event loop is alive. Services (D-Bus, varlink, metrics, platform connector,
Slurm) plug in through :class:`Service` and are told about every poll that changed anything
they show; none of them can delay one. A poll that changed nothing (no event, the same health
and status, while no service waits for a poll) never reaches the loop: the poll thread keeps
the picture and the watchdog's clock itself and polls again at the next tick
(:meth:`Daemon._quiet_repeat`). They receive a
:class:`~nichealthd.surfaces.context.ServiceContext`, never this module's :class:`Daemon`.

The command-line entry (:mod:`nichealthd.runtime.daemon`) starts this with a validated
:class:`~nichealthd.runtime.startup.Startup`; this module does not import that one.
"""

from __future__ import annotations

import argparse
import asyncio
import gc
import logging
import os
import signal
import time
from datetime import datetime
from typing import Any, Callable, Mapping, Optional, Protocol, Union

from .. import __version__
from ..core.config import Config, ConfigError
from ..core.duration import format_duration
from ..core.events import format_timestamp
from ..core.picture import PollPicture
from ..core.views import health_status, status_summary
from ..sources.config_file import load_config
from ..surfaces.connector.status import NAME as CONNECTOR
from ..surfaces.connector.status import ConnectorStatus
from ..surfaces.context import PollOutcome, PollStats, ServiceContext
from ..surfaces.eventlog import EventLog
from ..surfaces.slurm.status import NAME as SLURM
from ..surfaces.slurm.status import SlurmStatus
from ..surfaces.status import Board, records, typed
from .event_journal import EventJournal
from .libraries import service_factories
from .linkwake import EarlyPolls, LinkWake, watched_netdevs
from .linkwake import enabled as link_events_enabled
from .notify import Notifier, StatusLine
from .pollguard import PollFailed
from .pollworker import WOKEN, PollWorker, Woken
from .startup import (
    EXIT_OK,
    Startup,
    StartupError,
    choose_topology,
    consumers,
    log_topology,
    topology_loader,
    warn_hidden_paths,
)
from .threadnames import name_threads

log = logging.getLogger("nichealthd")
# What their dedicated status keys say before the connector or Slurm published (or without).
NO_CONNECTOR = ConnectorStatus()
NO_SLURM = SlurmStatus()

STOP_DELIVERY_SECONDS = 5.0
STOP_POLL_GRACE = 10.0


class Service(Protocol):
    """A part of the daemon that runs beside the poller."""

    name: str

    async def start(self) -> None: ...

    def on_poll(self, outcome: PollOutcome) -> None: ...

    # Optional: ``idle() -> bool``: nothing to do at a poll that changed nothing (no reload
    # waiting to be answered, ...); a service without it is told of every poll. And
    # ``on_quiet_poll(outcome)``: such a poll, told from the poll thread (metrics counts it).

    def on_reload(self, config: Config) -> None: ...

    async def stop(self) -> None: ...


class Daemon:
    """The running daemon: owns the monitor and the loop; services get :meth:`context`."""

    def __init__(self, startup: Startup, args: argparse.Namespace,
                 notifier: Optional[Notifier] = None) -> None:
        self.args = args
        self.config = startup.config
        self.overrides = startup.overrides
        self.monitor = startup.monitor
        self.event_log = startup.event_log
        self.event_journal = EventJournal()
        self.fd_plan = startup.fd_plan
        self.notifier = notifier or Notifier.from_environment()
        self.version = __version__
        self.started_at = time.time()
        self._started_text = format_timestamp(datetime.fromtimestamp(self.started_at).astimezone())
        self.pid = os.getpid()
        self.last_poll_monotonic: Optional[float] = None
        self.last_poll_wall: Optional[datetime] = None
        self.reload_error = ""
        # Every surface's status as it last published it (the connector's, Slurm's, ...).
        self.board = Board()
        # The last completed poll as every surface reads it: made once per poll, on the loop.
        self.picture: Optional[PollPicture] = None
        # The polls the picture shows (:meth:`_show`): the monitor counts a poll in the poll
        # thread before it shows, and a client that saw poll_count 1 must find the picture.
        self.polls_shown = 0
        self.services: list[Service] = []
        self._poll_listeners: list[Callable[[PollOutcome], None]] = []
        self._worker = PollWorker()  # the poll thread: reads sysfs, runs the monitor
        # Plain flags and one future at a time, not asyncio Events and tasks: an idle cycle
        # then costs the event loop one wake-up.
        self._stop_requested = False
        self._reload_requested = False
        # The wait for the next tick and the poll after it (one job of the poll thread).
        self._polling: Optional[asyncio.Future[Union[PollOutcome, Woken]]] = None
        self._withholding = False
        self.poll_abandoned = False
        # A poll wanted before the next tick (a link change); the tick is still kept.
        self._early_wanted = False
        self._early_budget = EarlyPolls()
        self.link_wake = LinkWake(self.request_poll)
        self._schedule = Ticks(self.config.polling_interval, time.monotonic())
        # What the loop last showed of the board (surfaces' statuses): a poll that comes
        # after a change of it goes to the loop (STATUS=, D-Bus properties).
        self._board_shown: Optional[Mapping[str, Any]] = None
        self._error_shown = ""  # and the poll error it last showed (STATUS=, /healthz)
        self.quiet_polls = 0  # polls the poll thread kept (``_quiet_repeat``)

    # ------------------------------------------------------------ public API

    def add_poll_listener(self, callback: Callable[[PollOutcome], None]) -> None:
        self._poll_listeners.append(callback)

    def request_stop(self) -> None:
        """Stop after the poll in progress; one that hangs gets ``STOP_POLL_GRACE`` seconds."""
        if self._stop_requested:
            return
        self._stop_requested = True
        self._worker.wake()
        polling = self._polling
        if polling is not None and not polling.done():
            asyncio.get_running_loop().call_later(STOP_POLL_GRACE, self._abandon, polling)

    def request_reload(self) -> None:
        """Reload after the poll in progress, or at once when between polls."""
        self._reload_requested = True
        self._worker.wake()

    def request_poll(self) -> None:
        """Poll at once (as often as :class:`~.linkwake.EarlyPolls` allows), then keep the
        interval's ticks."""
        self._early_wanted = True
        self._worker.wake()

    def health_status(self) -> dict[str, Any]:
        """Health keys of the status, from the last picture (all zero before the first)."""
        picture = self.picture
        if picture is None:
            return health_status(None, None, self.monitor.state)
        return dict(picture.status)

    def status_line(self) -> str:
        """The text of STATUS= (:meth:`notify_status`)."""
        return str(self.notify_status())

    def notify_status(self) -> StatusLine:
        """``32 ports: 30 healthy, 1 degraded, 1 fatal; connector connected``, as its values.

        No time of the last poll: it would be stale between two STATUS= messages, and a
        message every poll would wake the service manager every second. ``nichealthctl
        status`` shows the real one; the watchdog restarts a daemon whose polls stop, and
        failing polls are named here (``poll_error``)."""
        picture = self.picture
        summary = picture.summary if picture is not None else \
            status_summary(self.health_status())
        return StatusLine(summary, self._connector_summary(), self.reload_error,
                          self.monitor.guard.reason(), self.slurm.failing)

    def _connector_summary(self) -> str:
        """``connector down since <time> (<error>), 12 queued, 2 dead letters``."""
        status = self.connector
        text = f"connector {status.state}"
        if status.state == "down":
            if status.since:
                text += f" since {status.since}"
            if status.last_error:
                text += f" ({status.last_error})"
        if status.outbox_depth:
            text += f", {status.outbox_depth} queued"
        if status.dead_letters:
            text += f", {status.dead_letters} dead letters"
        return text

    # ------------------------------------------------------------- main loop

    async def run(self) -> int:
        loop = asyncio.get_running_loop()
        for signum, handler in ((signal.SIGTERM, self.request_stop),
                                (signal.SIGINT, self.request_stop),
                                (signal.SIGHUP, self.request_reload)):
            loop.add_signal_handler(signum, handler)
        self.monitor.journal.register(consumers(self.config, self.event_log))
        self.services = self._make_services()
        for service in self.services:
            try:
                await service.start()
            except Exception as exc:  # a broken optional part must not stop monitoring
                log.error("%s could not start: %s", service.name, exc)
        if link_events_enabled(self.config):
            self.link_wake.start(loop)
        watchdog = asyncio.ensure_future(self._watchdog())
        try:
            await self._poll_loop()
        finally:
            watchdog.cancel()
            await self._shutdown()
        return EXIT_OK

    async def _poll_loop(self) -> None:
        schedule = self._schedule = Ticks(self.config.polling_interval, time.monotonic())
        first = True
        due: Optional[float] = None  # the first poll at once
        while not self._stop_requested:
            early = self._early_poll(due)
            if early is not None and due is not None:  # before the tick `due`, still to come
                outcome = await self._poll(early or None, due)
            else:
                # The tick after this one, unless the poll runs late: the poll thread rests
                # until then. Once ready, quiet polls stay in the poll thread.
                outcome = await self._poll(due, (schedule.origin if due is None else due)
                                           + schedule.interval, repeat=not first)
            if outcome is None:
                break
            if isinstance(outcome, PollFailed):
                # Logged and counted by the monitor's guard; the watchdog keepalive stops
                # only if polls keep failing past its interval (last_poll_monotonic is old).
                self.notifier.status(self.notify_status())
            elif isinstance(outcome, PollOutcome):
                self._after_poll(outcome)
                # READY=1 only once a poll has been committed: a daemon that cannot read or
                # write (fds exhausted, state directory broken) must not report itself started.
                if first and outcome.commit_error is None:
                    self.notifier.ready(self.notify_status())
                    log.info("nichealthd %s ready: %s", __version__, self.status_line())
                    first = False
                    freeze_start_up_objects()
                    name_threads()
                else:
                    self.notifier.status(self.notify_status())
            if not isinstance(outcome, Woken):
                self._error_shown = self.monitor.guard.reason()
            if self._reload_requested:
                self._reload_requested = False
                await self._reload()
                if self.config.polling_interval != schedule.interval:
                    schedule = self._schedule = Ticks(self.config.polling_interval,
                                                      time.monotonic(), ticks=1)
                    due = schedule.due
                    continue
            if isinstance(outcome, Woken) or early is not None:
                # A request cut the wait short, or came early: that tick is to come (a later
                # one if the poll thread kept quiet polls meanwhile).
                due = None if due is None else schedule.due
                continue
            due = schedule.advance()

    def _early_poll(self, due: Optional[float]) -> Optional[float]:
        """When the early poll that was asked for runs (0.0: at once), or None: none is
        wanted, or the tick ``due`` comes first (then it is that poll)."""
        if not self._early_wanted:
            return None
        self._early_wanted = False
        now = time.monotonic()
        at = self._early_budget.take(now, due)
        if at is None:
            return None  # the next poll comes no later than it would
        log.debug("link change: polling before the tick")
        return 0.0 if at <= now else at

    async def _poll(self, due: Optional[float], next_due: float, repeat: bool = False
                    ) -> Union[PollOutcome, PollFailed, Woken, None]:
        """Wait for the tick ``due`` (monotonic; None: now) and poll, in the poll thread, which
        then rests until ``next_due``. ``repeat``: polls that changed nothing stay in the
        poll thread (:meth:`_quiet_repeat`), if every service is idle; this returns the first
        one that did not.

        The failure when it could not read or evaluate; :class:`Woken` when a stop or reload
        request came first (no poll); None when a stop abandoned a poll that hung (see
        request_stop)."""
        if due is not None and (self._stop_requested or self._reload_requested
                                or self._early_wanted):
            return WOKEN
        quiet = self._quiet_repeat if repeat and self._services_idle() else None
        polling = self._polling = self._worker.run(self._logged_poll, due=due,
                                                   next_due=next_due, repeat=quiet)
        try:
            return await polling
        except PollFailed as failed:
            return failed
        except asyncio.CancelledError:
            if not self.poll_abandoned:
                raise
            return None
        finally:
            self._polling = None

    def _services_idle(self) -> bool:
        """Whether every service has nothing to do at a poll that changes nothing."""
        if self._poll_listeners:
            return False
        for service in self.services:
            idle = getattr(service, "idle", None)
            try:
                if idle is None or not idle():
                    return False
            except Exception:
                log.exception("%s failed in idle", service.name)
                return False
        return True

    def _quiet_repeat(self, outcome: Any) -> Optional[tuple[float, float]]:
        """In the poll thread: a poll that changed nothing the loop would show is kept here,
        and the next tick's times are returned (the loop is not woken); None otherwise.

        Nothing changed when the poll committed no event, the health keys are the same
        object (core/views.py keeps them while they are equal), the device count and the
        poll error are the same, no surface published a new status, the event log has
        written everything, and the watched netdevs are the same. The loop's surfaces read
        the picture (:meth:`view`) and the clocks live; the watchdog and ``/healthz`` see
        ``last_poll_monotonic`` move as ever, and metrics counts the poll
        (``on_quiet_poll``)."""
        last = self.picture
        if (not isinstance(outcome, PollOutcome) or outcome.committed or last is None
                or outcome.commit_error is not None
                or self.monitor.guard.reason() != self._error_shown
                or self.board.latest() is not self._board_shown
                or (self.event_log is not None and not self.event_log.idle())):
            return None
        picture = PollPicture(outcome.snapshot, outcome.result, self.monitor.state,
                              self.monitor.config)
        if (picture.status is not last.status
                or len(picture.snapshot.devices) != len(last.snapshot.devices)
                or (self.link_wake.listening
                    and watched_netdevs(outcome) != self.link_wake.watched)):
            return None
        self._show(picture, outcome)
        self._tell_services("on_quiet_poll", outcome)
        self.quiet_polls += 1
        self.last_poll_monotonic = time.monotonic()
        due = self._schedule.advance()
        return due, due + self._schedule.interval

    def _logged_poll(self) -> PollOutcome:
        log.debug("poll started at monotonic %.4f", time.monotonic())
        return self.monitor.poll()

    def _abandon(self, polling: asyncio.Future[Union[PollOutcome, Woken]]) -> None:
        """A stop's grace for a hanging poll (a sysfs read that never returns) is over."""
        if polling.done():
            return
        log.error("the poll in progress did not finish within %.0f s; stopping without it",
                  STOP_POLL_GRACE)
        self.poll_abandoned = True
        polling.cancel()

    def _show(self, picture: PollPicture, outcome: PollOutcome) -> None:
        """Make ``picture`` the one every surface reads, then the count and the time of the
        poll it shows (a client that read the count finds the picture)."""
        self.picture = picture
        self.polls_shown = self.monitor.polls
        self.last_poll_wall = outcome.snapshot.taken_at

    def _after_poll(self, outcome: PollOutcome) -> None:
        self._show(PollPicture(outcome.snapshot, outcome.result, self.monitor.state,
                               self.monitor.config), outcome)
        if self.event_log is not None:
            self.event_log.publish(outcome.committed)
        self.event_journal.log(outcome.committed)
        self._board_shown = self.board.latest()  # before the services: they publish after
        self._tell_services("on_poll", outcome)
        if self.link_wake.listening:
            self.link_wake.watch(watched_netdevs(outcome))
        for listener in self._poll_listeners:
            listener(outcome)
        # Set last: /healthz answers 200 only once every service has published this poll.
        self.last_poll_monotonic = time.monotonic()

    def _tell_services(self, hook: str, argument: Any) -> None:
        """Call a hook on every service that has it; one failing service never stops the
        others."""
        for service in self.services:
            call = getattr(service, hook, None)
            if call is None:  # an optional hook (on_quiet_poll)
                continue
            try:
                call(argument)
            except Exception:
                log.exception("%s failed in %s", service.name, hook)

    async def _reload(self) -> None:
        """Re-read the config; apply it only if valid (snapshots and latches are kept)."""
        self.notifier.reloading()
        try:
            config = load_config(self.args.config, self.overrides)
            choice = choose_topology(config)
        except (ConfigError, StartupError) as exc:
            self.reload_error = str(exc)
            log.error("reload rejected, keeping the running configuration: %s", exc)
            self.notifier.ready(self.notify_status())
            return
        except Exception as exc:  # a bug in validation must not stop a running daemon
            self.reload_error = f"unexpected error: {type(exc).__name__}: {exc}"
            log.exception("reload rejected on an unexpected error (a bug: please report it), "
                          "keeping the running configuration")
            self.notifier.ready(self.notify_status())
            return
        if choice.reason != self.monitor.topology_reason:
            log_topology(choice)
        await self._worker.run(self.monitor.reconfigure, config, choice.topology,
                               topology_loader(config), choice.reason)
        self.config = config
        self.reload_error = ""
        if config.event_log != (self.event_log.path if self.event_log else ""):
            self.event_log = EventLog(config.event_log, self.monitor.journal) \
                if config.event_log else None
        self.monitor.journal.register(consumers(config, self.event_log))
        self._tell_services("on_reload", config)
        if link_events_enabled(config):
            self.link_wake.start(asyncio.get_running_loop())
        else:
            self.link_wake.close()
        for notice in config.notices:
            log.warning("%s", notice)
        warn_hidden_paths(config)
        log.info("configuration reloaded from %s (polling every %s)", self.args.config,
                 format_duration(config.polling_interval))
        name_threads()
        self.notifier.ready(self.notify_status())

    async def _watchdog(self) -> None:
        """WATCHDOG=1 at half the interval, only while polls keep completing."""
        period = self.notifier.watchdog_seconds
        if not period:
            return
        while True:
            await asyncio.sleep(period / 2)
            last = self.last_poll_monotonic
            limit = max(period, 2 * self.config.polling_interval)
            if last is not None and time.monotonic() - last < limit:
                self.notifier.watchdog()
                if self._withholding:
                    log.warning("poll loop is completing cycles again; watchdog resumed")
                self._withholding = False
            elif not self._withholding:
                self._withholding = True
                log.error("no poll has completed for %.0f s; withholding the watchdog "
                          "keepalive so that systemd restarts the daemon", limit)

    async def _shutdown(self) -> None:
        self.notifier.stopping()
        self.link_wake.close()
        log.info("stopping: committing state and delivering pending events")
        if not self.poll_abandoned:
            await self._worker.run(self.monitor.flush)
        for service in reversed(self.services):
            try:
                await asyncio.wait_for(service.stop(), STOP_DELIVERY_SECONDS)
            except Exception as exc:
                log.warning("%s did not stop cleanly: %s", service.name, exc)
        if not self.poll_abandoned:
            await self._worker.run(self.monitor.close)
        self._worker.shutdown()
        self.event_journal.close()
        self.notifier.close()

    def _make_services(self) -> list[Service]:
        context = self.context()
        # The connector, D-Bus, metrics and varlink, each imported here: one whose library
        # is missing is left out with one error line (runtime/libraries.py).
        services = [factory(context) for factory in service_factories(self.config)]
        return [s for s in services if getattr(s, "enabled", True)]

    # ----------------------------------------------------------- context

    def context(self) -> ServiceContext:
        """What services may read and do; bound methods of this daemon, nothing else."""
        return ServiceContext(
            journal=self.monitor.journal, config_path=self.args.config,
            config=lambda: self.config, view=self.view, stats=self.stats,
            status=self.status, reload_error=lambda: self.reload_error,
            request_reload=self.request_reload, connector=lambda: self.connector,
            connection_limits=self.fd_plan.connections, slurm=lambda: self.slurm,
            publish=self.board.publish, surfaces=self.board.surfaces)

    def view(self) -> Optional[PollPicture]:
        """The picture of the last completed poll (None before the first)."""
        return self.picture

    def stats(self) -> PollStats:
        guard, reader = self.monitor.guard, self.monitor.reader
        return PollStats(
            polls=self.polls_shown, started_at=self.started_at,
            last_poll_monotonic=self.last_poll_monotonic, last_poll_wall=self.last_poll_wall,
            failing=guard.reason(), failures=guard.totals(),
            unreadable_reads=reader.unreadable_reads, einval_files=len(reader.einval),
            families_failing={k: f.why for k, f in self.monitor.families.failing.items()},
            families_judged=self.monitor.families.last_success)

    @property
    def connector(self) -> ConnectorStatus:
        """The connector's status as it published it (its dedicated status keys)."""
        return self.board.typed(CONNECTOR, ConnectorStatus, NO_CONNECTOR)

    @property
    def slurm(self) -> SlurmStatus:
        """The Slurm consumer's status as it published it (its dedicated status keys)."""
        return self.board.typed(SLURM, SlurmStatus, NO_SLURM)

    # ------------------------------------------------------------ status

    def status(self) -> dict[str, Any]:
        """Daemon status for D-Bus properties and ``nichealthctl status``; ``surfaces``
        lists every surface's status as it published it (surfaces/status.py)."""
        latest = self.board.latest()  # one value: the keys below and ``surfaces`` agree
        connector = typed(latest, CONNECTOR, ConnectorStatus, NO_CONNECTOR)
        slurm = typed(latest, SLURM, SlurmStatus, NO_SLURM)
        return {
            "version": __version__,
            "node_name": self.config.node_name,
            "boot_id": self.monitor.state.boot_id,
            "last_poll": format_timestamp(self.last_poll_wall) if self.last_poll_wall else "",
            "poll_count": self.polls_shown,
            "polling_interval": self.config.polling_interval,
            "connector_state": connector.state,
            "outbox_depth": connector.outbox_depth,
            "dead_letters": connector.dead_letters,
            **self.health_status(),
            # What the last poll saw (0 before the first)
            "rdma_devices": len(self.picture.snapshot.devices) if self.picture else 0,
            "topology": self.monitor.topology_summary,
            "topology_source": self.monitor.topology.gpus.source,
            "topology_reason": self.monitor.topology_reason,
            "connector_last_error": connector.last_error,
            "started_at": self._started_text,
            "config_path": self.args.config,
            "reload_error": self.reload_error,
            "poll_error": self.monitor.guard.reason(),
            "pid": self.pid,
            **slurm.status_keys(),
            "surfaces": records(latest),
        }


class Ticks:
    """The drift-free schedule ``origin + k * interval``: a late cycle skips ticks instead of
    shifting every later one. Shared by the loop and the poll thread, which advances it
    while it keeps quiet polls (never both at once: the loop waits for the thread then)."""

    def __init__(self, interval: float, origin: float, ticks: int = 0) -> None:
        self.interval = interval
        self.origin = origin
        self.ticks = ticks

    @property
    def due(self) -> float:
        return self.origin + self.ticks * self.interval

    def advance(self) -> float:
        """The next tick still to come (after this one, or later if the poll ran late)."""
        self.ticks = max(self.ticks + 1,
                         int((time.monotonic() - self.origin) / self.interval) + 1)
        return self.due


def freeze_start_up_objects() -> None:
    """Keep what start-up made (modules, libraries, the config, the first poll's state) out of
    the garbage collector's full collections from now on.

    They live as long as the process, yet a full collection walks every one of them (45,000
    tracked objects): on a 34-device host one took 60-120 ms, a stall of whichever thread
    triggered it, against 5 ms for a whole cycle; frozen, 0.8 ms (bench/README.md).
    ``gc.freeze`` moves them to the permanent generation; objects made later are collected as
    before.
    """
    gc.collect()
    gc.freeze()


def run_service(startup: Startup, args: argparse.Namespace) -> int:
    """Run until SIGTERM/SIGINT; returns the exit status."""
    daemon: Optional[Daemon] = None

    async def main() -> int:
        nonlocal daemon
        daemon = Daemon(startup, args)
        return await daemon.run()
    status = asyncio.run(main())
    if daemon is not None and daemon.poll_abandoned:
        logging.shutdown()
        os._exit(status)  # the hung poll thread would keep the interpreter from exiting
    return status

