"""asyncio and hashlib imported without OpenSSL: importing this module first keeps libcrypto
out of the daemon.

OpenSSL (libcrypto with ``_ssl`` or ``_hashlib``) is 3.5 to 4.5 MiB of the daemon's resident
memory, about a tenth of it on a small host (bench/README.md), and the daemon uses none of it:

- asyncio's event loops import ``ssl`` when they can (``base_events``, ``selector_events``,
  ``sslproto``: ``try: import ssl``) for their TLS transports, and run without it where Python
  has none. The daemon speaks no TLS on its loop: D-Bus and varlink are Unix sockets, the
  metrics endpoint is plain HTTP on its own threads, and the connector's gRPC does its TLS, if
  any, in its own C core.
- hashlib takes its hashes from OpenSSL's ``_hashlib`` when it can, else from CPython's own
  modules (``_sha256``, ``_md5``, ...), which give the same digests. The daemon's hashes
  (dbus-fast's cache keys of introspection data, the GPU metadata file's digest) are SHA-256,
  which both have.

So ``ssl`` and ``_hashlib`` are marked unimportable while asyncio and hashlib are imported,
and the marks are removed at once. In this process asyncio's loops have no TLS
(``loop.create_connection(ssl=...)`` raises "stdlib ssl module not available") and hashlib has
no OpenSSL-only functions (``scrypt``); anything imported later that needs
``ssl`` or ``_hashlib`` (a surface's library) still gets the real module. Nothing is done
where any of them is already imported (the tests, an embedding program): they keep what they
have.
"""

from __future__ import annotations

import sys

OPENSSL_MODULES = ("ssl", "_ssl", "_hashlib")
WITHOUT = ("asyncio", "hashlib")  # imported here, with OpenSSL unavailable


def import_without_openssl() -> None:
    """Import asyncio and hashlib with ``ssl`` and ``_hashlib`` unavailable, unless any of
    them is imported already."""
    if any(name in sys.modules for name in (*OPENSSL_MODULES, *WITHOUT)):
        return
    for name in OPENSSL_MODULES:
        sys.modules[name] = None  # type: ignore[assignment]  # ``import`` raises ImportError
    try:
        for name in WITHOUT:  # each reads the marks once, when imported
            __import__(name)
    finally:
        for name in OPENSSL_MODULES:
            del sys.modules[name]


import_without_openssl()
