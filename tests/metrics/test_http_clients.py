"""Misbehaving HTTP clients: idle sockets, backlog, one rate-limited log line.

400 connections that send nothing used to make the stdlib server print a 15-line traceback
each when it dropped them after 10 s; the listen backlog was socketserver's 5.
"""

from __future__ import annotations

import logging
import shutil
import socket
import subprocess
import threading
from pathlib import Path
from typing import Any, Callable

import pytest

from nichealthd.surfaces import metrics_http
from nichealthd.surfaces.metrics_http import ClientErrors, make_http_server

from ..harness import DEADLINE, wait_until
from .conftest import RunningDaemon, get

Start = Callable[[Path], RunningDaemon]
IDLE = 400


def _connect_idle(port: int, count: int) -> list[socket.socket]:
    opened = []
    try:
        for _ in range(count):
            opened.append(socket.create_connection(("127.0.0.1", port), timeout=5))
    except BaseException:
        for sock in opened:
            sock.close()
        raise
    return opened


def _closed_by_peer(sock: socket.socket) -> bool:
    sock.settimeout(0.0)
    try:
        return sock.recv(1) == b""
    except BlockingIOError:
        return False
    except OSError:
        return True


@pytest.mark.slow
def test_idle_connections_are_dropped_without_tracebacks(sim: Callable[..., Path],
                                                         daemon: Start) -> None:
    running = daemon(sim("synthetic", devices=2))
    idle = _connect_idle(running.port, IDLE)
    try:
        # While they wait, scrapes and health checks are answered: a newcomer waits in the
        # listen backlog until a waiting connection has waited EVICT_AFTER and is closed
        # for it (surfaces/metrics_http.py).
        wait_until(lambda: "nichealthd_polls_total" in running.text(),
                   "a scrape answered while idle connections wait", DEADLINE)
        assert get(running.base + "/healthz")[0] == 200
        wait_until(lambda: all(_closed_by_peer(s) for s in idle),
                   "idle connections closed by the server",
                   metrics_http.REQUEST_DEADLINE + DEADLINE)
    finally:
        for sock in idle:
            sock.close()
    assert "nichealthd_polls_total" in running.text()
    log = (running.root / "daemon.log").read_text()
    assert "Traceback" not in log, log[-3000:]
    lines = [line for line in log.splitlines() if "metrics HTTP client" in line]
    assert 1 <= len(lines) <= 2, lines  # the first error; any more within a minute are counted
    assert "sent no whole request within 5 s" in lines[0]
    assert running.proc.poll() is None


@pytest.mark.skipif(shutil.which("ss") is None, reason="ss (iproute2) is not installed")
def test_listen_backlog_is_normal() -> None:
    server = make_http_server("127.0.0.1:0", lambda environ, start: [b""])
    try:
        port = server.server_address[1]
        out = subprocess.run(["ss", "-ltnH", f"sport = :{port}"], capture_output=True,
                             text=True, timeout=10).stdout.split()
        # For a listening socket ss prints the backlog as Send-Q (state, Recv-Q, Send-Q, …).
        assert int(out[2]) >= 128, out
    finally:
        server.server_close()
        server._wake_read.close()
        server._wake_write.close()


def test_client_errors_are_one_line_per_minute(caplog: pytest.LogCaptureFixture) -> None:
    now = [100.0]
    errors = ClientErrors(clock=lambda: now[0])
    with caplog.at_level(logging.WARNING, logger="nichealthd.surfaces.metrics"):
        for _ in range(351):
            errors.report("127.0.0.1", TimeoutError("timed out"))
        now[0] += metrics_http.CLIENT_ERROR_LOG_SECONDS + 1
        errors.report("127.0.0.1", ConnectionResetError(104, "Connection reset by peer"))
    lines = [r.getMessage() for r in caplog.records]
    assert len(lines) == 2, lines
    assert "127.0.0.1 timed out; connection closed" in lines[0]
    assert "ConnectionResetError" in lines[1] and "351 client errors" in lines[1]
    assert errors.total == 352


def test_connections_are_capped_an_idle_one_gives_way_a_busy_one_does_not(
        monkeypatch: pytest.MonkeyPatch) -> None:
    """The open-file plan counts MAX_CLIENTS connections: at the cap, the oldest connection
    still waiting for its request is closed for a newcomer (an idle flood cannot keep a
    scraper out); with every connection busy, a newcomer waits in the listen backlog and is
    answered once one ends."""
    monkeypatch.setattr(metrics_http, "REQUEST_DEADLINE", 600.0)  # eviction alone here
    gate = threading.Event()

    def app(environ: dict[str, Any], start: Callable[..., Any]) -> list[bytes]:
        if environ.get("PATH_INFO") == "/slow":
            gate.wait(DEADLINE)
        start("200 OK", [("Content-Length", "2")])
        return [b"ok"]

    server = make_http_server("127.0.0.1:0", app)
    server.max_clients = 3
    thread = threading.Thread(target=server.serve_until_closed, daemon=True)
    thread.start()
    port = int(server.server_address[1])
    base = f"http://127.0.0.1:{port}"
    idle: list[socket.socket] = []
    busy: list[threading.Thread] = []
    try:
        idle = _connect_idle(port, 3)
        wait_until(lambda: server.clients == 3, "three connections held")
        assert get(base + "/", timeout=DEADLINE)[0] == 200  # the oldest idle one made room
        wait_until(lambda: _closed_by_peer(idle[0]), "the oldest idle connection closed")
        assert not any(_closed_by_peer(s) for s in idle[1:])
        for sock in idle:
            sock.close()
        wait_until(lambda: server.clients == 0, "the idle connections gone")
        busy = [threading.Thread(target=get, args=(base + "/slow",),
                                 kwargs={"timeout": DEADLINE}) for _ in range(3)]
        for worker in busy:
            worker.start()
        wait_until(lambda: server.clients == 3 and not server.waiting, "three busy clients")
        with socket.create_connection(("127.0.0.1", port), timeout=DEADLINE) as extra:
            extra.sendall(b"GET / HTTP/1.0\r\n\r\n")
            assert server.clients == 3  # not let in while every connection is busy
            gate.set()
            assert extra.makefile("rb").readline().startswith(b"HTTP/1.0 200")
    finally:
        gate.set()
        for worker in busy:
            worker.join(DEADLINE)
        for sock in idle:
            sock.close()
        server.close()
        thread.join(DEADLINE)
