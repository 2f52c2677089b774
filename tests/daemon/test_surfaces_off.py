"""A surface the configuration switches off costs the daemon nothing (runtime/libraries.py):
neither its module nor its library is imported by the daemon's modules or by making its
services, each asked in a fresh interpreter."""

from __future__ import annotations

import json
import subprocess
import sys

from .conftest import REPO

# What each surface's module brings, beyond the daemon itself.
SURFACE_MODULES = ("nichealthd.surfaces.dbus_api", "dbus_fast", "nichealthd.surfaces.metrics",
                   "nichealthd.surfaces.varlink", "nichealthd.surfaces.connector.service")
PROBE = """
import json, sys
import nichealthd.runtime.daemon
from nichealthd.runtime.libraries import service_factories
from nichealthd.sources.config_file import load_config
config = load_config(None, json.loads(sys.argv[1]))
names = [f.__name__ for f in service_factories(config)]
print(json.dumps({"services": names, "modules": [m for m in json.loads(sys.argv[2])
                                                  if m in sys.modules]}))
"""


def imported(overrides: dict[str, str]) -> dict[str, list[str]]:
    """The service classes made under ``overrides`` and which of SURFACE_MODULES that
    imported, in a fresh interpreter."""
    done = subprocess.run([sys.executable, "-c", PROBE, json.dumps(overrides),
                           json.dumps(SURFACE_MODULES)],
                          cwd=REPO, capture_output=True, text=True, timeout=120, check=True)
    return json.loads(done.stdout)  # type: ignore[no-any-return]


def test_surfaces_switched_off_import_nothing_of_theirs() -> None:
    got = imported({"dbus": "none", "metricsListen": "", "varlinkSocket": "",
                    "platformConnectorSocket": ""})
    assert got == {"services": ["SlurmService"], "modules": []}


def test_surfaces_switched_on_are_made_in_start_order() -> None:
    got = imported({"dbus": "system", "metricsListen": "127.0.0.1:2112",
                    "varlinkSocket": "/run/nichealthd/io.nichealthd.Monitor",
                    "platformConnectorSocket": "unix:///run/nvsentinel/absent.sock"})
    assert got["services"] == ["ConnectorService", "DbusService", "MetricsService",
                               "VarlinkService", "SlurmService"]
    assert got["modules"] == list(SURFACE_MODULES)
