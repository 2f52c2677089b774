"""Which committed events drain or resume the Slurm node: pure rules over the drain record.

A fatal event (``isFatal``) drains; a degraded one never does. A healthy event clears the
fatal conditions it matches with the platform's own rule (NVSentinel's fault-quarantine): the same
``checkName``; no entities clears every condition of that check, else the condition must
carry all of its entities; and, when it carries error codes, one of them. Once no condition
the node was drained for is open, the node may be resumed — the executor
(:mod:`.service`) does so only while the node's drain reason is still the one nichealthd set.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, replace
from typing import Any, Optional

from ...core.events import ENTITY_NIC, ENTITY_PORT, SUSPECT_SUFFIX, HealthEvent

REASON_PREFIX = "nichealthd: "
# Slurm keeps any length, but sinfo, scontrol and the site's dashboards show reasons on one
# line; long messages (a counter's full description) are cut to this many characters.
REASON_MAX = 128
ELLIPSIS = "..."

DRAIN = "drain"
RESUME = "resume"


@dataclass(frozen=True)
class Condition:
    """An open fatal condition the node is drained for, keyed as the platform keys it."""

    check: str
    entities: tuple[tuple[str, str], ...]
    codes: tuple[str, ...]
    reason: str  # the drain reason of its event

    @property
    def key(self) -> tuple[str, frozenset[tuple[str, str]], frozenset[str]]:
        return self.check, frozenset(self.entities), frozenset(self.codes)

    def to_json(self) -> dict[str, Any]:
        return {"check": self.check, "entities": [list(e) for e in self.entities],
                "codes": list(self.codes), "reason": self.reason}

    @classmethod
    def from_json(cls, data: Any) -> Condition:
        """Strict: anything but the shape :meth:`to_json` writes raises ValueError."""
        if not isinstance(data, dict):
            raise ValueError("a condition is not an object")
        check, entities, codes, reason = (data.get(k) for k in
                                          ("check", "entities", "codes", "reason"))
        if not (isinstance(check, str) and isinstance(reason, str)
                and isinstance(entities, list) and isinstance(codes, list)
                and all(isinstance(e, list) and len(e) == 2
                        and all(isinstance(v, str) for v in e) for e in entities)
                and all(isinstance(c, str) for c in codes)):
            raise ValueError(f"malformed condition {data!r:.200}")
        return cls(check, tuple((e[0], e[1]) for e in entities), tuple(codes), reason)

    def label(self) -> str:
        """``InfiniBandStateCheck mlx5_0/1 port_state``: what ``slurm_drained_for`` lists."""
        where = "/".join(v for t, v in self.entities if t in (ENTITY_NIC, ENTITY_PORT))
        return " ".join(p for p in (self.check, where, ",".join(self.codes)) if p)


@dataclass(frozen=True)
class DrainRecord:
    """What the node is drained for (persisted: :mod:`.record`). ``reason`` is the drain
    reason nichealthd set and still holds, ``""`` while it holds no drain; ``draining`` the
    reason of a drain command it is about to run or ran without seeing it end (written
    before the command, so a crash in between cannot make its own drain look like an
    administrator's). nichealthd knows its drains by these exact texts and the node, never
    by their prefix: an administrator may write any reason, ``nichealthd: ...`` included."""

    node: str = ""
    reason: str = ""
    conditions: tuple[Condition, ...] = ()
    draining: str = ""

    def set_by_us(self, held: str) -> bool:
        """Whether the node's current reason ``held`` is one nichealthd set on this node."""
        return bool(held) and held in (self.reason, self.draining)


@dataclass(frozen=True)
class Decision:
    """The record after an event, and what to run for it: ``action`` is ``""``,
    :data:`DRAIN` (with the reason to set) or :data:`RESUME` (``reason`` is the drain reason
    the node must still have)."""

    record: DrainRecord
    action: str = ""
    reason: str = ""


def condition_of(event: HealthEvent) -> Condition:
    return Condition(event.check_name, event.entities, event.error_code, reason_for(event))


def clears(healthy: HealthEvent, condition: Condition) -> bool:
    """Whether the healthy event clears the condition (the platform's matching rule)."""
    if healthy.check_name != condition.check:
        return False
    if healthy.entities and not set(healthy.entities) <= set(condition.entities):
        return False
    return not healthy.error_code or bool(set(healthy.error_code) & set(condition.codes))


def decide(record: DrainRecord, event: HealthEvent, resume: bool) -> Decision:
    """The record after ``event`` and the action it calls for; ``resume`` is slurmResume."""
    if event.is_fatal and not event.is_healthy:
        condition = condition_of(event)
        kept = tuple(c for c in record.conditions if c.key != condition.key)
        return Decision(replace(record, conditions=kept + (condition,)), DRAIN,
                        condition.reason)
    if not event.is_healthy:
        return Decision(record)  # degraded: never drains
    open_ = tuple(c for c in record.conditions if not clears(event, c))
    if len(open_) == len(record.conditions):
        return Decision(record)
    after = replace(record, conditions=open_)
    if open_ or not record.reason or not resume:
        return Decision(after)
    return Decision(replace(after, reason=""), RESUME, record.reason)


def reason_for(event: HealthEvent) -> str:
    """``nichealthd: mlx5_0 1: state DOWN, phys_state Polling - no connectivity``: one line,
    no double quotes, at most :data:`REASON_MAX` characters. The committed message's suspect
    suffix (core/suspect.py) is left out: it would push the condition past the limit."""
    device = _entity(event, ENTITY_NIC)
    port = _entity(event, ENTITY_PORT)
    message = event.message.partition(SUSPECT_SUFFIX)[0]
    if device and port and message.startswith(f"Port {device} port {port}: "):
        message = message[len(f"Port {device} port {port}: "):]
    elif device and message.startswith(f"{device}: "):
        message = message[len(device) + 2:]
    where = " ".join(p for p in (device, port) if p)
    text = REASON_PREFIX + (f"{where}: " if where else "") + message
    text = re.sub(r"\s+", " ", "".join(c if c.isprintable() else " " for c in text))
    text = text.replace('"', "'").strip()
    if len(text) > REASON_MAX:
        text = text[:REASON_MAX - len(ELLIPSIS)].rstrip() + ELLIPSIS
    return text


def _entity(event: HealthEvent, kind: str) -> str:
    return next((v for t, v in event.entities if t == kind), "")


def current_reason(output: str) -> Optional[str]:
    """The node's drain reason from the reason command's output, None when it has none.

    Takes sinfo's ``%E`` (one line, ``none`` when there is no reason) or ``scontrol show
    node``'s ``Reason=... [user@time]`` (no such line when there is none)."""
    match = re.search(r"(?:^|\s)Reason=(.*)$", output, re.M)
    if match:
        text = re.sub(r"\s*\[[^\]\s]*@[^\]\s]*\]\s*$", "", match.group(1)).strip()
    elif "NodeName=" in output:
        return None  # scontrol show node without a Reason line: no reason
    else:
        text = next((line.strip() for line in output.splitlines() if line.strip()), "")
    return None if text in ("", "none", "(null)") else text
