"""The link-counter family's section of the state: snapshots, latched breaches, saturation.

Counter snapshots (value + wall-clock timestamp, authoritative across processes: DESIGN §2.5)
and breach flags are spec §6.6's keys; the saturation tables are nichealthd's (#21.3). The JSON
is the same as before the check-family seam, so a state file of an older nichealthd loads.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from datetime import datetime
from typing import Any, Mapping, NamedTuple, Optional

from ..events import format_timestamp
from ..state import parse_bool, parse_nonnegative, parse_str, parse_table, parse_when, timestamps

KEYS = ("counter_snapshots", "breach_flags", "saturated_counters", "saturated_quiet_counters")


class CounterSnap(NamedTuple):
    """A counter value and when it was read (the start of the current window).

    A NamedTuple: a per-second velocity window closes on every poll, so one is made for most
    counters of every port on every poll.
    """

    value: int
    timestamp: datetime


@dataclass(frozen=True)
class BreachFlag:
    """A latched threshold breach; cleared only by a counter reset or a reboot.

    ``last_value`` is the last value seen while latched (None in state files written before
    it existed). A latched counter keeps moving; after a restart a decrease must be judged
    against where it was last seen, not against the snapshot of the breach: 2 at the breach,
    2^32-1 before the restart and 1 after it is a wrap, not a reset.
    """

    check_name: str
    is_fatal: bool
    since: datetime
    breached: bool = True
    last_value: Optional[int] = None


@dataclass
class CounterSection:
    """What the counter family remembers; a value of one poll (see :meth:`copy`)."""

    counter_snapshots: dict[str, CounterSnap] = field(default_factory=dict)
    breach_flags: dict[str, BreachFlag] = field(default_factory=dict)
    # Counter files stuck at their saturation value, keyed by ``<device>:<port>:<file name>``:
    # those reported with an event (error counters) and those only shown (traffic counters).
    saturated: dict[str, datetime] = field(default_factory=dict)
    saturated_quiet: dict[str, datetime] = field(default_factory=dict)

    def copy(self) -> CounterSection:
        """A copy whose containers can be changed without touching this one."""
        return CounterSection(dict(self.counter_snapshots), dict(self.breach_flags),
                              dict(self.saturated), dict(self.saturated_quiet))

    def to_json(self) -> dict[str, Any]:
        ts = format_timestamp
        return {
            "counter_snapshots": {
                k: {"value": s.value, "timestamp": ts(s.timestamp)}
                for k, s in sorted(self.counter_snapshots.items())},
            "breach_flags": {
                k: {"breached": b.breached, "check_name": b.check_name, "is_fatal": b.is_fatal,
                    "since": ts(b.since),
                    **({} if b.last_value is None else {"last_value": b.last_value})}
                for k, b in sorted(self.breach_flags.items())},
            "saturated_counters": timestamps(self.saturated),
            "saturated_quiet_counters": timestamps(self.saturated_quiet),
        }

    @classmethod
    def from_json(cls, data: Mapping[str, Any]) -> CounterSection:
        """Layout 1, the only one so far. Raises on anything malformed."""
        when = parse_when
        return cls(
            counter_snapshots={
                parse_str(k): CounterSnap(parse_nonnegative(v["value"]), when(v["timestamp"]))
                for k, v in parse_table(data, "counter_snapshots").items()},
            breach_flags={
                parse_str(k): BreachFlag(
                    parse_str(v["check_name"]), parse_bool(v["is_fatal"]), when(v["since"]),
                    parse_bool(v.get("breached", True)),
                    parse_nonnegative(v["last_value"]) if "last_value" in v else None)
                for k, v in parse_table(data, "breach_flags").items()
                if parse_bool(v.get("breached", True))},
            saturated={parse_str(k): when(v)
                       for k, v in parse_table(data, "saturated_counters").items()},
            saturated_quiet={parse_str(k): when(v)
                             for k, v in parse_table(data, "saturated_quiet_counters").items()},
        )
