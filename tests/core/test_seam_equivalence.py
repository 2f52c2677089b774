"""The check-family seam changed nothing — the same events and state, poll after poll.

The outcome of four random whole-host traces and of a resumed run was recorded by main at
dd25288, before the seam (``tests/core/equivalence.py``). The evaluator of today must produce
the identical event stream (every field, in the same order) and the identical persisted state,
and a state file that main wrote must load and carry on exactly as main carried on from it.

The suspect part of each unhealthy event (core/suspect.py) is the one field added since: the
recorded stream is compared with it taken out (:func:`without_suspect`: the two metadata
keys, nothing else), and every unhealthy event must carry it.
"""

from __future__ import annotations

import json
import shutil
from pathlib import Path
from typing import Any

import pytest

from nichealthd.core.events import SUSPECT_EVIDENCE_KEY, SUSPECT_KEY
from nichealthd.core.suspect import PARTS
from nichealthd.storage.store import load_state, save_state

from .equivalence import (
    OLD_STATE,
    POLLS,
    RESUME_AT,
    RESUME_SEED,
    SEEDS,
    WAITING_DIFFERENCE,
    main_state,
    recorded,
    replay,
)


def without_suspect(polls: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """The polls with each unhealthy event's suspect taken out (checked present and one of
    the parts), as main recorded them; a healthy event must have none."""
    out = []
    for poll in polls:
        events = []
        for event in poll["events"]:
            metadata = dict(event["metadata"])
            part = metadata.pop(SUSPECT_KEY, None)
            evidence = metadata.pop(SUSPECT_EVIDENCE_KEY, None)
            if event["isHealthy"]:
                assert part is None and evidence is None, event
            else:
                assert part in PARTS and evidence, event
            events.append(dict(event, metadata=metadata))
        out.append(dict(poll, events=events))
    return out


@pytest.mark.parametrize("seed", SEEDS)
def test_random_host_traces_give_the_recorded_events_and_states(seed: int) -> None:
    expected = recorded()[str(seed)]
    got = without_suspect(replay(seed))
    assert len(got) == len(expected)
    for mine, theirs in zip(got, expected):
        assert mine == theirs, f"poll {theirs['poll']} differs"


def test_todays_rule_for_ports_waiting_for_the_sm_moves_one_card_verdict_only() -> None:
    """Seed 2 under today's card rule: main's events, but for one card verdict held until
    its hold is over (a port suppressed at first sight, then ARMED: waiting for the SM)."""
    main, today = recorded()["2"], without_suspect(replay(2, today=True))
    was, now, message = WAITING_DIFFERENCE

    def without_it(stream: list[dict[str, Any]]) -> list[tuple[int, list[dict[str, Any]]]]:
        return [(p["poll"], [e for e in p["events"] if e["message"] != message])
                for p in stream]

    def at(stream: list[dict[str, Any]]) -> list[int]:
        return [p["poll"] for p in stream for e in p["events"] if e["message"] == message]

    assert without_it(today) == without_it(main)
    assert (at(main), at(today)) == ([was], [now])
    for seed in set(SEEDS) - {2}:
        assert without_suspect(replay(seed, today=True)) == recorded()[str(seed)]


def test_a_state_file_written_by_main_loads_and_carries_on_as_main_did(tmp_path: Path) -> None:
    path = tmp_path / "state.json"
    shutil.copy(OLD_STATE, path)
    loaded = load_state(str(path))
    assert not loaded.fresh and loaded.problem is None
    assert main_state(loaded.state) == json.loads(OLD_STATE.read_text())
    got = replay(RESUME_SEED, POLLS, start=RESUME_AT + 1, state=loaded.state)
    assert without_suspect(got) == recorded()["resume"]
    save_state(str(path), loaded.state)  # written back by the new code: main's keys unchanged
    assert main_state(load_state(str(path)).state) == json.loads(OLD_STATE.read_text())
