"""The persisted monitor state: the host's keys plus one section per check family, as JSON.

The state file keeps the layout of link-counter-detection §6.6: ``version``, ``boot_id`` and
``event_seq`` belong to the host, and every other top-level key to the check family that owns
it (:mod:`nichealthd.core.family`). ``schemas`` records each family's section layout: a family
whose keys are absent starts fresh on its own (a family added by an upgrade), and so does one
whose section was written by a newer nichealthd (with a note saying so). Anything else
unusable makes the whole file corrupt: the daemon moves it aside and starts fresh. Each
section is a dataclass read and written by the one codec of :mod:`nichealthd.core.codec`.
"""

from __future__ import annotations

from typing import Any, Optional, TypeVar, cast

from . import checks
from .codec import MAX_SEQ, parse_int, parse_str, parse_table
from .family import CheckFamily

STATE_VERSION = 1

HEALTHY = "healthy"
DEGRADED = "degraded"
FATAL = "fatal"
SUPPRESSED = "suppressed"  # unhealthy at the first poll with no evidence: not reported
# The health model's words for a port besides those (core/health.py).
UNCABLED = "uncabled"  # SUPPRESSED in the state: down at first sight, card not short
UNKNOWN = "unknown"  # never read and nothing recorded, or not judged
RANK = {HEALTHY: 0, UNCABLED: 0, UNKNOWN: 1, DEGRADED: 2, FATAL: 3}

S = TypeVar("S")


class StateCorrupt(ValueError):
    """The state file exists but cannot be trusted; the daemon starts fresh."""


class MonitorState:
    """The whole persisted state. Treated as a value: the evaluator returns a new one.

    Sections are values too: a family never changes a section it was given, so a copy of the
    state shares them. A family's section is read as ``state.section(FAMILY)``.
    """

    def __init__(self, boot_id: str = "", event_seq: int = 0, version: int = STATE_VERSION,
                 sections: Optional[dict[str, Any]] = None) -> None:
        self.boot_id = boot_id
        self.event_seq = event_seq
        self.version = version
        self.sections: dict[str, Any] = dict(sections or {})
        for family in checks.families():
            if family.id not in self.sections:
                self.sections[family.id] = family.fresh()

    def section(self, family: CheckFamily[S, Any, Any]) -> S:
        """The section of ``family``."""
        return cast(S, self.sections[family.id])

    def copy(self) -> MonitorState:
        """A copy whose host fields and section table can change without touching this one."""
        return MonitorState(self.boot_id, self.event_seq, self.version, self.sections)

    def __eq__(self, other: object) -> bool:
        if not isinstance(other, MonitorState):
            return NotImplemented
        return (self.boot_id, self.event_seq, self.version, self.sections) == (
            other.boot_id, other.event_seq, other.version, other.sections)

    __hash__ = None  # type: ignore[assignment]  # mutable

    def __repr__(self) -> str:
        return (f"MonitorState(boot_id={self.boot_id!r}, event_seq={self.event_seq}, "
                f"sections={self.sections!r})")

    def to_json(self) -> dict[str, Any]:
        data: dict[str, Any] = {"version": self.version, "boot_id": self.boot_id}
        families = checks.families()
        for family in families:
            data.update(family.dump(self.sections[family.id]))
        data["event_seq"] = self.event_seq
        data["schemas"] = {family.id: family.schema for family in families}
        return data

    @classmethod
    def from_json(cls, data: object) -> MonitorState:
        """Parse and type-check; any structural problem raises :class:`StateCorrupt`."""
        return parse_state(data)[0]


def parse_state(data: object) -> tuple[MonitorState, tuple[str, ...]]:
    """The state and the notes of sections that start fresh (written by a newer version).

    Raises :class:`StateCorrupt` for anything unusable."""
    try:
        return _parse_state(data)
    except StateCorrupt:
        raise
    except (KeyError, TypeError, ValueError, AttributeError, OverflowError) as exc:
        raise StateCorrupt(f"unexpected content ({type(exc).__name__}: {exc})") from None


def _parse_state(data: object) -> tuple[MonitorState, tuple[str, ...]]:
    if not isinstance(data, dict):
        raise StateCorrupt("top level is not a JSON object")
    version = parse_int(data.get("version", STATE_VERSION))
    if version != STATE_VERSION:
        raise StateCorrupt(f"unsupported state version {version}")
    schemas = {parse_str(k): parse_int(v, 2**16)
               for k, v in parse_table(data, "schemas").items()}
    sections: dict[str, Any] = {}
    notes = []
    for family in checks.families():
        schema = schemas.get(family.id, 1)  # files written before the seam: every layout 1
        if schema > family.schema:
            notes.append(f"the {family.id} section was written by a newer nichealthd (layout "
                         f"{schema}, this one reads up to {family.schema}): it starts fresh")
            sections[family.id] = family.fresh()
        else:
            sections[family.id] = family.load(data, schema)
    state = MonitorState(parse_str(data.get("boot_id", "")),
                         parse_int(data.get("event_seq", 0), MAX_SEQ), version, sections)
    return state, tuple(notes)


def counter_key(device: str, port: int, name: str) -> str:
    """``<device>:<port>:<counter name>`` (link-counter-detection §6.6)."""
    return f"{device}:{port}:{name}"
