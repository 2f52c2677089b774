"""A lost or corrupt ``cursors.json`` never skips a pending event.

A real daemon (``--once``) commits events while the platform connector (a real gRPC server on
a unix socket) is down; the cursors file is then deleted or damaged and the daemon run again
with the connector up: every pending event arrives (some may arrive twice, none is lost).

``--once`` delivers what it can within ``connectorTimeout`` (500 ms here) and leaves the rest
in the outbox for the next run; on a loaded machine one run may not deliver them all (at a
load of 20, 3 of 175 were still pending). So after each run every pending event must be
either delivered or still in the outbox (read from the journal and its cursors, as the next
run reads them): one that is neither is lost. The daemon runs again until all arrived, and
the test prints what each run delivered."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from pathlib import Path

import pytest

from nichealthd.sim import mutate
from nichealthd.storage.store import Journal
from nichealthd.surfaces.connector.outbox import CONSUMER

from .. import simtrees
from ..harness import DEADLINE
from .connector_fixtures import FakeConnector

ROOT = Path(__file__).resolve().parents[2]


def run_once(root: Path, target: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "nichealthd.runtime.daemon",
         "--config", str(root / "nichealthd.toml"),
         "--platform-connector-socket", target, "--once"],
        cwd=ROOT, capture_output=True, text=True, timeout=120,
        env={**os.environ, "PYTHONPATH": str(ROOT)})


def outbox_ids(root: Path) -> set[str]:
    """What the next run delivers, read as it reads it (nothing written): the events the
    connector's cursor has not passed, or every event while the cursors cannot be read
    (still a directory, say: then the next run restarts from the oldest entry too)."""
    journal = Journal(str(root / "var/lib/nichealthd"))
    journal.recover(None)
    entries = journal.history(10**9) if journal._cursors_lost else journal.pending(CONSUMER)
    return {entry.event.event_id for entry in entries}


def event_log_ids(root: Path) -> list[str]:
    return [json.loads(line)["metadata"]["nichealthd.event_id"]
            for line in (root / "events.jsonl").read_text().splitlines() if line.strip()]


@pytest.mark.parametrize("damage", ["deleted", "garbage", "not-an-object", "huge-cursor",
                                    "wrong-type", "directory"])
def test_lost_cursors_redeliver_every_pending_event(
        connector: FakeConnector, damage: str) -> None:
    root = simtrees.take("dgx-h100")
    with open(root / "nichealthd.toml", "a") as handle:
        handle.write('connectorTimeout = "500ms"\n')
    # The connector is down: baselines, then a fatal counter and a degradation, stay pending.
    assert run_once(root, connector.target).returncode == 0
    mutate.counter(root, "mlx5_0", 1, "link_downed", add=1)
    mutate.counter(root, "mlx5_1", 1, "symbol_error", add=5000)
    assert run_once(root, connector.target).returncode == 0
    pending = event_log_ids(root)
    assert len(pending) > 10 and connector.received == []
    cursors = root / "var/lib/nichealthd/cursors.json"
    assert cursors.exists()
    if damage == "deleted":
        cursors.unlink()
    elif damage == "garbage":
        cursors.write_bytes(b"\x00\xffnot json{{")
    elif damage == "not-an-object":
        cursors.write_text("[1, 2, 3]")
    elif damage == "huge-cursor":
        cursors.write_text(json.dumps({"connector": 10**30, "eventlog:" + str(
            root / "events.jsonl"): 10**30}))
    elif damage == "wrong-type":
        cursors.write_text(json.dumps({"connector": "7"}))
    else:
        cursors.unlink()
        cursors.mkdir()
    connector.start()
    arrived: list[int] = []  # of the pending events, delivered after each run
    end = time.monotonic() + 4 * DEADLINE  # reached only if runs stop making progress
    while True:
        result = run_once(root, connector.target)
        assert result.returncode == 0, result.stderr
        assert "Traceback" not in result.stderr
        if not arrived:
            assert "consumers restart from the oldest journal entry" in result.stderr
            # A directory is moved aside: else no cursor could be saved, and every run
            # restarted from the oldest entry and never reached the newest (seen at load 18:
            # 172 of 175 after each of six runs).
            assert cursors.is_file()
        delivered = set(connector.event_ids())
        outbox = outbox_ids(root)
        lost = [i for i in pending if i not in delivered and i not in outbox]
        assert not lost, (f"{len(lost)} of {len(pending)} pending events neither delivered "
                          f"nor in the outbox after run {len(arrived) + 1}")
        arrived.append(sum(i in delivered for i in pending))
        if arrived[-1] == len(pending):
            break
        assert time.monotonic() < end, f"delivered after each run: {arrived}"
    received = connector.event_ids()
    print(f"{damage}: of {len(pending)} pending events, delivered after each run {arrived}; "
          f"{len(received) - len(set(received))} delivered twice")
