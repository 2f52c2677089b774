"""Prometheus ``/metrics`` and ``/healthz``: every port, counter and the daemon itself.

The families are built on each scrape by a custom collector from the picture of the last poll
(:class:`~nichealthd.core.picture.PollPicture`), through the same records that D-Bus, varlink
and ``nichealthctl`` read, built once per poll for all of them. So a scrape never touches
sysfs, never disagrees with the other surfaces, and a port, counter file or device that
disappears simply stops having series — there are no long-lived labelled children to clean
up. A missing file gives no series, never 0.

What a fleet stores is bounded (nichealthd(8), METRICS): at most node_exporter's infiniband
collector's series for the same host. The facts node_exporter exports (port state, physical
state and rate, the counters of ``ports/N/counters/``: :data:`NODE_EXPORTER_COUNTERS`) are
left to it; a flag (a breach, a saturation, a degraded hop) is a series only while it is
true, so a healthy host exports none.

The HTTP server runs in daemon threads (prometheus-client's WSGI app behind a threading
``wsgiref`` server), so neither a slow scraper nor the work of building the families can
delay the event loop or the poller. The loop publishes the daemon's picture of each poll in
:meth:`MetricsService.on_poll`; the server threads only read it.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import selectors
import socket
import socketserver
import sys
import threading
import time
from typing import TYPE_CHECKING, Any, Callable, Iterable, Iterator, Optional
from wsgiref.simple_server import WSGIRequestHandler, WSGIServer, make_server

from prometheus_client import CollectorRegistry, ProcessCollector, make_wsgi_app
from prometheus_client.core import (
    CounterMetricFamily,
    GaugeMetricFamily,
    HistogramMetricFamily,
    Metric,
)
from prometheus_client.utils import floatToGoString

from .. import __version__
from ..core.checks import families
from ..core.config import Config
from ..core.health import UNCABLED
from ..core.picture import PollPicture
from ..core.state import DEGRADED, FATAL, HEALTHY, SUPPRESSED
from .admission import METRICS_CLIENTS
from .context import CONNECTIONS_METRICS, PollOutcome, PollStats
from .slurm.status import OFF as SLURM_OFF
from .slurm.status import SlurmStatus

if TYPE_CHECKING:  # pragma: no cover
    from .context import ServiceContext

log = logging.getLogger("nichealthd.metrics")

PREFIX = "nichealthd_"
# The values of ConnectorStatus.state, each a series of nichealthd_connector_state.
CONNECTOR_STATES = ("connected", "down", "not installed", "disabled", "unavailable")
# Not ``nichealthd_counter_value`` / ``_counter_breached``: promtool's linter rejects a metric
# name that contains a type name (``_counter_``), and passing promtool is part of the contract.
STALE_INTERVALS = 3
CLOSE_WAIT_SECONDS = 5.0  # for the HTTP thread to leave its wait when the server closes
# A normal listen backlog (socketserver's default is 5); the kernel caps it at somaxconn.
LISTEN_BACKLOG = max(128, socket.SOMAXCONN)
CLIENT_TIMEOUT = 10.0  # a client that sends nothing for this long is dropped
# HTTP connections held at once, so that the open-file plan (runtime/fdplan.py) can count
# them: a flood of connections cannot take the descriptors polling needs. When all are taken,
# the oldest one that has not sent its request line yet is closed for the newcomer (an idle
# flood cannot keep a scraper out); with every one of them busy answering, a newcomer is
# closed at once.
MAX_CLIENTS = METRICS_CLIENTS
EVICTING = 16  # connections closed for a newcomer whose threads have not ended yet
CLIENT_ERROR_LOG_SECONDS = 60.0  # at most one line a minute about clients that misbehave
# Poll cycles take about a millisecond per 8 devices; a hung sysfs read takes seconds.
DURATION_BUCKETS = (0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0,
                    2.5, 5.0, 10.0)
# Uncabled-at-first-sight ports (suppressed) are not reported by the daemon: they count as 0.
HEALTH_VALUE = {HEALTHY: 0, SUPPRESSED: 0, UNCABLED: 0, DEGRADED: 1, FATAL: 2}
_PORT = ("device", "port")
# The files of ``ports/N/counters/`` that node_exporter's infiniband collector exports, with
# its series (``node_infiniband_<name>``, labels ``device`` and ``port`` as here): their
# values are left to it (tests/metrics/test_cardinality.py reads them from a real one).
NODE_EXPORTER_COUNTERS = {
    "excessive_buffer_overrun_errors": "excessive_buffer_overrun_errors_total",
    "link_downed": "link_downed_total",
    "link_error_recovery": "link_error_recovery_total",
    "local_link_integrity_errors": "local_link_integrity_errors_total",
    "multicast_rcv_packets": "multicast_packets_received_total",
    "multicast_xmit_packets": "multicast_packets_transmitted_total",
    "port_rcv_constraint_errors": "port_constraint_errors_received_total",
    "port_xmit_constraint_errors": "port_constraint_errors_transmitted_total",
    "port_rcv_data": "port_data_received_bytes_total",
    "port_xmit_data": "port_data_transmitted_bytes_total",
    "port_xmit_discards": "port_discards_transmitted_total",
    "port_rcv_errors": "port_errors_received_total",
    "port_rcv_packets": "port_packets_received_total",
    "port_xmit_packets": "port_packets_transmitted_total",
    "port_rcv_remote_physical_errors": "port_receive_remote_physical_errors_total",
    "port_rcv_switch_relay_errors": "port_receive_switch_relay_errors_total",
    "port_xmit_wait": "port_transmit_wait_total",
    "symbol_error": "symbol_error_total",
    "unicast_rcv_packets": "unicast_packets_received_total",
    "unicast_xmit_packets": "unicast_packets_transmitted_total",
    "VL15_dropped": "vl15_dropped_total",
}


def left_to_node_exporter(path: str) -> bool:
    """A counter file whose value node_exporter's infiniband collector exports."""
    parent, _, name = path.rpartition("/")
    return parent.endswith("/counters") and name in NODE_EXPORTER_COUNTERS


def parse_listen(listen: str) -> Optional[tuple[str, int]]:
    """``:2112``, ``127.0.0.1:2112``, ``[::1]:2112`` -> (host, port); ``''`` -> None."""
    text = listen.strip()
    if not text:
        return None
    host, _, port = text.rpartition(":")
    if host.startswith("[") and host.endswith("]"):
        host = host[1:-1]
    return host, int(port)


def _flag(value: bool) -> str:
    return "true" if value else "false"


class _ClientErrors:
    """Client errors (idle timeouts, resets) as one rate-limited line, never a traceback.

    A client that connects and sends nothing is dropped after ``CLIENT_TIMEOUT``; the
    stdlib server printed a 15-line traceback for each. The first error is
    logged at once, later ones at most every ``CLIENT_ERROR_LOG_SECONDS`` with a count.
    """

    def __init__(self, clock: Callable[[], float] = time.monotonic) -> None:
        self._clock = clock
        self._lock = threading.Lock()
        self._logged_at: Optional[float] = None
        self._since = 0
        self.total = 0

    def report(self, client: str, exc: BaseException) -> None:
        now = self._clock()
        with self._lock:
            self.total += 1
            self._since += 1
            last = self._logged_at
            if last is not None and now - last < CLIENT_ERROR_LOG_SECONDS:
                return
            count, self._since, self._logged_at = self._since, 0, now
        what = "timed out sending its request" if isinstance(exc, TimeoutError) else \
            f"failed: {type(exc).__name__}: {exc}"
        more = "" if last is None else \
            f" ({count} client errors in the last {now - last:.0f} s)"
        log.warning("metrics HTTP client %s %s; connection closed%s", client, what, more)


class _Server(socketserver.ThreadingMixIn, WSGIServer):
    """Threading WSGI server; each scrape in its own daemon thread."""

    daemon_threads = True
    allow_reuse_address = True
    request_queue_size = LISTEN_BACKLOG
    client_errors: Optional[_ClientErrors] = None
    max_clients = MAX_CLIENTS
    # Set in server_bind: the connections held, those without a request yet (oldest first),
    # and the connections closed for the limit since the last line about them.
    _clients_lock: threading.Lock
    _clients: int
    _waiting: dict[Any, None]
    _closed: dict[str, int]
    _closed_logged_at: Optional[float]

    def verify_request(self, request: Any, client_address: Any) -> bool:
        """Hold at most ``max_clients`` connections (see MAX_CLIENTS)."""
        victim = None
        with self._clients_lock:
            if self._clients >= self.max_clients:
                victim = next(iter(self._waiting), None)
                if victim is None or self._clients >= self.max_clients + EVICTING:
                    self._closed_note("closed at once, every connection busy")
                    return False
                del self._waiting[victim]
            self._clients += 1
            self._waiting[request] = None
        if victim is not None:
            with contextlib.suppress(OSError):  # its thread reads EOF and ends
                victim.shutdown(socket.SHUT_RDWR)
            with self._clients_lock:
                self._closed_note("that sent no request closed for newer ones")
        return True

    def request_started(self, request: Any) -> None:
        """The connection sent its request line: it is served, no longer evictable."""
        with self._clients_lock:
            self._waiting.pop(request, None)

    def _closed_note(self, what: str) -> None:
        """One line a minute at most about connections closed for the limit (called with
        the lock held)."""
        self._closed[what] = self._closed.get(what, 0) + 1
        now = time.monotonic()
        if self._closed_logged_at is not None and \
                now - self._closed_logged_at < CLIENT_ERROR_LOG_SECONDS:
            return
        closed = self._closed
        self._closed = {}
        self._closed_logged_at = now
        log.warning("metrics HTTP: %s (at most %d connections at a time); polling is not "
                    "affected", "; ".join(f"{count} connection(s) {why}"
                                          for why, count in closed.items()),
                    self.max_clients)

    def process_request(self, request: Any, client_address: Any) -> None:
        try:
            super().process_request(request, client_address)
        except BaseException:
            self._release_client(request)
            raise

    def process_request_thread(self, request: Any, client_address: Any) -> None:
        try:
            super().process_request_thread(request, client_address)
        finally:
            self._release_client(request)

    def _release_client(self, request: Any) -> None:
        with self._clients_lock:
            self._clients -= 1
            self._waiting.pop(request, None)

    def handle_error(self, request: Any, client_address: Any) -> None:
        """A client's error is the client's: one rate-limited line, no traceback."""
        exc = sys.exc_info()[1]
        if exc is None or not isinstance(exc, (OSError, ValueError)):
            log.exception("metrics HTTP: unexpected error serving %s", client_address)
            return
        if self.client_errors is None:
            self.client_errors = _ClientErrors()
        host = client_address[0] if isinstance(client_address, tuple) else client_address
        self.client_errors.report(str(host), exc)

    def server_bind(self) -> None:
        # HTTPServer.server_bind resolves the FQDN of the bind address, which can stall
        # start-up for seconds on a host with broken reverse DNS; the name is not needed.
        socketserver.TCPServer.server_bind(self)
        self.server_name = "nichealthd"
        self.server_port = self.server_address[1]
        self.setup_environ()
        self._clients_lock = threading.Lock()
        self._clients = 0
        self._waiting = {}
        self._closed = {}
        self._closed_logged_at = None
        self._wake_read, self._wake_write = socket.socketpair()
        self._stopped = threading.Event()

    def serve_until_closed(self) -> None:
        """Serve until :meth:`close`. Unlike ``serve_forever``, which wakes every 0.5 s to
        look for a shutdown request, this sleeps until a request or the close arrives."""
        try:
            with selectors.DefaultSelector() as selector:
                selector.register(self, selectors.EVENT_READ)
                selector.register(self._wake_read, selectors.EVENT_READ)
                while not any(key.fileobj is self._wake_read for key, _ in selector.select()):
                    self.handle_request()  # the listening socket is readable: no blocking
        finally:
            self._stopped.set()

    def close(self) -> None:
        """Stop serving (from any thread, once) and close the sockets."""
        self._wake_write.send(b"x")
        self._stopped.wait(CLOSE_WAIT_SECONDS)
        self.server_close()
        self._wake_write.close()
        self._wake_read.close()


class _Server6(_Server):
    address_family = socket.AF_INET6


class _QuietHandler(WSGIRequestHandler):
    """No access log on stderr; a stuck client is dropped after ``CLIENT_TIMEOUT``."""

    timeout = CLIENT_TIMEOUT

    def parse_request(self) -> bool:
        self.server.request_started(self.connection)  # type: ignore[attr-defined]
        return bool(super().parse_request())

    def log_message(self, format: str, *args: Any) -> None:  # the stdlib's signature
        log.debug("%s %s", self.address_string(), format % args)


def make_http_server(listen: str, app: Callable[..., Iterable[bytes]]) -> _Server:
    """Bind ``[HOST]:PORT``; an empty host means every address (IPv6 and IPv4 when possible)."""
    parsed = parse_listen(listen)
    if parsed is None:
        raise ValueError("metrics listen address is empty")
    host, port = parsed
    if not host:
        try:
            return make_server("::", port, app, _Server6, _QuietHandler)  # type: ignore[return-value]
        except OSError:
            host = "0.0.0.0"
    server_class = _Server6 if ":" in host else _Server
    return make_server(host, port, app, server_class, _QuietHandler)  # type: ignore[return-value]


class _Collector:
    """prometheus-client collector: builds every family from the service on each scrape."""

    def __init__(self, service: MetricsService) -> None:
        self._service = service

    def describe(self) -> list[Metric]:
        return []  # label sets depend on the host: nothing to pre-declare

    def collect(self) -> Iterator[Metric]:
        return iter(self._service.families())


class MetricsService:
    """The daemon's ``/metrics`` and ``/healthz`` endpoint (plug-in service)."""

    name = "metrics"

    def __init__(self, context: ServiceContext) -> None:
        self.context = context
        self.listen = context.config().metrics_listen
        self.enabled = bool(self.listen.strip())
        self.registry = CollectorRegistry(auto_describe=False)
        self.registry.register(_Collector(self))
        # The daemon's own cost (CPU seconds, resident memory, open files): process_*, as
        # every Prometheus client exports it; the fleet dashboard shows it.
        ProcessCollector(registry=self.registry)
        self._metrics_app = make_wsgi_app(self.registry)
        self._server: Optional[_Server] = None
        self._thread: Optional[threading.Thread] = None
        self._lock = threading.Lock()
        self._picture: Optional[PollPicture] = None
        self._events: dict[tuple[str, str, str], int] = {}
        self._commit_errors = 0
        self._buckets = [0] * len(DURATION_BUCKETS)
        self._duration_count = 0
        self._duration_sum = 0.0

    # ------------------------------------------------------------ service API

    async def start(self) -> None:
        self._serve(self.listen)

    def on_poll(self, outcome: PollOutcome) -> None:
        picture = self.context.view()
        if picture is None:  # not after a completed poll: nothing to publish
            return
        with self._lock:
            for entry in outcome.committed:
                event = entry.event
                key = (event.check_name, _flag(event.is_fatal), _flag(event.is_healthy))
                self._events[key] = self._events.get(key, 0) + 1
            if outcome.commit_error is not None:
                self._commit_errors += 1
            for i, bound in enumerate(DURATION_BUCKETS):
                if outcome.duration <= bound:
                    self._buckets[i] += 1
                    break
            self._duration_count += 1
            self._duration_sum += outcome.duration
            self._picture = picture

    def on_reload(self, config: Config) -> None:
        """A changed listen address takes effect at once; the old one keeps serving on error."""
        if config.metrics_listen == self.listen:
            return
        old = self._server
        try:
            self._serve(config.metrics_listen)
        except RuntimeError as exc:
            log.error("%s; still serving on %s", exc, self.listen or "nothing")
            return
        self.listen = config.metrics_listen
        if old is not None:
            threading.Thread(target=_close, args=(old,), daemon=True).start()

    async def stop(self) -> None:
        server, self._server = self._server, None
        if server is not None:
            await asyncio.get_running_loop().run_in_executor(None, _close, server)

    # ------------------------------------------------------------------ HTTP

    def _serve(self, listen: str) -> None:
        if not listen.strip():
            self._server = None
            return
        try:
            server = make_http_server(listen, self._app)
        except OSError as exc:
            raise RuntimeError(f"cannot serve metrics on {listen}: "
                               f"{exc.strerror or exc}") from None
        server.max_clients = self.context.connection_limits.get(CONNECTIONS_METRICS,
                                                                MAX_CLIENTS)
        thread = threading.Thread(target=server.serve_until_closed, name="metrics-http",
                                  daemon=True)
        thread.start()
        self._server, self._thread = server, thread
        host, port = str(server.server_address[0]), int(server.server_address[1])
        log.info("metrics on http://%s:%d/metrics (health on /healthz)",
                 f"[{host}]" if ":" in host else host, port)

    def _app(self, environ: dict[str, Any], start_response: Callable[..., Any]
             ) -> Iterable[bytes]:
        path = environ.get("PATH_INFO") or "/"
        if path == "/metrics":
            return self._metrics_app(environ, start_response)  # type: ignore[no-any-return]
        if path == "/healthz":
            ok, reason = self.healthz()
            status = "200 OK" if ok else "503 Service Unavailable"
            body = (reason + "\n").encode()
        elif path == "/":
            status, body = "200 OK", b"nichealthd: /metrics /healthz\n"
        else:
            status, body = "404 Not Found", b"not found: try /metrics or /healthz\n"
        start_response(status, [("Content-Type", "text/plain; charset=utf-8"),
                                ("Content-Length", str(len(body)))])
        return [body]

    def healthz(self) -> tuple[bool, str]:
        """(True, "ok") while the last poll completed within 3 intervals and nothing fails
        (reading, evaluating, committing); else the reason."""
        interval = self.context.config().polling_interval
        limit = STALE_INTERVALS * interval
        stats = self.context.stats()
        last, failing = stats.last_poll_monotonic, stats.failing
        now = time.monotonic()
        if last is None:
            return False, failing or (f"no poll has completed yet (started "
                                      f"{time.time() - stats.started_at:.1f} s ago)")
        age = now - last
        if age > limit:
            return False, (f"last poll completed {age:.1f} s ago, more than {STALE_INTERVALS} "
                           f"polling intervals ({limit:g} s): the poller is stuck"
                           + (f"; {failing}" if failing else ""))
        if failing:
            return False, failing
        return True, "ok"

    # -------------------------------------------------------------- families

    def families(self) -> list[Metric]:
        """Every family, from the last published picture (called on a server thread)."""
        with self._lock:
            picture = self._picture
            events = dict(self._events)
            commit_errors = self._commit_errors
            buckets = list(self._buckets)
            count, total = self._duration_count, self._duration_sum
        out = self._daemon_families(events, commit_errors, buckets, count, total)
        if picture is not None:
            out.extend(_host_families(picture))
        return out

    def _daemon_families(self, events: dict[tuple[str, str, str], int], commit_errors: int,
                         buckets: list[int], count: int, total: float) -> list[Metric]:
        stats = self.context.stats()
        connector = self.context.connector()
        out: list[Metric] = []

        def gauge(name: str, doc: str, value: float) -> None:
            out.append(GaugeMetricFamily(PREFIX + name, doc, value=value))

        def counter(name: str, doc: str, value: float) -> None:
            out.append(CounterMetricFamily(PREFIX + name, doc, value=value))

        status = self.context.status()
        info = GaugeMetricFamily(PREFIX + "build_info", "nichealthd version, where the GPU "
                                 "topology comes from and what it found (always 1)",
                                 labels=["version", "topology_source", "topology"])
        info.add_metric([__version__, str(status.get("topology_source", "")),
                         str(status.get("topology", ""))], 1)
        out.append(info)
        cumulative, running = [], 0
        for bound, n in zip(DURATION_BUCKETS, buckets):
            running += n
            cumulative.append((floatToGoString(bound), running))  # type: ignore[no-untyped-call]
        cumulative.append(("+Inf", count))
        out.append(HistogramMetricFamily(
            PREFIX + "poll_duration_seconds",
            "Wall time of one poll cycle (read sysfs, evaluate, commit)",
            buckets=cumulative, sum_value=total))
        counter("polls", "Poll cycles completed", stats.polls)
        counter("commit_errors", "Polls whose events and state could not be committed",
                commit_errors)
        failures = CounterMetricFamily(PREFIX + "poll_failures",
                                       "Polls that failed, by the step that failed (read, "
                                       "evaluate, commit)", labels=["cause"])
        for cause, n in stats.failures.items():
            failures.add_metric([cause], n)
        out.append(failures)
        if stats.last_poll_wall is not None:
            gauge("last_poll_timestamp_seconds", "When the last poll read sysfs (Unix time)",
                  stats.last_poll_wall.timestamp())
        family = CounterMetricFamily(PREFIX + "events",
                                     "Health events committed, by check and severity",
                                     labels=["check", "fatal", "healthy"])
        for key in sorted(events):
            family.add_metric(list(key), events[key])
        out.append(family)
        counter("connector_sends", "Events the platform connector accepted",
                connector.sent)
        counter("connector_errors", "Failed sends to the platform connector",
                connector.errors)
        # connector_up keeps its meaning (1 only while connected); connector_state tells a host
        # without a connector (disabled, not installed) from a connector that is down.
        gauge("connector_up", "1 while connected to the platform connector, else 0 (also where "
              "none is configured or installed: see nichealthd_connector_state)",
              1 if connector.state == "connected" else 0)
        state = GaugeMetricFamily(PREFIX + "connector_state", "The platform connector's state: "
                                  "1 for the current one of connected, down (its socket exists "
                                  "or existed and calls fail), not installed (its socket has not "
                                  "existed since start: no NVSentinel) and disabled",
                                  labels=["state"])
        extra = () if connector.state in CONNECTOR_STATES else (connector.state,)
        for name in CONNECTOR_STATES + extra:
            state.add_metric([name], 1 if connector.state == name else 0)
        out.append(state)
        gauge("outbox_depth", "Committed events not yet delivered to the platform connector",
              connector.outbox_depth)
        gauge("dead_letters", "Events the platform connector rejected permanently",
              connector.dead_letters)
        counter("unreadable_reads", "sysfs reads that gave no usable value",
                stats.unreadable_reads)
        out.extend(_family_boundaries(stats))
        out.extend(_slurm_families(self.context.slurm()))
        gauge("einval_ignored_files", "Counter files that failed with EINVAL and are no "
              "longer read (restricted functions)", stats.einval_files)
        return out


def _family_boundaries(stats: PollStats) -> list[Metric]:
    """Each enabled check family: whether it judged the last poll, and when it last did."""
    up = GaugeMetricFamily(PREFIX + "family_up", "1 while the check family judges, 0 while it "
                           "cannot (it raised, or a source it reads failed: its ports show as "
                           "unknown)", labels=["family"])
    last = GaugeMetricFamily(PREFIX + "family_last_success_timestamp_seconds",
                             "When the check family last judged a poll (Unix time)",
                             labels=["family"])
    for family in sorted({*stats.families_judged, *stats.families_failing}):
        up.add_metric([family], 0 if family in stats.families_failing else 1)
        when = stats.families_judged.get(family)
        if when is not None:
            last.add_metric([family], when.timestamp())
    return [up, last]


def _slurm_families(slurm: SlurmStatus) -> list[Metric]:
    """What the Slurm consumer did (surfaces/slurm/), only where slurmDrain is on."""
    if slurm.mode == SLURM_OFF:
        return []
    actions = CounterMetricFamily(PREFIX + "slurm_actions", "Slurm drains and resumes, by "
                                  "result: ok, failed (every attempt), held (already drained "
                                  "by nichealthd), skipped (the node has another reason, an "
                                  "administrator's), dry_run", labels=["action", "result"])
    for (action, result), n in sorted(slurm.actions.items()):
        actions.add_metric([action, result], n)
    drained = GaugeMetricFamily(PREFIX + "slurm_drained", "1 while nichealthd holds a Slurm "
                                "drain of this node, else 0", value=1 if slurm.holds_drain else 0)
    return [actions, drained]


def _host_families(picture: PollPicture) -> list[Metric]:
    """Per-port, per-counter and per-device families of one poll."""
    host = picture.health  # the one health model (nichealthd.core.health)
    overall = GaugeMetricFamily(
        PREFIX + "health", "Overall health of the host's NICs: 0 healthy, 1 degraded, 2 fatal "
        "(ports, latched counter breaches, missing devices, card anomalies)",
        value=HEALTH_VALUE[host.health])

    health = GaugeMetricFamily(
        PREFIX + "port_health", "Health of a monitored port, the worst of its state and "
        "every open condition on it (counter breach, saturation, short card, missing): "
        "0 healthy or uncabled, 1 degraded, 2 fatal", labels=_PORT)
    for record in picture.ports:
        if record["monitored"] and record["health"] in HEALTH_VALUE:
            health.add_metric([record["device"], str(record["port"])],
                              HEALTH_VALUE[record["health"]])

    value = GaugeMetricFamily(
        PREFIX + "port_value", "Raw value of a configured counter that node_exporter's "
        "infiniband collector does not export (hw_counters, netdev statistics; no series when "
        "its file does not exist or could not be read)", labels=[*_PORT, "counter", "file"])
    breached = GaugeMetricFamily(
        PREFIX + "threshold_breached", "1 while a counter's threshold breach is latched "
        "(no series otherwise)", labels=[*_PORT, "counter", "fatal"])
    saturated = GaugeMetricFamily(
        PREFIX + "saturated", "1 while a counter file is stuck at its saturation value (an IB "
        "PMA counter: blind until cleared; no series otherwise)",
        labels=[*_PORT, "counter", "file"])
    for record in picture.counters():
        labels = [record["device"], str(record["port"]), record["counter"]]
        path = record["path"]
        file = path.rsplit("/", 1)[-1]
        if record["value"] is not None and not left_to_node_exporter(path):
            value.add_metric([*labels, file], record["value"])
        if record["breached"]:
            breached.add_metric([*labels, _flag(record["fatal"])], 1)
        if record["saturated"]:
            saturated.add_metric([*labels, file], 1)

    info = GaugeMetricFamily(
        PREFIX + "device_info", "RDMA device facts (always 1)",
        labels=["device", "hca_type", "fw_ver", "board_id", "role", "pci_address",
                "numa_node", "netdev", "adapter"])
    for record in picture.devices:
        if record["present"]:
            info.add_metric([record["device"], record["hca_type"], record["fw_ver"],
                             record["board_id"], record["role"], record["pci_address"],
                             str(record["numa_node"]), ",".join(record["netdevs"]),
                             record["adapter"]], 1)
    return [overall, health, value, breached, saturated, info, *_family_series(picture)]


def _family_series(picture: PollPicture) -> list[Metric]:
    """The series the check families supply (:meth:`CheckFamily.series`), as Prometheus
    families: a new family's metrics need nothing here."""
    out: list[Metric] = []
    pictures = picture.result.pictures
    for family in families():
        for series in family.series(picture.state.section(family), pictures.get(family.id)):
            kind = CounterMetricFamily if series.kind == "counter" else GaugeMetricFamily
            metric = kind(PREFIX + series.name, series.help, labels=list(series.labels))
            for labels, value in series.samples:
                metric.add_metric(list(labels), value)
            out.append(metric)
    return out


def _close(server: _Server) -> None:
    server.close()
