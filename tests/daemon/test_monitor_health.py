"""The health of a poll is worked out once, on the poll thread, and read by every surface."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from nichealthd.core import health, views
from nichealthd.runtime.monitor import Monitor
from nichealthd.sim import mutate


def status(monitor: Monitor) -> dict[str, Any]:
    """What the daemon's surfaces ask on the main thread after a poll."""
    assert monitor.last is not None
    return views.health_status(monitor.last.snapshot, monitor.last.result, monitor.state)


def test_the_poll_assesses_and_the_surfaces_reuse_the_answer(
        monitor: Monitor, monkeypatch: pytest.MonkeyPatch) -> None:
    calls = []
    real = health.assess

    def counted(*args: Any) -> Any:
        calls.append(args)
        return real(*args)

    monkeypatch.setattr("nichealthd.core.views.assess", counted)
    monitor.poll()
    assert len(calls) == 1
    assert status(monitor)["health"] == "healthy" and len(calls) == 1
    mutate.set_port(Path(monitor.config.sysfs_root).parent, "mlx5_0", 1, state="DOWN",
                    phys_state="Disabled")
    monitor.poll()
    assert len(calls) == 2
    assert status(monitor)["health"] == "fatal" and len(calls) == 2


def test_an_assessment_that_fails_does_not_fail_the_poll(
        monitor: Monitor, monkeypatch: pytest.MonkeyPatch) -> None:
    """The surfaces compute it again and report the failure; the poll is committed."""
    def broken(*args: Any) -> Any:
        raise RuntimeError("a bug in the health model")

    monkeypatch.setattr("nichealthd.core.views.assess", broken)
    outcome = monitor.poll()
    assert outcome.commit_error is None and outcome.committed  # the baseline events
    assert monitor.last is outcome
    with pytest.raises(RuntimeError):
        status(monitor)
