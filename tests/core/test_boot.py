"""Which start is a baseline, from what state, and what is logged: a table.

The rule of link-counter-detection §6.5."""

from __future__ import annotations

from datetime import datetime, timezone
from typing import Optional

import pytest

from nichealthd.core.boot import decide_start
from nichealthd.core.checks.counter_section import BreachFlag
from nichealthd.core.checks.link_counters import LINK_COUNTERS
from nichealthd.core.state import MonitorState

from .builders import with_fields

SINCE = datetime(2026, 11, 23, tzinfo=timezone.utc)


def saved(boot_id: str, seq: int = 7) -> MonitorState:
    return with_fields(MonitorState(boot_id=boot_id, event_seq=seq), LINK_COUNTERS, breach_flags={
        "mlx5_0:1:link_downed": BreachFlag("InfiniBandStateCheck", True, SINCE)})


@pytest.mark.parametrize("state,boot_id,baseline,kept,warn,reason", [
    (None, "boot-b", True, False, False, "no saved state"),
    (None, None, True, False, False, "no saved state"),
    (saved("boot-a"), "boot-b", True, False, False, "boot ID changed (boot-a -> boot-b)"),
    (saved(""), "boot-b", True, False, False, "boot ID changed (none -> boot-b)"),
    (saved("boot-a"), "boot-a", False, True, False, "same boot"),
    (saved("boot-a"), None, False, True, True, "boot ID unreadable"),
    (saved("boot-a"), "", False, True, True, "boot ID unreadable"),
], ids=["no-state", "no-state-no-boot-id", "rebooted", "state-without-boot-id", "same-boot",
        "boot-id-unreadable", "boot-id-empty"])
def test_start_decision(state: Optional[MonitorState], boot_id: Optional[str], baseline: bool,
                        kept: bool, warn: bool, reason: str) -> None:
    decision = decide_start(state, boot_id)
    assert decision.baseline is baseline
    assert decision.warn is warn
    assert reason in decision.reason
    # a baseline clears every latch
    assert bool(decision.state.section(LINK_COUNTERS).breach_flags) is kept
    if baseline:
        assert decision.state.boot_id == (boot_id or "")
    else:
        assert decision.state.boot_id == "boot-a"


@pytest.mark.parametrize("state", [None, saved("boot-a", seq=3), saved("boot-a", seq=90)])
@pytest.mark.parametrize("boot_id", ["boot-a", "boot-b"])
def test_the_event_sequence_never_goes_back(state: Optional[MonitorState], boot_id: str) -> None:
    """Consumers' cursors stay valid: a fresh or rebooted state continues after the journal."""
    decision = decide_start(state, boot_id, journal_seq=40)
    kept = state.event_seq if state is not None and not decision.baseline else 0
    assert decision.state.event_seq == max(kept, 40)


def test_the_saved_state_is_not_changed() -> None:
    state = saved("boot-a", seq=3)
    decide_start(state, "boot-a", journal_seq=40)
    assert state.event_seq == 3
