"""Polls that change nothing stay in the poll thread (runtime/service.py, ``_quiet_repeat``).

A real daemon, in-process, on a simulated DGX H100 polled every 100 ms with every surface a
standalone host runs (metrics, varlink, the event log), plus one recording service. On a
steady host the loop is told of no poll, yet the picture, the poll clocks and metrics move
with every one; a port going down reaches every service at the very poll that found it."""

from __future__ import annotations

import asyncio
import time
import urllib.request
from pathlib import Path
from typing import Any, Callable

import pytest

from nichealthd.runtime import daemon as daemon_cli
from nichealthd.runtime.service import Daemon
from nichealthd.sim import mutate
from nichealthd.surfaces.context import PollOutcome

from ..harness import DEADLINE
from ..netports import free_port
from .conftest import SimHost


class Recorder:
    """A service that records what it is told, idle unless told otherwise."""

    name = "recorder"

    def __init__(self) -> None:
        self.loud: list[PollOutcome] = []
        self.quiet: list[PollOutcome] = []
        self.busy = False

    async def start(self) -> None: ...

    def on_poll(self, outcome: PollOutcome) -> None:
        self.loud.append(outcome)

    def on_quiet_poll(self, outcome: PollOutcome) -> None:
        self.quiet.append(outcome)

    def idle(self) -> bool:
        return not self.busy

    def on_reload(self, config: Any) -> None: ...

    async def stop(self) -> None: ...


def scrape(port: int) -> str:
    with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=10) as answer:
        return str(answer.read().decode())


def metric(text: str, name: str) -> float:
    return float(next(line.split()[1] for line in text.splitlines()
                      if line.startswith(name + " ")))


def run_daemon(host: SimHost, tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
               scenario: Callable[[Daemon, Recorder], Any], port: int = 0) -> None:
    monkeypatch.delenv("NOTIFY_SOCKET", raising=False)
    args = daemon_cli.build_parser().parse_args(
        ["--config", str(host.config), "--polling-interval", "100ms",
         "--metrics-listen", f"127.0.0.1:{port or free_port()}",
         "--varlink-socket", str(tmp_path / "v.sock"),
         "--event-log", str(tmp_path / "events.jsonl"), "--dbus", "none"])
    recorder = Recorder()
    make = Daemon._make_services
    monkeypatch.setattr(Daemon, "_make_services",
                        lambda self: [*make(self), recorder])

    async def main() -> None:
        daemon = Daemon(daemon_cli.start(args), args)
        task = asyncio.ensure_future(daemon.run())
        try:
            await scenario(daemon, recorder)
        finally:
            daemon.request_stop()
            await asyncio.wait_for(task, DEADLINE)
    asyncio.run(main())


async def until(predicate: Callable[[], bool], what: str) -> None:
    deadline = time.monotonic() + DEADLINE
    while not predicate():
        assert time.monotonic() < deadline, f"timed out waiting for {what}"
        await asyncio.sleep(0.02)


def test_a_steady_host_keeps_its_polls_in_the_poll_thread_and_a_fault_reaches_every_service(
        sim_host: Callable[..., SimHost], tmp_path: Path,
        monkeypatch: pytest.MonkeyPatch) -> None:
    host = sim_host()
    port = free_port()

    async def scenario(daemon: Daemon, recorder: Recorder) -> None:
        await until(lambda: len(recorder.quiet) >= 5, "five quiet polls")
        loud = len(recorder.loud)
        assert loud >= 1  # the first poll (READY=1) always reaches the loop
        # Quiet polls still show: the picture and the clocks move with each one.
        picture, wall = daemon.picture, daemon.last_poll_wall
        await until(lambda: len(recorder.quiet) >= 8, "three more quiet polls")
        assert daemon.picture is not picture and daemon.last_poll_wall != wall
        assert daemon.monitor.polls == len(recorder.loud) + len(recorder.quiet)
        assert daemon.quiet_polls == len(recorder.quiet)
        assert all(not o.committed for o in recorder.quiet)
        # Metrics counts every poll's duration (a poll may complete between the two values).
        text = await asyncio.get_running_loop().run_in_executor(None, scrape, port)
        count, polls = (metric(text, "nichealthd_poll_duration_seconds_count"),
                        metric(text, "nichealthd_polls_total"))
        assert polls >= 8 and polls - 1 <= count <= polls

        # A port goes down: the poll that finds it reaches every service, with its event.
        quiet = len(recorder.quiet)
        mutate.set_port(host.root, "mlx5_0", 1, state="DOWN", phys_state="Disabled")
        await until(lambda: any(o.committed for o in recorder.loud[loud:]), "the event")
        assert any(e.event.check_name and not e.event.is_healthy
                   for o in recorder.loud[loud:] for e in o.committed)
        assert (tmp_path / "events.jsonl").read_text().count("mlx5_0 port 1") >= 1
        # The host is steady again (down, but unchanged): polls go quiet again.
        await until(lambda: len(recorder.quiet) >= quiet + 3, "quiet polls after the fault")

    run_daemon(host, tmp_path, monkeypatch, scenario, port)


def test_a_busy_service_or_a_new_surface_status_hears_of_every_poll(
        sim_host: Callable[..., SimHost], tmp_path: Path,
        monkeypatch: pytest.MonkeyPatch) -> None:
    """A service that waits for polls (a Reload caller) gets every one; a surface that
    published a new status gets the next poll to the loop (STATUS=, D-Bus properties)."""
    host = sim_host()

    async def scenario(daemon: Daemon, recorder: Recorder) -> None:
        await until(lambda: len(recorder.quiet) >= 2, "quiet polls")
        recorder.busy = True
        daemon.request_reload()  # ends the quiet wait: the next poll is asked for anew
        polls = daemon.monitor.polls
        await until(lambda: daemon.monitor.polls >= polls + 4, "four polls")
        loud = len(recorder.loud)
        quiet = len(recorder.quiet)
        await until(lambda: daemon.monitor.polls >= polls + 8, "four more polls")
        assert len(recorder.quiet) == quiet and len(recorder.loud) >= loud + 4
        recorder.busy = False
        daemon.request_reload()
        await until(lambda: len(recorder.quiet) >= quiet + 2, "quiet polls again")
        loud = len(recorder.loud)
        daemon.board.publish("test surface", daemon.connector)  # from any thread
        await until(lambda: len(recorder.loud) > loud, "the poll after the new status")

    run_daemon(host, tmp_path, monkeypatch, scenario)


def test_the_poll_count_never_runs_ahead_of_the_picture(
        sim_host: Callable[..., SimHost], tmp_path: Path,
        monkeypatch: pytest.MonkeyPatch) -> None:
    """The monitor counts a poll in the poll thread before the loop shows it: a client that
    read ``poll_count`` 1 and then asked for the devices was told NotReady."""
    host = sim_host()
    # As each poll reaches the loop: (poll_count shown, polls counted, a picture shown)
    seen: list[tuple[int, int, bool]] = []
    after_poll = Daemon._after_poll

    def recorded(self: Daemon, outcome: PollOutcome) -> None:
        seen.append((self.status()["poll_count"], self.monitor.polls, self.view() is not None))
        after_poll(self, outcome)
        assert self.status()["poll_count"] == self.stats().polls == self.monitor.polls

    monkeypatch.setattr(Daemon, "_after_poll", recorded)

    async def scenario(daemon: Daemon, recorder: Recorder) -> None:
        await until(lambda: len(recorder.quiet) >= 2, "quiet polls")
        assert seen[0] == (0, 1, False)  # the first poll counts once it shows
        assert all(shown == counted - 1 for shown, counted, _ in seen)
        # Quiet polls count as they show, too.
        assert daemon.status()["poll_count"] == daemon.polls_shown >= 3

    run_daemon(host, tmp_path, monkeypatch, scenario)
