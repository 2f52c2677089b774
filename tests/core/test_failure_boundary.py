"""The family failure boundary of the evaluator (ARCHITECTURE.md, core/evaluate.py): a family that
raises, or needs a part whose source failed, costs only itself.

The fault is injected at the one place that cannot fail on demand otherwise: a family's
``evaluate`` made to raise (a bug), and a part of the snapshot marked unread (a source that
raised, runtime/monitor.py). Everything else is the real evaluator and real families.
"""

from __future__ import annotations

from dataclasses import replace
from typing import Any

import pytest

from nichealthd.core.checks.counters import CounterTables
from nichealthd.core.checks.link_counters import LINK_COUNTERS
from nichealthd.core.checks.link_flaps import LINK_FLAPS
from nichealthd.core.checks.pcie_aer import PCIE_AER
from nichealthd.core.views import health_status, port_records, status_summary
from nichealthd.sources.pcie import AER as READS_AER

from .builders import (
    DOWN,
    POLLING,
    Runner,
    at,
    config,
    counter_tables,
    counters_port,
    device,
    host,
)


def poll(runner: Runner, when: float, state: str = "4: ACTIVE", phys: str = "5: LinkUp",
         unread: Any = None, **values: Any) -> Any:
    values.setdefault("symbol_error_fatal", values.get("symbol_error", 0))
    snapshot = host(device(ports=(replace(counters_port(dict(values)), state=state,
                                          phys_state=phys),)), when=when)
    if unread:
        snapshot = replace(snapshot, unread=unread)
    return runner.poll(snapshot)


def codes(result: Any) -> list[str]:
    return sorted(e.error_code[0] for e in result.events if e.error_code)


@pytest.fixture
def broken_counters(monkeypatch: pytest.MonkeyPatch) -> list[bool]:
    """link_counters raises while the flag is set (a bug met on some input)."""
    broken = [False]
    real = type(LINK_COUNTERS).evaluate

    def evaluate(self: Any, previous: Any, cycle: Any, volatile: Any) -> Any:
        if broken[0]:
            CounterTables.next_of(volatile).last_values["poisoned"] = 1  # half-way, then the bug
            raise ZeroDivisionError("division by zero")
        return real(self, previous, cycle, volatile)

    monkeypatch.setattr(type(LINK_COUNTERS), "evaluate", evaluate)
    return broken


def test_a_family_that_raises_costs_only_itself(broken_counters: list[bool]) -> None:
    runner = Runner(config(linkFlapCount=0))
    poll(runner, 0, link_downed=0)
    kept = runner.state.section(LINK_COUNTERS)
    broken_counters[0] = True
    result = poll(runner, 1, state=DOWN, phys=POLLING, link_downed=1)
    assert codes(result) == ["port_state"]  # the port-state family judged as usual
    assert set(result.failed) == {LINK_COUNTERS.id}
    assert result.failed[LINK_COUNTERS.id].startswith(
        "ZeroDivisionError: division by zero (at test_failure_boundary.py:")
    assert runner.state.section(LINK_COUNTERS) is kept  # its previous section, unchanged
    assert "poisoned" not in counter_tables(runner).last_values  # its memory as before
    # Fixed (a reload, the next poll past the input): the rise is judged then, not lost.
    broken_counters[0] = False
    result = poll(runner, 2, state=DOWN, phys=POLLING, link_downed=1)
    assert codes(result) == ["link_downed"] and not result.failed


def test_a_family_whose_part_was_not_read_is_not_judged() -> None:
    runner = Runner(config(pcieAerInterval="10s"))
    poll(runner, 0)
    kept = runner.state.section(PCIE_AER)
    result = poll(runner, 11, unread={READS_AER: "OSError: [Errno 5] Input/output error"})
    assert result.failed == {PCIE_AER.id: "aer not read: OSError: [Errno 5] Input/output "
                                          "error"}
    assert runner.state.section(PCIE_AER) is kept
    # A failed slow family is due again at the next poll, not a cadence later.
    assert not poll(runner, 12).failed
    assert runner.memory.ran_at[PCIE_AER.id] == at(12)  # it ran, 1 s after the failure
    assert PCIE_AER.id not in poll(runner, 13).failed


def test_the_other_counting_family_keeps_its_memory(broken_counters: list[bool]) -> None:
    """link_flaps runs after link_counters in the same memory: its slot advances."""
    runner = Runner()
    poll(runner, 0, link_downed=0)
    broken_counters[0] = True
    poll(runner, 1, link_downed=2)
    poll(runner, 2, link_downed=2)
    assert runner.state.section(LINK_FLAPS).link_flaps["mlx5_0_1"].count == 2


def test_a_snapshot_without_failures_fails_nothing() -> None:
    runner = Runner()
    assert not poll(runner, 0).failed
    assert not host().unread


def test_what_a_failed_family_judges_is_unknown_on_the_surfaces(
        broken_counters: list[bool]) -> None:
    """The one health model: a port otherwise healthy is unknown, never healthy; a port
    another family judged unhealthy keeps that; the host is degraded with the reason."""
    runner = Runner(config(linkFlapCount=0))
    snapshot = host(device(ports=(counters_port({"link_downed": 0}),)),
                    device("mlx5_1", pci="0000:48:00.0"), when=0)
    runner.poll(snapshot)
    broken_counters[0] = True
    down = replace(snapshot.devices[1].ports[0], state=DOWN, phys_state=POLLING)
    snapshot = replace(snapshot, taken_at=at(1), devices=(
        snapshot.devices[0], replace(snapshot.devices[1], ports=(down,))))
    result = runner.poll(snapshot)
    status = health_status(snapshot, result, runner.state)
    assert (status["health"], status["ports_unknown"], status["ports_fatal"]) == (
        "fatal", 1, 1)
    assert status["families_failing"] == [f"link_counters: {result.failed['link_counters']}"]
    assert status["problems"][-1] == (f"check family link_counters cannot judge: "
                                      f"{result.failed['link_counters']}")
    records = {r["device"]: r for r in port_records(snapshot, result, runner.state)}
    assert (records["mlx5_0"]["health"], records["mlx5_0"]["healthy"],
            records["mlx5_0"]["reasons"]) == ("unknown", False, ["not judged by link_counters"])
    assert records["mlx5_1"]["health"] == "fatal"
    assert ", 1 unknown (" in status_summary(status)
