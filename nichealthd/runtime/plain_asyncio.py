"""asyncio imported without ``ssl``: importing this module first keeps OpenSSL out of the daemon.

asyncio's event loops import ``ssl`` when they can (``base_events``, ``selector_events``,
``sslproto``: ``try: import ssl``) for their TLS transports, and run without it where Python
has none. The daemon speaks no TLS on its loop: D-Bus and varlink are Unix sockets, the
metrics endpoint is plain HTTP on its own threads, and the connector's gRPC does its TLS, if
any, in its own C core. OpenSSL (libcrypto and ``_ssl``) is about 4.4 MiB of the daemon's
resident memory, a tenth of it on a small host (bench/README.md).

So ``ssl`` is marked unimportable while asyncio is imported, and the mark is removed at once:
asyncio's loops have no TLS in this process (``loop.create_connection(ssl=...)`` raises
"stdlib ssl module not available"), and anything imported later that needs ``ssl`` (a
surface's library) still gets the real module. Nothing is done where asyncio or ``ssl`` is
already imported (the tests, an embedding program): they keep what they have.
"""

from __future__ import annotations

import sys


def import_asyncio_without_tls() -> None:
    """Import asyncio (and its loops) with ``ssl`` unavailable, unless either is imported."""
    if "asyncio" in sys.modules or "ssl" in sys.modules:
        return
    sys.modules["ssl"] = None  # type: ignore[assignment]  # ``import ssl`` raises ImportError
    try:
        import asyncio  # noqa: F401 - its submodules read ``ssl`` once, when imported
    finally:
        del sys.modules["ssl"]


import_asyncio_without_tls()
