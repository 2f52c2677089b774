"""A Mellanox PF on the bus without an RDMA device is one fatal event naming it, once the
RDMA driver is demonstrably up and the driver grace has passed (the boot-order rules of
:mod:`nichealthd.core.checks.lost_nic`)."""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path
from typing import Any, Iterable

from nichealthd.core.checks.link_section import DriverEvent
from nichealthd.core.checks.link_state import LINK_STATE
from nichealthd.core.checks.lost_nic import LOST_NICS
from nichealthd.core.evaluate import CycleResult
from nichealthd.core.model import HostSnapshot
from nichealthd.core.state import MonitorState
from nichealthd.core.topology import Topology
from nichealthd.sources.adapter_facts import AdapterFacts, PciNic
from nichealthd.sources.routes import read_default_route_netdevs

from .builders import Runner, at, config, device, gpus, host
from .test_topology import Host, v4_default

REGISTERED = PciNic("0000:47:00.0", "0x020700", True, "mlx5_core")
LOST = PciNic("0000:48:00.0", "0x020700", False, None, (), 0)
PROBE_FAILED = PciNic("0000:49:00.0", "0x020000", False, "mlx5_core", ("eth3",), 1)
GRACE = 180.0  # driverReloadGrace's default
READ = 10.0  # adapterCheckInterval's default: one adapter read every 10 s


def snap(when: float, *nics: PciNic, adapter: bool = True) -> HostSnapshot:
    """mlx5_0 registered at 0000:47:00.0 (a sibling with its device) and ``nics``."""
    base = host(device("mlx5_0", "0000:47:00.0"), when=when)
    return replace(base, adapter=AdapterFacts(pci_nics=(REGISTERED, *nics))
                   if adapter else None)


def bare(when: float, *nics: PciNic) -> HostSnapshot:
    """No RDMA device on the host: only the functions ``nics`` on the bus."""
    return replace(host(when=when), adapter=AdapterFacts(pci_nics=nics))


def lost(result: CycleResult) -> list[Any]:
    return [e for e in result.events if e.error_code == ("nic_unregistered",)]


def reads(runner: Runner, start: float, stop: float, *nics: PciNic,
          make: Any = snap) -> dict[float, list[Any]]:
    """One adapter read every 10 s from ``start`` to before ``stop``: the lost-NIC events of
    each read that had any, by its time."""
    fired: dict[float, list[Any]] = {}
    when = start
    while when < stop:
        got = lost(runner.poll(make(when, *nics)))
        if got:
            fired[when] = got
        when += READ
    return fired


def dgx_functions(registered: Iterable[int] = ()) -> tuple[PciNic, ...]:
    """The 13 PFs of a DGX H100 (8 InfiniBand, 4 storage and 1 management Ethernet), bound to
    mlx5_core with their netdevs; ``registered``: the indexes whose RDMA device exists."""
    done = set(registered)
    nics = []
    for i in range(13):
        infiniband = i < 8
        nics.append(PciNic(f"0000:{0x18 + i:02x}:00.0", "0x020700" if infiniband else "0x020000",
                           i in done, None if i in done else "mlx5_core",
                           () if i in done else (f"ib{i}" if infiniband else f"eth{i}",),
                           None if i in done else i % 2))
    return tuple(nics)


def dgx(when: float, *registered: int) -> HostSnapshot:
    """The DGX's functions, their devices for ``registered``, as the snapshot lists them."""
    nics = dgx_functions(registered)
    devices = tuple(device(f"mlx5_{i}", nics[i].address, numa=i % 2) for i in registered)
    return replace(host(*devices, when=when), adapter=AdapterFacts(pci_nics=nics))


# --------------------------------------------------------------- the verdict and its clock

def test_an_unbound_pf_is_one_fatal_event_with_its_pci_address_after_the_grace() -> None:
    runner = Runner()
    assert reads(runner, 0, GRACE, LOST) == {}  # 18 reads: not yet
    got = lost(runner.poll(snap(GRACE, LOST)))
    assert len(got) == 1
    event = got[0]
    assert event.is_fatal and event.recommended_action == "REPLACE_VM"
    assert event.check_name == "InfiniBandStateCheck"
    assert event.entities == (("PCI", "0000:48:00.0"),)
    assert "0000:48:00.0" in event.message and "no driver is bound" in event.message
    assert "for 3m" in event.message
    assert reads(runner, GRACE + READ, GRACE + 60, LOST) == {}  # latched: once
    section = runner.state.section(LOST_NICS)
    assert section.misses == {} and section.since == {}
    back = lost(runner.poll(snap(GRACE + 60, replace(LOST, registered=True))))
    assert len(back) == 1 and back[0].is_healthy and back[0].entities == event.entities


def test_the_three_reads_stay_a_floor_under_a_short_grace() -> None:
    """driverReloadGrace = 0s reports at the third read, as a missing device is, never at
    the first read that may race a probe."""
    runner = Runner(cfg=config(driverReloadGrace="0s"))
    fired = [n for n in range(6) if lost(runner.poll(snap(n, LOST)))]
    assert fired == [2]
    runner = Runner(cfg=config(driverReloadGrace="5s"))  # 3 reads in 2 s: the grace decides
    fired = [n for n in range(8) if lost(runner.poll(snap(n, LOST)))]
    assert fired == [5]


def test_a_restart_keeps_the_clock_and_a_clock_gone_back_restarts_it() -> None:
    runner = Runner()
    assert reads(runner, 0, 100, LOST) == {}
    assert runner.state.section(LOST_NICS).since == {"0000:48:00.0": at(0)}
    runner.restart()  # through the state file
    assert runner.state.section(LOST_NICS).since == {"0000:48:00.0": at(0)}
    assert list(reads(runner, 100, 200, LOST)) == [GRACE]  # not 100 + 180
    clocked = Runner()
    assert reads(clocked, 1000, 1100, LOST) == {}
    assert reads(clocked, 500, 500 + GRACE, LOST) == {}  # the wall clock went back 10 min
    assert list(reads(clocked, 500 + GRACE, 500 + GRACE + READ, LOST)) == [500 + GRACE]


def test_one_probe_failing_while_its_siblings_have_their_devices_is_fatal_after_the_grace() \
        -> None:
    runner = Runner()
    assert reads(runner, 0, GRACE, PROBE_FAILED) == {}
    got = lost(runner.poll(snap(GRACE, PROBE_FAILED)))
    assert [e.check_name for e in got] == ["EthernetStateCheck"]
    assert got[0].is_fatal and got[0].recommended_action == "REPLACE_VM"
    assert "driver mlx5_core is bound" in got[0].message and "eth3" in got[0].message
    assert "probe failed" in got[0].message


def test_the_function_of_a_known_device_is_left_to_the_device_missing_rule() -> None:
    runner = Runner()
    runner.poll(snap(0))
    gone = PciNic("0000:47:00.0", "0x020700", False, "mlx5_core", (), 0)
    sibling = PciNic("0000:50:00.0", "0x020700", True)
    for n in range(1, 40):
        result = runner.poll(replace(host(device("mlx5_9", "0000:50:00.0"), when=n * READ),
                                     adapter=AdapterFacts(pci_nics=(gone, sibling))))
        assert not lost(result)


# --------------------------------------------------------------- boot order: mlx5_ib late

def test_no_function_with_a_device_judges_nothing_for_ten_minutes() -> None:
    """The daemon started before mlx5_ib: 13 functions bound to mlx5_core, no RDMA device."""
    runner = Runner()
    notes: list[str] = []
    for n in range(60):
        result = runner.poll(dgx(n * READ))
        assert not lost(result)
        notes.extend(result.notes)
    section = runner.state.section(LOST_NICS)
    assert section.misses == {} and section.since == {} and section.latched == {}
    told = [n for n in notes if "no Mellanox PCI function has an RDMA device" in n]
    assert len(told) == 1 and "13 function(s)" in told[0]  # once, not every read


def test_mlx5_ib_loading_after_ten_minutes_is_no_event_and_restarts_the_clocks() -> None:
    runner = Runner()
    assert reads(runner, 0, 600, make=lambda when: dgx(when)) == {}
    # mlx5_ib probes the functions one after the other: 5 at the first read, the rest at the
    # next, and nothing is ever reported.
    result = runner.poll(dgx(600, *range(5)))
    assert not lost(result)
    assert any("RDMA driver is up" in n for n in result.notes)
    section = runner.state.section(LOST_NICS)
    assert set(section.since) == {f"0000:{0x18 + i:02x}:00.0" for i in range(5, 13)}
    assert set(section.since.values()) == {at(600)}  # the clocks start at the load
    assert reads(runner, 610, 1200, make=lambda when: dgx(when, *range(13))) == {}
    assert runner.state.section(LOST_NICS).since == {}


def test_the_clock_starts_when_the_driver_is_up_not_at_the_daemons_start() -> None:
    """One function's probe fails when mlx5_ib loads at 10 min: reported at 10 min + the
    grace, not at the grace after the start."""
    runner = Runner()
    twelve = range(12)
    assert reads(runner, 0, 600, make=lambda when: dgx(when)) == {}
    fired = reads(runner, 600, 600 + GRACE + 60, make=lambda when: dgx(when, *twelve))
    assert list(fired) == [600 + GRACE]
    assert [e.entities for e in fired[600 + GRACE]] == [(("PCI", "0000:24:00.0"),)]


def test_the_driver_going_away_again_restarts_every_clock() -> None:
    runner = Runner()
    assert reads(runner, 0, 120, LOST) == {}
    # Every device unregistered (mlx5_ib unloaded before the daemon knew any device).
    assert reads(runner, 120, 300, LOST, make=bare) == {}
    assert runner.state.section(LOST_NICS).since == {}
    assert list(reads(runner, 300, 300 + GRACE + 30, LOST)) == [300 + GRACE]


def test_a_driver_reload_restarts_the_clock_of_a_function_still_without_its_device() -> None:
    """Two known devices gone at once are a driver event (held); no function has a device
    then, so the pending function's clock starts again when the driver is back."""
    def two(when: float, *nics: PciNic) -> HostSnapshot:
        devices = (device("mlx5_0", "0000:47:00.0"), device("mlx5_1", "0000:50:00.0"))
        sibling = PciNic("0000:50:00.0", "0x020700", True)
        return replace(host(*devices, when=when),
                       adapter=AdapterFacts(pci_nics=(REGISTERED, sibling, *nics)))

    def unloaded(when: float, *nics: PciNic) -> HostSnapshot:
        off = (replace(REGISTERED, registered=False, driver="mlx5_core"),
               PciNic("0000:50:00.0", "0x020700", False, "mlx5_core"))
        return replace(host(when=when), adapter=AdapterFacts(pci_nics=(*off, *nics)))

    runner = Runner()
    assert reads(runner, 0, 120, LOST, make=two) == {}
    assert reads(runner, 120, 180, LOST, make=unloaded) == {}
    assert runner.state.section(LINK_STATE).driver_event is not None  # held as a reload
    assert runner.state.section(LOST_NICS).since == {}
    # The read at which the devices return still ends the held event; the clock starts at
    # the next one.
    assert list(reads(runner, 180, 180 + GRACE + 30, LOST, make=two)) == [190 + GRACE]


# --------------------------------------------------------------- not judged at all

def test_a_function_bound_to_another_driver_is_not_judged_and_unbound_is() -> None:
    vfio = replace(LOST, address="0000:4a:00.0", driver="vfio-pci")
    other = replace(LOST, address="0000:4b:00.0", driver="some_vendor_driver")
    unbound = replace(LOST, address="0000:4c:00.0")
    mlx4 = replace(LOST, address="0000:4d:00.0", driver="mlx4_core")
    runner = Runner()
    fired = reads(runner, 0, 600, vfio, other, unbound, mlx4)
    assert list(fired) == [GRACE]
    assert sorted(e.entities[0][1] for e in fired[GRACE]) == ["0000:4c:00.0", "0000:4d:00.0"]
    assert "0000:4a:00.0" not in runner.state.section(LOST_NICS).since


def test_management_by_its_netdevs_default_route_is_not_judged() -> None:
    """The default route's device set names RDMA devices, which such a function has none of:
    its netdev is compared with the route's netdevs."""
    mgmt = PciNic("0000:e4:00.0", "0x020000", False, "mlx5_core", ("enp228s0np0",), 1)
    topology = Topology(gpus().gpus, default_route_netdevs=frozenset({"enp228s0np0"}))
    assert reads(Runner(topology=topology), 0, 600, mgmt) == {}
    assert list(reads(Runner(), 0, 600, mgmt)) == [GRACE]  # no route: a storage NIC


def test_management_behind_a_bond_read_from_the_real_route_tables(tmp_path: Path) -> None:
    """/proc/net/route -> bond0.100 -> bond0 -> its slaves, the two functions of a front-end
    card with RoCE off (no RDMA device), as startup reads them into the topology."""
    tree = Host(tmp_path)
    for iface in ("ens1f0np0", "ens1f1np1", "ens2f0np0"):
        tree.physical(iface, None)
    tree.virtual("bond0", ("ens1f0np0", "ens1f1np1"), "ens1f0np0 ens1f1np1")
    tree.virtual("bond0.100", ("bond0",))
    tree.routes(v4=v4_default("bond0.100"))
    netdevs = read_default_route_netdevs(str(tree.proc), str(tree.net))
    topology = Topology(gpus().gpus, default_route_netdevs=netdevs)
    slaves = [PciNic(f"0000:0d:00.{fn}", "0x020000", False, "mlx5_core", (iface,), 1)
              for fn, iface in enumerate(("ens1f0np0", "ens1f1np1"))]
    storage = PciNic("0000:0e:00.0", "0x020000", False, "mlx5_core", ("ens2f0np0",), 1)
    fired = reads(Runner(topology=topology), 0, 600, *slaves, storage)
    assert [[e.entities for e in got] for got in fired.values()] == [
        [(("PCI", "0000:0e:00.0"),)]]


def test_exclusion_regex_matches_the_address_or_a_netdev_and_numa_management_is_skipped() \
        -> None:
    by_address = Runner(cfg=config(nicExclusionRegex=["^0000:48"]))
    by_netdev = Runner(cfg=config(nicExclusionRegex=["^eth9$"]))
    remote = Runner()  # NUMA node 3 has no GPU: management, not monitored
    nic9 = replace(LOST, netdevs=("eth9",))
    assert reads(by_address, 0, 600, LOST) == {}
    assert reads(by_netdev, 0, 600, nic9) == {}
    assert reads(remote, 0, 600, replace(LOST, numa_node=3)) == {}
    pinned = Runner(cfg=config(nicInclusionRegexOverride=["^0000:48:00.0$"]))
    assert list(reads(pinned, 0, 600, LOST)) == [GRACE]


def test_no_verdict_during_a_driver_event_or_without_facts() -> None:
    state = MonitorState(boot_id="boot-1")
    links = state.section(LINK_STATE).copy()
    links.driver_event = DriverEvent(at(0), ("mlx5_5",))
    state.sections[LINK_STATE.id] = links
    runner = Runner(state=state, baseline=False)
    assert reads(runner, 10, 600, LOST) == {}
    # Polls without facts neither count nor reset: the third read reports.
    runner = Runner(cfg=config(driverReloadGrace="0s"))
    fired = [n for n in range(6) if lost(runner.poll(snap(n, LOST, adapter=n % 2 == 0)))]
    assert fired == [4]
    assert "0000:48:00.0" in runner.state.section(LOST_NICS).latched


# --------------------------------------------------------------- the views

def test_a_reported_lost_nic_is_a_device_row_between_adapter_reads_too() -> None:
    """``show devices`` (D-Bus, varlink) lists it by its PCI address, with why."""
    from nichealthd.core.checks.lost_nic import lost_nic_records
    from nichealthd.core.views import device_records

    runner = Runner(cfg=config(driverReloadGrace="0s"))
    for n in range(2):
        pending = runner.poll(snap(n, LOST, PROBE_FAILED))
        assert lost_nic_records(runner.state, pending.pictures) == []  # not reported yet
    result = runner.poll(snap(2, LOST, PROBE_FAILED))
    rows = lost_nic_records(runner.state, result.pictures)
    assert [(r["device"], r["pci_address"], r["link_layer"], r["lost_reason"]) for r in rows] == [
        ("0000:48:00.0", "0000:48:00.0", "InfiniBand", "no driver is bound to it"),
        ("0000:49:00.0", "0000:49:00.0", "Ethernet",
         "driver mlx5_core is bound but registered no RDMA device while other functions have "
         "theirs (probe failed)")]
    assert rows[1]["netdevs"] == ["eth3"] and rows[1]["numa_node"] == 1
    assert rows[1]["driver"] == "mlx5_core" and rows[1]["card"] == "0000:49:00"
    assert all(r["lost"] and not r["present"] and r["lost_since"] == "2026-01-01T12:00:02Z"
               for r in rows)
    # A poll without an adapter read still shows what the last read saw.
    between = runner.poll(snap(3, adapter=False))
    assert lost_nic_records(runner.state, between.pictures) == rows
    records = device_records(snap(3), between, runner.state)
    assert [r["device"] for r in records if r.get("lost")] == ["0000:48:00.0", "0000:49:00.0"]
    assert {frozenset(r) for r in records if r.get("lost")} == {frozenset(rows[0])}
    # After a restart (no read yet) the row is still there, from the state alone.
    runner.restart()
    bare_rows = lost_nic_records(runner.state, {})
    assert [(r["device"], r["lost_reason"], r["netdevs"]) for r in bare_rows] == [
        (r["device"], r["lost_reason"], []) for r in rows]
    # Registered again: the row goes.
    back = runner.poll(snap(4, replace(LOST, registered=True),
                            replace(PROBE_FAILED, registered=True)))
    assert lost_nic_records(runner.state, back.pictures) == []


def test_a_failed_adapter_read_shows_the_last_picture_not_the_familys_memory() -> None:
    """The failure boundary (core/evaluate.py): the views show a failed family's last
    picture. The lost-NIC family keeps other things in its volatile slot than in its
    picture; the views were given the slot, and ``show devices`` raised."""
    from nichealthd.core.checks.lost_nic import lost_nic_records
    from nichealthd.core.views import device_records
    from nichealthd.sources.adapter import ADAPTER

    runner = Runner(cfg=config(driverReloadGrace="0s"))
    for n in range(3):
        result = runner.poll(snap(n, LOST))
    rows = lost_nic_records(runner.state, result.pictures)
    assert [r["device"] for r in rows] == ["0000:48:00.0"]
    failed = runner.poll(replace(snap(3, adapter=False),
                                 unread={ADAPTER: "numa_node: '--1'"}))
    assert LOST_NICS.id in failed.failed
    assert lost_nic_records(runner.state, failed.pictures) == rows
    records = device_records(snap(3), failed, runner.state)
    assert [r["device"] for r in records if r.get("lost")] == ["0000:48:00.0"]
