"""One health model for a port, used by every surface.

A port's health is the worst of its port-state condition and every open condition on it:
latched counter breaches (fatal or not), saturation reported as an event, the verdict of a
short card it is part of, its device or the port itself declared missing. Each condition adds
a reason. ``nichealthctl show ports``/``status``/``check``, the D-Bus records and signal, the
``nichealthd_port_health`` metric and STATUS= all read :func:`assess`, so they cannot
disagree: before it, a port with a fatal counter breach was "healthy" everywhere but
``check``.

Pure: (committed state, the poll's snapshot and roles) in, a :class:`HostHealth` out. It
names no family: the bases and the conditions come through the registry (the link-state
family's are in :mod:`nichealthd.core.checks.link_health`).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Callable, Iterable, Mapping, Optional

from .checks import families, supplying
from .family import Condition, PortBase, PortId
from .model import HostSnapshot
from .state import DEGRADED, FATAL, HEALTHY, RANK, UNCABLED, UNKNOWN, MonitorState
from .topology import Role

__all__ = ["UNCABLED", "UNKNOWN", "HostHealth", "PortHealth", "assess"]


@dataclass(frozen=True)
class PortHealth:
    """The health of one monitored port and why (empty reasons: nothing open)."""

    device: str
    port: int
    health: str
    reasons: tuple[str, ...] = ()
    present: bool = True  # False: the port (or its device) is not in this poll
    codes: tuple[str, ...] = ()  # the errorCodes of its open conditions (core/suspect.py)

    @property
    def fatal(self) -> bool:
        return self.health == FATAL

    @property
    def name(self) -> str:
        return f"{self.device}/{self.port}"

    def problem(self) -> str:
        """``mlx5_5/1 link_downed breached`` (the text of ``check`` and ``status``)."""
        return f"{self.name} {', '.join(self.reasons) or self.health}"


@dataclass(frozen=True)
class HostHealth:
    """Every monitored port's health plus the conditions that rest on no port."""

    ports: Mapping[PortId, PortHealth]
    other: tuple[tuple[str, str], ...] = field(default=())  # (health, reason)

    @property
    def health(self) -> str:
        """``healthy``, ``degraded`` or ``fatal``: the worst condition anywhere."""
        ranks = [RANK.get(p.health, 0) for p in self.ports.values()]
        ranks += [RANK.get(h, 0) for h, _ in self.other]
        worst = max(ranks, default=0)
        if worst >= RANK[FATAL]:
            return FATAL
        return DEGRADED if worst >= RANK[DEGRADED] else HEALTHY

    def names(self, health: str) -> list[str]:
        return [p.name for _, p in sorted(self.ports.items()) if p.health == health]

    def problems(self) -> list[str]:
        """Fatal first, then degraded: ports with their reasons, then the rest."""
        out = []
        for wanted in (FATAL, DEGRADED):
            out += [p.problem() for _, p in sorted(self.ports.items()) if p.health == wanted]
            out += [reason for h, reason in self.other if h == wanted]
        return out

    def counts(self) -> dict[str, int]:
        counts = {HEALTHY: 0, DEGRADED: 0, FATAL: 0, UNCABLED: 0, UNKNOWN: 0}
        for p in self.ports.values():
            counts[p.health] = counts.get(p.health, 0) + 1
        counts["total"] = len(self.ports)
        return counts


def assess(state: MonitorState, snapshot: HostSnapshot, roles: Mapping[str, Role],
           pictures: Optional[Mapping[str, Any]] = None,
           failed: Optional[Mapping[str, str]] = None) -> HostHealth:
    """The health of every monitored port of the poll, and of the ports it no longer sees.

    The base is what the families that judge port state give (:meth:`CheckFamily.port_bases`:
    the link-state family's reported state, a missing device or port; ``present`` False for
    a port the poll does not list); a port a family calls uncabled is uncabled. Every family's
    open conditions (:meth:`CheckFamily.conditions`) worsen the ports they are about, or the
    host. ``pictures``: the families' pictures of the poll, for conditions that depend on it.

    ``failed``: the families that could not judge this poll (:attr:`CycleResult.failed`).
    What they hold from earlier polls still counts; a port one of them judges
    (:meth:`CheckFamily.judges`) that is otherwise healthy is unknown, never healthy, and the
    host is degraded with the reason (as a blind host is: the monitor cannot vouch for what
    it did not judge). A port none of them judges keeps its health.
    """
    pictures = pictures or {}
    bases: dict[PortId, PortBase] = {}
    uncabled: set[PortId] = set()
    for family in supplying("port_bases"):
        bases.update(family.port_bases(state.section(family), snapshot, roles))
    for family in supplying("uncabled"):
        uncabled |= family.uncabled(state.section(family))
    for key in uncabled & bases.keys():
        if bases[key].present:
            bases[key] = PortBase(UNCABLED)
    ranks = {key: RANK.get(base.health, 0) for key, base in bases.items()}
    added: dict[PortId, tuple[str, ...]] = {}  # the reasons conditions add to a base's
    codes: dict[PortId, tuple[str, ...]] = {key: (base.code,) for key, base in bases.items()
                                            if base.code}
    other: list[tuple[str, str]] = []

    def worsen(key: PortId, health: str, reason: str) -> None:
        ranks[key] = max(ranks[key], RANK[health])
        more = added.get(key, ())
        if reason not in bases[key].reasons and reason not in more:
            added[key] = (*more, reason)

    def apply(conditions: Iterable[Condition]) -> None:
        for condition in conditions:
            if condition.port is not None and condition.port in ranks:
                worsen(condition.port, condition.health, condition.reason)
                if condition.code and condition.code not in codes.get(condition.port, ()):
                    codes[condition.port] = (*codes.get(condition.port, ()), condition.code)
            else:
                other.append((condition.health, condition.alone or condition.reason))

    for family in families():
        apply(family.conditions(state.section(family), pictures.get(family.id)))
    for family in supplying("base_conditions"):
        apply(family.base_conditions(state.section(family), snapshot, bases))
    if snapshot.blind:  # nothing could be looked at: never healthy (no host-wide unknown)
        other.append((DEGRADED, snapshot.blind))
    if failed:
        _not_judged(snapshot, bases, ranks, failed, worsen)
        other.extend((DEGRADED, f"check family {family} cannot judge: {why}")
                     for family, why in sorted(failed.items()))

    by_rank = {rank: health for health, rank in RANK.items() if health != UNCABLED}
    ports = {}
    for key, base in bases.items():
        rank = ranks[key]
        health = base.health if RANK.get(base.health, 0) == rank else by_rank[rank]
        more = added.get(key)
        ports[key] = _port_health(key, health, base.reasons + more if more else base.reasons,
                                  base.present, codes.get(key, ()))
    return HostHealth(ports, tuple(other))


def _not_judged(snapshot: HostSnapshot, bases: Mapping[PortId, PortBase],
                ranks: Mapping[PortId, int], failed: Mapping[str, str],
                worsen: Callable[[PortId, str, str], None]) -> None:
    """Make unknown each healthy port of the poll that a failed family judges."""
    judging = [family for family in families() if family.id in failed]
    for device in snapshot.devices:
        for port in device.ports:
            key = (device.name, port.port)
            base = bases.get(key)
            if base is None or not base.present or base.health != HEALTHY \
                    or ranks[key] != RANK[HEALTHY]:
                continue
            names = [family.id for family in judging if family.judges(device, port)]
            if names:
                worsen(key, UNKNOWN, f"not judged by {', '.join(sorted(names))}")


_KNOWN: dict[tuple[PortId, str, tuple[str, ...], bool, tuple[str, ...]], PortHealth] = {}
_KNOWN_KEPT = 1 << 14


def _port_health(key: PortId, health: str, reasons: tuple[str, ...], present: bool,
                 codes: tuple[str, ...] = ()) -> PortHealth:
    """The port's health, the same (frozen) object as at the last poll when nothing about it
    changed: every poll assesses every port, and nearly all of them are as before."""
    found = _KNOWN.get((key, health, reasons, present, codes))
    if found is None:
        if len(_KNOWN) >= _KNOWN_KEPT:
            _KNOWN.clear()
        found = _KNOWN[(key, health, reasons, present, codes)] = PortHealth(
            key[0], key[1], health, reasons, present, codes)
    return found
