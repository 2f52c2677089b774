"""One health model for a port, used by every surface (issue #22, "Health shown").

A port's health is the worst of its port-state condition and every open condition on it:
latched counter breaches (fatal or not), saturation reported as an event, the verdict of a
short card it is part of, its device or the port itself declared missing. Each condition adds
a reason. ``nichealthctl show ports``/``status``/``check``, the D-Bus records and signal, the
``nichealthd_port_health`` metric and STATUS= all read :func:`assess`, so they cannot
disagree: before it, a port with a fatal counter breach was "healthy" everywhere but
``check``.

Pure: (committed state, the poll's snapshot and roles) in, a :class:`HostHealth` out.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Mapping, Optional

from .checks import families
from .checks.efa_state import EFA_STATE
from .checks.link_section import PortRecord
from .checks.link_state import LINK_STATE
from .checks.ports import is_active, state_name
from .family import PortId
from .model import HostSnapshot, PortSnapshot
from .state import DEGRADED, FATAL, HEALTHY, SUPPRESSED, MonitorState
from .topology import Role

UNCABLED = "uncabled"  # SUPPRESSED in the state: down at first sight, card not short
UNKNOWN = "unknown"  # never read and nothing recorded
RANK = {HEALTHY: 0, UNCABLED: 0, UNKNOWN: 1, DEGRADED: 2, FATAL: 3}
MISSES_BEFORE_GONE = 3  # checks.devices / checks.ports: gone at the third miss



@dataclass(frozen=True)
class PortHealth:
    """The health of one monitored port and why (empty reasons: nothing open)."""

    device: str
    port: int
    health: str
    reasons: tuple[str, ...] = ()
    present: bool = True  # False: the port (or its device) is not in this poll

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

    The base is the link-state family's: the port's reported state, a short card, a missing
    device or port. Ports of a monitored device that vanished from the poll, and every
    recorded port of a known device absent from it, keep their record and are shown with
    ``present`` False. Every family's open conditions (:meth:`CheckFamily.conditions`)
    worsen the ports they are about, or the host. ``pictures``: the families' pictures of the
    poll, for conditions that depend on it.

    ``failed``: the families that could not judge this poll (:attr:`CycleResult.failed`).
    What they hold from earlier polls still counts; a port they would have judged that is
    otherwise healthy is unknown, never healthy, and the host is degraded with the reason
    (as a blind host is: the monitor cannot vouch for what it did not judge).
    """
    links = state.section(LINK_STATE)
    # EFA ports down since first sight without evidence (#18): uncabled, as ConnectX ones are
    # (their port attributes say ACTIVE/LinkUp whatever the netdev, so _base cannot see it).
    uncabled = EFA_STATE.suppressed(state.section(EFA_STATE))
    bases: dict[PortId, tuple[str, list[str], bool]] = {}
    card_of: dict[str, str] = {}
    present_devices = set()
    recorded: dict[str, list[PortRecord]] = {}  # device -> its port records (one pass)
    for each in links.port_states.values():
        recorded.setdefault(each.device, []).append(each)
    for device in snapshot.devices:
        present_devices.add(device.name)
        role = roles.get(device.name)
        if not (role and role.monitored):
            continue
        card_of[device.name] = device.card or ""
        seen = set()
        for port in device.ports:
            seen.add(port.port)
            if uncabled and (device.name, port.port) in uncabled:
                bases[(device.name, port.port)] = (UNCABLED, [], True)
                continue
            bases[(device.name, port.port)] = (
                *_base(port, links.port_states.get(port.key)), True)
        for record in recorded.get(device.name, ()):
            if record.port not in seen:
                health, why = _base(None, record)
                if record.misses >= MISSES_BEFORE_GONE:
                    health, why = FATAL, [*why, "port missing"]
                bases[(record.device, record.port)] = (health, why, False)
    absent = set(links.known_devices) - present_devices
    for record in (r for name in sorted(absent) for r in recorded.get(name, ())):
        health, why = _base(None, record)
        if record.device in links.missing_devices:
            health, why = FATAL, [f"{record.device} missing"]
        else:
            misses = links.device_misses.get(record.device, 0)
            if misses:
                why = [*why, f"{record.device} not seen ({misses} polls)"]
        bases[(record.device, record.port)] = (health, why, False)

    ranks = {key: RANK.get(h, 0) for key, (h, _, _) in bases.items()}
    reasons = {key: list(r) for key, (_, r, _) in bases.items()}
    other: list[tuple[str, str]] = []

    def worsen(key: PortId, health: str, reason: str) -> None:
        ranks[key] = max(ranks[key], RANK[health])
        if reason not in reasons[key]:
            reasons[key].append(reason)

    for family in families():
        picture = (pictures or {}).get(family.id)
        for condition in family.conditions(state.section(family), picture):
            if condition.port is not None and condition.port in ranks:
                worsen(condition.port, condition.health, condition.reason)
            else:
                other.append((condition.health, condition.alone or condition.reason))

    on_card: dict[str, list[PortId]] = {}
    if links.card_anomalies:
        for key in bases:
            on_card.setdefault(card_of.get(key[0], ""), []).append(key)
    for card, anomaly in sorted(links.card_anomalies.items()):
        reason = f"card {card} has {anomaly.active} of {anomaly.expected} ports active"
        short = [key for key in on_card.get(card, ())
                 if f"{key[0]}_{key[1]}" in anomaly.ports
                 or bases[key][0] in (DEGRADED, FATAL)]
        for key in short:
            worsen(key, FATAL, reason)
        if not short:
            other.append((FATAL, reason))

    if snapshot.blind:  # nothing could be looked at: never healthy (no host-wide unknown)
        other.append((DEGRADED, snapshot.blind))
    if failed:
        not_judged = f"not judged by {', '.join(sorted(failed))}"
        for key, (base, _, present) in bases.items():
            if present and base == HEALTHY and ranks[key] == RANK[HEALTHY]:
                worsen(key, UNKNOWN, not_judged)
        other.extend((DEGRADED, f"check family {family} cannot judge: {why}")
                     for family, why in sorted(failed.items()))

    attributed = {key[0] for key, (_, _, present) in bases.items() if not present}
    for name in sorted(links.missing_devices):
        if name not in attributed:
            other.append((FATAL, f"{name} missing"))

    by_rank = {rank: health for health, rank in RANK.items() if health != UNCABLED}
    ports = {}
    for key, (base, _, present) in bases.items():
        rank = ranks[key]
        health = base if RANK.get(base, 0) == rank else by_rank[rank]
        ports[key] = PortHealth(key[0], key[1], health, tuple(reasons[key]), present)
    return HostHealth(ports, tuple(other))


def _base(port: Optional[PortSnapshot], record: Optional[PortRecord]) -> tuple[str, list[str]]:
    """The port-state condition: the health last reported for the port, and why."""
    if record is None:
        if port is None or not port.readable:
            return UNKNOWN, ["state unreadable"]
        if is_active(port.state, port.phys_state):
            return HEALTHY, []
        return UNKNOWN, ["not evaluated"]
    if record.health == SUPPRESSED:
        return UNCABLED, []
    if record.health in (DEGRADED, FATAL):
        return record.health, [f"{state_name(record.state)}/{state_name(record.physical_state)}"]
    return HEALTHY, []
