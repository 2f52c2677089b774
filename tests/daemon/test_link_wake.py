"""A netdev going down is reported within milliseconds of the kernel's notification, polling
every 10 s: the real rtnetlink path end to end (runtime/linkwake.py).

The simulated host has no kernel netdevs, so the test ties one to a real one: in a network
namespace of its own (nothing on the machine sees it), a veth named like the sim port's netdev,
and the daemon started inside that namespace with ``linkEvents = "on"``. Each fault is what the
kernel does on a real host, in the same order: the port's sysfs files change (the sim tree:
DOWN/Disabled, operstate down), and the link goes down (``ip link set X down``), which the
kernel announces on rtnetlink. The test listens for that announcement on its own socket in the
namespace and times the event from it.
"""

from __future__ import annotations

import ctypes
import json
import os
import select
import shutil
import socket
import subprocess
import threading
import time
from pathlib import Path
from typing import Any, Iterator

import pytest

from nichealthd.sim import mutate
from nichealthd.sources import rtnetlink

from .. import simtrees
from ..harness import SimDaemon

pytestmark = [pytest.mark.root, pytest.mark.skipif(
    os.geteuid() != 0 or shutil.which("ip") is None,
    reason="needs root and iproute2 (a network namespace and a veth)")]

CLONE_NEWNET = 0x40000000
DEVICE, NETDEV = "mlx5_1", "enp36s0f0np0"  # a compute RoCE port of the a100-roce profile
TARGET = 0.050  # the bound, kernel notification -> event
# On the shared 2-core VM other suites keep both cores busy: the daemon's threads wait for a
# CPU for tens of ms at times, and a poll of this 18-device host takes 5-15 ms there. 0.2 s more
# than the target still tells an early poll from the 10 s tick by a factor of 40.
MARGIN = 0.200


def _enter(netns: str) -> None:
    """setns(2) into ``netns`` for the calling thread (or the child, in preexec_fn)."""
    fd = os.open(f"/run/netns/{netns}", os.O_RDONLY | os.O_CLOEXEC)
    try:
        if ctypes.CDLL(None, use_errno=True).setns(fd, CLONE_NEWNET) != 0:
            raise OSError(ctypes.get_errno(), "setns")
    finally:
        os.close(fd)


def _socket_in(netns: str) -> socket.socket:
    """An rtnetlink socket of ``netns``, made by a thread that enters it (and then ends)."""
    made: list[Any] = []

    def make() -> None:
        try:
            _enter(netns)
            made.append(rtnetlink.open_link_socket())
        except OSError as exc:
            made.append(exc)

    thread = threading.Thread(target=make)
    thread.start()
    thread.join()
    if isinstance(made[0], OSError):
        raise made[0]
    sock: socket.socket = made[0]
    return sock


def _ip(netns: str, *args: str) -> None:
    subprocess.run(["ip", "-n", netns, *args], check=True, capture_output=True, timeout=30)


@pytest.fixture
def netns() -> Iterator[str]:
    name = f"nh-linkwake-{os.getpid()}"
    subprocess.run(["ip", "netns", "add", name], check=True, capture_output=True, timeout=30)
    try:
        _ip(name, "link", "add", NETDEV, "type", "veth", "peer", "name", "nhpeer")
        _ip(name, "link", "set", "nhpeer", "up")
        _ip(name, "link", "set", NETDEV, "up")
        yield name
    finally:
        subprocess.run(["ip", "netns", "del", name], capture_output=True, timeout=30)


def _about(event: dict[str, Any], healthy: bool) -> bool:
    return bool(event["isHealthy"] == healthy and any(
        e["entityValue"] in (DEVICE, NETDEV) for e in event["entitiesImpacted"]))


def _reported(log: Path, offset: int, healthy: bool, timeout: float = 5.0) -> float:
    """The monotonic time an event about the port with ``healthy`` is in the event log after
    byte ``offset``, looked for every 2 ms (the harness's 20 ms would blur the figure)."""
    end = time.monotonic() + timeout
    while time.monotonic() < end:
        with open(log, "rb") as handle:
            handle.seek(offset)
            lines = handle.read().split(b"\n")[:-1]  # whole lines only
        if any(_about(json.loads(line), healthy) for line in lines):
            return time.monotonic()
        time.sleep(0.002)
    raise AssertionError(f"no {'healthy' if healthy else 'unhealthy'} event about {DEVICE} "
                         f"within {timeout:g} s")


class Announced:
    """The link states of NETDEV the kernel announced, counted as runtime/linkwake.py judges a
    change (a message whose ``link`` differs from the last one): the most early polls they
    can ask for."""

    def __init__(self) -> None:
        self.states = 0
        self._last: Any = None

    def read(self, sock: socket.socket) -> bool:
        """Reads one datagram; whether it had a message about NETDEV."""
        about = False
        for message in rtnetlink.parse(sock.recv(rtnetlink.RECV_BYTES)):
            if message.name == NETDEV:
                about = True
                if message.link != self._last:
                    self._last, self.states = message.link, self.states + 1
        return about


def _notified(sock: socket.socket, seen: Announced, timeout: float = 10.0) -> float:
    """The monotonic time the kernel's first message about NETDEV was read."""
    end = time.monotonic() + timeout
    while time.monotonic() < end:
        if select.select([sock], [], [], 0.5)[0]:
            at = time.monotonic()
            if seen.read(sock):
                return at
    raise AssertionError(f"no rtnetlink message about {NETDEV} within {timeout:g} s")


def test_a_port_whose_netdev_goes_down_is_reported_within_50_ms(netns: str) -> None:
    root = simtrees.take("a100-roce")
    config = root / "nichealthd.toml"
    config.write_text(config.read_text() + 'linkEvents = "on"\n')
    log = root / "events.jsonl"
    daemon = SimDaemon(root, ["--polling-interval", "10s", "--log-level", "debug"],
                       preexec_fn=lambda: _enter(netns))
    sock = _socket_in(netns)
    seen = Announced()
    try:
        daemon.wait_log(" ready: ")
        latencies: list[float] = []
        for healthy, state, phys, oper, link in ((False, "DOWN", "Disabled", "down", "down"),
                                                 (True, "ACTIVE", "LinkUp", "up", "up")) * 2:
            offset = log.stat().st_size
            mutate.set_port(root, DEVICE, 1, state=state, phys_state=phys, operstate=oper)
            # Not waited for first: the notification is timed as it arrives.
            ip = subprocess.Popen(["ip", "-n", netns, "link", "set", NETDEV, link])
            notified = _notified(sock, seen)
            assert ip.wait(30) == 0
            latencies.append(_reported(log, offset, healthy) - notified)
            while _notified_quietly(sock, seen):  # the rest of this burst (carrier, operstate)
                pass
        print(f"kernel notification -> event: {', '.join(f'{x * 1e3:.1f}' for x in latencies)}"
              f" ms")
        assert max(latencies) <= TARGET + MARGIN, latencies
        # Polling every 10 s: each change made an early poll, and none was made per message.
        # A change's messages within BURST_SECONDS make one; the kernel's linkwatch may send
        # the operstate of a link coming up later (it defers what is not urgent), and that
        # new state is worth its own poll: at most one per state the kernel announced.
        text = daemon.log()
        early = text.count("link change: polling before the tick")
        while _notified_quietly(sock, seen):  # read after the log: all that woke those polls
            pass
        print(f"early polls: {early}, link states announced: {seen.states}")
        assert len(latencies) <= early <= seen.states, (early, seen.states, text)
    finally:
        sock.close()
        daemon.stop()


def _notified_quietly(sock: socket.socket, seen: Announced) -> bool:
    """Reads one more pending message (within 50 ms); False when there is none."""
    if select.select([sock], [], [], 0.05)[0]:
        seen.read(sock)
        return True
    return False
