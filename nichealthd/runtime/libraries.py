"""The surfaces whose Python library a host may lack, imported only when the daemon starts them.

A library missing at run time never stops the daemon (packaging/README.md): RHEL 9 ships no D-Bus
library for Python, and grpcio only in EPEL. Each surface (those below,
and those found by ``surfaces/seam.py``: the connector's, Slurm's) names the top-level modules
it needs; when importing it fails for one of them, the surface is left
out, the daemon says once at error priority what is missing, how to install it and what the
host gets meanwhile, and everything else runs as usual. Any other import error is a bug and
is raised. Nothing is said of a surface the configuration switches off, and nothing of it is
imported: its service would leave itself out (``enabled``), and its library alone is megabytes
of the daemon's memory (dbus_fast 3 MiB with what it imports).
"""

from __future__ import annotations

import importlib
import logging
from typing import Any, Callable, Optional

from ..core.config import Config
from ..surfaces.seam import Surface, surfaces

log = logging.getLogger("nichealthd")

# The surfaces that answer requests rather than consume the journal; those that act on
# committed events (the connector, Slurm, ...) are found by surfaces/seam.py.
DBUS = Surface(
    "the D-Bus API", "nichealthd.surfaces.dbus_api", "DbusService",
    lambda config: config.dbus != "none", libraries=("dbus_fast", "dbus_next"),
    install="python3-dbus-fast or python3-dbus-next (pip: dbus-fast)",
    without="nichealthctl reads the varlink socket instead", order=20)
METRICS = Surface(
    "the Prometheus metrics and /healthz", "nichealthd.surfaces.metrics", "MetricsService",
    lambda config: bool(config.metrics_listen.strip()), order=30)
VARLINK = Surface(
    "the varlink API", "nichealthd.surfaces.varlink", "VarlinkService",
    lambda config: bool(config.varlink_socket), order=40)


def all_surfaces() -> tuple[Surface, ...]:
    """Every surface, the listed and the found, in start order."""
    return tuple(sorted((DBUS, METRICS, VARLINK, *surfaces()), key=lambda s: s.order))


def surface(module: str) -> Surface:
    """The surface whose service (or another module) lives in ``module``'s package."""
    return next(s for s in all_surfaces()
                if s.module.rpartition(".")[0] == module.rpartition(".")[0])


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
    for each in all_surfaces():
        if not (each.always or each.wanted(config)):
            continue
        factory = service_factory(each, config)
        if factory is not None:
            factories.append(factory)
    return factories
