"""RDMA devices that leave while their PCI functions stay are a driver event, not broken NICs.

``rmmod mlx5_ib``/``mlx5_core``, ``devlink dev reload``, a driver unbind, ``mlxfwreset`` or a
firmware activation of one card, a PCI remove/rescan and a driver upgrade unregister RDMA
devices while their PCI functions stay on the bus (or come straight back); a NIC that falls
off the bus takes its function with it (core/checks/identity.py: a device is its PCI function). So a
known device gone from the class directory in a complete enumeration is *held* — counted,
not judged — when

- its PCI function (the address recorded for it) is still listed under
  ``<sysfs-root>/bus/pci/devices`` (:attr:`HostSnapshot.pci_bus`, listed in a poll in which
  a known function has no device); or, where that cannot be told (no address recorded, the
  bus not listable),
- every known device present at the last enumeration is gone in the same poll (two or more:
  one device alone vanishing says nothing about the driver), or the class directory lists no
  device while Mellanox functions are on the bus (the whole-driver evidence).

The held devices form one driver event: devices that leave over several polls (an unload
with busy users removes them a few at a time, seconds apart; one card's firmware reset after
another's) join it. Once one of them has been gone ``driverReloadGrace``, one non-fatal event
per state check names every device held then; a device that joins later is named when its
own grace is over. A held device leaves the event when

- it is back (its misses are forgotten by :func:`.devices.device_present`);
- its function is seen off the bus: judged by the spec's three-poll rule from that poll on;
- it has been gone ``driverReloadTimeout``: judged at once (its misses are long past three,
  so it is fatal: a function unbound for good, a probe that never succeeded); or
  ``cardResetTimeout`` (2.5 minutes by default, at most ``driverReloadTimeout``) when it left
  while another known device stayed present (:attr:`DriverEvent.alone`);
- without the bus evidence, another held device is back: the driver is back without it, and
  the three-poll rule applies from then (link-state-detection §7).

The two timeouts (beside the specification, which makes every disappearance fatal after
three polls): a driver unload, reload or upgrade takes every device of the driver, and a
slow one (probes seconds to minutes apart, a package's post-install) gets the long timeout,
as do the devices still gone after the others are back. One card gone while its peers stay
is not the driver: a firmware reset of that card (``mlxfwreset``, a firmware activation,
mlx5 health recovery) is over in under 2 minutes, so a card still gone after
``cardResetTimeout`` is a NIC that failed to come back, REPLACE_VM within 3 minutes of its
leaving, not 15, while a training job on every GPU of the cluster waits on it. A device
that left alone but whose peers leave too before it is judged (an unload that takes them a
few at a time) is the driver's after all: :attr:`DriverEvent.alone` is emptied in a poll
that sees every known device gone.

When the last device has left, a reported event is closed by one healthy event per check it
was sent under (before any per-device verdict of the same poll: the evaluator puts this
family's host events in order).
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from datetime import datetime
from typing import Mapping, NamedTuple, Optional

from ..config import Config
from ..events import ENTITY_NIC, HealthEvent, make_event
from ..model import HostSnapshot
from .link_section import DriverEvent, LinkStateSection
from .link_settings import LinkStateSettings

CODE_DRIVER_EVENT = "driver_event"
MIN_DEVICES = 2  # "all at once" needs more than one device (or the PCI functions' evidence)


class DriverVerdict(NamedTuple):
    """What :func:`judge_driver_event` decided for one poll."""

    held: frozenset[str]  # names held from per-device judgement this poll
    events: list[HealthEvent]  # host-level events (report, close)
    notes: list[str]  # log lines


def on_bus(name: str, section: LinkStateSection, snapshot: HostSnapshot) -> Optional[bool]:
    """Whether the PCI function recorded for ``name`` is listed on the bus this poll; None
    when it cannot be told (no address recorded, the bus not listed or not listable)."""
    identity = section.identities.get(name)
    if snapshot.pci_bus is None or identity is None or not identity.pci_address:
        return None
    return identity.pci_address in snapshot.pci_bus


@dataclass(frozen=True)
class DriverPoll:
    """What one poll's judgement of the driver event reads: the committed section, the
    snapshot, the settings, the time, and how a device's events find their state check
    (``layer_of``: each gone or held device's recorded link layer; ``check_of``: a layer's
    state check, sent only when ``enabled``)."""

    previous: LinkStateSection
    snapshot: HostSnapshot
    config: Config
    now: datetime
    enabled: frozenset[str]
    layer_of: Mapping[str, str]
    check_of: Mapping[str, str]


def judge_driver_event(poll: DriverPoll, state: LinkStateSection) -> DriverVerdict:
    """Which gone devices are held this poll, with the host events and log lines.

    Writes ``state.driver_event`` and restarts the misses of a device that leaves the event
    for the three-poll rule.
    """
    previous, snapshot, now = poll.previous, poll.snapshot, poll.now
    event = previous.driver_event
    if not snapshot.complete:
        # Uncertain enumeration: nothing is counted or decided (the rule of devices.py).
        return DriverVerdict(frozenset(event.devices) if event else frozenset(), [], [])
    present = set(snapshot.parts.names)
    known = len([n for n in previous.known_devices if n not in previous.missing_devices])
    notes: list[str] = []
    if event is not None:
        if now < event.since:  # the wall clock went back: the waits start again from here
            event = replace(event, since=now, left={})
        event = _leave(event, poll, state, present, notes)
    held_before = set(previous.driver_event.devices if previous.driver_event else ())
    joining = _joining(event, previous, snapshot, present, held_before)
    peers = any(n in present for n in previous.known_devices
                if n not in previous.missing_devices)
    if joining:
        notes.append(_join_note(joining, event, poll, known, peers))
        event = _joined(event, joining, now, peers)
    elif event is not None and event.alone and not peers:
        event = replace(event, alone=())  # every known device gone: the driver's
    events: list[HealthEvent] = []
    if event is not None and event.devices:
        event, events = _report(event, poll, known)
    elif event is not None:
        events = _close(event, previous.driver_event, present, now)
        notes.append("the driver event is over")
        event = None
    state.driver_event = event
    return DriverVerdict(frozenset(event.devices) if event else frozenset(), events, notes)


class _Leaving(NamedTuple):
    """The devices that leave the driver event this poll, by reason."""

    back: list[str]
    off_bus: list[str]
    timed_out: list[str]
    behind: list[str]  # left behind by the driver's return


def _leave(event: DriverEvent, poll: DriverPoll, state: LinkStateSection, present: set[str],
           notes: list[str]) -> DriverEvent:
    """The event less the devices that leave it this poll (back, off the bus, timed out, or
    left behind by the driver's return), with a log line for each reason."""
    now = poll.now
    back = [n for n in event.devices if n in present]
    timeout, card = timeouts(poll.config)
    off_bus, timed_out, behind = [], [], []
    for name in event.devices:
        if name in present:
            continue
        bus = on_bus(name, poll.previous, poll.snapshot)
        limit = card if name in event.alone else timeout
        if bus is False:
            off_bus.append(name)
        elif (now - event.left_at(name)).total_seconds() >= limit:
            timed_out.append(name)
        elif back and bus is None:
            behind.append(name)
    for name in off_bus + behind:
        state.device_misses.pop(name, None)  # the three-poll rule starts now
    notes.extend(_leave_notes(event, _Leaving(back, off_bus, timed_out, behind),
                              (timeout, card), now))
    leaving = {*back, *off_bus, *timed_out, *behind}
    if not leaving:
        return event
    return replace(event, devices=tuple(n for n in event.devices if n not in leaving),
                   left={n: t for n, t in event.left.items() if n not in leaving},
                   alone=tuple(n for n in event.alone if n not in leaving))


def timeouts(config: Config) -> tuple[float, float]:
    """``driverReloadTimeout``, and ``cardResetTimeout`` capped by it: how long a held
    device may stay gone, as part of the whole driver's event or alone."""
    timings = config.settings(LinkStateSettings)
    return (timings.driver_reload_timeout,
            min(timings.card_reset_timeout, timings.driver_reload_timeout))


def _leave_notes(event: DriverEvent, leaving: _Leaving, limits: tuple[float, float],
                 now: datetime) -> list[str]:
    """A log line for each reason devices leave the event this poll."""
    back, off_bus, timed_out, behind = leaving
    notes = []
    if back:
        notes.append(f"{len(back)} of {len(event.devices)} RDMA devices are back after "
                     f"{_duration((now - event.since).total_seconds())}"
                     + ("" if len(back) == len(event.devices) else f": {_names(tuple(back))}"))
    if off_bus:
        notes.append(f"the PCI function of {_names(tuple(off_bus))} left the bus too: judged "
                     f"one by one (fatal after three polls without them)")
    alone = tuple(n for n in timed_out if n in event.alone)
    driver = tuple(n for n in timed_out if n not in event.alone)
    if driver:
        notes.append(f"{_names(driver)} gone longer than driverReloadTimeout "
                     f"({_duration(limits[0])}) with the PCI function on "
                     f"the bus: judged one by one")
    if alone:
        notes.append(f"{_names(alone)} gone longer than cardResetTimeout "
                     f"({_duration(limits[1])}) while other RDMA devices stay, with the PCI "
                     f"function on the bus: not a reset, a NIC that did not come back; judged "
                     f"one by one")
    if behind:
        notes.append(f"still gone after the others came back: {_names(tuple(behind))} "
                     f"(judged one by one: fatal after three polls without them)")
    return notes


def _joined(event: Optional[DriverEvent], joining: tuple[str, ...], now: datetime,
            peers: bool) -> DriverEvent:
    """The event with the devices that join it this poll (started by them if none);
    ``peers``: a known device is present this poll (they left alone, else no one is)."""
    alone = joining if peers else ()
    if event is None:
        return DriverEvent(now, joining, alone=alone)
    return replace(event, devices=tuple(sorted({*event.devices, *joining})),
                   left={**event.left, **{n: now for n in joining}},
                   alone=tuple(sorted({*event.alone, *alone})) if peers else ())


def _joining(event: Optional[DriverEvent], previous: LinkStateSection,
             snapshot: HostSnapshot, present: set[str], held: set[str]) -> tuple[str, ...]:
    """The gone devices that join (or start) the event this poll; ``held``: those held at
    the last poll (a device that left the event does not join it again in the same poll)."""
    candidates = sorted(n for n in previous.known_devices
                        if n not in previous.missing_devices and n not in held)
    gone = [n for n in candidates if n not in present]
    if not gone:
        return ()
    bus = {n: on_bus(n, previous, snapshot) for n in gone}
    joining = {n for n in gone if bus[n]}
    unknown = [n for n in gone if bus[n] is None]
    if unknown and _whole_driver(event, previous, snapshot, candidates, present):
        joining.update(unknown)
    return tuple(sorted(joining))


def _whole_driver(event: Optional[DriverEvent], previous: LinkStateSection,
                  snapshot: HostSnapshot, candidates: list[str], present: set[str]) -> bool:
    """The evidence for the driver when the bus cannot tell: the class directory empty while
    Mellanox functions are on the bus, or (starting an event) every known device gone in the
    same poll."""
    if not snapshot.devices and (snapshot.pci_functions or 0) > 0:
        return True
    return (event is None and len(candidates) >= MIN_DEVICES
            and not any(n in present for n in candidates)
            and all(previous.device_misses.get(n, 0) == 0 for n in candidates))


def _join_note(joining: tuple[str, ...], event: Optional[DriverEvent], poll: DriverPoll,
               known: int, peers: bool) -> str:
    snapshot, config = poll.snapshot, poll.config
    if event is None and len(joining) == known and not snapshot.devices:
        functions = snapshot.pci_functions
        why = (f"{functions} Mellanox PCI functions are still on the bus" if functions
               else "in the same poll")
        head = f"all {known} RDMA devices gone at once ({why}): driver unloaded or firmware " \
               f"reset in progress"
    else:
        joins = ("" if event is None or not event.devices
                 else f" (joins the driver event of {_names(event.devices)})")
        head = (f"{_names(joining)} gone with the PCI function on the bus: driver unbound or "
                f"unloaded, or firmware reset in progress{joins}")
    grace = config.settings(LinkStateSettings).driver_reload_grace
    timeout, card = timeouts(config)
    if peers:
        return (f"{head}; other RDMA devices stay: judged per device after "
                f"{_duration(card)} (cardResetTimeout) unless every device leaves too")
    return (f"{head}; no per-device verdict for {_duration(grace)} "
            f"(driverReloadGrace), per-device after {_duration(timeout)} "
            f"(driverReloadTimeout)")


def _report(event: DriverEvent, poll: DriverPoll, known: int
            ) -> tuple[DriverEvent, list[HealthEvent]]:
    """One non-fatal event per state check once a held device has been gone
    ``driverReloadGrace``: the first names every device held then (those of a staggered
    unload together), a later one each device that joined after it, once its grace is over."""
    now = poll.now
    grace = poll.config.settings(LinkStateSettings).driver_reload_grace
    overdue = [n for n in event.devices if n not in event.told
               and (now - event.left_at(n)).total_seconds() >= grace]
    if not overdue:
        return event, []
    due = tuple(n for n in event.devices if n not in event.told) if not event.told \
        else tuple(overdue)
    events = []
    checks = _checks(due, poll)
    elapsed = _duration((now - min(event.left_at(n) for n in due)).total_seconds())
    if len(due) == known and not event.told:
        what = (f"all {known} RDMA devices gone at once: driver unloaded or firmware reset in "
                f"progress")
    else:
        what = (f"{len(due)} of {known} RDMA devices gone while their PCI functions stay on "
                f"the bus: driver unbound or unloaded, or firmware reset in progress")
    for check, names in checks.items():
        events.append(make_event(
            check, fatal=False, healthy=False, error_code=CODE_DRIVER_EVENT,
            entities=tuple((ENTITY_NIC, name) for name in names), at=now,
            message=f"{what} (gone for {elapsed}: {_names(due)})"))
    told = tuple(sorted({*event.told, *due}))
    return replace(event, reported=True, told=told,
                   checks=tuple(sorted({*event.checks, *checks}))), events


def _checks(names: tuple[str, ...], poll: DriverPoll) -> dict[str, list[str]]:
    """The enabled state check of each device's layer -> its devices."""
    by_check: dict[str, list[str]] = {}
    check_of = poll.check_of
    for name in names:
        layer = poll.layer_of.get(name) or "InfiniBand"
        check = check_of.get(layer, check_of["InfiniBand"])
        if check in poll.enabled:
            by_check.setdefault(check, []).append(name)
    return by_check


def _close(event: DriverEvent, started: Optional[DriverEvent], present: set[str],
           now: datetime) -> list[HealthEvent]:
    """The healthy events that close a reported driver event, one per check it used."""
    if not event.reported or not event.told:
        return []
    back = [n for n in event.told if n in present]
    if len(back) == len(event.told):
        since = started.since if started else event.since
        why = f"back after {_duration((now - since).total_seconds())}"
    elif back:
        why = (f"{len(back)} back, {len(event.told) - len(back)} judged per device "
               f"(driverReloadTimeout, or off the PCI bus)")
    else:
        why = "gone too long or off the PCI bus: judged per device"
    return [make_event(check, fatal=False, healthy=True, error_code=CODE_DRIVER_EVENT,
                       entities=tuple((ENTITY_NIC, name) for name in event.told), at=now,
                       message=f"driver event over: {len(event.told)} RDMA devices {why}")
            for check in event.checks]


def _names(names: tuple[str, ...], limit: int = 8) -> str:
    shown = ", ".join(names[:limit])
    return shown + (f" and {len(names) - limit} more" if len(names) > limit else "")


def _duration(seconds: Optional[float]) -> str:
    value = float(seconds or 0)
    if value >= 120 and value % 60 == 0:
        return f"{int(value // 60)} min"
    return f"{round(value, 1):g} s"
