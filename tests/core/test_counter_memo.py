"""Only what changed is judged (counters.PortMemo): the outcome is the full path's, poll after poll.

Two runners take the same polls: one as shipped, one whose counting families judge every
counter of every port every poll (``CounterPoll(remember=False)``, the engine before the
memo) and whose link-rate family judges every poll (no ``link_rate.Unchanged``). Their
events, persisted states, the counters shown and the engine's tables must be identical
after every poll. The traces are the seam-equivalence hosts (counters that rise,
breach, latch, saturate, wrap and reset; ports that go down and come back; devices that
vanish; restarts and failed commits) polled as the daemon polls: once a second with a few
milliseconds of jitter either way, some polls early (a reload), some late, and the clock
now and then set back; with ``port_xmit_wait`` on (a counter that moves), with minute and
hour windows, and with ``stateHoldDown`` (held counters, absorbed blips).
"""

from __future__ import annotations

import random
from dataclasses import replace
from typing import Any, Iterable, Iterator
from unittest import mock

import pytest

from nichealthd.core.checks import counters, link_rate
from nichealthd.core.checks.counters import CounterTables
from nichealthd.core.checks.link_counters import LINK_COUNTERS
from nichealthd.core.config import Config
from nichealthd.core.evaluate import CycleResult, settled
from nichealthd.core.model import DeviceSnapshot, HostSnapshot
from nichealthd.core.state import MonitorState

from .builders import Runner, at, config, counters_port, device, host, port
from .equivalence import main_config, topology, trace


def _polls(seed: int, length: int) -> Iterator[tuple[HostSnapshot, bool, bool]]:
    """The seed's equivalence polls at a daemon's times: (snapshot, commit fails, restart)."""
    polls, failed, restarts = trace(seed, length)
    rng = random.Random(seed * 7 + 1)
    now = 0.0
    for index, snapshot in enumerate(polls):
        draw = rng.random()
        if draw < 0.03:
            now += rng.choice((0.2, 0.5, 0.97, 0.979, 0.981))  # early: a reload, jitter
        elif draw < 0.05:
            now += rng.choice((2.0, 30.0, 61.0, 3600.0))
        elif draw < 0.06:
            now -= 5.0  # the wall clock set back
        else:
            now += 1.0 + rng.uniform(-0.012, 0.012)
        yield replace(snapshot, taken_at=at(now)), index in failed, index in restarts


def _full_path(self: counters.CounterPoll, *args: Any, **kwargs: Any) -> None:
    kwargs["remember"] = False
    _ORIGINAL_INIT(self, *args, **kwargs)


_ORIGINAL_INIT = counters.CounterPoll.__init__


def _outcome(result: CycleResult) -> dict[str, Any]:
    """What a poll told, persisted and kept: the state and read times with what the memos
    hold back written (the full path's memos hold nothing back)."""
    tables = result.memory.volatile.get(LINK_COUNTERS.id)
    kept = None
    if isinstance(tables, CounterTables):
        read_at = dict(tables.last_times)
        for memo in tables.memos.values():
            counters.settle(memo, {}, read_at)
        kept = (tables.last_values, read_at, tables.closed_windows)
    return {"events": [e.to_json() for e in result.events],
            "state": settled(result.state, result.memory).to_json(),
            "observations": dict(result.observations), "notes": result.notes, "tables": kept}


def _side_by_side(cfg: Config, seed: int, length: int = 300) -> int:
    """Both runners through the seed's polls; returns the polls the memo skipped a port in."""
    return _both(cfg, _polls(seed, length))


def _both(cfg: Config, polls: Iterable[tuple[HostSnapshot, bool, bool]]) -> int:
    """Both runners through ``polls`` (snapshot, commit fails, restart); returns the polls
    the memo skipped a port in."""
    memo, full = Runner(cfg=cfg, topology=topology()), Runner(cfg=cfg, topology=topology())
    skipped = 0
    for index, (snapshot, fails, restart) in enumerate(polls):
        if restart:
            memo.restart()
            full.restart()
        with mock.patch.object(counters, "_unchanged", wraps=counters._unchanged) as whole:
            mine = memo.evaluate(snapshot)
        skipped += whole.call_count > 0
        with mock.patch.object(counters.CounterPoll, "__init__", _full_path), \
                mock.patch.object(link_rate, "_same", return_value=False):
            theirs = full.evaluate(snapshot)
        assert _outcome(mine) == _outcome(theirs), f"poll {index} differs"
        if not fails:
            memo.adopt(mine)
            full.adopt(theirs)
    return skipped


@pytest.mark.parametrize("seed", (1, 2, 3, 4))
def test_the_memo_gives_the_full_paths_outcome_on_random_hosts(seed: int) -> None:
    assert _side_by_side(main_config(), seed) > 50  # the memo was used, and often


def test_the_same_with_hold_down_minute_and_hour_windows_and_quiet_wait() -> None:
    cfg = config(stateHoldDown="3s", counters=[
        {"name": "port_xmit_wait", "enabled": True},
        {"name": "port_rcv_errors", "thresholdType": "velocity", "velocityUnit": "minute",
         "threshold": 50},
        {"name": "out_of_sequence", "thresholdType": "velocity", "velocityUnit": "hour",
         "threshold": 100}])
    for seed in (5, 6):
        assert _side_by_side(cfg, seed) > 50


def test_renamed_devices_find_the_windows_their_memos_held_back_closed() -> None:
    """Quiet NICs, then two swap names and a third takes a new one (a driver reload): each
    device's records follow it from the windows its memo closed at the last poll, so a
    counter that rises in the rename poll is judged over the last second, as the full path
    judges it (from the older snapshot the section itself holds, it would not breach)."""
    def nic(index: int, name: str, **values: int) -> DeviceSnapshot:
        counted = dict.fromkeys(("symbol_error", "port_rcv_errors", "link_error_recovery",
                                 "link_downed"), 0)
        return device(name, pci=f"0000:{0x10 + index:02x}:00.0",
                      node_guid=f"b8ce:f603:00{index:02x}:0000",
                      ports=(port(name, 1, counters={**counted, **values}),))

    def polls() -> Iterator[tuple[HostSnapshot, bool, bool]]:
        names = ["mlx5_0", "mlx5_1", "mlx5_2"]
        for second in range(12):
            if second == 6:
                names = ["mlx5_1", "mlx5_0", "mlx5_7"]
            at_once = {"symbol_error": 40} if second >= 6 else {}  # over the last second
            later = {"port_rcv_errors": 30} if second >= 8 else {}
            yield host(nic(0, names[0], **later), nic(1, names[1]), nic(2, names[2], **at_once),
                       when=second + 0.001 * second), False, False

    assert _both(config(), polls()) >= 6


def test_a_quiet_host_is_judged_once_and_its_empty_windows_still_close_each_poll() -> None:
    runner = Runner()
    values = dict.fromkeys(("link_downed", "symbol_error", "symbol_error_fatal",
                            "port_rcv_errors", "link_error_recovery"), 0)
    ports = (counters_port(values),)
    runner.poll(host(device(ports=ports), when=0))
    runner.poll(host(device(ports=ports), when=1))  # the empty windows close: steady now
    for second in range(2, 6):
        before = runner.state.section(LINK_COUNTERS)
        with mock.patch.object(counters, "_evaluate_one",
                               wraps=counters._evaluate_one) as judged:
            result = runner.poll(host(device(ports=ports), when=second))
        assert judged.call_count == 0  # nothing moved: no counter judged
        # ... and nothing written: the section is the last poll's, not a copy of it ...
        assert result.state.section(LINK_COUNTERS) is before
        assert result.held_back  # ... while the memo holds back the windows' closing:
        section = settled(result.state, result.memory).section(LINK_COUNTERS)
        # the per-second windows closed at this poll, as the full path closes them ...
        assert section.counter_snapshots["mlx5_0:1:symbol_error"] == (0, at(second))
        # ... the minute and hour windows still fill from their start.
        assert section.counter_snapshots["mlx5_0:1:link_error_recovery"] == (0, at(0))
        assert result.observations["mlx5_0:1:symbol_error"] == (0, 0, 0.0)
    moved = runner.poll(host(device(ports=(counters_port({**values, "symbol_error": 40,
                                                           "symbol_error_fatal": 40}),)),
                             when=6))
    # 40 in the last second: the rate is worked out over the last second, as before.
    assert [e.error_code for e in moved.events] == [("symbol_error",)]
    assert "rate=40.00/sec" in moved.events[0].message


def test_a_restored_state_is_judged_in_full_first() -> None:
    runner = Runner()
    ports = (counters_port({"link_downed": 3}),)
    for second in range(3):
        runner.poll(host(device(ports=ports), when=second))
    state = MonitorState.from_json(runner.state.to_json())
    again = Runner(state=state, baseline=False)
    with mock.patch.object(counters, "_evaluate_one", wraps=counters._evaluate_one) as judged:
        again.poll(host(device(ports=ports), when=3))
    assert judged.call_count == 1  # no memo after a restart


def test_a_window_still_filling_is_judged_again_when_it_is_full_to_the_millisecond() -> None:
    runner = Runner()
    ports = (counters_port({"link_error_recovery": 0}),)  # a minute window: full at 59.95 s
    runner.poll(host(device(ports=ports), when=0))
    runner.poll(host(device(ports=ports), when=1))
    runner.poll(host(device(ports=ports), when=59.949))  # not full: the window stays open
    section = runner.state.section(LINK_COUNTERS)
    assert section.counter_snapshots["mlx5_0:1:link_error_recovery"] == (0, at(0))
    runner.poll(host(device(ports=ports), when=59.95))  # full: closed, empty
    section = runner.state.section(LINK_COUNTERS)
    assert section.counter_snapshots["mlx5_0:1:link_error_recovery"] == (0, at(59.95))
