"""Bad and slow varlink clients against the real daemon: bounded, logged, never felt by
polling or by other clients; Reload only for uid 0 (SO_PEERCRED); WatchEvents."""

from __future__ import annotations

import json
import os
import random
import shutil
import signal
import socket
import threading
import time
from pathlib import Path

import pytest
from vlhelpers import Raw, VarlinkDaemon, make_sim, records, run_as

from nichealthd.sim import mutate, tree
from nichealthd.surfaces import varlink as service
from nichealthd.surfaces.admission import Caps
from tests.harness import NOBODY, wait_until

M = "io.nichealthd.Monitor."


def still_serving(daemon: VarlinkDaemon) -> None:
    """Polling goes on and a new client is answered."""
    daemon.wait_polls(2)
    with Raw(daemon.socket) as raw:
        assert records(raw.ask(M + "ListPorts"), "ports")
    assert daemon.proc.poll() is None


@pytest.mark.parametrize("garbage", [
    b"\0\0\0\0",  # empty messages: not JSON
    b"{\"method\": \0",  # broken JSON
    b"[1, 2, 3]\0",  # JSON, not an object
    b"{\"parameters\": {}}\0",  # no method
    b"{\"method\": \"io.nichealthd.Monitor.ListPorts\", \"more\": \"yes\"}\0",
    b"\xff\xfe\xfd\0",  # not UTF-8
    b"x" * 100_000,  # 100 kB without a message end
    b"{\"method\": \"" + b"a" * 70_000 + b"\"}\0",  # a message over the limit
], ids=["nul", "broken-json", "array", "no-method", "bad-flag", "not-utf8", "100kB-open",
        "too-long"])
def test_malformed_input_closes_that_connection_only(daemon: VarlinkDaemon,
                                                     garbage: bytes) -> None:
    with Raw(daemon.socket) as bystander, Raw(daemon.socket) as bad:
        bystander.call(M + "GetStatus")  # a client in the middle of its work
        try:
            bad.send(garbage)
        except (BrokenPipeError, ConnectionResetError):
            pass  # closed while we were still sending: as good
        assert bad.closed_by_peer()
        assert bystander.reply()["error"] is None
        assert records(bystander.ask(M + "ListDevices"), "devices")
    still_serving(daemon)
    daemon.wait_log("closed varlink connection(s) that broke the protocol")


def test_random_bytes_from_many_clients(daemon: VarlinkDaemon) -> None:
    rng = random.Random(14)
    for _ in range(30):
        with Raw(daemon.socket) as bad:
            try:
                bad.send(bytes(rng.randrange(256) for _ in range(rng.randrange(1, 4096)))
                         + b"\0")
            except (BrokenPipeError, ConnectionResetError):
                pass
    still_serving(daemon)
    log = daemon.log()
    assert "Traceback" not in log
    # rate-limited: one line at first, the rest counted for the next minute
    assert log.count("broke the protocol") <= 2


def test_connections_are_bounded_and_freed(daemon: VarlinkDaemon) -> None:
    caps = Caps.of(service.MAX_CONNECTIONS)  # root: every slot; another user: its eighth
    limit = caps.total if os.geteuid() == 0 else caps.per_uid
    held: list[Raw] = []
    try:
        for _ in range(limit):
            held.append(Raw(daemon.socket))
        held[-1].ask(M + "GetStatus")  # all of them admitted
        extra = Raw(daemon.socket)
        assert extra.closed_by_peer()
        extra.close()
        daemon.wait_log("refused varlink connection(s) over the limit")
        # polling is not affected (asked on a connection that was admitted)
        first = held[0].ask(M + "GetStatus")["parameters"]["status"]["poll_count"]
        wait_until(lambda: held[0].ask(M + "GetStatus")["parameters"]["status"]["poll_count"]
                   >= first + 2, "two more polls", proc=daemon.proc)
    finally:
        for conn in held:
            conn.close()
    wait_until(lambda: _answers(daemon), "a new connection answered after the others closed")


def _answers(daemon: VarlinkDaemon) -> bool:
    try:
        with Raw(daemon.socket, timeout=2) as raw:
            return raw.ask(M + "GetStatus")["error"] is None
    except (ConnectionError, socket.timeout):
        return False


def test_a_client_that_does_not_read_its_replies_is_not_read(daemon: VarlinkDaemon) -> None:
    """Thousands of pipelined calls, no reads: the daemon stops reading that client (its
    memory holds at most one buffer of replies); other clients and polling go on."""
    greedy = socket.socket(socket.AF_UNIX)
    greedy.connect(daemon.socket)
    greedy.setblocking(False)
    call = json.dumps({"method": M + "ListCounters"}).encode() + b"\0"
    sent = 0
    deadline = time.monotonic() + 10
    while time.monotonic() < deadline:
        try:
            sent += greedy.send(call * 100)
        except BlockingIOError:
            break  # the daemon stopped reading us: the kernel buffer is full
    assert time.monotonic() < deadline, "the daemon kept reading a client that never reads"
    still_serving(daemon)
    greedy.close()
    still_serving(daemon)


def test_watch_events_streams_each_committed_event(daemon: VarlinkDaemon) -> None:
    with Raw(daemon.socket) as watcher:
        watcher.call(M + "WatchEvents", more=True)
        daemon.wait_polls(1)  # the watch is registered (calls on a connection are in order)
        mutate.set_port(daemon.root, "mlx5_5", 1, state="DOWN", phys_state="Polling")
        reply = watcher.reply()
        assert reply["continues"] is True and reply["error"] is None
        event = reply["parameters"]["event"]
        assert "mlx5_5" in event["message"] and event["isHealthy"] is False
        assert {"seq", "severity", "checkName", "isFatal", "entitiesImpacted",
                "generatedTimestamp", "recommendedAction"} <= set(event)
        mutate.set_port(daemon.root, "mlx5_5", 1, state="ACTIVE", phys_state="LinkUp")
        recovered = watcher.reply()["parameters"]["event"]
        assert recovered["isHealthy"] is True and recovered["seq"] > event["seq"]


def test_list_events_then_watch_on_one_connection_skips_nothing(
        daemon: VarlinkDaemon) -> None:
    """The watch starts right after the ListEvents answer, even when events are committed
    between the two calls (nichealthctl events --follow relies on it)."""
    with Raw(daemon.socket) as conn:
        history = records(conn.ask(M + "ListEvents", {"limit": 3}), "events")
        last = history[-1]["seq"]
        mutate.set_port(daemon.root, "mlx5_6", 1, state="DOWN", phys_state="Disabled")
        daemon.wait_polls(2)  # committed and published before the watch starts
        conn.call(M + "WatchEvents", more=True)
        first = conn.reply()["parameters"]["event"]
        assert first["seq"] == last + 1 and "mlx5_6" in first["message"]


def test_a_watcher_that_stops_reading_is_dropped(start_daemon) -> None:
    """A synthetic 257-NIC host (tests/sim/test_large.py's) flapping every port commits 257
    events a poll; a watcher that never reads is dropped once WATCH_BACKLOG bytes wait for it,
    with the reason in the log, while a watcher that reads gets every event, in order, none
    skipped."""
    root = make_sim("synthetic", devices=257)
    daemon = start_daemon(root)
    ports = [(d["name"], p) for d in tree.load(root)["devices"]
             if d["role"] in ("compute", "storage") for p in d["ports"]]
    stuck = socket.socket(socket.AF_UNIX)
    stuck.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4096)
    stuck.connect(daemon.socket)
    stuck.sendall(json.dumps({"method": M + "WatchEvents", "more": True}).encode() + b"\0")
    seqs: list[int] = []
    problems: list[BaseException] = []
    reader = Raw(daemon.socket, timeout=60)
    reader.call(M + "WatchEvents", more=True)

    def read() -> None:
        try:
            while True:
                reply = reader.reply()
                if "event" not in reply["parameters"]:  # told, not raised in this thread
                    problems.append(AssertionError(f"not an event: {reply}"))
                    return
                seqs.append(reply["parameters"]["event"]["seq"])
        except (ConnectionError, OSError) as exc:
            problems.append(exc)

    thread = threading.Thread(target=read, daemon=True)
    thread.start()
    daemon.wait_polls(1)  # both watches registered
    down = [True]

    def flap_and_check() -> bool:
        state = ("DOWN", "Disabled") if down[0] else ("ACTIVE", "LinkUp")
        for name, port in ports:
            mutate.set_port(root, name, port, state=state[0], phys_state=state[1])
        down[0] = not down[0]
        daemon.wait_polls(1)
        return "a WatchEvents client stopped reading" in daemon.log()

    # 4 MiB of events is about 30 polls of 257: minutes on a loaded 2-core machine.
    wait_until(flap_and_check, "the stuck watcher dropped", timeout=600, proc=daemon.proc,
               detail=lambda: f"{len(seqs)} events read, {problems}")
    wait_until(lambda: stuck_closed(stuck), "the stuck watcher's connection closed")
    count = len(seqs)
    assert count > 2 * len(ports), count
    assert seqs == list(range(seqs[0], seqs[0] + len(seqs)))[:len(seqs)], "a gap or reorder"
    assert not problems, problems
    reader.close()
    still_serving(daemon)


def stuck_closed(sock: socket.socket) -> bool:
    """Drain what the daemon had sent; True at EOF or reset."""
    sock.settimeout(2)
    try:
        while sock.recv(1 << 20):
            pass
        return True
    except ConnectionResetError:
        return True
    except socket.timeout:
        return False


def test_stop_ends_a_watch_with_shutting_down(daemon: VarlinkDaemon) -> None:
    with Raw(daemon.socket) as watcher:
        watcher.call(M + "WatchEvents", more=True)
        daemon.wait_polls(1)
        daemon.stop()
        reply = watcher.reply()
        assert reply["error"] == M + "ShuttingDown"
    assert not os.path.exists(daemon.socket)  # the daemon removed its socket


@pytest.mark.root
@pytest.mark.skipif(os.geteuid() != 0, reason="reloads as root and is refused as nobody")
def test_reload_is_for_uid_0_only(daemon: VarlinkDaemon) -> None:
    if shutil.which("setpriv") is None:
        pytest.skip("setpriv is not installed")
    with Raw(daemon.socket) as root:
        answer = root.ask(M + "Reload")
        assert answer["error"] is None, answer
        assert answer["parameters"]["accepted"] is True
        assert answer["parameters"]["message"].startswith("configuration reloaded from ")
    script = (
        "import socket, json\n"
        f"s = socket.socket(socket.AF_UNIX); s.connect({daemon.socket!r})\n"
        "s.sendall(b'{\"method\":\"io.nichealthd.Monitor.Reload\"}\\0'"
        " + b'{\"method\":\"io.nichealthd.Monitor.ListPorts\"}\\0')\n"
        "data = b''\n"
        "while data.count(b'\\0') < 2:\n"
        "    data += s.recv(65536)\n"
        "for part in data.split(b'\\0')[:2]:\n"
        "    print(json.dumps(json.loads(part)))\n")
    out = run_as(NOBODY, script)
    assert out.returncode == 0, out.stderr
    refused, ports = (json.loads(line) for line in out.stdout.splitlines())
    assert refused["error"] == M + "PermissionDenied"
    assert "root only" in refused["parameters"]["message"]
    assert ports["parameters"]["ports"]  # reading is for everyone
    assert daemon.log().count("configuration reloaded from") == 1
    config = daemon.root / "nichealthd.toml"
    config.write_text(config.read_text() + 'pollingInterval = "soon"\n')
    with Raw(daemon.socket) as root:
        answer = root.ask(M + "Reload")
    assert answer["parameters"]["accepted"] is False
    assert "pollingInterval" in answer["parameters"]["message"]


def test_a_reload_moves_the_socket(start_daemon) -> None:
    """varlinkSocket changed in the file: after SIGHUP the API is on the new path only."""
    daemon = start_daemon(flag=False)
    old = daemon.socket
    new = str(Path(old).parent / "moved.sock")
    config = daemon.root / "nichealthd.toml"
    config.write_text(config.read_text().replace(old, new))
    daemon.proc.send_signal(signal.SIGHUP)
    wait_until(lambda: os.path.exists(new) and not os.path.exists(old), "the moved socket",
               proc=daemon.proc, detail=daemon.log)
    with Raw(new) as raw:
        assert records(raw.ask(M + "ListPorts"), "ports")
    config.write_text(config.read_text().replace(f'varlinkSocket = "{new}"', 'varlinkSocket = ""'))
    daemon.proc.send_signal(signal.SIGHUP)
    wait_until(lambda: not os.path.exists(new), "the socket removed", proc=daemon.proc)
    daemon.wait_log("varlink API disabled")
