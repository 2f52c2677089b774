"""What the daemon's process imports with every surface on (runtime/without_openssl.py,
surfaces/metrics_text.py): no OpenSSL for asyncio or hashlib, no client library and no HTTP
stack for the metrics endpoint; a library imported later still gets ``ssl`` and ``_hashlib``.
Each asked in a fresh interpreter, as the daemon starts."""

from __future__ import annotations

import json
import subprocess
import sys
from typing import Any

from .conftest import REPO

# Megabytes of resident memory the daemon has no use for (bench/README.md).
UNWANTED = ("ssl", "_ssl", "_hashlib", "prometheus_client", "http.server", "wsgiref", "email",
            "urllib.request", "gzip", "tempfile", "shutil", "zlib", "bz2", "lzma")
# What the D-Bus library imports itself, whatever the daemon does: an older dbus-fast (2.x, as
# RHEL 9 gets it) imports zlib in its message module.
LIBRARY_PROBE = """
import json, sys
import nichealthd.runtime.without_openssl
import dbus_fast, dbus_fast.aio
print(json.dumps([m for m in json.loads(sys.argv[1]) if m in sys.modules]))
"""
OPENSSL_AND_HTTP = {"ssl", "_ssl", "_hashlib", "prometheus_client", "http.server", "wsgiref",
                    "email", "urllib.request"}
PROBE = """
import json, sys
FIRST, OWN = sys.argv[1], sys.argv[3]
if FIRST:
    __import__(FIRST)
if OWN:  # a Python built with none of its own hashes but blake2, as RHEL's
    sys.modules.update(dict.fromkeys(("_sha1", "_sha2", "_sha256"), None))
import nichealthd.runtime.daemon
nichealthd.runtime.daemon.build_parser().parse_args([])
from nichealthd.runtime.libraries import service_factories
from nichealthd.sources.config_file import load_config
config = load_config(None, {"dbus": "system", "metricsListen": "127.0.0.1:2112",
                            "varlinkSocket": "/run/nichealthd/io.nichealthd.Monitor"})
services = [f.__name__ for f in service_factories(config)]
loaded = [m for m in json.loads(sys.argv[2]) if m in sys.modules]
import asyncio.base_events, asyncio.selector_events, asyncio.sslproto
loops = [m.ssl is not None for m in (asyncio.base_events, asyncio.selector_events,
                                     asyncio.sslproto)]
import hashlib
digest = hashlib.sha256(b"nichealthd").hexdigest()
import hmac, ssl
print(json.dumps({"services": services, "loaded": loaded, "loops_tls": loops, "digest": digest,
                  "openssl_hashes": hashlib.sha256.__name__.startswith("openssl_"),
                  "later": [hasattr(ssl, "SSLContext"), "_hashlib" in sys.modules]}))
"""


def probe(first: str = "", own_hashes: bool = True) -> dict[str, Any]:
    done = subprocess.run([sys.executable, "-c", PROBE, first, json.dumps(UNWANTED),
                           "" if own_hashes else "none"],
                          cwd=REPO, capture_output=True, text=True, timeout=120, check=True)
    return json.loads(done.stdout)  # type: ignore[no-any-return]


def test_the_daemon_with_every_surface_imports_no_tls_and_no_http_library() -> None:
    got = probe()
    assert {"DbusService", "MetricsService", "VarlinkService"} <= set(got["services"])
    theirs = json.loads(subprocess.run(
        [sys.executable, "-c", LIBRARY_PROBE, json.dumps(UNWANTED)], cwd=REPO,
        capture_output=True, text=True, timeout=120, check=True).stdout)
    assert set(got["loaded"]) <= set(theirs) and not OPENSSL_AND_HTTP & set(theirs), theirs
    assert got["loops_tls"] == [False, False, False]
    assert not got["openssl_hashes"]  # CPython's own hashes: the same digests
    # SHA-256 of b"nichealthd" as OpenSSL computes it:
    assert got["digest"] == "40f4eb6d8d9b8797aaf8abec275f908bac2a2eda3a5a5feda772587add1e1e1b"
    assert got["later"] == [True, True]  # a library imported later still has both


def test_where_ssl_is_already_imported_asyncio_keeps_it() -> None:
    got = probe("ssl")
    assert got["loops_tls"] == [True, True, True]
    assert got["openssl_hashes"]


def test_where_python_has_only_openssls_hashes_hashlib_keeps_them() -> None:
    """RHEL's Python has no SHA-256 of its own: hashlib keeps OpenSSL's, asyncio still
    has no TLS."""
    got = probe(own_hashes=False)
    assert got["openssl_hashes"]
    assert got["digest"] == "40f4eb6d8d9b8797aaf8abec275f908bac2a2eda3a5a5feda772587add1e1e1b"
    assert got["loops_tls"] == [False, False, False]
    assert "ssl" not in got["loaded"] and "_hashlib" in got["loaded"]
