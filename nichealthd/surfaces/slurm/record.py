"""The Slurm drain record in the state directory (``slurm.json``): what the node is drained
for, kept across restarts.

A file of its own, like the journal's ``cursors.json``, not a section of the state file: the
state file is the poller's, committed once per poll with the events, while the Slurm consumer
runs in its own thread at the pace of slurmctld; sharing the file would make one wait for the
other. The record is written (atomically) before the consumer's journal cursor passes the
event that changed it, so a crash in between replays that event against the newer record, and
every decision is idempotent (a drain already held, a resume already done are no-ops). A
drain's reason is written (``draining``) before its command runs, so a crash between the
command and the record still knows the node's reason as nichealthd's own.
"""

from __future__ import annotations

import json
import logging
import os
from typing import Optional

from ...storage.store import atomic_write, move_aside
from .decide import Condition, DrainRecord

log = logging.getLogger("nichealthd.slurm")

RECORD_NAME = "slurm.json"
VERSION = 1


def record_path(state_dir: str) -> str:
    return os.path.join(state_dir, RECORD_NAME)


def load_record(path: str, node: str) -> DrainRecord:
    """The record of ``node``; empty when there is none, and when it is unreadable (moved
    aside and said) or of another node (said: a renamed node starts afresh)."""
    try:
        with open(path, "rb") as handle:
            data = json.loads(handle.read())
        record = _parse(data)
    except FileNotFoundError:
        return DrainRecord(node)
    except (OSError, ValueError, RecursionError) as exc:
        where = move_aside(path) if not isinstance(exc, OSError) else None
        log.warning("Slurm drain record %s is unusable (%s)%s; starting with none: a drain "
                    "nichealthd set before is then not resumed automatically", path, exc,
                    f"; moved aside to {where}" if where else "")
        return DrainRecord(node)
    if record.node and record.node != node:
        log.warning("Slurm drain record %s is of node %s, not %s; starting with none",
                    path, record.node, node)
        return DrainRecord(node)
    return DrainRecord(node, record.reason, record.conditions, record.draining)


def save_record(path: str, record: DrainRecord) -> Optional[str]:
    """Write the record; the error text when that failed (the caller retries)."""
    data = {"version": VERSION, "node": record.node, "reason": record.reason,
            "draining": record.draining,
            "conditions": [c.to_json() for c in record.conditions]}
    try:
        atomic_write(path, json.dumps(data, indent=1).encode() + b"\n")
    except OSError as exc:
        return f"cannot write {path}: {exc.strerror}"
    return None


def _parse(data: object) -> DrainRecord:
    if not isinstance(data, dict) or data.get("version") != VERSION:
        raise ValueError("not a version 1 record")
    node, reason, conditions = data.get("node"), data.get("reason"), data.get("conditions")
    draining = data.get("draining", "")  # absent in records of earlier versions
    if not isinstance(node, str) or not isinstance(reason, str) \
            or not isinstance(conditions, list) or not isinstance(draining, str):
        raise ValueError("malformed record")
    return DrainRecord(node, reason, tuple(Condition.from_json(c) for c in conditions),
                       draining)
