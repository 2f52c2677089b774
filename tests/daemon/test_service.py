"""The long-running daemon against a real sd_notify socket (issue #4's notify protocol)."""

from __future__ import annotations

import json
import os
import signal
import socket
import subprocess
import sys
import threading
import time
from pathlib import Path
from typing import Callable, Iterator, Optional

import pytest

from nichealthd.sim import mutate

from ..threadstop import ThreadStopper
from .conftest import REPO, SimHost


class NotifySocket:
    """An AF_UNIX datagram socket standing in for systemd's notify socket.

    A thread drains it continuously, as systemd does: the kernel queues only a few datagrams.
    """

    def __init__(self, path: Path) -> None:
        self.path = path
        self.sock = socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM)
        self.sock.setsockopt(socket.SOL_SOCKET, socket.SO_PASSCRED, 1)
        self.sock.bind(str(path))
        self.sock.settimeout(0.1)
        self.messages: list[tuple[float, str]] = []
        self._read = 0
        self._closed = False
        self._thread = threading.Thread(target=self._drain, daemon=True)
        self._thread.start()

    def _drain(self) -> None:
        while not self._closed:
            try:
                data = self.sock.recv(4096).decode()
            except (socket.timeout, OSError):
                continue
            self.messages.append((time.monotonic(), data))

    def close(self) -> None:
        self._closed = True
        self._thread.join()
        self.sock.close()

    def collect(self, seconds: float) -> list[str]:
        """Wait ``seconds``; returns the datagrams that arrived since the last call."""
        time.sleep(seconds)
        new = [m for _, m in self.messages[self._read:]]
        self._read += len(new)
        return new

    def wait_for(self, needle: str, seconds: float = 10.0) -> str:
        end = time.monotonic() + seconds
        while time.monotonic() < end:
            while self._read < len(self.messages):
                message = self.messages[self._read][1]
                self._read += 1
                if needle in message:
                    return message
            time.sleep(0.05)
        raise AssertionError(f"no {needle!r} within {seconds} s; got {self.messages[-5:]}")


class Daemon:
    def __init__(self, host: SimHost, notify: NotifySocket, *args: str,
                 watchdog_usec: Optional[int] = None) -> None:
        env = dict(os.environ, NOTIFY_SOCKET=str(notify.path))
        env.pop("JOURNAL_STREAM", None)
        if watchdog_usec:
            env["WATCHDOG_USEC"] = str(watchdog_usec)
        self.proc = subprocess.Popen(
            [sys.executable, "-m", "nichealthd.daemon", "--config", str(host.config),
             "--polling-interval", "200ms", *args],
            cwd=REPO, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)

    def stop(self, sig: int = signal.SIGTERM, timeout: float = 20) -> tuple[int, str]:
        if self.proc.poll() is None:
            self.proc.send_signal(sig)
        try:
            _, err = self.proc.communicate(timeout=timeout)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            _, err = self.proc.communicate()
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
    notify.wait_for("1 fatal", seconds=5)
    assert any(e["message"] == ("Port mlx5_0 port 1: state DOWN, phys_state Disabled"
                                " - no connectivity")
               for e in events(host))
    code, err = daemon.stop()
    assert code == 0, err
    assert any("STOPPING=1" in m for _, m in notify.messages[-3:]), notify.messages[-4:]
    state = json.loads(host.state_file.read_text())
    assert state["port_states"]["mlx5_0_1"]["health"] == "fatal"


def test_polls_keep_a_drift_free_schedule(sim_host: Callable[..., SimHost],
                                          notify: NotifySocket) -> None:
    host = sim_host()
    daemon = Daemon(host, notify, "--log-level", "debug")
    notify.wait_for("READY=1")
    time.sleep(3.0)
    code, err = daemon.stop()
    assert code == 0
    starts = [float(line.rsplit("at monotonic ", 1)[1]) for line in err.splitlines()
              if "poll started at monotonic" in line]
    assert len(starts) >= 12
    # Each poll starts on the grid origin + k * 200 ms: no accumulated drift.
    origin = starts[0]
    for k, moment in enumerate(starts):
        assert abs(moment - (origin + 0.2 * k)) < 0.08, (k, moment - origin)


def test_watchdog_fed_only_while_polls_complete(sim_host: Callable[..., SimHost],
                                                notify: NotifySocket) -> None:
    host = sim_host()
    daemon = Daemon(host, notify, watchdog_usec=1_000_000)
    notify.wait_for("READY=1")
    fed = [m for m in notify.collect(2.0) if "WATCHDOG=1" in m]
    assert len(fed) >= 3
    # Hang the poller. A FIFO no longer does (sysfs files are opened with O_NONBLOCK), so
    # the poll thread is stopped with ptrace while it waits for work, as a read stuck in the
    # kernel (a firmware command) would hold it; the event loop keeps running.
    poller = ThreadStopper(daemon.proc.pid)
    notify.collect(1.5)  # the last poll may still have been inside the watchdog period
    silent = notify.collect(2.5)
    assert [m for m in silent if "WATCHDOG=1" in m] == []
    assert daemon.proc.poll() is None  # the event loop is alive; only the poller is stuck
    poller.resume()
    code, err = daemon.stop(timeout=30)
    assert code == 0
    assert "withholding the watchdog keepalive" in err


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
    deadline = time.monotonic() + 5
    while time.monotonic() < deadline and not any(
            e["errorCode"] == ["link_downed"] and e["isFatal"] for e in events(host)):
        time.sleep(0.1)
    code, err = daemon.stop()
    assert code == 0, err
    assert any(e["errorCode"] == ["link_downed"] for e in events(host))


def test_sigint_stops_cleanly_and_state_survives_restart(
        sim_host: Callable[..., SimHost], notify: NotifySocket) -> None:
    host = sim_host()
    daemon = Daemon(host, notify)
    notify.wait_for("READY=1")
    mutate.counter(host.root, "mlx5_1", 1, "link_downed", add=1)
    time.sleep(0.6)
    assert daemon.stop(signal.SIGINT)[0] == 0
    before = len(events(host))
    daemon = Daemon(host, notify)
    notify.wait_for("READY=1")
    time.sleep(0.5)
    assert daemon.stop()[0] == 0
    assert len(events(host)) == before  # latched breach, same boot: nothing new
