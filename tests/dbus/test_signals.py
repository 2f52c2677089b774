"""PortHealthChanged says what ListPorts says: the health model's verdict, never one read
from an event's message (pure: pictures of polls driven by the core's Runner, no bus)."""

from __future__ import annotations

from nichealthd.core.events import CODE_PORT_MISSING, make_event, port_entities
from nichealthd.core.picture import PollPicture
from nichealthd.core.state import FATAL
from nichealthd.storage.store import JournalEntry
from nichealthd.surfaces.dbus_signals import PortHealthChanged, Signals
from tests.core.builders import Runner, at, device, host, port

TWO_PORTS = device("mlx5_0", ports=(port("mlx5_0", 1), port("mlx5_0", 2)))
ONE_PORT = device("mlx5_0", ports=(port("mlx5_0", 1),))


def poll(runner: Runner, dev: object, when: float) -> tuple[PollPicture, list[JournalEntry]]:
    snapshot = host(dev, when=when)  # type: ignore[arg-type]
    result = runner.poll(snapshot)
    entries = [JournalEntry(i, e) for i, e in enumerate(result.events)]
    return PollPicture(snapshot, result, runner.state, runner.config), entries


def listed(picture: PollPicture, key: tuple[str, int]) -> tuple[str, bool]:
    record = picture.port_record(key)
    assert record is not None
    return record["health"], record["fatal"]


def test_a_port_gone_from_its_device_is_signalled_as_listports_lists_it() -> None:
    runner, signals = Runner(), Signals({})
    picture, entries = poll(runner, TWO_PORTS, 0)
    first = signals.ports_changed(picture, entries)  # the healthy baselines' events
    assert [(s.port, s.health) for s in first] == [(1, "healthy"), (2, "healthy")]
    sent: list[PortHealthChanged] = []
    for second in range(1, 4):
        picture, entries = poll(runner, ONE_PORT, second)
        sent += signals.ports_changed(picture, entries)
    gone = [s for s in sent if (s.device, s.port) == ("mlx5_0", 2)]
    assert gone and "disappeared" in gone[-1].message
    assert (gone[-1].health, gone[-1].fatal) == listed(picture, ("mlx5_0", 2)) == (FATAL, True)
    assert not [s for s in sent if s.port == 1]  # nothing changed on port 1


def test_an_event_for_a_port_the_model_does_not_judge_says_unknown() -> None:
    """The message says "missing"; before, that made the signal fatal while ListPorts did
    not list the port at all."""
    runner, signals = Runner(), Signals({})
    picture, _ = poll(runner, ONE_PORT, 0)
    event = make_event("InfiniBandStateCheck", fatal=True, healthy=False, at=at(0),
                       error_code=CODE_PORT_MISSING, entities=port_entities("mlx5_9", 1),
                       message="Port mlx5_9 port 1 missing")
    [signal] = signals.ports_changed(picture, [JournalEntry(1, event)])
    assert signal == PortHealthChanged("mlx5_9", 1, "unknown", False, event.message)
    assert picture.port_record(("mlx5_9", 1)) is None


def test_a_health_change_without_an_event_is_signalled_with_the_model_reasons() -> None:
    runner, signals = Runner(), Signals({})
    signals.ports_changed(*poll(runner, ONE_PORT, 0))
    down = device("mlx5_0", ports=(port("mlx5_0", 1, state="1: DOWN", phys="3: Disabled"),))
    picture, _ = poll(runner, down, 1)
    [signal] = signals.ports_changed(picture, [])
    judged = picture.health.ports[("mlx5_0", 1)]
    assert (signal.health, signal.fatal) == (judged.health, judged.fatal) == \
        listed(picture, ("mlx5_0", 1))
    assert signal.message.startswith("mlx5_0 port 1: ")
    assert ", ".join(judged.reasons) in signal.message
