"""A TCP port on the loopback that nothing listens on now, for a server a test starts."""

from __future__ import annotations

import socket


def free_port() -> int:
    """A port the kernel just gave and took back (another process may take it first: a
    test retries or fails clearly, it never assumes)."""
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])
