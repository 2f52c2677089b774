"""No mix of clients keeps ``/healthz`` from a newcomer (surfaces/metrics_http.py): clients
that trickle a header every 2 s (each used to reset a 10 s timeout and hold a slot for
good: 64 of them shut every probe out), idle ones and garbage ones, all from the prober's
own address (loopback; the hardest case, since no per-address limit can tell them apart),
and clients from another address that cannot take the slots of the first."""

from __future__ import annotations

import socket
import threading
import time
import urllib.error
import urllib.request
from pathlib import Path
from typing import Any, Callable, Optional

import pytest

from nichealthd.surfaces import metrics_http
from nichealthd.surfaces.metrics_http import make_http_server

from ..harness import DEADLINE, wait_until
from .conftest import RunningDaemon
from .test_http_clients import _closed_by_peer

Start = Callable[[Path], RunningDaemon]
TRICKLERS = 80
ATTACK_SECONDS = 30.0
HEADER_EVERY = 2.0  # seconds between two headers of a trickling client
PROBE_TIMEOUT = 10.0  # a Prometheus scrape_timeout of 10 s


class Attack:
    """``count`` clients on threads, each reconnecting whenever the server closes it:
    ``trickle`` sends a request line and then a header every HEADER_EVERY seconds, ``idle``
    sends nothing, ``garbage`` sends a line that is no HTTP."""

    def __init__(self, port: int, count: int, kind: str, source: str = "127.0.0.1") -> None:
        self.port, self.kind, self.source = port, kind, source
        self.stop = threading.Event()
        self.connections = 0
        self.threads = [threading.Thread(target=self._client, daemon=True)
                        for _ in range(count)]
        for thread in self.threads:
            thread.start()

    def _client(self) -> None:
        while not self.stop.is_set():
            try:
                with socket.create_connection(("127.0.0.1", self.port), timeout=1.0,
                                              source_address=(self.source, 0)) as sock:
                    self.connections += 1
                    self._talk(sock)
            except OSError:
                pass
            self.stop.wait(0.05)  # reconnect at once, as an attacker would

    def _talk(self, sock: socket.socket) -> None:
        if self.kind == "garbage":
            sock.sendall(b"\x16\x03\x01 not http at all\r\n\r\n")
        elif self.kind == "trickle":
            sock.sendall(b"GET /metrics HTTP/1.1\r\n")
        header = 0
        while not self.stop.wait(HEADER_EVERY if self.kind == "trickle" else 0.5):
            try:
                if self.kind == "trickle":
                    sock.sendall(b"X-Slow-%d: x\r\n" % header)
                    header += 1
                sock.settimeout(0.0)
                if sock.recv(4096) == b"":
                    return  # closed by the server
            except BlockingIOError:
                continue
            except OSError:
                return

    def end(self) -> None:
        self.stop.set()
        for thread in self.threads:
            thread.join(DEADLINE)


def ok(environ: dict[str, Any], start: Callable[..., Any]) -> list[bytes]:
    start("200 OK", [("Content-Length", "2")])
    return [b"ok"]


def probe(url: str) -> tuple[Optional[int], float, str]:
    """(status or None, seconds, error) of one GET."""
    began = time.monotonic()
    try:
        with urllib.request.urlopen(url, timeout=PROBE_TIMEOUT) as response:
            return response.status, time.monotonic() - began, ""
    except urllib.error.HTTPError as exc:
        return exc.code, time.monotonic() - began, ""
    except OSError as exc:
        return None, time.monotonic() - began, str(exc)


@pytest.mark.slow
def test_80_trickling_clients_for_30_s_leave_every_healthz_probe_answered(
        sim: Callable[..., Path], daemon: Start) -> None:
    running = daemon(sim("synthetic", devices=2))
    attacks = [Attack(running.port, TRICKLERS, "trickle"),
               Attack(running.port, 8, "idle"), Attack(running.port, 8, "garbage")]
    results: list[tuple[Optional[int], float, str]] = []
    try:
        wait_until(lambda: attacks[0].connections >= metrics_http.MAX_CLIENTS,
                   "the slots taken by trickling clients")
        end = time.monotonic() + ATTACK_SECONDS
        while time.monotonic() < end:
            results.append(probe(running.base + "/healthz"))
    finally:
        for attack in attacks:
            attack.end()
    slowest = max(seconds for _, seconds, _ in results)
    print(f"{len(results)} /healthz probes in {ATTACK_SECONDS:g} s beside {TRICKLERS} "
          f"trickling, 8 idle and 8 garbage clients ({attacks[0].connections} trickling "
          f"connections made): slowest answer {slowest:.2f} s")
    failed = [r for r in results if r[0] != 200]
    assert len(results) >= 10 and not failed, failed[:5]
    assert running.proc.poll() is None
    assert "Traceback" not in (running.root / "daemon.log").read_text()


def test_one_address_cannot_hold_every_slot_against_another(monkeypatch: Any) -> None:
    """At the cap, the connection closed for a newcomer is one of the address holding the
    most, even when another address's waiting connection is older."""
    monkeypatch.setattr(metrics_http, "REQUEST_DEADLINE", 600.0)  # eviction alone here
    server = make_http_server("127.0.0.1:0", ok)
    server.max_clients = 4
    thread = threading.Thread(target=server.serve_until_closed, daemon=True)
    thread.start()
    port = int(server.server_address[1])
    opened: list[socket.socket] = []

    def connect(source: str) -> socket.socket:
        sock = socket.create_connection(("127.0.0.1", port), timeout=DEADLINE,
                                        source_address=(source, 0))
        opened.append(sock)
        return sock

    try:
        other = connect("127.0.0.1")
        wait_until(lambda: server.clients == 1, "the first connection held")
        greedy = [connect("127.0.0.2") for _ in range(3)]
        wait_until(lambda: server.clients == 4, "the cap reached")
        newcomer = connect("127.0.0.3")
        wait_until(lambda: _closed_by_peer(greedy[0]), "the greedy address's oldest closed")
        assert not _closed_by_peer(other)
        assert not any(_closed_by_peer(s) for s in greedy[1:])
        newcomer.sendall(b"GET / HTTP/1.0\r\n\r\n")
        assert newcomer.makefile("rb").readline().startswith(b"HTTP/1.0 200")
    finally:
        for sock in opened:
            sock.close()
        server.close()
        thread.join(DEADLINE)


def test_a_request_must_be_whole_within_the_deadline(monkeypatch: Any) -> None:
    """A header every 0.1 s used to reset the timeout for ever; now the connection is closed
    once REQUEST_DEADLINE has passed since its accept, however busy the client is."""
    monkeypatch.setattr(metrics_http, "REQUEST_DEADLINE", 1.0)
    server = make_http_server("127.0.0.1:0", ok)
    thread = threading.Thread(target=server.serve_until_closed, daemon=True)
    thread.start()
    trickling_for = 30.0
    try:
        port = int(server.server_address[1])
        with socket.create_connection(("127.0.0.1", port), timeout=DEADLINE) as sock:
            began = time.monotonic()
            sock.sendall(b"GET / HTTP/1.1\r\n")
            closed_after: Optional[float] = None
            header = 0
            while closed_after is None and time.monotonic() - began < trickling_for:
                try:
                    sock.sendall(b"X-%d: x\r\n" % header)
                    header += 1
                    sock.settimeout(0.1)  # the trickle's pace: one header per 0.1 s
                    if sock.recv(4096) == b"":
                        closed_after = time.monotonic() - began
                except socket.timeout:
                    continue
                except OSError:
                    closed_after = time.monotonic() - began
        assert closed_after is not None, f"still open after {trickling_for:g} s of headers"
        assert closed_after >= 1.0
        print(f"closed {closed_after:.2f} s after its accept, after {header} headers")
        wait_until(lambda: server.clients == 0, "the connection released")
    finally:
        server.close()
        thread.join(DEADLINE)
