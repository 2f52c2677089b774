"""One report per saturated counter on the running daemon (200 ms polls, symbol_error's 1 s window):
the counter reaching its limit is one unhealthy event and its clear one healthy event, also
when the velocity window fills only polls after the limit was first seen (the first outside
audit of this branch found two unhealthy events there)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any, Callable

from nichealthd.sim import mutate

from .conftest import RunningDaemon, series, value


def symbol_error_events(root: Path) -> list[dict[str, Any]]:
    path = root / "events.jsonl"
    lines = path.read_text().splitlines() if path.exists() else []
    return [e for e in map(json.loads, lines) if e["errorCode"] == ["symbol_error"]
            and "after reboot" not in e["message"]]


def breach_flags(root: Path) -> dict[str, Any]:
    flags: dict[str, Any] = json.loads(
        (root / "var/lib/nichealthd/state.json").read_text()).get("breach_flags", {})
    return flags


def test_symbol_error_at_its_limit_is_one_event_and_its_clear_one_healthy_event(
        sim: Callable[..., Path], daemon: Callable[[Path], RunningDaemon]) -> None:
    root = sim()
    running = daemon(root)
    running.next_polls(1)
    key = "mlx5_0:1:symbol_error"
    sat = {"device": "mlx5_0", "port": "1", "counter": "symbol_error", "file": "symbol_error"}
    mutate.counter(root, "mlx5_0", 1, "symbol_error", set_to=65535)
    # 0 to 65535 in a second: the breach latches once the 1 s window is full.
    running.wait_for(lambda: key in breach_flags(root), what="the breach latched")
    samples = running.next_polls(3)  # more polls at the limit
    assert value(samples, "nichealthd_saturated", **sat) == 1
    unhealthy = [e for e in symbol_error_events(root) if not e["isHealthy"]]
    assert len(unhealthy) == 1, [e["message"] for e in unhealthy]
    assert "saturated at 65535" in unhealthy[0]["message"]

    mutate.counter(root, "mlx5_0", 1, "symbol_error", set_to=0)
    running.wait_for(lambda: key not in breach_flags(root), what="the recovery")
    samples = running.next_polls(3)
    assert series(samples, "nichealthd_saturated", **sat) == []  # a flag only while true
    assert [(e["isHealthy"], e["checkName"]) for e in symbol_error_events(root)] == [
        (False, "InfiniBandDegradationCheck"), (True, "InfiniBandDegradationCheck")]
