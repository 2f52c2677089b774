"""The start-up decision: resume the saved state, or start from a clean baseline.

As link-counter-detection §6.5 has it. Pure: the monitor reads the state file and the boot ID, this
decides. A baseline poll sends a healthy event for everything it sees (clearing whatever the
platform still holds), so it is chosen exactly when the saved state cannot speak for this boot:
there is none (or it was unusable), or the host rebooted since it was written.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Optional

from .state import MonitorState


@dataclass(frozen=True)
class StartDecision:
    """The state the first poll starts from, whether it is a baseline, and why (one log line)."""

    state: MonitorState
    baseline: bool
    reason: str
    warn: bool = False  # the reason deserves a warning, not an info line


def decide_start(saved: Optional[MonitorState], boot_id: Optional[str],
                 journal_seq: int = 0) -> StartDecision:
    """``saved`` is None when there is no usable state file; ``boot_id`` None when unreadable.

    The event sequence never goes back: a fresh state continues after the journal's last
    entry, so consumers' cursors stay valid.
    """
    if saved is None:
        decision = StartDecision(MonitorState(boot_id=boot_id or ""), True,
                                 "no saved state: sending healthy baselines")
    elif boot_id and saved.boot_id != boot_id:
        decision = StartDecision(
            MonitorState(boot_id=boot_id), True,
            f"boot ID changed ({saved.boot_id or 'none'} -> {boot_id}): host rebooted; "
            f"clearing all state and sending healthy baselines")
    elif not boot_id:
        decision = StartDecision(saved.copy(), False,
                                 "boot ID unreadable; assuming the same boot as the saved state",
                                 warn=True)
    else:
        decision = StartDecision(saved.copy(), False, "same boot: resuming the saved state")
    decision.state.event_seq = max(decision.state.event_seq, journal_seq)
    return decision
