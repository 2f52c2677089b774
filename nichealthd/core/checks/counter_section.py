"""The link-counter family's section of the state: snapshots, latched breaches, saturation.

Counter snapshots (value + wall-clock timestamp, authoritative across processes) and breach
flags are the keys of link-counter-detection §6.6; the saturation tables are nichealthd's. The
JSON is the same as before the check-family seam, so a state file of an older nichealthd loads.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from datetime import datetime
from typing import NamedTuple, Optional

from ..codec import Layout, Section, stored


class CounterSnap(NamedTuple):
    """A counter value and when it was read (the start of the current window).

    A NamedTuple: a per-second velocity window closes on every poll, so one is made for most
    counters of every port on every poll.
    """

    value: int
    timestamp: datetime


def _latched(flags: dict[str, BreachFlag]) -> dict[str, BreachFlag]:
    """A flag written as not breached (never, but older files may hold one) is no flag."""
    return {k: flag for k, flag in flags.items() if flag.breached}


@dataclass(frozen=True)
class BreachFlag:
    """A latched threshold breach; cleared only by a counter reset or a reboot.

    ``last_value`` is the last value seen while latched (absent in state files written before
    it existed). A latched counter keeps moving; after a restart a decrease must be judged
    against where it was last seen, not against the snapshot of the breach: 2 at the breach,
    2^32-1 before the restart and 1 after it is a wrap, not a reset.
    """

    LAYOUT = Layout(order=("breached", "check_name", "is_fatal", "since", "last_value"))

    check_name: str
    is_fatal: bool
    since: datetime
    breached: bool = field(default=True, metadata=stored(legacy=True))
    last_value: Optional[int] = field(default=None, metadata=stored(
        legacy=None, null=False, omit=lambda flag: flag.last_value is None))


@dataclass
class CounterSection(Section):
    """What the counter family remembers; a value of one poll (see :meth:`copy`)."""

    counter_snapshots: dict[str, CounterSnap] = field(default_factory=dict)
    breach_flags: dict[str, BreachFlag] = field(default_factory=dict,
                                                metadata=stored(after=_latched))
    # Counter files stuck at their saturation value, keyed by ``<device>:<port>:<file name>``:
    # those reported with an event (error counters) and those only shown (traffic counters).
    saturated: dict[str, datetime] = field(default_factory=dict,
                                           metadata=stored(key="saturated_counters"))
    saturated_quiet: dict[str, datetime] = field(
        default_factory=dict, metadata=stored(key="saturated_quiet_counters"))


KEYS = CounterSection.keys()
