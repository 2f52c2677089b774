"""The metrics endpoint's own HTTP/1.0 handling (surfaces/metrics_http.py, metrics.py): what a
scraper, a browser or a broken client gets, over a real socket."""

from __future__ import annotations

import gzip
import socket
import threading
from collections.abc import Iterator

import pytest

from nichealthd.surfaces.metrics import MetricsService
from nichealthd.surfaces.metrics_text import CONTENT_TYPE

from ..harness import DEADLINE
from .test_healthz import Loop


@pytest.fixture
def port() -> Iterator[int]:
    service = MetricsService(Loop("127.0.0.1:2112").context())
    service._serve("127.0.0.1:0")
    server = service._server
    assert server is not None
    try:
        yield int(server.server_address[1])
    finally:
        server.close()


def ask(port: int, request: bytes) -> tuple[str, dict[str, str], bytes]:
    """(status line, headers, body) of one request sent as given."""
    with socket.create_connection(("127.0.0.1", port), timeout=DEADLINE) as sock:
        sock.sendall(request)
        answer = sock.makefile("rb").read()
    head, _, body = answer.partition(b"\r\n\r\n")
    status, *lines = head.decode("latin-1").split("\r\n")
    headers = {k.lower(): v.strip() for k, _, v in (line.partition(":") for line in lines)}
    return status, headers, body


def test_a_scrape_is_the_text_format_gzipped_when_asked(port: int) -> None:
    status, headers, plain = ask(port, b"GET /metrics HTTP/1.1\r\nHost: x\r\n\r\n")
    assert status == "HTTP/1.0 200 OK"
    assert headers["content-type"] == CONTENT_TYPE
    assert int(headers["content-length"]) == len(plain)
    assert b"\n# TYPE nichealthd_polls_total counter\nnichealthd_polls_total 0.0\n" in plain
    assert b"\nprocess_open_fds " in plain
    status, headers, packed = ask(port, b"GET /metrics HTTP/1.1\r\n"
                                        b"Accept-Encoding: deflate, gzip;q=1.0\r\n\r\n")
    assert headers["content-encoding"] == "gzip"
    assert gzip.decompress(packed).split(b"\nprocess_")[0] == plain.split(b"\nprocess_")[0]


def test_methods_as_prometheus_client_answered_them(port: int) -> None:
    status, headers, body = ask(port, b"OPTIONS /metrics HTTP/1.0\r\n\r\n")
    assert (status, headers["allow"], body) == ("HTTP/1.0 200 OK", "OPTIONS,GET", b"")
    status, headers, body = ask(port, b"POST /metrics HTTP/1.0\r\n\r\n")
    assert status == "HTTP/1.0 405 Method Not Allowed" and headers["allow"] == "OPTIONS,GET"
    status, headers, body = ask(port, b"HEAD /healthz HTTP/1.0\r\n\r\n")
    assert status == "HTTP/1.0 503 Service Unavailable" and body == b""
    assert int(headers["content-length"]) > 0  # the GET's length, no body
    assert ask(port, b"GET /metrics?name[]=x HTTP/1.0\r\n\r\n")[0] == "HTTP/1.0 200 OK"
    assert ask(port, b"GET /nothing HTTP/1.0\r\n\r\n")[0] == "HTTP/1.0 404 Not Found"


@pytest.mark.parametrize(("request_", "status"), [
    (b"GET /metrics\r\n\r\n", "400 Bad Request"),  # HTTP/0.9
    (b"hello\r\n\r\n", "400 Bad Request"),
    (b"GET /metrics HTTP/1.0\r\nno colon here\r\n\r\n", "400 Bad Request"),
    (b"GET /" + b"m" * 70000 + b" HTTP/1.0\r\n\r\n", "414 URI Too Long"),
    (b"GET / HTTP/1.0\r\n" + b"X-A: b\r\n" * 101 + b"\r\n", "431 Request Header Fields Too Large"),
])
def test_what_is_not_http_gets_a_clear_answer(port: int, request_: bytes, status: str) -> None:
    assert ask(port, request_)[0] == f"HTTP/1.0 {status}"


def test_a_client_that_closes_at_once_costs_nothing(port: int) -> None:
    for _ in range(5):
        socket.create_connection(("127.0.0.1", port), timeout=DEADLINE).close()
    assert ask(port, b"GET / HTTP/1.0\r\n\r\n")[0] == "HTTP/1.0 200 OK"
    assert threading.active_count() < 20
