"""A local user holding idle varlink connections (stdlib only: run with the system's python3
as an unprivileged uid, ``python3 holder.py SOCKET N``).

Each of N threads connects and sends nothing, as a patient client does: a connect blocks while
the daemon's listen backlog is full, so whatever descriptor the daemon frees it accepts into.
After a few seconds it prints one JSON line, how many connected and how many the daemon still
holds (no EOF from it), then keeps them all until its stdin closes.
"""

from __future__ import annotations

import json
import os
import socket
import sys
import threading
import time

SETTLE = 5.0  # seconds for the daemon to accept (or refuse) every connection


def main() -> int:
    path, count = sys.argv[1], int(sys.argv[2])
    connected: list[socket.socket] = []
    lock = threading.Lock()

    def connect() -> None:
        sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        try:
            sock.connect(path)
        except OSError:
            sock.close()
            return
        with lock:
            connected.append(sock)

    for _ in range(count):
        threading.Thread(target=connect, daemon=True).start()
    time.sleep(SETTLE)
    held = 0
    with lock:
        for sock in connected:
            try:
                if sock.recv(1, socket.MSG_PEEK | socket.MSG_DONTWAIT):
                    held += 1  # (the daemon never writes first; counted as held anyway)
            except BlockingIOError:
                held += 1  # open, nothing to read: held
            except OSError:
                pass  # reset: refused
        total = len(connected)
    print(json.dumps({"connected": total, "held": held}), flush=True)
    sys.stdin.readline()  # until the test closes our stdin
    os._exit(0)  # threads still blocked in connect() need not finish


if __name__ == "__main__":
    sys.exit(main())
