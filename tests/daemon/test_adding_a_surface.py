"""Adding a surface that acts on committed events is one module (ARCHITECTURE.md, "Adding a
surface").

The package is copied as it is and the example of tests/data/adding_a_surface (a webhook that
POSTs each committed event as JSON) is dropped into the copy's ``surfaces/``: nothing else in
it changes (checked file by file). Its key is then one ``nichealthctl config check`` of the
copy knows (the shipped package refuses it), and the real daemon run from the copy on a
simulated host posts every committed event to a real local HTTP server: a fault and its
recovery arrive, and an event the server refused while the daemon stopped arrives after the
restart. Its status, published through the seam, is in the copy's ``nichealthctl status``
(text and JSON, over varlink: the reply held to the interface file) and ``/metrics``: ok with
nothing pending, then failing with the server's refusal and the refused event pending.
Shipped into a copy of the repository with its documented keys as well, it breaks none of
the tests that hold the docs and the settings to the declarations.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any, Callable, Iterator

import pytest

from ..harness import NotifySocket, ctl_output, run_tests_in_a_copy, wait_until
from ..metrics.conftest import get, parse
from ..netports import free_port
from .conftest import REPO, SimHost, running_daemon
from .test_adding_a_family import differing, insert, interface_check
from .test_service import events, notify  # noqa: F401 (fixture)

EXAMPLE = REPO / "tests/data/adding_a_surface"
ADDED = "surfaces/webhook.py"
ID = "nichealthd.event_id"
# Where its keys are documented: after Slurm's, in the man page's GENERAL KEYS and in the
# shipped config.
MAN_BEFORE = ".TP\n.BR cardVerdictHoldTime "
CONFIG_BEFORE = "# How long a card short of ports"
HELD_TESTS = ("tests/test_manpages.py", "tests/core/test_config_bounds.py",
              "tests/core/test_settings.py", "tests/test_layout.py")


class Receiver:
    """A local HTTP server that takes (or, while ``refusing``, answers 503 to) each POST."""

    def __init__(self) -> None:
        self.posts: list[dict[str, Any]] = []
        self.refusing = False
        self.refused = 0
        receiver = self

        class Handler(BaseHTTPRequestHandler):
            def do_POST(self) -> None:
                body = self.rfile.read(int(self.headers["Content-Length"]))
                if receiver.refusing:
                    receiver.refused += 1
                    self.send_response(503)
                else:
                    receiver.posts.append(json.loads(body))
                    self.send_response(200)
                self.send_header("Content-Length", "0")
                self.end_headers()

            def log_message(self, format: str, *args: Any) -> None:
                return None

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.thread = threading.Thread(target=self.server.serve_forever, daemon=True)
        self.thread.start()

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.server.server_address[1]}/events"

    def ids(self) -> list[str]:
        return [post["event"]["metadata"][ID] for post in self.posts]

    def close(self) -> None:
        self.server.shutdown()
        self.server.server_close()


@pytest.fixture
def receiver() -> Iterator[Receiver]:
    made = Receiver()
    yield made
    made.close()


@pytest.fixture
def extended(tmp_path: Path) -> Iterator[Path]:
    """A copy of the package with the example's one module added; its parent directory."""
    top = tmp_path / "extended"
    shutil.copytree(REPO / "nichealthd", top / "nichealthd",
                    ignore=shutil.ignore_patterns("__pycache__"))
    shutil.copy(EXAMPLE / "webhook.py", top / "nichealthd" / ADDED)
    yield top


def sim(host: SimHost, *args: str) -> None:
    proc = subprocess.run([sys.executable, "-m", "nichealthd.sim", args[0], str(host.root),
                           *args[1:]], cwd=REPO, capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stderr


def config_check(host: SimHost, top: Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "nichealthd.cli.ctl", "config", "check", str(host.config)],
        cwd=top, env=dict(os.environ, PYTHONPATH=str(top)), capture_output=True, text=True,
        timeout=60)


def committed(host: SimHost) -> list[str]:
    return [event["metadata"][ID] for event in events(host)]


def webhook_status(socket: Path, top: Path) -> dict[str, Any]:
    """The webhook's entry in ``nichealthctl --json status`` of ``top``'s package."""
    shown = json.loads(ctl_output(socket, "--json", "status", cwd=top,
                                  env=dict(os.environ, PYTHONPATH=str(top))))
    return next((s for s in shown.get("surfaces", []) if s["name"] == "webhook"), {})


def shows_its_status(socket: Path, metrics: str, top: Path) -> None:
    """Ok and caught up in ``nichealthctl status`` (text), in the varlink reply (checked
    against the interface) and in ``/metrics``."""
    text = ctl_output(socket, "status", cwd=top, env=dict(os.environ, PYTHONPATH=str(top)))
    assert "  webhook    ok; 0 pending; last success " in text, text
    checked = interface_check(top, "--call", str(socket), "GetStatus")
    assert checked.returncode == 0, checked.stderr
    surfaces = json.loads(checked.stdout)["status"]["surfaces"]
    webhook = next(s for s in surfaces if s["name"] == "webhook")
    assert (webhook["state"], webhook["pending"]) == ("ok", 0), webhook
    status, body = get(f"http://{metrics}/metrics")
    assert status == 200
    samples = parse(body)
    assert samples[("nichealthd_surface_state", frozenset(
        {("surface", "webhook"), ("state", "ok")}))] == 1
    assert samples[("nichealthd_surface_pending", frozenset({("surface", "webhook")}))] == 0


def test_a_surface_is_one_new_module(
        extended: Path, sim_host: Callable[..., SimHost], notify: NotifySocket,  # noqa: F811
        receiver: Receiver) -> None:
    assert differing(REPO / "nichealthd", extended / "nichealthd") == [ADDED]
    host = sim_host()
    with host.config.open("a") as config:
        config.write(f'webhookUrl = "{receiver.url}"\n')  # the new surface's setting
    shipped = config_check(host, REPO)  # the package as shipped does not know the key
    assert shipped.returncode != 0 and "webhookUrl" in shipped.stdout + shipped.stderr
    known = config_check(host, extended)
    assert known.returncode == 0, known.stdout + known.stderr
    env = dict(os.environ, NOTIFY_SOCKET=str(notify.path), PYTHONPATH=str(extended))

    def fatal_posted() -> bool:
        return any(post["event"]["isFatal"] and not post["event"]["isHealthy"]
                   for post in receiver.posts)

    socket, metrics = host.root.parent / "varlink.sock", f"127.0.0.1:{free_port()}"
    surfaces = ("--varlink-socket", str(socket), "--metrics-listen", metrics)
    with running_daemon(host.config, env, *surfaces, cwd=extended) as (proc, lines):
        wait_until(lambda: bool(committed(host)) and set(committed(host)) <= set(receiver.ids()),
                   "the first poll's events posted", proc=proc, detail=lines.tail)
        wait_until(lambda: webhook_status(socket, extended).get("pending") == 0,
                   "the webhook's status caught up", proc=proc, detail=lines.tail)
        shows_its_status(socket, metrics, extended)
        sim(host, "uncable", "mlx5_0", "1")
        wait_until(fatal_posted, "the fatal event posted", proc=proc, detail=lines.tail)
        receiver.refusing = True  # the recovery is committed while the server refuses it
        before = len(committed(host))
        sim(host, "recable", "mlx5_0", "1")
        wait_until(lambda: len(committed(host)) > before and receiver.refused > 0,
                   "the recovery committed and refused", proc=proc, detail=lines.tail)
        wait_until(lambda: webhook_status(socket, extended).get("state") == "failing",
                   "the webhook's status failing", proc=proc, detail=lines.tail)
        failing = webhook_status(socket, extended)
        assert "503" in failing["last_error"] and failing["pending"] >= 1, failing
        text = ctl_output(socket, "status", cwd=extended,
                          env=dict(os.environ, PYTHONPATH=str(extended)))
        assert "  webhook    failing; " in text and "503" in text, text
    pending = committed(host)[before:]
    assert not set(pending) & set(receiver.ids())  # refused, so not delivered yet
    receiver.refusing = False
    with running_daemon(host.config, env, cwd=extended) as (proc, lines):
        wait_until(lambda: set(pending) <= set(receiver.ids()),
                   "the refused recovery posted after the restart", proc=proc,
                   detail=lines.tail)
    ids = receiver.ids()
    assert set(committed(host)) <= set(ids)  # every committed event arrived at least once
    recovery = next(post["event"] for post in receiver.posts if post["event"]["metadata"][ID]
                    == pending[0])
    assert recovery["isHealthy"], recovery
    seqs = [post["seq"] for post in receiver.posts]
    assert seqs == sorted(seqs)  # in commit order


def ship(top: Path) -> None:
    """The example as a shipped surface: its module, its keys in nichealthd.toml(5) and in
    the shipped config."""
    shutil.copy(EXAMPLE / "webhook.py", top / "nichealthd" / ADDED)
    insert(top / "man/nichealthd.toml.5", MAN_BEFORE,
           (EXAMPLE / "nichealthd.toml.5.entry").read_text())
    insert(top / "etc/nichealthd/config.toml", CONFIG_BEFORE,
           (EXAMPLE / "config.toml.entry").read_text())


def test_the_example_shipped_breaks_no_test(tmp_path: Path) -> None:
    """Shipped as ARCHITECTURE.md says (its module, its documented keys), the surface keeps
    the tests that hold the man page, the shipped config, the bounds and the layers passing,
    and they see its keys."""
    run = run_tests_in_a_copy(tmp_path / "repo", ship, HELD_TESTS)
    assert run.returncode == 0, run.stdout[-4000:] + run.stderr[-2000:]
    for shown in ("test_each_key_carries_its_man_page_line[webhookUrl] PASSED",
                  "test_bounds_are_documented[webhookTimeout] PASSED",
                  "test_each_layer_imports_only_downwards[surfaces/webhook.py] PASSED"):
        assert shown in run.stdout  # the copy's tests saw the surface
