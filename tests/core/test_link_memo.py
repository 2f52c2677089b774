"""Only what changed is judged (link-state and link-flap memos): the outcome is the full path's.

Two runners take the same polls: one as shipped, one whose link-state and link-flap families
judge every poll (their memo never kept: ``link_state.clocked`` and ``link_flaps._at_rest``
say a clock runs), and whose health model works its port bases out afresh, as the PCI
functions the reader watches. Their events, persisted states, notes, pictures, the families
that failed, the flap family's counters, the health the surfaces show (``health_status``) and
the functions watched must be identical after every poll. The polls are the
seam-equivalence hosts (ports down, INIT, unreadable, garbage; devices that vanish;
incomplete enumerations; restarts and failed commits; the clock jumping and set back), polled
as the daemon polls them (devices in the reader's order), and the same hosts made quiet: a
busy healthy host (the data counters move every poll, so every port is a new object) on
which a port now and then goes down, flaps, or a device goes away, with the hold-down, the
card verdict hold and a short flap window running.

The mutation tests break the memo's validity condition and show that the comparison fails.
"""

from __future__ import annotations

import contextlib
import random
from dataclasses import replace
from typing import Any, Callable, ContextManager, Iterator, Optional
from unittest import mock

import pytest

from nichealthd.core import evaluate, views
from nichealthd.core.checks import link_flaps, link_health, link_state
from nichealthd.core.checks.link_flaps import LINK_FLAPS
from nichealthd.core.checks.readings import device_readings
from nichealthd.core.config import Config
from nichealthd.core.evaluate import CycleResult
from nichealthd.core.model import DeviceIndex, HostSnapshot, PortSnapshot
from nichealthd.core.state import MonitorState

from . import equivalence
from .builders import ACTIVE, LINKUP, Runner, at, config, device, host, port
from .equivalence import main_config, topology, trace

Polls = Iterator[tuple[HostSnapshot, bool, bool]]


def _in_order(snapshot: HostSnapshot) -> HostSnapshot:
    """The devices in the reader's order (the traces shuffle them each poll)."""
    return replace(snapshot, devices=tuple(sorted(snapshot.devices, key=lambda d: d.name)))


def _polls(seed: int, length: int = 400) -> Polls:
    """The seed's equivalence polls: (snapshot, commit fails, restart before)."""
    polls, failed, restarts = trace(seed, length)
    for index, snapshot in enumerate(polls):
        yield _in_order(snapshot), index in failed, index in restarts


def _busy(p: PortSnapshot, second: int) -> PortSnapshot:
    """The port with its data counter moved (a new object, as on a busy host)."""
    return replace(p, counters={**p.counters, "port_rcv_data": 12_500_000_000 * second})


def _quiet_polls(seed: int, length: int = 600) -> Polls:
    """The equivalence host made quiet: its data counters move each poll; now and then a
    port goes down (DOWN, Disabled, INIT, ARMED, Polling, garbage; ``link_downed`` counting
    most outages) for one to forty polls, reads unreadable, or a device is gone for a few
    polls; polled about once a second (now and then late, early, or the clock set back)."""
    rng = random.Random(seed)
    cards = [equivalence.Card(i, "InfiniBand") for i in range(4)]
    cards.append(equivalence.Card(4, "Ethernet"))
    outage: dict[str, int] = {}  # device -> polls left down
    failed = {i for i in range(length) if rng.random() < 0.05}
    restarts = {i for i in range(length) if rng.random() < 0.03}
    now = 0.0
    for index in range(length):
        now += rng.choice((1.0,) * 20 + (0.5, 2.0, 30.0, 61.0, -5.0))
        devices = []
        for card in cards:
            for name, pci in zip(card.names, card.pci):
                if card.gone[name]:
                    card.gone[name] -= 1
                    continue
                if rng.random() < 0.001:
                    card.gone[name] = rng.choice((1, 2, 3, 5))
                if outage.get(name):
                    outage[name] -= 1
                    if not outage[name]:
                        card.state[name] = (ACTIVE, LINKUP)
                elif rng.random() < 0.004:
                    card.state[name] = rng.choice(equivalence.STATES[12:])
                    outage[name] = rng.choice((1, 2, 4, 8, 40))
                    card.values[name]["link_downed"] += rng.random() < 0.7
                state: tuple[Optional[str], Optional[str]] = card.state[name]
                if rng.random() < 0.001:
                    state = (None, None)  # unreadable this poll
                made = port(name, 1, *state, card.layer, counters=dict(card.values[name]),
                            operstate="up" if card.layer == "Ethernet" else None)
                devices.append(device(name, pci=pci, numa=card.numa,
                                      ports=(_busy(made, index),)))
        snapshot = host(*devices, when=now, complete=rng.random() > 0.01)
        yield snapshot, index in failed, index in restarts


@contextlib.contextmanager
def _patched(*patches: Any) -> Iterator[None]:
    with contextlib.ExitStack() as stack:
        for patch in patches:
            stack.enter_context(patch)
        yield


def _full_path() -> ContextManager[None]:
    """Both memos never kept: every poll judged in full, and the health model's port bases
    and the PCI functions watched worked out afresh."""
    return _patched(mock.patch.object(link_state, "clocked", return_value=True),
                    mock.patch.object(link_flaps, "_at_rest", return_value=False),
                    mock.patch.object(link_state.LinkState, "port_bases", _bases),
                    mock.patch.object(evaluate, "watched_functions", _watched))


def _bases(self: Any, section: Any, snapshot: HostSnapshot, roles: Any) -> Any:
    return link_health.port_bases(section, snapshot, roles)


def _watched(state: MonitorState) -> frozenset[str]:
    identities, _ = evaluate._identities(state)
    return frozenset(i.pci_address for i in identities.values() if i.pci_address)


def _outcome(snapshot: HostSnapshot, result: CycleResult) -> dict[str, Any]:
    """What a poll gives: its events, the state, notes, pictures, failed families, the flap
    counters; the health the surfaces show and the PCI functions the next poll watches."""
    memory = result.memory.volatile.get(LINK_FLAPS.id)
    return {"events": [e.to_json() for e in result.events],
            "state": result.state.to_json(), "notes": result.notes,
            "failed": dict(result.failed), "pictures": dict(result.pictures),
            "counted": memory.counted if isinstance(memory, link_flaps.Memory) else None,
            "health": views.health_status(snapshot, result, result.state),
            "watched": evaluate.watched_functions(result.state)}


class Hits:
    """The polls in which each memo spared its family the full path."""

    def __init__(self) -> None:
        self.state = self.flaps = 0


def _side_by_side(cfg: Config, polls: Polls,
                  broken: Callable[[], ContextManager[Any]] = contextlib.nullcontext
                  ) -> Hits:
    """Both runners through the polls; ``broken``: a patch the memo's runner runs under."""
    memo, full = Runner(cfg=cfg, topology=topology()), Runner(cfg=cfg, topology=topology())
    hits = Hits()
    for index, (snapshot, fails, restart) in enumerate(polls):
        if restart:
            memo.restart()
            full.restart()
        with mock.patch.object(link_state, "without_efa", wraps=link_state.without_efa
                               ) as judged, \
                mock.patch.object(link_flaps, "_step", wraps=link_flaps._step) as stepped, \
                broken():
            mine = memo.evaluate(snapshot)
        hits.state += judged.call_count == 0
        hits.flaps += stepped.call_count == 0 and bool(snapshot.devices)
        with _full_path():
            theirs = full.evaluate(snapshot)
        mine_seen = _outcome(snapshot, mine)
        with _full_path():
            theirs_seen = _outcome(snapshot, theirs)
        assert mine_seen == theirs_seen, f"poll {index} differs"
        if not fails:
            memo.adopt(mine)
            full.adopt(theirs)
    return hits


HELD = config(counters=[{"name": "port_xmit_wait", "enabled": True}], stateHoldDown="3s",
              cardVerdictHoldTime="5s", linkFlapCount=2, linkFlapWindow="20s")


@pytest.mark.parametrize("seed", equivalence.SEEDS)
def test_the_memos_give_the_full_paths_outcome_on_the_equivalence_hosts(seed: int) -> None:
    hits = _side_by_side(main_config(), _polls(seed))
    assert hits.state > 10 and hits.flaps > 10  # the memos were used


@pytest.mark.parametrize("seed", (1, 2))
def test_the_same_with_hold_down_card_hold_and_a_short_flap_window(seed: int) -> None:
    hits = _side_by_side(HELD, _polls(seed))
    assert hits.state > 10  # the flap memo: not while an outage is open under the hold-down


@pytest.mark.parametrize(("seed", "cfg"), ((4, main_config()), (5, HELD), (6, HELD)))
def test_a_busy_quiet_host_is_judged_once_per_change(seed: int, cfg: Config) -> None:
    hits = _side_by_side(cfg, _quiet_polls(seed))
    assert hits.state > 300 and hits.flaps > 250  # most of 600 polls: nothing judged


def test_a_memo_kept_while_a_clock_runs_gives_another_outcome() -> None:
    """Mutation: the link-state memo kept while a hold-down, a card hold, a driver event or
    a fabric waits for the clock. The held edge is then never reported (or the card)."""
    with pytest.raises(AssertionError, match="differs"):
        for seed in (5, 6):
            _side_by_side(HELD, _quiet_polls(seed), broken=lambda: mock.patch.object(
                link_state, "clocked", return_value=False))


def test_a_memo_of_other_readings_gives_another_outcome() -> None:
    """Mutation: the memo kept whatever the ports read (the readings not compared)."""
    with pytest.raises(AssertionError, match="differs"):
        _side_by_side(main_config(), _quiet_polls(4), broken=lambda: _patched(
            mock.patch.object(link_state, "device_readings", return_value=()),
            mock.patch.object(link_flaps, "_readings", return_value=())))


def test_a_flap_memo_kept_while_cycles_leave_the_window_gives_another_outcome() -> None:
    """Mutation: the flap memo kept although a port's cycle left the window since: the
    flap count never falls, and the flap is never recovered."""
    with pytest.raises(AssertionError, match="differs"):
        for seed in (5, 6):
            _side_by_side(HELD, _quiet_polls(seed), broken=lambda: mock.patch.object(
                link_flaps, "_oldest", return_value=None))


def test_the_readings_are_compared_field_by_field_not_by_identity() -> None:
    """A busy host: each poll's devices and ports are new objects with moved counters; the
    memo still holds. A port's state read differently is judged."""
    runner = Runner(cfg=main_config(), topology=topology())
    polls = [snapshot for snapshot, _, _ in _quiet_polls(7, 3)]
    for second, snapshot in enumerate(polls):
        runner.poll(replace(snapshot, taken_at=at(second)))
    again = replace(polls[-1], taken_at=at(3), devices=tuple(
        d.with_ports(tuple(_busy(p, 3) for p in d.ports)) for d in polls[-1].devices))
    with mock.patch.object(link_state, "without_efa", wraps=link_state.without_efa) as judged:
        runner.poll(again)
    assert judged.call_count == 0
    first = again.devices[0]
    down = first.with_ports((replace(first.ports[0], state="1: DOWN"),))
    with mock.patch.object(link_state, "without_efa", wraps=link_state.without_efa) as judged:
        result = runner.poll(replace(again, taken_at=at(4), devices=(down, *again.devices[1:])))
    assert judged.call_count == 1
    assert [e.is_fatal for e in result.events] == [True]


def test_the_readings_of_vfs_are_compared_whole_and_a_changed_vf_is_seen() -> None:
    """The VFs of the reader's index are one tuple of the same snapshots each poll: the
    readings of two such polls are equal (counters aside); a VF read differently, or one
    more VF, is a difference. ``replace`` gives a snapshot its own readings."""
    pf = device("mlx5_0", pci="0000:47:00.0")
    vfs = tuple(device(f"mlx5_{n}", pci=f"0000:47:00.{n}", is_vf=True) for n in (1, 2))
    index = DeviceIndex(frozenset({pf.name, *(v.name for v in vfs)}), (pf,), vfs)
    first = replace(host(pf, *vfs), index=index)
    busy_pf = pf.with_ports(tuple(_busy(p, 1) for p in pf.ports))
    second = replace(host(busy_pf, *vfs, when=1),
                     index=DeviceIndex(index.names, (busy_pf,), vfs))
    assert device_readings(first) == device_readings(second)
    assert device_readings(second) is device_readings(second)  # worked out once per poll
    moved = (vfs[0], replace(vfs[1], numa_node=1))
    third = replace(host(pf, *moved, when=2), index=DeviceIndex(index.names, (pf,), moved))
    assert device_readings(third) != device_readings(first)
    extra = device("mlx5_3", pci="0000:47:00.3", is_vf=True)
    fourth = replace(first, devices=(pf, *vfs, extra), index=None)
    assert len(fourth.parts.vfs) == 3
    assert device_readings(fourth) != device_readings(first)
