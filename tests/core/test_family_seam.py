"""The check-family seam (ARCHITECTURE.md). A family is one unit: found, run, persisted and shown by
every surface without a line elsewhere; its section is its own (a missing or newer one is a
fresh start for it alone)."""

from __future__ import annotations

import json
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any, Iterable, Iterator, Mapping, Optional

import pytest

from nichealthd.core import checks
from nichealthd.core.checks import families
from nichealthd.core.checks.link_counters import LINK_COUNTERS
from nichealthd.core.checks.link_state import LINK_STATE
from nichealthd.core.codec import parse_int, parse_table
from nichealthd.core.events import make_event, port_entities
from nichealthd.core.family import (
    HOST,
    READS_PORTS,
    CheckFamily,
    Condition,
    Cycle,
    Series,
    Verdict,
)
from nichealthd.core.health import assess
from nichealthd.core.state import MonitorState, parse_state
from nichealthd.core.views import port_records
from nichealthd.storage.store import load_state, save_state

from .builders import (
    DISABLED,
    DOWN,
    Runner,
    at,
    config,
    counters_port,
    device,
    host,
    port,
    with_fields,
)
from .equivalence import OLD_STATE

ADAPTER_FAMILIES = ("netdev_link", "char_devices", "lost_nics", "firmware")


def test_the_built_in_families_are_found_in_their_order() -> None:
    ids = [f.id for f in families()]
    assert ids[:4] == ["link_state", "efa_state", "link_counters", "efa_counters"]
    assert {"link_flaps", "link_rate", "pcie_link", "pcie_aer", "nic_temperature"} <= set(ids)
    adapter = [i for i in ids if i in ADAPTER_FAMILIES]  # in their order
    assert adapter == [i for i in ADAPTER_FAMILIES if i in ids] and "char_devices" in adapter
    keys = [k for f in families() for k in f.keys]
    assert len(keys) == len(set(keys))
    # The EFA families leave their empty keys out of the file.
    efa = {k for f in families() if f.id.startswith("efa_") for k in f.keys}
    assert set(keys) - efa | {"version", "boot_id", "event_seq", "schemas"} == set(
        MonitorState().to_json())


# ------------------------------------------------------------------ a family added by a test


@dataclass
class TallySection:
    """Polls seen per port, and the ports it reported."""

    seen: dict[str, int] = field(default_factory=dict)
    reported: list[str] = field(default_factory=list)


class Tally(CheckFamily[TallySection, int, int]):
    """A toy family: reports a port at its third poll, and once per host at the second."""

    id = "tally"
    order = 30
    schema = 2
    keys = ("tally_seen", "tally_reported")
    reads = frozenset({READS_PORTS})
    cadence = 0.0

    def fresh(self) -> TallySection:
        return TallySection()

    def load(self, data: Mapping[str, Any], schema: int) -> TallySection:
        return TallySection({k: parse_int(v) for k, v in parse_table(data, "tally_seen").items()},
                            list(data.get("tally_reported", [])))

    def dump(self, section: TallySection) -> dict[str, Any]:
        return {"tally_seen": dict(section.seen), "tally_reported": list(section.reported)}

    def evaluate(self, previous: TallySection, cycle: Cycle, volatile: Optional[int]
                 ) -> Verdict[TallySection, int, int]:
        section = TallySection(dict(previous.seen), list(previous.reported))
        events = []
        runs = (volatile or 0) + 1  # its volatile memory: the polls it ran in
        for dev in cycle.monitored:
            for p in dev.ports:
                section.seen[p.key] = section.seen.get(p.key, 0) + 1
                if section.seen[p.key] == 3:
                    section.reported.append(p.key)
                    events.append((dev.name, make_event(
                        "InfiniBandDegradationCheck", fatal=False, healthy=False,
                        message=f"tally {p.key}", error_code="tally",
                        entities=port_entities(dev.name, p.port), at=cycle.now)))
        if runs == 2:
            events.append((HOST, make_event(
                "InfiniBandDegradationCheck", fatal=False, healthy=False, message="tally host",
                error_code="tally", entities=(), at=cycle.now)))
        return Verdict(section, tuple(events), picture=len(section.seen), volatile=runs)

    def conditions(self, section: TallySection, picture: Optional[int]) -> Iterable[Condition]:
        for key in section.reported:
            device_name, _, number = key.rpartition("_")
            yield Condition("degraded", "tallied", (device_name, int(number)))

    def port_fields(self, section: TallySection, picture: Optional[int],
                    port_id: tuple[str, int]) -> Mapping[str, Any]:
        return {"tally": section.seen.get(f"{port_id[0]}_{port_id[1]}", 0)}

    def series(self, section: TallySection, picture: Optional[int]) -> Iterable[Series]:
        yield Series("tally_ports", "Ports tallied", "gauge", (), (((), float(picture or 0)),))


class Slow(Tally):
    id = "slow"
    order = 5
    schema = 1
    keys = ("slow_seen", "slow_reported")
    cadence = 60.0

    def load(self, data: Mapping[str, Any], schema: int) -> TallySection:
        return TallySection({k: parse_int(v) for k, v in parse_table(data, "slow_seen").items()})

    def dump(self, section: TallySection) -> dict[str, Any]:
        return {"slow_seen": dict(section.seen), "slow_reported": list(section.reported)}


@pytest.fixture
def with_tally(monkeypatch: pytest.MonkeyPatch) -> Iterator[Tally]:
    """The registry with one more family, as a new module under core/checks would add it."""
    tally = Tally()
    monkeypatch.setattr(checks, "_found", (*families(), tally))
    yield tally


def two_ports(when: float) -> Any:
    return host(device("mlx5_0", ports=(counters_port({"link_downed": 0}),)),
                device("mlx5_1", pci="0000:48:00.0", ports=(port("mlx5_1"),)), when=when)


def test_a_new_family_runs_persists_and_is_shown_by_one_module(with_tally: Tally,
                                                                 tmp_path: Path) -> None:
    runner = Runner()
    runner.poll(two_ports(0))
    runner.poll(two_ports(1))
    result = runner.poll(two_ports(2))
    # Its events follow each device's own, then the host-level ones.
    assert [e.message for e in result.events if "tally" in e.message] == [
        "tally mlx5_0_1", "tally mlx5_1_1"]
    assert runner.memory.volatile["tally"] == 3
    section = runner.state.section(with_tally)
    assert section.reported == ["mlx5_0_1", "mlx5_1_1"]
    # Persisted under its own keys and schema; loads back.
    path = tmp_path / "state.json"
    save_state(str(path), runner.state)
    data = json.loads(path.read_text())
    assert data["schemas"]["tally"] == 2 and data["tally_seen"] == {"mlx5_0_1": 3,
                                                                    "mlx5_1_1": 3}
    assert load_state(str(path)).state == runner.state
    # Health, port records and metrics series come from the family.
    health = assess(runner.state, two_ports(3), result.roles, result.pictures)
    assert health.ports[("mlx5_0", 1)].reasons == ("tallied",)
    assert health.ports[("mlx5_0", 1)].health == "degraded"
    records = port_records(two_ports(3), result, runner.state)
    assert [r["tally"] for r in records] == [3, 3]
    assert list(with_tally.series(section, result.pictures["tally"]))[0].samples == (((), 2.0),)


def test_a_family_s_host_events_come_after_every_device_s(with_tally: Tally) -> None:
    runner = Runner(baseline=False)
    runner.poll(two_ports(0))
    second = runner.poll(host(device("mlx5_0", ports=(port("mlx5_0", state=DOWN,
                                                            phys=DISABLED),)), when=1))
    assert [e.message.split(":")[0] for e in second.events] == [
        "Port mlx5_0 port 1", "tally host"]


def test_a_missing_section_is_a_fresh_start_for_that_family_alone(with_tally: Tally) -> None:
    """A state file of a nichealthd without the family (an upgrade adds it)."""
    old = json.loads(OLD_STATE.read_text())
    state, notes = parse_state(old)
    assert notes == ()
    assert state.section(with_tally) == TallySection()
    assert state.section(LINK_COUNTERS).breach_flags  # the others keep theirs
    assert state.section(LINK_STATE).card_anomalies


def test_a_section_of_a_newer_layout_starts_fresh_with_a_note(with_tally: Tally) -> None:
    data = {**json.loads(OLD_STATE.read_text()), "tally_seen": {"x_1": 1},
            "schemas": {"tally": 3, "link_state": 1, "link_counters": 1}}
    state, notes = parse_state(data)
    assert state.section(with_tally) == TallySection()
    assert notes == ("the tally section was written by a newer nichealthd (layout 3, this "
                     "one reads up to 2): it starts fresh",)
    assert state.section(LINK_COUNTERS).breach_flags


def test_a_slow_family_runs_once_per_cadence(monkeypatch: pytest.MonkeyPatch) -> None:
    slow = Slow()
    monkeypatch.setattr(checks, "_found", (slow, *families()))
    runner = Runner()
    for when in (0, 1, 30, 59.9, 60, 61, 125, 100):  # the clock goes back at the end
        runner.poll(two_ports(when))
    # Runs at 0, 60, 125 and at 100 (the clock went back: a fresh start of the cadence).
    assert runner.state.section(slow).seen == {"mlx5_0_1": 4, "mlx5_1_1": 4}
    assert runner.memory.ran_at["slow"] == at(100)


def test_a_disabled_family_keeps_its_section(monkeypatch: pytest.MonkeyPatch) -> None:
    class Off(Tally):
        def enabled(self, config: Any) -> bool:
            return False

    off = Off()
    monkeypatch.setattr(checks, "_found", (*families(), off))
    kept = TallySection({"mlx5_0_1": 7})
    start = MonitorState(boot_id="boot-1")
    start.sections[off.id] = kept
    runner = Runner(state=start)
    result = runner.poll(two_ports(0))
    assert result.state.section(off) is kept and "tally" not in result.pictures


def test_the_enabled_families_follow_the_config_and_the_registry(
        monkeypatch: pytest.MonkeyPatch) -> None:
    """``checks.enabled_under`` keeps its answer per config and registry: a reload (a new
    config) or a family added is seen at once."""
    class OnlyOnNodeB(Tally):
        def enabled(self, config: Any) -> bool:
            return bool(config.node_name == "node-b")

    picky = OnlyOnNodeB()
    monkeypatch.setattr(checks, "_found", (*families(), picky))
    on_a, on_b = config(), config(nodeName="node-b")
    assert picky not in checks.enabled_under(on_a)
    assert picky in checks.enabled_under(on_b)
    assert picky not in checks.enabled_under(on_a)
    assert checks.enabled_under(on_b) is checks.enabled_under(on_b)
    monkeypatch.setattr(checks, "_found", families()[:-1])
    assert picky not in checks.enabled_under(on_b)
    assert [f.id for f in checks.enabled_under(on_a)] == [
        f.id for f in families() if f.enabled(on_a)]


def test_evaluation_leaves_every_section_it_was_given_unchanged() -> None:
    runner = Runner()
    runner.poll(host(device(ports=(counters_port({"link_downed": 0}),)), when=0))
    before = {k: replace(v) for k, v in runner.state.sections.items()}
    dumped = runner.state.to_json()
    runner.evaluate(host(device(ports=(counters_port({"link_downed": 5}, state=DOWN,
                                                     phys=DISABLED),)), when=1))
    assert runner.state.sections == before and runner.state.to_json() == dumped


def test_sections_are_read_through_their_family_only() -> None:
    state = with_fields(MonitorState(boot_id="b"), LINK_STATE, known_devices=["mlx5_0"])
    assert state.section(LINK_STATE).known_devices == ["mlx5_0"]
    assert not hasattr(state, "known_devices") and not hasattr(state, "nonsense")
    with pytest.raises(TypeError):
        MonitorState(known_devices=["mlx5_0"])  # type: ignore[call-arg]
