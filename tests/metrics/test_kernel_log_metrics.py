"""Fault repeats: the real daemon on a sim tree, its journal written by ``nichealthd-sim
kernel-log`` as an operator would in a drill: a non-fatal driver fault repeating on one
device gives one CONTACT_SUPPORT event and, when the (scaled-down) window empties, its
recovery; the metrics count the lines per rule and device, and those in the window."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any, Callable

import pytest

from .conftest import RunningDaemon, value
from .test_link_families import configure, sim

pytestmark = pytest.mark.usefixtures("journal_reader")

Start = Callable[[Path], RunningDaemon]
RULE = "mlx5_tx_timeout_detected"


def events(root: Path) -> list[dict[str, Any]]:
    path = root / "events.jsonl"
    return [json.loads(line) for line in path.read_text().splitlines()] if path.exists() else []


def repeated(root: Path) -> list[dict[str, Any]]:
    return [e for e in events(root) if e["errorCode"] == [f"{RULE}_repeated"]]


def test_a_repeating_fault_one_contact_support_event_its_recovery_and_metrics(
        sim_root: Path, daemon: Start) -> None:
    configure(sim_root, kernelLogPath=f'"{sim_root / "journal"}"',
              kernelLogRepeatWindow='"20s"')
    running = daemon(sim_root)
    running.next_polls()
    sim(sim_root, "kernel-log", "mlx5_0", RULE, "--count", "2", "--interval", "1")
    samples = running.next_polls(3)
    assert value(samples, "nichealthd_kernel_log_matches_total", rule=RULE,
                 device="mlx5_0") == 2
    assert value(samples, "nichealthd_kernel_log_repeat_window_matches", rule=RULE,
                 device="mlx5_0") == 2
    assert repeated(sim_root) == []
    sim(sim_root, "kernel-log", "mlx5_0", RULE)
    running.wait_for(lambda: len(repeated(sim_root)) == 1, what="the repetition event")
    (told,) = repeated(sim_root)
    assert (told["checkName"], told["isFatal"], told["isHealthy"],
            told["recommendedAction"]) == (
        "InfiniBandDegradationCheck", False, False, "CONTACT_SUPPORT")
    assert {"entityType": "NIC", "entityValue": "mlx5_0"} in told["entitiesImpacted"]
    driver = [e for e in events(sim_root) if e["errorCode"] == [RULE]]
    assert len(driver) == 1  # the three lines are within one 5-minute dedup window
    # the window (20 s) slides past the first line: one recovery, same identity
    running.wait_for(lambda: len(repeated(sim_root)) == 2, timeout=60, what="the recovery")
    healed = repeated(sim_root)[1]
    assert healed["isHealthy"] and healed["entitiesImpacted"] == told["entitiesImpacted"]
    assert healed["checkName"] == told["checkName"]
