"""The varlink API's connection limits: per uid with root's reserve, and the idle timeout.

The share-out is pure bookkeeping (:mod:`nichealthd.surfaces.admission`), tested as a table;
the idle timeout runs the real service on a socket in this process with a short timeout.
(Other uids against the real daemon: test_varlink_neighbours.py.)
"""

from __future__ import annotations

import asyncio
import json
import logging
import os
from pathlib import Path
from typing import Any

import pytest

from nichealthd.sources.config_file import load_config
from nichealthd.storage.store import Journal
from nichealthd.surfaces.admission import Admission, Caps
from nichealthd.surfaces.connector.status import ConnectorStatus
from nichealthd.surfaces.context import CONNECTIONS_VARLINK, PollStats, ServiceContext
from nichealthd.surfaces.varlink import MAX_CONNECTIONS, VarlinkService
from nichealthd.surfaces.varlink_protocol import encode_call


def test_the_caps_of_256_slots() -> None:
    assert Caps.of(MAX_CONNECTIONS) == Caps(total=256, unprivileged=224, per_uid=32)
    assert Caps.of(9) == Caps(9, 8, 1)
    assert Caps.of(0) == Caps(1, 0, 1)  # root's one connection


def test_four_users_take_what_one_user_may_and_root_still_gets_in() -> None:
    """4 uids x 64 (and more) filled every slot; now they hold 32 each."""
    admission = Admission(Caps.of(256))
    refused = {uid: sum(bool(admission.admit(uid)) for _ in range(75))
               for uid in (1001, 1002, 1003, 1004)}
    assert refused == dict.fromkeys((1001, 1002, 1003, 1004), 75 - 32)
    assert admission.admit(0) == ""
    assert "the most one user may" in admission.admit(1001)


def test_all_users_together_leave_an_eighth_to_root() -> None:
    admission = Admission(Caps.of(256))
    for uid in range(1001, 1011):  # ten users, each as much as it may
        for _ in range(32):
            admission.admit(uid)
    assert admission.unprivileged == 224 and admission.held(1008) == 0
    assert "kept for root" in admission.admit(2000)
    assert "kept for root" in admission.admit(-1)  # a peer of unknown uid is not root
    assert [admission.admit(0) for _ in range(33)] == [""] * 32 + [
        "all 256 connections are taken"]
    admission.release(0)
    admission.release(1001)
    assert admission.admit(1008) == ""  # a user's slot freed is another user's
    admission.release(4242)  # never admitted: nothing changes
    assert (admission.total, admission.unprivileged) == (255, 224)


# ----------------------------------------------------------------- the idle timeout

def service_for(tmp_path: Path, limit: int = MAX_CONNECTIONS) -> VarlinkService:
    socket = tmp_path / "varlink.sock"
    (tmp_path / "c.toml").write_text(f'stateFile = "{tmp_path}/state.json"\n'
                                     f'varlinkSocket = "{socket}"\n')
    config = load_config(str(tmp_path / "c.toml"))
    context = ServiceContext(
        journal=Journal(config.state_dir), config_path=str(tmp_path / "c.toml"),
        config=lambda: config, view=lambda: None,
        stats=lambda: PollStats(0, 0.0, None, None, "", {}, 0, 0),
        status=lambda: {"health": "healthy"}, reload_error=lambda: "",
        request_reload=lambda: None, connector=ConnectorStatus,
        connection_limits={CONNECTIONS_VARLINK: limit})
    return VarlinkService(context)


async def _closed(reader: asyncio.StreamReader, within: float) -> bool:
    """Whether the daemon closes the connection (EOF) within ``within`` seconds."""
    try:
        return await asyncio.wait_for(reader.read(), within) == b""
    except asyncio.TimeoutError:
        return False


async def _idle_drill(service: VarlinkService) -> dict[str, Any]:
    service.idle_timeout = 0.4
    await service.start()
    path = service.path
    try:
        idle_r, idle_w = await asyncio.open_unix_connection(path)
        busy_r, busy_w = await asyncio.open_unix_connection(path)
        watch_r, watch_w = await asyncio.open_unix_connection(path)
        watch_w.write(encode_call("io.nichealthd.Monitor.WatchEvents", more=True))
        answers = 0
        for _ in range(10):  # 1.5 s of a call every 0.15 s: never idle for 0.4 s
            busy_w.write(encode_call("io.nichealthd.Monitor.GetStatus"))
            reply = await asyncio.wait_for(busy_r.readuntil(b"\0"), 5)
            answers += json.loads(reply[:-1])["parameters"]["status"]["health"] == "healthy"
            await asyncio.sleep(0.15)
        result = {"idle": await _closed(idle_r, 0.1), "busy": await _closed(busy_r, 0.1),
                  "watch": await _closed(watch_r, 0.1), "answers": answers,
                  "held": service.connections}
        for writer in (idle_w, busy_w, watch_w):
            writer.close()
        await asyncio.sleep(0.1)
        result["after"] = service.connections
        return result
    finally:
        await service.stop()


def test_an_idle_connection_is_closed_a_busy_one_and_a_watch_are_not(
        tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level(logging.INFO, "nichealthd.varlink")
    result = asyncio.run(_idle_drill(service_for(tmp_path)))
    assert result == {"idle": True, "busy": False, "watch": False, "answers": 10, "held": 2,
                      "after": 0}
    assert "closed varlink connection(s) idle for 0.4 s" in caplog.text


async def _over_the_limit(service: VarlinkService) -> list[bool]:
    await service.start()
    try:
        streams = [await asyncio.open_unix_connection(service.path) for _ in range(3)]
        closed = [await _closed(reader, 0.5) for reader, _ in streams]
        for _, writer in streams:
            writer.close()
        return closed
    finally:
        await service.stop()


def test_the_plan_lowers_the_limit(tmp_path: Path) -> None:
    """A limit given by the open-file plan is the service's: 2 slots, of which root may take
    both (the total is its only limit) and another user one (its eighth, at least one)."""
    held = 2 if os.geteuid() == 0 else 1
    assert asyncio.run(_over_the_limit(service_for(tmp_path, limit=2))) == \
        [False] * held + [True] * (3 - held)
