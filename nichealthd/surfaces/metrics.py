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

The families are written in Prometheus' text format by :mod:`.metrics_text` (the daemon needs
no client library: prometheus-client's exposition alone is megabytes of imports). The HTTP
server runs in daemon threads (the threading server of :mod:`.metrics_http`, which no client
can keep ``/healthz`` from), so neither a slow scraper nor the work of building the families
can delay the event loop or the poller.
The loop publishes the daemon's picture of each poll in
:meth:`MetricsService.on_poll`; the server threads only read it.
"""

from __future__ import annotations

import asyncio
import logging
import threading
import time
from typing import TYPE_CHECKING, Any, Callable, Iterable, Optional, Sequence

from .. import __version__
from ..core.checks import families
from ..core.config import Config
from ..core.health import UNCABLED
from ..core.picture import PollPicture
from ..core.state import DEGRADED, FATAL, HEALTHY, SUPPRESSED
from .context import CONNECTIONS_METRICS, PollOutcome, PollStats
from .metrics_http import MAX_CLIENTS, Server, make_http_server
from .metrics_process import ProcessFamilies
from .metrics_text import (
    CONTENT_TYPE,
    CounterFamily,
    Family,
    GaugeFamily,
    HistogramFamily,
    exposition,
    go_float,
)
from .slurm.status import OFF as SLURM_OFF
from .slurm.status import SlurmStatus
from .status import SurfaceStatus

if TYPE_CHECKING:  # pragma: no cover
    from .context import ServiceContext

log = logging.getLogger("nichealthd.metrics")

PREFIX = "nichealthd_"
# The values of ConnectorStatus.state, each a series of nichealthd_connector_state.
CONNECTOR_STATES = ("connected", "down", "not installed", "disabled", "unavailable")
# Not ``nichealthd_counter_value`` / ``_counter_breached``: promtool's linter rejects a metric
# name that contains a type name (``_counter_``), and passing promtool is part of the contract.
STALE_INTERVALS = 3
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


def _flag(value: bool) -> str:
    return "true" if value else "false"


class MetricsService:
    """The daemon's ``/metrics`` and ``/healthz`` endpoint (plug-in service)."""

    name = "metrics"

    def __init__(self, context: ServiceContext) -> None:
        self.context = context
        self.listen = context.config().metrics_listen
        self.enabled = bool(self.listen.strip())
        # The daemon's own cost (CPU seconds, resident memory, open files): process_*, as
        # every Prometheus client exports it; the fleet dashboard shows it.
        self._process = ProcessFamilies()
        self._server: Optional[Server] = None
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

    # A poll that changed nothing is counted the same, from the poll thread (under the lock,
    # as the scrape thread reads): its duration and its picture (counter values move).
    on_quiet_poll = on_poll

    def idle(self) -> bool:
        return True

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
            return self._metrics(environ, start_response)
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

    def _metrics(self, environ: dict[str, Any], start_response: Callable[..., Any]
                 ) -> Iterable[bytes]:
        """The families in the text format; gzipped when the client accepts it (Prometheus
        does), as prometheus-client's WSGI app answered."""
        method = environ.get("REQUEST_METHOD", "GET")
        if method == "OPTIONS":
            start_response("200 OK", [("Allow", "OPTIONS,GET"), ("Content-Length", "0")])
            return [b""]
        if method != "GET":
            body = f"# HTTP 405 Method Not Allowed: {method}; use OPTIONS or GET\n".encode()
            start_response("405 Method Not Allowed", [("Allow", "OPTIONS,GET"),
                                                      ("Content-Length", str(len(body)))])
            return [body]
        body = exposition([*self.families(), *self._process.families()])
        headers = [("Content-Type", CONTENT_TYPE)]
        if _gzip_accepted(environ.get("HTTP_ACCEPT_ENCODING", "")):
            body = _gzip(body)
            headers.append(("Content-Encoding", "gzip"))
        start_response("200 OK", [*headers, ("Content-Length", str(len(body)))])
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

    def families(self) -> list[Family]:
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
                         buckets: list[int], count: int, total: float) -> list[Family]:
        stats = self.context.stats()
        connector = self.context.connector()
        out: list[Family] = []

        def gauge(name: str, doc: str, value: float) -> None:
            out.append(GaugeFamily(PREFIX + name, doc, value=value))

        def counter(name: str, doc: str, value: float) -> None:
            out.append(CounterFamily(PREFIX + name, doc, value=value))

        status = self.context.status()
        info = GaugeFamily(PREFIX + "build_info", "nichealthd version, where the GPU "
                                 "topology comes from and what it found (always 1)",
                                 labels=["version", "topology_source", "topology"])
        info.add_metric([__version__, str(status.get("topology_source", "")),
                         str(status.get("topology", ""))], 1)
        out.append(info)
        cumulative, running = [], 0
        for bound, n in zip(DURATION_BUCKETS, buckets):
            running += n
            cumulative.append((go_float(bound), running))
        cumulative.append(("+Inf", count))
        out.append(HistogramFamily(
            PREFIX + "poll_duration_seconds",
            "Wall time of one poll cycle (read sysfs, evaluate, commit)",
            buckets=cumulative, sum_value=total))
        counter("polls", "Poll cycles completed", stats.polls)
        counter("commit_errors", "Polls whose events and state could not be committed",
                commit_errors)
        failures = CounterFamily(PREFIX + "poll_failures",
                                       "Polls that failed, by the step that failed (read, "
                                       "evaluate, commit)", labels=["cause"])
        for cause, n in stats.failures.items():
            failures.add_metric([cause], n)
        out.append(failures)
        if stats.last_poll_wall is not None:
            gauge("last_poll_timestamp_seconds", "When the last poll read sysfs (Unix time)",
                  stats.last_poll_wall.timestamp())
        family = CounterFamily(PREFIX + "events",
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
        state = GaugeFamily(PREFIX + "connector_state", "The platform connector's state: "
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
        out.extend(_surface_families(self.context.surfaces()))
        gauge("einval_ignored_files", "Counter files that failed with EINVAL and are no "
              "longer read (restricted functions)", stats.einval_files)
        return out


def _family_boundaries(stats: PollStats) -> list[Family]:
    """Each enabled check family: whether it judged the last poll, and when it last did."""
    up = GaugeFamily(PREFIX + "family_up", "1 while the check family judges, 0 while it "
                           "cannot (it raised, or a source it reads failed: its ports show as "
                           "unknown)", labels=["family"])
    last = GaugeFamily(PREFIX + "family_last_success_timestamp_seconds",
                             "When the check family last judged a poll (Unix time)",
                             labels=["family"])
    for family in sorted({*stats.families_judged, *stats.families_failing}):
        up.add_metric([family], 0 if family in stats.families_failing else 1)
        when = stats.families_judged.get(family)
        if when is not None:
            last.add_metric([family], when.timestamp())
    return [up, last]


def _surface_families(surfaces: Sequence[SurfaceStatus]) -> list[Family]:
    """Every surface's state as it published it (surfaces/status.py): its current one is 1,
    and the events pending on its journal cursor."""
    state = GaugeFamily(PREFIX + "surface_state", "A surface's current state (always 1; "
                        "nichealthctl status says more): ok, off, failing, or its own (the "
                        "connector's, Slurm's mode)", labels=["surface", "state"])
    pending = GaugeFamily(PREFIX + "surface_pending", "Committed events a surface has not "
                          "acted on yet (its journal cursor's lag)", labels=["surface"])
    for surface in surfaces:
        state.add_metric([surface.name, surface.state], 1)
        if surface.pending is not None:
            pending.add_metric([surface.name], surface.pending)
    return [state, pending]


def _slurm_families(slurm: SlurmStatus) -> list[Family]:
    """What the Slurm consumer did (surfaces/slurm/), only where slurmDrain is on."""
    if slurm.mode == SLURM_OFF:
        return []
    actions = CounterFamily(PREFIX + "slurm_actions", "Slurm drains and resumes, by "
                                  "result: ok, failed (every attempt), held (already drained "
                                  "by nichealthd), skipped (the node has another reason, an "
                                  "administrator's), dry_run", labels=["action", "result"])
    for (action, result), n in sorted(slurm.actions.items()):
        actions.add_metric([action, result], n)
    drained = GaugeFamily(PREFIX + "slurm_drained", "1 while nichealthd holds a Slurm "
                                "drain of this node, else 0", value=1 if slurm.holds_drain else 0)
    failing = GaugeFamily(PREFIX + "slurm_failing", "1 while a drain or resume the "
                                "events call for cannot be done (Slurm refuses or cannot be "
                                "reached; retried; nichealthctl status says why), else 0",
                                value=1 if slurm.failing else 0)
    return [actions, drained, failing]


def _host_families(picture: PollPicture) -> list[Family]:
    """Per-port, per-counter and per-device families of one poll."""
    host = picture.health  # the one health model (nichealthd.core.health)
    overall = GaugeFamily(
        PREFIX + "health", "Overall health of the host's NICs: 0 healthy, 1 degraded, 2 fatal "
        "(ports, latched counter breaches, missing devices, card anomalies)",
        value=HEALTH_VALUE[host.health])

    health = GaugeFamily(
        PREFIX + "port_health", "Health of a monitored port, the worst of its state and "
        "every open condition on it (counter breach, saturation, short card, missing): "
        "0 healthy or uncabled, 1 degraded, 2 fatal", labels=_PORT)
    suspect = GaugeFamily(
        PREFIX + "port_suspect", "1 on an unhealthy port, labelled with the part to look at "
        "first (nic, module, cable-or-far-end, link, fabric, unknown) and its health (no "
        "series on a healthy port)", labels=[*_PORT, "suspect", "health"])
    for record in picture.ports:
        if record["monitored"] and record["health"] in HEALTH_VALUE:
            health.add_metric([record["device"], str(record["port"])],
                              HEALTH_VALUE[record["health"]])
        if record["monitored"] and record["suspect"]:
            suspect.add_metric([record["device"], str(record["port"]), record["suspect"],
                                record["health"]], 1)

    value = GaugeFamily(
        PREFIX + "port_value", "Raw value of a configured counter that node_exporter's "
        "infiniband collector does not export (hw_counters, netdev statistics; no series when "
        "its file does not exist or could not be read)", labels=[*_PORT, "counter", "file"])
    breached = GaugeFamily(
        PREFIX + "threshold_breached", "1 while a counter's threshold breach is latched "
        "(no series otherwise)", labels=[*_PORT, "counter", "fatal"])
    saturated = GaugeFamily(
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

    info = GaugeFamily(
        PREFIX + "device_info", "RDMA device facts (always 1)",
        labels=["device", "hca_type", "fw_ver", "board_id", "role", "pci_address",
                "numa_node", "netdev", "adapter"])
    for record in picture.devices:
        if record["present"]:
            info.add_metric([record["device"], record["hca_type"], record["fw_ver"],
                             record["board_id"], record["role"], record["pci_address"],
                             str(record["numa_node"]), ",".join(record["netdevs"]),
                             record["adapter"]], 1)
    return [overall, health, suspect, value, breached, saturated, info,
            *_family_series(picture)]


def _family_series(picture: PollPicture) -> list[Family]:
    """The series the check families supply (:meth:`CheckFamily.series`), as Prometheus
    families: a new family's metrics need nothing here."""
    out: list[Family] = []
    pictures = picture.result.pictures
    for family in families():
        for series in family.series(picture.state.section(family), pictures.get(family.id)):
            kind: type[Family] = CounterFamily if series.kind == "counter" else GaugeFamily
            metric = kind(PREFIX + series.name, series.help, labels=list(series.labels))
            for labels, value in series.samples:
                metric.add_metric(list(labels), value)
            out.append(metric)
    return out


def _gzip_accepted(accept_encoding: str) -> bool:
    """Whether an ``Accept-Encoding`` header lists gzip (as prometheus-client reads it)."""
    return any(coding.split(";")[0].strip().lower() == "gzip"
               for coding in accept_encoding.split(","))


def _gzip(body: bytes) -> bytes:
    """``body`` in the gzip format (RFC 1952) by zlib itself: the gzip module would import
    more than the daemon needs, and only a scrape that asks for it pays for zlib."""
    import zlib

    packer = zlib.compressobj(6, zlib.DEFLATED, 31)  # wbits 16 + 15: a gzip header and trailer
    return packer.compress(body) + packer.flush()


def _close(server: Server) -> None:
    server.close()
