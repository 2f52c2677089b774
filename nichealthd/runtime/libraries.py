"""The surfaces whose Python library a host may lack, imported only when the daemon starts them.

A library missing at run time never stops the daemon (packaging/README.md): RHEL 9 ships no D-Bus
library for Python, and grpcio and prometheus-client only in EPEL. Each surface below names
the top-level modules it needs; when importing it fails for one of them, the surface is left
out, the daemon says once at error priority what is missing, how to install it and what the
host gets meanwhile, and everything else runs as usual. Any other import error is a bug and
is raised. Nothing is said of a surface the configuration switches off, and nothing of it is
imported: its service would leave itself out (``enabled``), and its library alone is megabytes
of the daemon's memory (dbus_fast 3 MiB, prometheus_client 3 MiB with what it imports).
"""

from __future__ import annotations

import importlib
import logging
from dataclasses import dataclass
from typing import Any, Callable, Optional

from ..core.config import Config

log = logging.getLogger("nichealthd")


@dataclass(frozen=True)
class Surface:
    """One optional surface: where its service class lives and what it needs."""

    what: str  # for the log line: "the D-Bus API"
    module: str
    factory: str  # the service class in ``module``
    libraries: tuple[str, ...]  # module names whose absence leaves it out
    install: str  # what to install (distribution packages, then pip)
    without: str  # what the host gets meanwhile
    wanted: Callable[[Config], bool]  # whether the configuration asks for it
    fallback: Optional[str] = None  # "module:Class" to run instead, without the library
    always: bool = False  # made even when switched off (a reload may switch it on)


CONNECTOR = Surface(
    "forwarding to the platform connector", "nichealthd.surfaces.connector.service",
    "ConnectorService", ("grpc", "google.protobuf"),
    "python3-grpcio and python3-protobuf (pip: grpcio protobuf)",
    "events are kept in the outbox (bounded by outboxMaxEvents/outboxMaxBytes) and sent "
    "after a restart with the library installed",
    lambda config: bool(config.platform_connector_socket),
    fallback="nichealthd.surfaces.connector.held:HeldOutbox")
DBUS = Surface(
    "the D-Bus API", "nichealthd.surfaces.dbus_api", "DbusService", ("dbus_fast", "dbus_next"),
    "python3-dbus-fast or python3-dbus-next (pip: dbus-fast)",
    "nichealthctl reads the varlink socket instead",
    lambda config: config.dbus != "none")
METRICS = Surface(
    "the Prometheus metrics and /healthz", "nichealthd.surfaces.metrics", "MetricsService",
    ("prometheus_client",), "python3-prometheus-client (pip: prometheus-client)",
    "no /metrics or /healthz endpoint: use nichealthctl check",
    lambda config: bool(config.metrics_listen.strip()))
VARLINK = Surface(
    "the varlink API", "nichealthd.surfaces.varlink", "VarlinkService", (), "", "",
    lambda config: bool(config.varlink_socket))
# Always made, so that a reload can switch slurmDrain on; it idles while that is off.
SLURM = Surface(
    "draining in Slurm", "nichealthd.surfaces.slurm.service", "SlurmService", (), "", "",
    lambda config: config.slurm_drain, always=True)
SURFACES = (CONNECTOR, DBUS, METRICS, VARLINK, SLURM)


def missing_library(exc: ImportError, libraries: tuple[str, ...]) -> Optional[str]:
    """The library of ``libraries`` whose absence ``exc`` reports (its module or a package
    above it), or None for any other import error."""
    name = exc.name or ""
    for library in libraries:
        if name == library or name.startswith(library + ".") or library.startswith(name + "."):
            return library
    return None


def load(surface: Surface, config: Config, module: str = "", attribute: str = ""
         ) -> Optional[Any]:
    """``attribute`` of ``module`` (default: the surface's service class), or None when one
    of the surface's libraries is missing — said once at error priority when the
    configuration wants the surface. Any other import error is raised."""
    try:
        imported = importlib.import_module(module or surface.module)
    except ImportError as exc:
        library = missing_library(exc, surface.libraries)
        if library is None:
            raise
        if surface.wanted(config):
            log.error("%s is off: the Python module %s is not installed (%s); install %s. "
                      "Meanwhile %s; everything else runs.", surface.what, library, exc,
                      surface.install, surface.without)
        return None
    return getattr(imported, attribute or surface.factory)


def service_factory(surface: Surface, config: Config) -> Optional[Callable[..., Any]]:
    """The service class of ``surface``; without its library its fallback where it has one
    and the configuration wants it, else None."""
    factory = load(surface, config)
    if factory is not None or surface.fallback is None or not surface.wanted(config):
        return factory  # type: ignore[no-any-return]
    module, _, name = surface.fallback.partition(":")
    return getattr(importlib.import_module(module), name)  # type: ignore[no-any-return]


def service_factories(config: Config) -> list[Callable[..., Any]]:
    """The service classes to run under ``config``, in start order: none of a surface the
    configuration switches off (a reload cannot start one: it takes a restart), so its
    module and library are never imported."""
    factories = []
    for surface in SURFACES:
        if not (surface.always or surface.wanted(config)):
            continue
        factory = service_factory(surface, config)
        if factory is not None:
            factories.append(factory)
    return factories
