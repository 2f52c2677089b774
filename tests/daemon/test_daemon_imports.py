"""What the daemon's process imports with every surface on (runtime/plain_asyncio.py,
surfaces/metrics_text.py): no OpenSSL for asyncio, no client library and no HTTP stack for the
metrics endpoint; a library imported later still gets ``ssl``. Each asked in a fresh
interpreter, as the daemon starts."""

from __future__ import annotations

import json
import subprocess
import sys

from .conftest import REPO

# Megabytes of resident memory the daemon has no use for (bench/README.md).
UNWANTED = ("ssl", "_ssl", "prometheus_client", "http.server", "wsgiref", "email",
            "urllib.request", "gzip", "tempfile")
PROBE = """
import json, sys
FIRST = sys.argv[1]
if FIRST:
    __import__(FIRST)
import nichealthd.runtime.daemon
from nichealthd.runtime.libraries import service_factories
from nichealthd.sources.config_file import load_config
config = load_config(None, {"dbus": "system", "metricsListen": "127.0.0.1:2112",
                            "varlinkSocket": "/run/nichealthd/io.nichealthd.Monitor"})
services = [f.__name__ for f in service_factories(config)]
loaded = [m for m in json.loads(sys.argv[2]) if m in sys.modules]
import asyncio.base_events, asyncio.selector_events, asyncio.sslproto
loops = [m.ssl is not None for m in (asyncio.base_events, asyncio.selector_events,
                                     asyncio.sslproto)]
import ssl
print(json.dumps({"services": services, "loaded": loaded, "loops_tls": loops,
                  "ssl_later": ssl.__name__ == "ssl" and hasattr(ssl, "SSLContext")}))
"""


def probe(first: str = "") -> dict[str, object]:
    done = subprocess.run([sys.executable, "-c", PROBE, first, json.dumps(UNWANTED)],
                          cwd=REPO, capture_output=True, text=True, timeout=120, check=True)
    return json.loads(done.stdout)  # type: ignore[no-any-return]


def test_the_daemon_with_every_surface_imports_no_tls_and_no_http_library() -> None:
    got = probe()
    assert {"DbusService", "MetricsService", "VarlinkService"} <= set(got["services"])  # type: ignore[arg-type]
    assert got["loaded"] == []
    assert got["loops_tls"] == [False, False, False]
    assert got["ssl_later"] is True  # a library imported later still has ssl


def test_where_ssl_is_already_imported_asyncio_keeps_it() -> None:
    got = probe("ssl")
    assert got["loops_tls"] == [True, True, True]
