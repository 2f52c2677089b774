"""Every RDMA device gone at once is a driver event, not N hardware failures (#19.2, DESIGN §2.10).

``rmmod mlx5_ib``/``mlx5_core``, ``devlink dev reload``, ``mlxfwreset`` and a driver upgrade
unregister every device of the driver in the same instant; a NIC that falls off the bus takes
only itself. So when, in one complete enumeration,

- every known device that was present at the last one is gone (two or more of them: one
  device alone vanishing says nothing about the driver), or
- the class directory lists no device at all while Mellanox network/InfiniBand functions are
  still on the PCI bus (``<sysfs-root>/bus/pci/devices``: the hardware is there, the driver
  is not; this also covers an unload seen half-way by one poll),

judgement is held: no per-device verdict. After ``driverReloadGrace`` without their return one
non-fatal event per state check says so (entities: the held NICs), and after
``driverReloadTimeout`` the devices still gone are judged one by one as before (spec §7: fatal,
the host event closed first). When any held device is back, the driver is back: the event ends
(closed by a healthy event if it was reported), and a device still absent then is judged by
the spec's three-poll rule from that poll on. Partial disappearance never starts an event.
"""

from __future__ import annotations

from dataclasses import replace
from datetime import datetime
from typing import Mapping, Optional

from ..config import Config
from ..events import ENTITY_NIC, HealthEvent, make_event
from ..model import HostSnapshot
from .link_section import DriverEvent, LinkStateSection

CODE_DRIVER_EVENT = "driver_event"
MIN_DEVICES = 2  # "all at once" needs more than one device (or the PCI functions' evidence)


def judge_driver_event(previous: LinkStateSection, state: LinkStateSection,
                       snapshot: HostSnapshot, config: Config, enabled: frozenset[str],
                       layer_of: Mapping[str, str], check_of: Mapping[str, str],
                       now: datetime) -> tuple[frozenset[str], list[HealthEvent], list[str]]:
    """The names held from per-device judgement this poll, the host events and log lines.

    Writes ``state.driver_event`` (and restarts the misses of held devices when the event
    ends with the driver back). ``layer_of`` is each known device's recorded link layer.
    """
    event = previous.driver_event
    if not snapshot.complete:
        # Uncertain enumeration: nothing is counted or decided (the rule of devices.py).
        return (frozenset(event.devices) if event else frozenset()), [], []
    present = {d.name for d in snapshot.devices}
    if event is not None:
        return _continue(event, state, present, config, enabled, layer_of, check_of, now)
    candidates = tuple(sorted(n for n in previous.known_devices
                              if n not in previous.missing_devices))
    if not candidates or any(n in present for n in candidates):
        return frozenset(), [], []
    at_once = (len(candidates) >= MIN_DEVICES
               and all(previous.device_misses.get(n, 0) == 0 for n in candidates))
    functions = snapshot.pci_functions or 0
    unbound = not snapshot.devices and functions > 0
    if not (at_once or unbound):
        return frozenset(), [], []
    state.driver_event = DriverEvent(now, candidates)
    why = (f"{functions} Mellanox PCI functions are still on the bus" if unbound else
           "in the same poll")
    notes = [f"all {len(candidates)} RDMA devices gone at once ({why}): driver unloaded or "
             f"firmware reset in progress; no per-device verdict for "
             f"{_duration(config.driver_reload_grace)} (driverReloadGrace), per-device after "
             f"{_duration(config.driver_reload_timeout)} (driverReloadTimeout)"]
    held, events, more = _continue(state.driver_event, state, present, config, enabled,
                                   layer_of, check_of, now)
    return held, events, notes + more


def _continue(event: DriverEvent, state: LinkStateSection, present: set[str], config: Config,
              enabled: frozenset[str], layer_of: Mapping[str, str],
              check_of: Mapping[str, str], now: datetime
              ) -> tuple[frozenset[str], list[HealthEvent], list[str]]:
    back = [n for n in event.devices if n in present]
    if now < event.since:  # the wall clock went back: the wait starts again from here
        event = state.driver_event = replace(event, since=now)
    elapsed = (now - event.since).total_seconds()
    if back:
        state.driver_event = None
        still = [n for n in event.devices if n not in present]
        for name in still:
            state.device_misses.pop(name, None)  # the three-poll rule starts now
        note = (f"{len(back)} of {len(event.devices)} RDMA devices are back after "
                f"{_duration(elapsed)}: the driver event is over")
        if still:
            note += (f"; still gone: {', '.join(still)} (judged one by one: fatal after "
                     f"three polls without them)")
        return frozenset(), _close(event, now, f"back after {_duration(elapsed)}"), [note]
    if elapsed >= config.driver_reload_timeout:
        state.driver_event = None
        note = (f"all {len(event.devices)} RDMA devices gone for {_duration(elapsed)}, longer "
                f"than driverReloadTimeout ({_duration(config.driver_reload_timeout)}): "
                f"judged one by one")
        return frozenset(), _close(event, now, f"gone for {_duration(elapsed)}, longer than "
                                               f"driverReloadTimeout: judged per device"), [note]
    events: list[HealthEvent] = []
    if not event.reported and elapsed >= config.driver_reload_grace:
        checks = _checks(event, enabled, layer_of, check_of)
        n = len(event.devices)
        for check, names in checks.items():
            events.append(make_event(
                check, fatal=False, healthy=False, error_code=CODE_DRIVER_EVENT,
                entities=tuple((ENTITY_NIC, name) for name in names), at=now,
                message=(f"all {n} RDMA devices gone at once: driver unloaded or firmware "
                         f"reset in progress (gone for {_duration(elapsed)}: "
                         f"{_names(event.devices)})")))
        state.driver_event = replace(event, reported=True, checks=tuple(sorted(checks)))
    return frozenset(event.devices), events, []


def _checks(event: DriverEvent, enabled: frozenset[str], layer_of: Mapping[str, str],
            check_of: Mapping[str, str]) -> dict[str, list[str]]:
    """The enabled state check of each held device's layer -> its devices."""
    by_check: dict[str, list[str]] = {}
    for name in event.devices:
        layer = layer_of.get(name) or "InfiniBand"
        check = check_of.get(layer, check_of["InfiniBand"])
        if check in enabled:
            by_check.setdefault(check, []).append(name)
    return by_check


def _close(event: DriverEvent, now: datetime, why: str) -> list[HealthEvent]:
    """The healthy events that close a reported driver event, one per check it used."""
    if not event.reported:
        return []
    return [make_event(check, fatal=False, healthy=True, error_code=CODE_DRIVER_EVENT,
                       entities=tuple((ENTITY_NIC, name) for name in event.devices), at=now,
                       message=(f"driver event over: {len(event.devices)} RDMA devices "
                                f"{why}"))
            for check in event.checks]


def _names(names: tuple[str, ...], limit: int = 8) -> str:
    shown = ", ".join(names[:limit])
    return shown + (f" and {len(names) - limit} more" if len(names) > limit else "")


def _duration(seconds: Optional[float]) -> str:
    value = float(seconds or 0)
    if value >= 120 and value % 60 == 0:
        return f"{int(value // 60)} min"
    return f"{value:g} s"
