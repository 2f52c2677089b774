"""Issue 12 class 1: a lost or corrupt ``cursors.json`` never skips a pending event.

A real daemon (``--once``) commits events while the platform connector (a real gRPC server on
a unix socket) is down; the cursors file is then deleted or damaged and the daemon run again
with the connector up: every pending event arrives (some may arrive twice, none is lost)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from nichealthd.sim import mutate

from .. import simtrees
from .connector_fixtures import FakeConnector

ROOT = Path(__file__).resolve().parents[2]


def run_once(root: Path, target: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "nichealthd.runtime.daemon",
         "--config", str(root / "nichealthd.toml"),
         "--platform-connector-socket", target, "--once"],
        cwd=ROOT, capture_output=True, text=True, timeout=120,
        env={**os.environ, "PYTHONPATH": str(ROOT)})


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
    result = run_once(root, connector.target)
    assert result.returncode == 0, result.stderr
    assert "Traceback" not in result.stderr
    delivered = set(connector.event_ids())
    missing = [i for i in pending if i not in delivered]
    assert not missing, f"{len(missing)} of {len(pending)} pending events were skipped"
    assert "consumers restart from the oldest journal entry" in result.stderr
