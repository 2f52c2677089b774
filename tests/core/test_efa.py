"""AWS EFA in the pure core: adapter family, roles, netdev state, presence, counters."""

from __future__ import annotations

from typing import Any, Optional

from nichealthd.core.checks.efa_counters import EFA_COUNTERS
from nichealthd.core.checks.efa_state import EFA_STATE
from nichealthd.core.checks.link_state import LINK_STATE
from nichealthd.core.config import EFA_DEGRADATION_CHECK, EFA_STATE_CHECK
from nichealthd.core.model import DeviceSnapshot, PortSnapshot
from nichealthd.core.topology import (
    COMPUTE,
    STORAGE,
    UNSUPPORTED,
    GpuTopology,
    NicFilters,
    classify,
)
from nichealthd.core.views import counter_records, device_records, health_status, port_records

from .builders import Runner, config, device, gpus, host, non_baseline


def efa_port(name: str, operstate: Optional[str] = "up", carrier: Optional[int] = 1,
             netdev: Optional[str] = "enp1s1", counters: Optional[dict[str, Any]] = None
             ) -> PortSnapshot:
    return PortSnapshot(device=name, port=1, link_layer="Unknown", state="4: ACTIVE",
                        phys_state="5: LinkUp", operstate=operstate if netdev else None,
                        netdev=netdev, carrier=carrier if netdev else None,
                        counters=counters or {})


def efa(name: str = "rdmap16s27", pci: str = "0000:10:1b.0", driver: Optional[str] = "efa",
        vendor: str = "0x1d0f", **kw: Any) -> DeviceSnapshot:
    guid = kw.pop("node_guid", None)
    ports = kw.pop("ports", None) or (efa_port(name, **kw),)
    return DeviceSnapshot(name=name, pci_address=pci, numa_node=0, driver=driver,
                          vendor=vendor, ports=ports, node_guid=guid)


NAMES = [f"rdmap{16 * i}s27" for i in range(1, 5)]
TOPOLOGY = gpus((0,), {n: ["PXB"] for n in NAMES})


def fleet(**changes: dict[str, Any]) -> list[DeviceSnapshot]:
    """Four EFA devices behind GPU switches; ``changes`` per device name."""
    return [efa(n, pci=f"0000:{16 * i:02x}:1b.0", **{"netdev": f"eth{i}", **changes.get(n, {})})
            for i, n in enumerate(NAMES, 1)]


def events_of(result: Any, check: Optional[str] = None) -> list[Any]:
    return [e for e in non_baseline(result) if check is None or e.check_name == check]


# ------------------------------------------------------------------------- discovery/roles

def test_adapter_family_by_driver_then_vendor() -> None:
    assert efa().adapter == "efa" and efa().is_efa
    assert efa(driver=None).adapter == "efa"  # vendor 0x1d0f alone
    assert device().adapter == "mlx5" and not device().is_efa
    other = DeviceSnapshot(name="bnxt_re0", driver="bnxt_en", vendor="0x14e4")
    assert other.adapter == ""
    # A driver other than efa wins over the vendor (an ENA never has an RDMA device).
    assert efa(driver="ena").adapter == ""


def test_efa_roles_come_from_the_pcie_topology() -> None:
    topo = GpuTopology(frozenset({0}), (), {"a": ("PXB",), "b": ("NODE",), "c": ("PHB",)})
    assert classify(efa("a"), topo, frozenset()).role == COMPUTE
    assert classify(efa("b"), topo, frozenset()).role == STORAGE
    # p4d: EFA and GPUs on one root bus, no switch (aws-ofi-nccl: "meet at host bridges").
    assert classify(efa("c"), topo, frozenset()).role == COMPUTE
    vf = DeviceSnapshot(name="v", driver="efa", vendor="0x1d0f", is_vf=True)
    assert classify(vf, topo, frozenset()).role == "vf"
    assert classify(efa("rdmap1"), topo, frozenset(),
                    NicFilters(exclusion=("^rdmap",))).role == "excluded"
    bnxt = DeviceSnapshot(name="bnxt_re0", driver="bnxt_en", vendor="0x14e4", numa_node=0)
    assert classify(bnxt, topo, frozenset()).role == UNSUPPORTED


# ------------------------------------------------------------------------------- state

def test_interface_set_down_is_one_fatal_event_and_its_return_one_recovery() -> None:
    runner = Runner(topology=TOPOLOGY)
    first = runner.poll(host(*fleet()))
    assert [e for e in first.events if not e.is_healthy] == []
    down = runner.poll(host(*fleet(rdmap32s27={"operstate": "down", "carrier": None}), when=1))
    (event,) = events_of(down)
    assert event.check_name == EFA_STATE_CHECK and event.is_fatal
    assert event.recommended_action == "REPLACE_VM"
    assert event.entities == (("NIC", "rdmap32s27"), ("NICPort", "1"))
    assert "operstate down" in event.message
    assert events_of(runner.poll(host(*fleet(rdmap32s27={"operstate": "down"}), when=2))) == []
    back = runner.poll(host(*fleet(), when=3))
    assert [(e.check_name, e.is_healthy) for e in events_of(back)] == [(EFA_STATE_CHECK, True)]


def test_carrier_loss_is_down_and_unknown_operstate_is_up() -> None:
    runner = Runner(topology=TOPOLOGY)
    runner.poll(host(*fleet(rdmap16s27={"operstate": "unknown"})))
    lost = runner.poll(host(*fleet(rdmap16s27={"carrier": 0}), when=1))
    assert [(e.check_name, e.is_fatal) for e in events_of(lost)] == [(EFA_STATE_CHECK, True)]


def test_nothing_read_holds_the_last_state() -> None:
    runner = Runner(topology=TOPOLOGY)
    runner.poll(host(*fleet()))
    blind = runner.poll(host(*fleet(rdmap16s27={"operstate": None, "carrier": None}), when=1))
    assert events_of(blind) == []


def test_down_at_first_sight_is_fatal_only_when_its_peers_are_up() -> None:
    runner = Runner(topology=TOPOLOGY)
    first = runner.poll(host(*fleet(rdmap16s27={"operstate": "down"})))
    assert [(e.check_name, e.is_fatal) for e in first.events if not e.is_healthy] == [
        (EFA_STATE_CHECK, True)]
    # Half of them down: no decisive mode, taken as not connected; quiet until up once.
    runner = Runner(topology=TOPOLOGY)
    half = {n: {"operstate": "down"} for n in NAMES[:2]}
    first = runner.poll(host(*fleet(**half)))
    assert [e for e in first.events if not e.is_healthy] == []
    assert any("not connected" in n for n in first.notes)
    assert events_of(runner.poll(host(*fleet(**half), when=1))) == []


def test_efa_without_netdev_gets_presence_only() -> None:
    runner = Runner(topology=TOPOLOGY)
    alone = fleet(rdmap16s27={"netdev": None})
    assert [e for e in runner.poll(host(*alone)).events if not e.is_healthy] == []
    rest = alone[1:]
    for second in (1, 2):
        assert events_of(runner.poll(host(*rest, when=second))) == []
    gone = runner.poll(host(*rest, when=3))
    (event,) = events_of(gone)
    assert event.check_name == EFA_STATE_CHECK and event.is_fatal
    assert event.error_code == ("device_missing",)
    back = runner.poll(host(*alone, when=4))
    assert [(e.error_code, e.is_healthy) for e in events_of(back)] == [(("device_missing",), True)]


def test_link_state_leaves_efa_alone_and_mlx5_beside_it_is_unchanged() -> None:
    topo = gpus((0,), {**{n: ["PXB"] for n in NAMES}, "mlx5_0": ["PXB"]})
    runner = Runner(topology=topo)
    runner.poll(host(device(), *fleet()))
    result = runner.poll(host(device(ports=(_down_ib(),)), *fleet(), when=1))
    assert [e.check_name for e in events_of(result)] == ["InfiniBandStateCheck"]
    links = result.state.section(LINK_STATE)
    assert "mlx5_0_1" in links.port_states and "rdmap16s27_1" not in links.port_states
    assert "rdmap16s27" not in links.known_devices


def _down_ib() -> PortSnapshot:
    return PortSnapshot(device="mlx5_0", port=1, link_layer="InfiniBand", state="1: DOWN",
                        phys_state="3: Disabled")


def test_a_mlx5_host_gets_no_efa_clears_and_an_efa_host_does() -> None:
    mlx = Runner().poll(host(device()))
    clears = {e.check_name for e in mlx.events if not e.entities}
    assert EFA_STATE_CHECK not in clears and EFA_DEGRADATION_CHECK not in clears
    aws = Runner(topology=TOPOLOGY).poll(host(*fleet()))
    clears = {e.check_name for e in aws.events if not e.entities}
    assert {EFA_STATE_CHECK, EFA_DEGRADATION_CHECK} <= clears


# ---------------------------------------------------------------------------- counters

def counted(when: float, **values: int) -> list[DeviceSnapshot]:
    base = {"rx_drops": 0, "no_completion_cmds": 0}
    return fleet(rdmap16s27={"counters": {**base, **values}})


def test_no_completion_cmds_plus_one_is_one_fatal_event() -> None:
    runner = Runner(topology=TOPOLOGY)
    runner.poll(host(*counted(0)))
    result = runner.poll(host(*counted(1, no_completion_cmds=1), when=1))
    (event,) = events_of(result)
    assert (event.check_name, event.is_fatal, event.error_code) == (
        EFA_DEGRADATION_CHECK, True, ("no_completion_cmds",))
    assert events_of(runner.poll(host(*counted(2, no_completion_cmds=1), when=2))) == []


def test_rx_drops_slow_is_nothing_fast_is_one_degradation() -> None:
    runner = Runner(topology=TOPOLOGY)
    runner.poll(host(*counted(0)))
    value = 0
    for second in range(1, 11):  # 50/s, under the 100/s threshold
        value += 50
        assert events_of(runner.poll(host(*counted(second, rx_drops=value), when=second))) == []
    value += 5000  # 5000/s
    (event,) = events_of(runner.poll(host(*counted(11, rx_drops=value), when=11)))
    assert (event.check_name, event.is_fatal, event.error_code) == (
        EFA_DEGRADATION_CHECK, False, ("rx_drops",))
    value += 5000
    assert events_of(runner.poll(host(*counted(12, rx_drops=value), when=12))) == []  # latched


def test_mlx5_counters_are_not_judged_on_efa_nor_efa_counters_on_mlx5() -> None:
    runner = Runner(topology=TOPOLOGY)
    runner.poll(host(*fleet(rdmap16s27={"counters": {"link_downed": 0}})))
    result = runner.poll(host(*fleet(rdmap16s27={"counters": {"link_downed": 5}}), when=1))
    assert events_of(result) == []


# ------------------------------------------------------------------------------- views

def test_records_name_the_adapter_and_the_health_model_judges_efa_ports() -> None:
    runner = Runner(topology=TOPOLOGY)
    runner.poll(host(*fleet()))
    snapshot = host(*fleet(rdmap32s27={"operstate": "down"}), when=1)
    result = runner.poll(snapshot)
    ports = {r["device"]: r for r in port_records(snapshot, result, runner.state)}
    assert ports["rdmap32s27"]["adapter"] == "efa"
    assert (ports["rdmap32s27"]["health"], ports["rdmap32s27"]["reasons"]) == (
        "fatal", ["netdev eth2 down"])
    assert ports["rdmap16s27"]["health"] == "healthy"
    devices = {r["device"]: r for r in device_records(snapshot, result, runner.state)}
    assert {r["adapter"] for r in devices.values()} == {"efa"}
    assert health_status(snapshot, result, runner.state)["fatal_ports"] == ["rdmap32s27/1"]
    counters = counter_records(snapshot, result, runner.state, config=runner.config)
    assert {c["counter"] for c in counters} == {s.name for s in runner.config.efa_counters}


def test_every_efa_device_gone_at_once_is_a_driver_event_not_32_failures() -> None:
    runner = Runner(cfg=config(driverReloadGrace="60s", driverReloadTimeout="600s"),
                    topology=TOPOLOGY)
    runner.poll(host(*fleet()))
    for second in (1, 2, 3, 4, 30):
        assert events_of(runner.poll(host(when=second))) == []  # held, within the grace
    (told,) = events_of(runner.poll(host(when=61)))
    assert (told.check_name, told.is_fatal, told.error_code) == (
        EFA_STATE_CHECK, False, ("driver_event",))
    assert len(told.entities) == 4
    assert events_of(runner.poll(host(when=62))) == []
    back = runner.poll(host(*fleet(), when=63))
    assert [(e.error_code, e.is_healthy) for e in events_of(back)] == [
        (("driver_event",), True)]


def test_efa_devices_gone_past_the_driver_timeout_are_judged_one_by_one() -> None:
    runner = Runner(cfg=config(driverReloadGrace="1s", driverReloadTimeout="10s"),
                    topology=TOPOLOGY)
    runner.poll(host(*fleet()))
    for second in (1, 2, 3, 5):
        runner.poll(host(when=second))
    out = runner.poll(host(when=11))
    # The host event closed first, then each device judged (missed three times already).
    assert [(e.error_code[0], e.is_fatal, e.is_healthy) for e in events_of(out)] == [
        ("driver_event", False, True)] + [("device_missing", True, False)] * 4


def test_without_efa_the_efa_families_keep_their_sections_until_a_device_appears() -> None:
    """A host without EFA (most) leaves the EFA sections as they are, poll after poll, with
    no EFA counter shown; an EFA device that appears later is judged as on any EFA host."""
    runner = Runner(topology=TOPOLOGY)
    runner.poll(host(device()))
    before = runner.state.section(EFA_STATE), runner.state.section(EFA_COUNTERS)
    result = runner.poll(host(device(), when=1))
    assert runner.state.section(EFA_STATE) is before[0]
    assert runner.state.section(EFA_COUNTERS) is before[1]
    assert result.pictures[EFA_COUNTERS.id] == {} and events_of(result) == []
    runner.poll(host(device(), *counted(2), when=2))
    assert runner.state.section(EFA_STATE).known_devices == NAMES
    (event,) = events_of(runner.poll(host(device(), *counted(3, no_completion_cmds=1), when=3)))
    assert (event.check_name, event.is_fatal, event.error_code) == (
        EFA_DEGRADATION_CHECK, True, ("no_completion_cmds",))
