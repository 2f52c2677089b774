"""The long-running daemon against a real sd_notify socket (sd_notify(3)'s protocol)."""

from __future__ import annotations

import json
import os
import signal
import subprocess
from pathlib import Path
from typing import Callable, Iterator, Optional

import pytest

from nichealthd.sim import mutate

from ..harness import DEADLINE, Lines, NotifySocket, stop_process, wait_until
from ..threadstop import ThreadStopper
from ..without import command
from .conftest import REPO, SimHost


class Daemon:
    """``nichealthd`` as a subprocess at 200 ms polls and ``--log-level debug`` (one line per
    poll started: :meth:`Lines.wait_polls`); its stderr is read as it comes into ``lines``.
    ``without``: Python modules it runs without (tests/without.py)."""

    def __init__(self, host: SimHost, notify: NotifySocket, *args: str,
                 watchdog_usec: Optional[int] = None, without: str = "") -> None:
        env = dict(os.environ, NOTIFY_SOCKET=str(notify.path))
        env.pop("JOURNAL_STREAM", None)
        if watchdog_usec:
            env["WATCHDOG_USEC"] = str(watchdog_usec)
        self.proc = subprocess.Popen(
            command(without, "nichealthd.runtime.daemon", "--config", str(host.config),
                    "--polling-interval", "200ms", "--log-level", "debug", *args),
            cwd=REPO, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
        assert self.proc.stderr is not None
        self.lines = Lines(self.proc.stderr)

    def wait_polls(self, more: int) -> None:
        self.lines.wait_polls(more, proc=self.proc)

    def wait_until(self, predicate: Callable[[], bool], what: str,
                   timeout: float = DEADLINE) -> None:
        wait_until(predicate, what, timeout, self.proc, self.lines.tail)

    def stop(self, sig: int = signal.SIGTERM, timeout: float = 20) -> tuple[int, str]:
        stop_process(self.proc, timeout, sig)
        err = self.lines.join()
        assert self.proc.stderr is not None
        self.proc.stderr.close()
        return self.proc.returncode, err


@pytest.fixture
def notify(tmp_path: Path) -> Iterator[NotifySocket]:
    sock = NotifySocket(tmp_path / "notify.sock")
    yield sock
    sock.close()


def events(host: SimHost) -> list[dict]:
    path = host.root / "events.jsonl"
    return [json.loads(line) for line in path.read_text().splitlines()] if path.exists() else []


def test_ready_after_first_commit_status_and_clean_stop(
        sim_host: Callable[..., SimHost], notify: NotifySocket) -> None:
    host = sim_host()
    daemon = Daemon(host, notify)
    ready = notify.wait_for("READY=1")
    # READY is only sent once the first poll was committed: the state file exists then.
    assert host.state_file.exists() and events(host)
    assert "STATUS=12 ports: 12 healthy, 0 degraded, 0 fatal" in ready
    mutate.set_port(host.root, "mlx5_0", 1, state="DOWN", phys_state="Disabled")
    notify.wait_for("1 fatal")
    assert any(e["message"] == ("Port mlx5_0 port 1: state DOWN, phys_state Disabled"
                                " - no connectivity - suspect: unknown (port disabled)")
               for e in events(host))
    code, err = daemon.stop()
    assert code == 0, err
    assert any("STOPPING=1" in m for _, m in notify.messages[-3:]), notify.messages[-4:]
    state = json.loads(host.state_file.read_text())
    assert state["port_states"]["mlx5_0_1"]["health"] == "fatal"


def test_polls_keep_a_drift_free_schedule(sim_host: Callable[..., SimHost],
                                          notify: NotifySocket) -> None:
    host = sim_host()
    daemon = Daemon(host, notify)
    notify.wait_for("READY=1")
    daemon.wait_polls(16)
    code, err = daemon.stop()
    assert code == 0
    starts = [float(line.rsplit("at monotonic ", 1)[1]) for line in err.splitlines()
              if "poll started at monotonic" in line]
    assert len(starts) >= 16
    # Each poll starts on the grid origin + k * 200 ms (a late one skips ticks): the offsets
    # from the grid do not grow. On a loaded machine a single start may be late, so the test
    # looks at the median of the later half, where an accumulated drift (a sleep of one
    # interval after each poll) would show as the sum of every poll's duration.
    origin = starts[0]
    offsets = [(m - origin) - 0.2 * round((m - origin) / 0.2) for m in starts]
    later = sorted(abs(o) for o in offsets[len(offsets) // 2:])
    assert later[len(later) // 2] < 0.04, offsets


def test_watchdog_fed_only_while_polls_complete(sim_host: Callable[..., SimHost],
                                                notify: NotifySocket) -> None:
    host = sim_host()
    daemon = Daemon(host, notify, watchdog_usec=1_000_000)
    notify.wait_for("READY=1")
    keepalives = lambda: sum("WATCHDOG=1" in m for _, m in notify.messages)  # noqa: E731
    daemon.wait_until(lambda: keepalives() >= 3, "3 keepalives")
    # Hang the poller. A FIFO no longer does (sysfs files are opened with O_NONBLOCK), so
    # the poll thread is stopped with ptrace while it waits for work, as a read stuck in the
    # kernel (a firmware command) would hold it; the event loop keeps running.
    poller = ThreadStopper(daemon.proc.pid)
    try:
        daemon.lines.wait_for("withholding the watchdog keepalive", proc=daemon.proc)
        withheld = keepalives()
        # Two watchdog ticks (period / 2 each) without a keepalive: an observation window,
        # not a synchronisation; what it checks is an absence.
        notify.collect(1.0)
        assert keepalives() == withheld
        assert daemon.proc.poll() is None  # the event loop is alive; only the poller is stuck
    finally:
        poller.resume()
    daemon.lines.wait_for("watchdog resumed", proc=daemon.proc)
    daemon.wait_until(lambda: keepalives() > withheld, "a keepalive after the resume")
    code, err = daemon.stop(timeout=30)
    assert code == 0


def test_reload_rejects_a_broken_config_and_keeps_running(
        sim_host: Callable[..., SimHost], notify: NotifySocket) -> None:
    host = sim_host()
    original = host.config.read_text()
    daemon = Daemon(host, notify)
    notify.wait_for("READY=1")
    host.config.write_text(original + '\n[[counterDetection.counters]]\nname = "x"\n')
    daemon.proc.send_signal(signal.SIGHUP)
    notify.wait_for("RELOADING=1")
    status = notify.wait_for("reload rejected")
    assert "counterDetection.counters[x].path" in status
    assert daemon.proc.poll() is None
    host.config.write_text(original + 'pollingInterval = "300ms"\n')
    daemon.proc.send_signal(signal.SIGHUP)
    notify.wait_for("RELOADING=1")
    ready = notify.wait_for("READY=1")
    assert "reload rejected" not in ready
    mutate.counter(host.root, "mlx5_0", 1, "link_downed", add=1)
    daemon.wait_until(lambda: any(e["errorCode"] == ["link_downed"] and e["isFatal"]
                                  for e in events(host)), "the link_downed event")
    code, err = daemon.stop()
    assert code == 0, err
    assert any(e["errorCode"] == ["link_downed"] for e in events(host))


def test_reload_and_stop_between_polls_act_at_once_without_a_poll(
        sim_host: Callable[..., SimHost], notify: NotifySocket) -> None:
    """The wait for the next tick is in the poll thread (runtime/pollworker.py): a request
    ends it. With a 60 s interval, SIGHUP is applied and SIGTERM obeyed within the test's
    deadline, and neither makes the poll that was not due yet."""
    host = sim_host()
    daemon = Daemon(host, notify, "--polling-interval", "60s")
    notify.wait_for("READY=1")
    daemon.proc.send_signal(signal.SIGHUP)
    notify.wait_for("RELOADING=1")
    notify.wait_for("READY=1", seconds=20)
    code, err = daemon.stop(timeout=20)
    assert code == 0, err
    assert err.count("poll started at monotonic") == 1, err


def test_sigint_stops_cleanly_and_state_survives_restart(
        sim_host: Callable[..., SimHost], notify: NotifySocket) -> None:
    host = sim_host()
    daemon = Daemon(host, notify)
    notify.wait_for("READY=1")
    mutate.counter(host.root, "mlx5_1", 1, "link_downed", add=1)
    daemon.wait_until(lambda: any(e["errorCode"] == ["link_downed"] and not e["isHealthy"]
                                  for e in events(host)), "the link_downed breach")
    assert daemon.stop(signal.SIGINT)[0] == 0
    before = len(events(host))
    daemon = Daemon(host, notify)
    notify.wait_for("READY=1")
    daemon.wait_polls(3)  # polls that would have reported the breach again
    assert daemon.stop()[0] == 0
    assert len(events(host)) == before, [e["message"] for e in events(host)[before - 3:]]
