"""One poll's picture: what every surface reads is built once, and is what the views build."""

from __future__ import annotations

from typing import Any

import pytest

from nichealthd.core import views
from nichealthd.core.health import UNKNOWN, assess
from nichealthd.core.picture import PollPicture

from .builders import Runner, device, host, port
from .test_identity import nic


def picture_of(runner: Runner, *devices: Any, when: float) -> PollPicture:
    snapshot = host(*devices, when=when)
    result = runner.poll(snapshot)
    return PollPicture(snapshot, result, runner.state, runner.config)


def test_the_records_are_the_views_and_built_once(monkeypatch: pytest.MonkeyPatch) -> None:
    runner = Runner()
    runner.poll(host(nic(0), nic(1), nic(2), when=0))
    devices = [nic(0), nic(1), nic(2, state="DOWN", phys="Disabled")]
    picture = picture_of(runner, *devices, when=1)
    snapshot, result, state = picture.snapshot, picture.result, picture.state
    assert list(picture.ports) == views.port_records(snapshot, result, state)
    assert list(picture.devices) == views.device_records(snapshot, result, state)
    assert list(picture.counters()) == views.counter_records(snapshot, result, state,
                                                             runner.config)
    assert dict(picture.status) == views.health_status(snapshot, result, state)
    assert picture.summary == views.status_summary(picture.status)
    assert picture.status["problems"] == ["mlx5_2/1 DOWN/Disabled"]

    calls = []
    real = assess

    def counted(*args: Any) -> Any:
        calls.append(args)
        return real(*args)

    monkeypatch.setattr("nichealthd.core.views.assess", counted)
    fresh = picture_of(runner, *devices, when=2)
    for _ in range(3):
        assert fresh.ports is fresh.ports and fresh.status is fresh.status
        assert fresh.counters("mlx5_1") is fresh.counters("mlx5_1")
        assert fresh.summary
    assert len(calls) == 1


def test_filtered_counters_are_those_of_the_device_and_port() -> None:
    runner = Runner()
    picture = picture_of(runner, nic(0, counters={"link_downed": 0}),
                         nic(1, counters={"link_downed": 0}), when=0)
    one = picture.counters("mlx5_1", 1)
    assert one and {(r["device"], r["port"]) for r in one} == {("mlx5_1", 1)}
    assert list(one) == views.counter_records(picture.snapshot, picture.result, picture.state,
                                              runner.config, "mlx5_1", 1)
    assert picture.counters("mlx5_1", 7) == ()


def test_why_a_counter_filter_lists_nothing() -> None:
    runner = Runner()
    picture = picture_of(runner, nic(0), when=0)
    assert picture.counters_problem("", 0) is None
    assert picture.counters_problem("mlx5_0", 1) is None
    name, message = picture.counters_problem("mlx5_9", 0) or ("", "")
    assert name == "UnknownDevice" and "present: mlx5_0" in message
    name, message = picture.counters_problem("mlx5_0", 2) or ("", "")
    assert name == "UnknownPort" and "ports: 1" in message


def test_a_port_the_model_does_not_judge_is_unknown_never_guessed() -> None:
    runner = Runner()
    picture = picture_of(runner, device("mlx5_0", ports=(port("mlx5_0", 1),)), when=0)
    judged = picture.health_of(("mlx5_0", 1))
    assert judged is picture.health.ports[("mlx5_0", 1)] and judged.health == "healthy"
    gone = picture.health_of(("mlx5_9", 1))
    assert (gone.health, gone.fatal, gone.reasons) == (UNKNOWN, False, ())
    assert picture.port_record(("mlx5_0", 1)) is picture.ports[0]
    assert picture.port_record(("mlx5_9", 1)) is None
