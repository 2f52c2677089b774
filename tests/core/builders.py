"""Tiny builders for snapshots, so each rule's test reads as a table."""

from __future__ import annotations

from dataclasses import replace
from datetime import datetime, timedelta, timezone
from typing import Any, Optional

from nichealthd.core.checks.counters import CounterTables
from nichealthd.core.checks.link_counters import LINK_COUNTERS
from nichealthd.core.config import Config
from nichealthd.core.config_build import build_config
from nichealthd.core.evaluate import CycleResult, PollMemory, Topology, evaluate, settled
from nichealthd.core.family import Family
from nichealthd.core.model import DeviceSnapshot, HostSnapshot, PortSnapshot
from nichealthd.core.state import MonitorState
from nichealthd.core.topology import GpuTopology
from nichealthd.sources.sysfs import counter_kind

T0 = datetime(2026, 1, 1, 12, 0, 0, tzinfo=timezone.utc)
ACTIVE, LINKUP = "4: ACTIVE", "5: LinkUp"
DOWN, DISABLED, POLLING = "1: DOWN", "3: Disabled", "2: Polling"


def at(seconds: float) -> datetime:
    return T0 + timedelta(seconds=seconds)


def config(**overrides: Any) -> Config:
    counters = overrides.pop("counters", None)
    data: dict[str, Any] = {"nodeName": "node-a"}
    if counters is not None:
        data["counterDetection"] = {"counters": counters}
    data.update(overrides)
    return build_config(data, "test.toml", {})


# Where the shipped config reads each counter: what the reader's kinds are decided from.
DEFAULT_PATHS = {spec.name: spec.path for spec in config().counters}


def port(device: str = "mlx5_0", number: int = 1, state: Optional[str] = ACTIVE,
         phys: Optional[str] = LINKUP, layer: Optional[str] = "InfiniBand",
         counters: Optional[dict[str, Any]] = None, operstate: Optional[str] = None,
         paths: Optional[dict[str, str]] = None) -> PortSnapshot:
    """A port; each counter gets the kind the reader would give its file (``paths``, else
    the shipped config's path)."""
    paths = paths or {}
    kinds = {name: counter_kind(paths.get(name) or DEFAULT_PATHS.get(name, name))
             for name in counters or {}}
    return PortSnapshot(device=device, port=number, link_layer=layer, state=state,
                        phys_state=phys, operstate=operstate, counters=counters or {},
                        counter_paths=paths, counter_kinds=kinds)


def device(name: str = "mlx5_0", pci: str = "0000:47:00.0", numa: int = 0,
           ports: tuple[PortSnapshot, ...] = (), **kw: Any) -> DeviceSnapshot:
    return DeviceSnapshot(name=name, pci_address=pci, numa_node=numa, driver="mlx5_core",
                          vendor="0x15b3", hca_type=kw.pop("hca", "MT4129"),
                          ports=ports or (port(name),), **kw)


def host(*devices: DeviceSnapshot, when: float = 0, boot: str = "boot-1",
         complete: bool = True) -> HostSnapshot:
    return HostSnapshot(at(when), boot, tuple(devices), complete=complete)


def gpus(numa: tuple[int, ...] = (0, 1), topology: Optional[dict[str, list[str]]] = None
         ) -> Topology:
    matrix = {k: tuple(v) for k, v in (topology or {}).items()}
    return Topology(GpuTopology(frozenset(numa), (), matrix))


def with_fields(state: MonitorState, family: Family, **fields: Any) -> MonitorState:
    """``state`` with these fields of ``family``'s section (a new section; ``state`` is
    changed and returned): ``with_fields(MonitorState(), LINK_STATE, known_devices=[...])``."""
    state.sections[family.id] = replace(state.section(family), **fields)
    return state


class Runner:
    """Drives the pure evaluator poll after poll, like the monitor does, minus the I/O."""

    def __init__(self, cfg: Optional[Config] = None, topology: Optional[Topology] = None,
                 state: Optional[MonitorState] = None, baseline: bool = True,
                 earlier: bool = True) -> None:
        self.config = cfg or config()
        self.topology = topology or gpus()
        self.state = state or MonitorState(boot_id="boot-1")
        self.memory = PollMemory()
        self.baseline = baseline
        self.earlier = earlier  # False: a host where nichealthd never ran
        self.last: Optional[CycleResult] = None

    def poll(self, snapshot: HostSnapshot) -> CycleResult:
        result = self.evaluate(snapshot)
        self.adopt(result)
        return result

    def evaluate(self, snapshot: HostSnapshot) -> CycleResult:
        """One poll's evaluation, not adopted: as the monitor does when the commit fails."""
        return evaluate(self.state, snapshot, self.config, self.topology, self.memory,
                        snapshot.taken_at, baseline=self.baseline, earlier=self.earlier)

    def adopt(self, result: CycleResult) -> None:
        """What the monitor does after a successful commit."""
        self.state, self.memory, self.baseline, self.last = (result.state, result.memory,
                                                             False, result)
        self.earlier = True

    def restart(self) -> None:
        """A process restart: persisted state survives (through JSON), memory does not."""
        self.state = MonitorState.from_json(settled(self.state, self.memory).to_json())
        self.memory = PollMemory()


def counter_tables(runner: Runner) -> CounterTables:
    """The link-counter family's volatile memory as the runner holds it (empty: none)."""
    tables = runner.memory.volatile.get(LINK_COUNTERS.id, CounterTables())
    assert isinstance(tables, CounterTables)
    return tables


def counters_port(values: dict[str, Any], **kw: Any) -> PortSnapshot:
    return port(counters=values, **kw)


def with_counters(p: PortSnapshot, **values: Any) -> PortSnapshot:
    kinds = {name: counter_kind(p.counter_paths.get(name) or DEFAULT_PATHS.get(name, name))
             for name in values}
    return replace(p, counters={**p.counters, **values},
                   counter_kinds={**p.counter_kinds, **kinds})


def messages(result: CycleResult) -> list[str]:
    return [e.message for e in result.events]


def non_baseline(result: CycleResult) -> list[Any]:
    """Events other than the check-scoped clears and healthy baselines."""
    return [e for e in result.events if not (e.is_healthy and "after reboot" in e.message)
            and e.entities]
