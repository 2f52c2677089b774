"""A reboot meets the InfiniBand ports waiting for the subnet manager (core/checks/cards.py).

The first poll after a boot sees the ports in INIT with the link up; the SM then activates
them sweep after sweep: all at once, over two polls, one port every 40 s, or after minutes.
A card short only of such ports is held ``cardVerdictHoldTime`` (4 min) from the first poll,
whether or not its ports were ever ACTIVE: no REPLACE_VM for any of these. What must stay
fatal: a port dead at boot (DOWN/Polling) beside ACTIVE peers, and a port still waiting once
the hold is over among ACTIVE peers of its fabric.
"""

from __future__ import annotations

from typing import Iterable

import pytest

from nichealthd.core.checks.link_state import LINK_STATE
from nichealthd.core.evaluate import CycleResult

from .builders import DOWN, LINKUP, POLLING, Runner, host
from .test_fabric import INIT, card

HOLD = 240  # the default cardVerdictHoldTime
N = 8


def boot_poll(runner: Runner, when: float, active: Iterable[int],
              other: tuple[str, str] = (INIT, LINKUP), dead: Iterable[int] = ()
              ) -> CycleResult:
    """Eight single-port cards: those in ``active`` ACTIVE, ``dead`` DOWN/Polling, the rest
    in ``other`` (INIT with the link up: waiting for the SM)."""
    up, down = set(active), set(dead)
    devices = [card(i) if i in up else card(i, DOWN, POLLING) if i in down
               else card(i, *other) for i in range(N)]
    return runner.poll(host(*devices, when=when))


def replace_vm(results: Iterable[CycleResult]) -> list[str]:
    return [e.message for r in results for e in r.events
            if e.recommended_action == "REPLACE_VM"]


def sweep(runner: Runner, start: float, step: float, first: int = 0) -> list[CycleResult]:
    """The SM activates one more port every ``step`` seconds from ``start`` (polls at 1 s)."""
    results = []
    second = start
    while True:
        active = range(min(N, first + int((second - start) // step) + 1))
        results.append(boot_poll(runner, second, active))
        if len(active) == N:
            return results
        second += 1


def test_the_sm_activates_the_ports_over_two_polls() -> None:
    runner = Runner()
    results = [boot_poll(runner, 0, ()), boot_poll(runner, 1, range(5)),
               boot_poll(runner, 2, range(N))]
    assert replace_vm(results) == []
    assert not runner.state.section(LINK_STATE).card_pending


def test_five_active_at_the_first_poll_and_three_a_second_later() -> None:
    runner = Runner()
    results = [boot_poll(runner, 0, range(5)), boot_poll(runner, 1, range(N))]
    assert replace_vm(results) == []
    waiting = [e for e in results[0].events if e.error_code == ("port_state",)]
    assert [(e.is_fatal, e.entities[0][1]) for e in waiting if not e.is_healthy] == [
        (False, "mlx5_5"), (False, "mlx5_6"), (False, "mlx5_7")]


def test_one_port_every_40_seconds() -> None:
    runner = Runner()
    results = [boot_poll(runner, 0, ())] + sweep(runner, 1, 40)
    assert replace_vm(results) == []
    assert not runner.state.section(LINK_STATE).card_anomalies


@pytest.mark.parametrize("step", [1, 40])
def test_after_five_minutes_of_init(step: int) -> None:
    runner = Runner()
    results = [boot_poll(runner, s, ()) for s in range(0, 300)] + sweep(runner, 300, step)
    assert replace_vm(results) == []


def test_a_restart_between_the_sweeps_keeps_the_clock() -> None:
    """The ``--once`` runs: a process per poll, the hold clock persisted."""
    runner = Runner()
    boot_poll(runner, 0, range(5))
    runner.restart()
    assert replace_vm([boot_poll(runner, HOLD - 1, range(5))]) == []
    runner.restart()
    assert len(replace_vm([boot_poll(runner, HOLD, range(5))])) == 3


def test_a_port_never_activated_among_active_peers_is_fatal_once_the_hold_is_over() -> None:
    runner = Runner()
    boot_poll(runner, 0, ())
    results = [boot_poll(runner, s, range(7)) for s in range(1, HOLD + 2)]
    assert [(i, m) for i, r in enumerate(results, 1) for m in replace_vm([r])] == [
        (HOLD + 1, "Card 0000:17:00 (compute) has 0 active ports, expected 1")]


def test_a_port_dead_at_boot_beside_active_peers_is_fatal_at_once() -> None:
    runner = Runner()
    first = boot_poll(runner, 0, range(7), dead=(7,))
    assert sorted(replace_vm([first])) == [
        "Card 0000:17:00 (compute) has 0 active ports, expected 1",
        "Port mlx5_7 port 1: state DOWN, phys_state Polling - no connectivity"]


def test_a_port_dead_at_boot_while_the_others_wait_is_fatal_when_they_are_active() -> None:
    """Nothing shows the dead port at fault until its peers are ACTIVE: then at once."""
    runner = Runner()
    assert replace_vm([boot_poll(runner, 0, (), dead=(7,))]) == []
    assert replace_vm([boot_poll(runner, 1, range(7), dead=(7,))]) == [
        "Card 0000:17:00 (compute) has 0 active ports, expected 1"]
