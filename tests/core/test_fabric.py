"""A subnet-manager outage is one fabric event, not a REPLACE_VM per card (core/checks/fabric.py).

The figures at a 1 s poll: every compute port of a DGX-like host (8 single-port
InfiniBand cards) in INIT for 10 minutes — longer than ``cardVerdictHoldTime`` (4 min) — gave
8 card REPLACE_VM; it must give none and one non-fatal fabric event with its recovery. One port
stuck ARMED 10 minutes among 7 ACTIVE peers must stay exactly one card REPLACE_VM.
"""

from __future__ import annotations

from dataclasses import replace
from typing import Iterable, Optional

from nichealthd.core.checks.link_state import LINK_STATE
from nichealthd.core.evaluate import CycleResult
from nichealthd.core.model import DeviceSnapshot, HostSnapshot
from nichealthd.core.topology import CardCount, anomalous_cards

from .builders import ACTIVE, DOWN, LINKUP, POLLING, Runner, host, with_counters
from .test_identity import nic

FABRIC = "fe80:0000:0000:0000/0x1"
OTHER = "fe80:0000:0000:0000/0x2"
INIT, ARMED = "2: INIT", "3: ARMED"
MINUTES = 60


def card(index: int, state: str = ACTIVE, phys: str = LINKUP,
         fabric: Optional[str] = FABRIC) -> DeviceSnapshot:
    """Card ``index`` (one InfiniBand port); an ACTIVE port reads its fabric."""
    device = nic(index, state=state, phys=phys)
    port = device.ports[0]
    read = fabric if state == ACTIVE else None
    return device.with_ports((replace(port, fabric=read),))


def poll(runner: Runner, when: float, states: dict[int, str], n: int = 8,
         fabrics: Optional[dict[int, str]] = None, phys: str = LINKUP) -> CycleResult:
    devices = [card(i, states.get(i, ACTIVE), phys if i in states else LINKUP,
                    (fabrics or {}).get(i, FABRIC)) for i in range(n)]
    return runner.poll(host(*devices, when=when))


def replace_vm(results: Iterable[CycleResult]) -> list[str]:
    return [e.message for r in results for e in r.events
            if e.recommended_action == "REPLACE_VM"]


def coded(results: Iterable[CycleResult], code: str) -> list[tuple[bool, str]]:
    return [(e.is_healthy, e.message) for r in results for e in r.events
            if e.error_code == (code,)]


def started(**kw: object) -> Runner:
    runner = Runner()
    poll(runner, 0, {}, **kw)  # type: ignore[arg-type]
    return runner


def test_an_sm_outage_of_ten_minutes_is_one_fabric_event_and_no_replace_vm() -> None:
    runner = started()
    everyone = {i: INIT for i in range(8)}
    outage = [poll(runner, s, everyone) for s in range(1, 10 * MINUTES + 1)]
    back = [poll(runner, s, {}) for s in range(10 * MINUTES + 1, 10 * MINUTES + 5)]
    assert replace_vm(outage + back) == []
    fabric = coded(outage + back, "fabric_event")
    assert [healthy for healthy, _ in fabric] == [False, True]
    assert fabric[0][1].startswith(
        "InfiniBand fabric fe80:0000:0000:0000 (SM LID 0x1): all 8 ports of this host on it "
        "left ACTIVE together, INIT with the link up")
    event = next(e for e in outage[0].events if e.error_code == ("fabric_event",))
    assert not event.is_fatal and event.recommended_action == "NONE"
    assert len(event.entities) == 8
    assert not runner.state.section(LINK_STATE).fabric_events
    assert not runner.state.section(LINK_STATE).card_anomalies


def test_one_port_stuck_armed_among_active_peers_is_exactly_one_card_replace_vm() -> None:
    runner = started()
    results = [poll(runner, s, {3: ARMED}) for s in range(1, 10 * MINUTES + 1)]
    fatal = replace_vm(results)
    assert fatal == ["Card 0000:13:00 (compute) has 0 active ports, expected 1"]
    when = next(i for i, r in enumerate(results, 1) if replace_vm([r]))
    assert when == 4 * MINUTES + 1  # cardVerdictHoldTime after it left ACTIVE
    assert coded(results, "fabric_event") == []


def test_an_outage_of_one_of_two_fabrics_holds_its_cards_only() -> None:
    """4 cards on each fabric; the group's tie falls back to the remembered mode, and the
    other fabric's ACTIVE cards show it: the fabric view is what holds the verdicts."""
    split = {i: OTHER for i in range(4, 8)}
    runner = started(fabrics=split)
    out = {i: INIT for i in range(4)}
    results = [poll(runner, s, out, fabrics=split) for s in range(1, 10 * MINUTES + 1)]
    assert replace_vm(results) == []
    assert [h for h, _ in coded(results, "fabric_event")] == [False]
    assert list(runner.state.section(LINK_STATE).fabric_events) == [FABRIC]


def test_a_port_still_init_after_its_fabric_is_back_is_judged_from_then() -> None:
    runner = started()
    everyone = {i: INIT for i in range(8)}
    for second in range(1, 6 * MINUTES):
        poll(runner, second, everyone)
    back = 6 * MINUTES
    after = [poll(runner, s, {5: INIT}) for s in range(back, back + 5 * MINUTES)]
    fatal = [(i, m) for i, r in enumerate(after) for m in replace_vm([r])]
    assert fatal == [(4 * MINUTES, "Card 0000:15:00 (compute) has 0 active ports, expected 1")]
    assert [h for h, _ in coded(after, "fabric_event")] == [True]


def test_a_restart_in_an_outage_keeps_the_event_and_says_it_once() -> None:
    runner = started()
    everyone = {i: INIT for i in range(8)}
    first = [poll(runner, s, everyone) for s in range(1, 30)]
    runner.restart()
    rest = [poll(runner, s, everyone) for s in range(30, 10 * MINUTES)]
    assert replace_vm(first + rest) == []
    assert [h for h, _ in coded(first + rest, "fabric_event")] == [False]


def test_ports_down_are_still_their_own_fault_during_the_outage() -> None:
    """A port DOWN/Polling is a physical fault, fatal at once, fabric event or not."""
    runner = started()
    states = {i: INIT for i in range(7)}
    results = [poll(runner, 1, states)]
    devices = [card(i, INIT) for i in range(7)] + [card(7, DOWN, POLLING)]
    results.append(runner.poll(host(*devices, when=2)))
    assert replace_vm(results) == [
        "Port mlx5_7 port 1: state DOWN, phys_state Polling - no connectivity"]


def test_one_port_leaving_active_is_not_a_fabric_event() -> None:
    runner = started(n=2)
    results = [poll(runner, s, {0: INIT}, n=2) for s in range(1, 10)]
    assert coded(results, "fabric_event") == []


def test_without_a_known_fabric_no_peer_at_the_mode_is_no_verdict() -> None:
    """Fabrics never read (gids or sm_lid unreadable): every card at 0 active ports is not
    evidence against any of them, however long it lasts (topology.anomalous_cards)."""
    runner = started(fabrics={i: "" for i in range(8)})
    everyone = {i: INIT for i in range(8)}
    results = [poll(runner, s, everyone, fabrics={i: "" for i in range(8)})
               for s in range(1, 10 * MINUTES)]
    assert replace_vm(results) == [] and coded(results, "fabric_event") == []


def test_a_remembered_mode_needs_a_peer_at_it_now() -> None:
    def count(name: str, active: int) -> CardCount:
        return CardCount(name, "compute", (name,), active, True, False, "InfiniBand")

    tie = [count("a", 0), count("b", 1)]
    assert set(anomalous_cards(tie, {"compute": 1})[0]) == {"a"}
    fallen = [count("a", 0), count("b", 0)]
    assert anomalous_cards(fallen, {"compute": 1})[0] == {}


def test_a_fabric_renamed_with_its_devices_keeps_its_event() -> None:
    runner = started(n=2)
    poll(runner, 1, {0: INIT, 1: INIT}, n=2)
    snapshot = host(*[card(i, INIT) for i in range(2)], when=2)
    renamed = HostSnapshot(snapshot.taken_at, snapshot.boot_id, tuple(
        replace(d, name=f"mlx5_{i + 4}", ports=tuple(replace(p, device=f"mlx5_{i + 4}")
                                                    for p in d.ports))
        for i, d in enumerate(snapshot.devices)))
    result = runner.poll(renamed)
    assert coded([result], "fabric_event") == []
    links = runner.state.section(LINK_STATE)
    assert links.fabric_events[FABRIC].devices == ("mlx5_4", "mlx5_5")
    assert set(links.port_fabrics) == {"mlx5_4_1", "mlx5_5_1"}


def test_the_real_faults_stay_replace_vm() -> None:
    """What the fabric view and the driver events must not hide: a port DOWN/Polling for 10
    minutes, and link_downed +1 on an ACTIVE port an hour after the last."""
    runner = started()
    down = [poll(runner, s, {2: DOWN}, phys=POLLING) for s in range(1, 10 * MINUTES)]
    assert replace_vm(down) == [
        "Port mlx5_2 port 1: state DOWN, phys_state Polling - no connectivity"]
    counted = Runner()
    for hour, value in enumerate((0, 0, 1)):
        devices = [card(i) for i in range(8)]
        devices[4] = devices[4].with_ports(
            (with_counters(devices[4].ports[0], link_downed=value),))
        result = counted.poll(host(*devices, when=hour * 60 * MINUTES))
    assert [e.error_code for e in result.events if e.recommended_action == "REPLACE_VM"] == [
        ("link_downed",)]


def test_a_fabric_with_one_port_of_this_host_is_a_fabric_event_not_a_card_verdict() -> None:
    """Seven cards on the compute fabric, card 7 alone on a storage fabric of the same role
    (one port per fabric): its SM down 10 minutes is one non-fatal fabric event and its
    recovery, never a card REPLACE_VM."""
    alone = {7: OTHER}
    runner = started(fabrics=alone)
    outage = [poll(runner, s, {7: INIT}, fabrics=alone) for s in range(1, 10 * MINUTES + 1)]
    back = [poll(runner, s, {}, fabrics=alone) for s in range(10 * MINUTES + 1, 10 * MINUTES + 3)]
    assert replace_vm(outage + back) == []
    fabric = coded(outage + back, "fabric_event")
    assert [healthy for healthy, _ in fabric] == [False, True]
    assert fabric[0][1].startswith(
        "InfiniBand fabric fe80:0000:0000:0000 (SM LID 0x2): the one port of this host on it "
        "left ACTIVE, INIT with the link up (mlx5_7)")
    assert fabric[1][1] == ("InfiniBand fabric fe80:0000:0000:0000 (SM LID 0x2) is back: "
                            "1 of 1 ports of this host on it ACTIVE again")
    assert not runner.state.section(LINK_STATE).card_anomalies


def test_one_port_per_fabric_each_outage_is_its_own_fabric_event() -> None:
    """Eight rails, each its own subnet: two SMs down are two fabric events, no verdict."""
    rails = {i: f"fe80:0000:0000:000{i}/0x1" for i in range(8)}
    runner = started(fabrics=rails)
    outage = [poll(runner, s, {2: ARMED, 5: INIT}, fabrics=rails)
              for s in range(1, 10 * MINUTES)]
    assert replace_vm(outage) == []
    assert [h for h, _ in coded(outage, "fabric_event")] == [False, False]


def test_a_port_dying_during_a_one_port_fabric_outage_is_fatal_at_once() -> None:
    alone = {7: OTHER}
    runner = started(fabrics=alone)
    for second in range(1, 60):
        poll(runner, second, {7: INIT}, fabrics=alone)
    died = poll(runner, 60, {7: DOWN}, fabrics=alone, phys=POLLING)
    assert replace_vm([died]) == [
        "Port mlx5_7 port 1: state DOWN, phys_state Polling - no connectivity"]


def test_after_an_sm_failover_a_port_that_retrained_stays_with_its_peers() -> None:
    """The standby SM (LID 0x2) took over: the ports that stayed ACTIVE still read 0x1, the
    one that flapped reads 0x2 when back. Stuck ARMED later, it is its card's fault after the
    hold, not a one-port fabric of its own."""
    runner = started()
    flapped = {3: OTHER}
    poll(runner, 1, {3: DOWN}, phys=POLLING)
    poll(runner, 2, {}, fabrics=flapped)
    assert runner.state.section(LINK_STATE).port_fabrics["mlx5_3_1"] == FABRIC
    results = [poll(runner, s, {3: ARMED}, fabrics=flapped) for s in range(3, 3 + 4 * MINUTES + 2)]
    assert replace_vm(results) == ["Card 0000:13:00 (compute) has 0 active ports, expected 1"]
    assert coded(results, "fabric_event") == []


def test_an_sm_failover_through_init_is_one_fabric_event() -> None:
    """The master SM died, every port went to INIT, the standby (0x2) activated them."""
    runner = started()
    everyone = {i: INIT for i in range(8)}
    outage = [poll(runner, s, everyone) for s in range(1, 20)]
    standby = {i: OTHER for i in range(8)}
    back = [poll(runner, s, {}, fabrics=standby) for s in range(20, 25)]
    assert replace_vm(outage + back) == []
    assert [h for h, _ in coded(outage + back, "fabric_event")] == [False, True]
