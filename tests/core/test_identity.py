"""A device is its PCI function (node GUID as a cross-check), not its kernel name.

A device back at the same PCI address under another name is the same device: no
disappearance, its records (port states, latched breaches, saturation, misses) carry over under
the new name, one log line says so and ``show devices`` records it.
"""

from __future__ import annotations

import json
from typing import Any, Optional

from nichealthd.core.checks.identity import alias, detect_renames, renames_of
from nichealthd.core.checks.link_counters import LINK_COUNTERS
from nichealthd.core.checks.link_state import LINK_STATE
from nichealthd.core.evaluate import CycleResult
from nichealthd.core.model import DeviceIndex, DeviceSnapshot, HostSnapshot
from nichealthd.core.observed import DeviceIdentity
from nichealthd.core.state import MonitorState
from nichealthd.core.views import device_records

from .builders import DOWN, POLLING, Runner, at, counter_tables, device, host, port
from .equivalence import OLD_STATE

GUIDS = {i: f"b8ce:f603:00{i:02x}:0000" for i in range(32)}


def nic(index: int, name: Optional[str] = None, guid: Optional[str] = None,
        counters: Optional[dict[str, Any]] = None, state: Optional[str] = None,
        phys: Optional[str] = None, layer: str = "InfiniBand") -> DeviceSnapshot:
    """The NIC on PCI bus 0x10+index, called ``name`` (default ``mlx5_<index>``)."""
    name = name or f"mlx5_{index}"
    kw: dict[str, Any] = {}
    if state:
        kw.update(state=state, phys=phys)
    return device(name, pci=f"0000:{0x10 + index:02x}:00.0", numa=index % 2,
                  node_guid=GUIDS[index] if guid is None else guid,
                  ports=(port(name, 1, layer=layer, counters=counters, **kw),))


def fatal(result: CycleResult) -> list[str]:
    return [e.message for e in result.events if e.is_fatal]


def entities(result: CycleResult) -> set[str]:
    return {v for e in result.events for _, v in e.entities}


def test_a_device_back_at_its_pci_address_under_a_new_name_is_the_same_device() -> None:
    runner = Runner()
    runner.poll(host(*(nic(i) for i in range(4)), when=0))
    for second in (1, 2, 3, 4):
        result = runner.poll(host(nic(0), nic(1), nic(2), nic(3, "mlx5_20"), when=second))
        assert not result.events, second
    links = runner.state.section(LINK_STATE)
    assert "mlx5_3" not in links.known_devices and "mlx5_20" in links.known_devices
    assert "mlx5_3_1" not in links.port_states
    assert links.port_states["mlx5_20_1"].device == "mlx5_20"
    assert links.identities["mlx5_20"].renamed_from == "mlx5_3"
    assert links.identities["mlx5_20"].pci_address == "0000:13:00.0"
    assert not links.device_misses


def test_the_rename_is_one_log_line_and_a_device_record() -> None:
    runner = Runner()
    runner.poll(host(nic(0), nic(1), when=0))
    result = runner.poll(host(nic(0), nic(1, "mlx5_20"), when=1))
    renames = [n for n in result.notes if "mlx5_1 is now mlx5_20" in n]
    assert len(renames) == 1 and "0000:11:00.0" in renames[0] and GUIDS[1] in renames[0]
    assert not runner.poll(host(nic(0), nic(1, "mlx5_20"), when=2)).notes
    records = {r["device"]: r for r in device_records(host(nic(0), nic(1, "mlx5_20")),
                                                      result, runner.state)}
    assert records["mlx5_20"]["renamed_from"] == "mlx5_1"
    assert records["mlx5_20"]["renamed_at"] == "2026-01-01T12:00:01Z"
    assert records["mlx5_0"]["renamed_from"] == ""
    assert "mlx5_1" not in records


def test_a_breach_latched_before_the_rename_stays_latched_under_the_new_name() -> None:
    runner = Runner()
    runner.poll(host(nic(0, counters={"link_downed": 0}), nic(1), when=0))
    breach = runner.poll(host(nic(0, counters={"link_downed": 1}), nic(1), when=1))
    assert [e.entities for e in breach.events if e.is_fatal] == [
        (("NIC", "mlx5_0"), ("NICPort", "1"))]
    moved = runner.poll(host(nic(0, "mlx5_7", counters={"link_downed": 2}), nic(1), when=2))
    assert not moved.events  # still latched: nothing new to say, nothing missing
    flags = runner.state.section(LINK_COUNTERS).breach_flags
    assert list(flags) == ["mlx5_7:1:link_downed"]
    assert flags["mlx5_7:1:link_downed"].last_value == 2
    # The counter reset of the reload recovers it, under the name it has now.
    reset = runner.poll(host(nic(0, "mlx5_7", counters={"link_downed": 0}), nic(1), when=3))
    assert [(e.is_healthy, e.entities) for e in reset.events] == [
        (True, (("NIC", "mlx5_7"), ("NICPort", "1")))]
    assert not runner.state.section(LINK_COUNTERS).breach_flags


def test_shifted_names_are_a_permutation_every_record_follows_its_device() -> None:
    runner = Runner()
    runner.poll(host(*(nic(i, counters={"link_downed": 0}) for i in range(4)), when=0))
    runner.poll(host(*(nic(i, counters={"link_downed": 1 if i == 1 else 0})
                       for i in range(4)), when=1))
    assert list(runner.state.section(LINK_COUNTERS).breach_flags) == ["mlx5_1:1:link_downed"]
    # Every device one name up (mlx5_0 -> mlx5_1 ... mlx5_3 -> mlx5_4), in one poll.
    shifted = host(*(nic(i, f"mlx5_{i + 1}", counters={"link_downed": 1 if i == 1 else 0})
                     for i in range(4)), when=2)
    result = runner.poll(shifted)
    assert not result.events
    assert list(runner.state.section(LINK_COUNTERS).breach_flags) == ["mlx5_2:1:link_downed"]
    links = runner.state.section(LINK_STATE)
    assert links.known_devices == ["mlx5_1", "mlx5_2", "mlx5_3", "mlx5_4"]
    assert {k: i.pci_address for k, i in links.identities.items()} == {
        "mlx5_1": "0000:10:00.0", "mlx5_2": "0000:11:00.0", "mlx5_3": "0000:12:00.0",
        "mlx5_4": "0000:13:00.0"}
    assert len([n for n in result.notes if " is now " in n]) == 4


def test_a_port_down_before_the_rename_stays_down_and_recovers_under_the_new_name() -> None:
    runner = Runner()
    runner.poll(host(nic(0), nic(1), when=0))
    down = runner.poll(host(nic(0), nic(1, state=DOWN, phys=POLLING), when=1))
    assert len(fatal(down)) == 1
    renamed = runner.poll(host(nic(0), nic(1, "mlx5_9", state=DOWN, phys=POLLING), when=2))
    assert not renamed.events  # the same port, still down: told already
    up = runner.poll(host(nic(0), nic(1, "mlx5_9"), when=3))
    assert [(e.is_healthy, e.entities) for e in up.events] == [
        (True, (("NIC", "mlx5_9"), ("NICPort", "1")))]


def test_another_card_at_the_same_address_is_not_a_rename() -> None:
    """Node GUIDs that differ where both are known: different hardware, the old one is gone."""
    runner = Runner()
    runner.poll(host(nic(0), nic(1), when=0))
    results = [runner.poll(host(nic(0), nic(1, "mlx5_5", guid="dead:beef:0000:0001"),
                                when=s)) for s in (1, 2, 3)]
    assert not results[0].notes or not any(" is now " in n for n in results[0].notes)
    assert fatal(results[2]) == [
        "NIC mlx5_1 disappeared from /sys/class/infiniband/ - hardware failure"]


def test_an_unknown_guid_on_either_side_does_not_stop_a_rename() -> None:
    runner = Runner()
    runner.poll(host(nic(0), nic(1, guid=""), when=0))
    for second in (1, 2, 3):
        assert not runner.poll(host(nic(0), nic(1, "mlx5_5"), when=second)).events
    assert runner.state.section(LINK_STATE).identities["mlx5_5"].node_guid == GUIDS[1]


def test_a_gone_device_whose_name_another_took_keeps_its_own_records() -> None:
    """A reload that shifted names down and left one card behind: mlx5_1 is gone, the old
    mlx5_2 is now called mlx5_1. The gone one is judged under an alias, never as the other."""
    runner = Runner()
    runner.poll(host(nic(0), nic(1), nic(2), when=0))
    polls = [runner.poll(host(nic(0), nic(2, "mlx5_1"), when=s)) for s in (1, 2, 3)]
    gone = alias("mlx5_1", "0000:11:00.0")
    assert gone == "mlx5_1@0000-11-00.0"
    assert fatal(polls[2]) == [
        f"NIC {gone} disappeared from /sys/class/infiniband/ - hardware failure"]
    assert not fatal(polls[0]) and not fatal(polls[1])
    links = runner.state.section(LINK_STATE)
    assert links.port_states["mlx5_1_1"].device == "mlx5_1"
    assert links.identities["mlx5_1"].pci_address == "0000:12:00.0"
    assert links.identities[gone].pci_address == "0000:11:00.0"


def test_ambiguous_addresses_are_never_renames() -> None:
    both = {"mlx5_0": DeviceIdentity("0000:47:00.0"), "mlx5_1": DeviceIdentity("0000:47:00.0")}
    assert detect_renames(both, [device("mlx5_5")]) == {}
    one = {"mlx5_0": DeviceIdentity("0000:47:00.0")}
    assert detect_renames(one, [device("mlx5_5"), device("mlx5_6")]) == {}
    assert detect_renames(one, [device("mlx5_5", pci="")]) == {}
    assert detect_renames(one, [device("mlx5_5")]) == {"mlx5_0": "mlx5_5"}


def test_no_rename_onto_a_known_name_without_an_identity() -> None:
    """A name the state knows from before identities were recorded: its records would mix."""
    one = {"mlx5_0": DeviceIdentity("0000:47:00.0")}
    assert detect_renames(one, [device("mlx5_5")], known=["mlx5_0", "mlx5_5"]) == {}


def _old_host(when: float, rename: Optional[dict[str, str]] = None) -> Any:
    """The host of the trace main's state file was written from (tests/core/equivalence.py):
    dual-function cards on buses 0x10-0x14, the last one RoCE; counters where main left them
    (the last value persisted with each latch)."""
    data = json.loads(OLD_STATE.read_text())
    devices = []
    for card in range(5):
        layer = "Ethernet" if card == 4 else "InfiniBand"
        for function in range(2):
            name = f"mlx5_{2 * card + function}"
            values = {key.split(":")[2]: flag["last_value"]
                      for key, flag in data["breach_flags"].items()
                      if key.startswith(f"{name}:1:")}
            shown = (rename or {}).get(name, name)
            devices.append(device(shown, pci=f"0000:{0x10 + card:02x}:00.{function}",
                                  numa=card % 2, ports=(port(
                                      shown, 1, layer=layer, counters=values,
                                      operstate="up" if layer == "Ethernet" else None),)))
    return host(*devices, when=when)


def test_a_state_file_written_by_main_migrates_and_a_rename_keeps_its_latches() -> None:
    state = MonitorState.from_json(json.loads(OLD_STATE.read_text()))
    before = {k for k in state.section(LINK_COUNTERS).breach_flags if k.startswith("mlx5_2:")}
    assert before  # main latched breaches on mlx5_2
    runner = Runner(state=state, baseline=False)
    first = runner.poll(_old_host(3 * 3600))
    assert not fatal(first)
    links = runner.state.section(LINK_STATE)
    assert links.identities["mlx5_2"].pci_address == "0000:11:00.0"  # recorded at once
    renamed = runner.poll(_old_host(3 * 3600 + 1, {"mlx5_2": "mlx5_12"}))
    assert not fatal(renamed)
    flags = runner.state.section(LINK_COUNTERS).breach_flags
    assert {k for k in flags if k.startswith("mlx5_12:")} == {
        k.replace("mlx5_2:", "mlx5_12:") for k in before}
    assert not any(k.startswith("mlx5_2:") for k in flags)
    assert all(flags[k.replace("mlx5_2:", "mlx5_12:")].since
               == state.section(LINK_COUNTERS).breach_flags[k].since for k in before)
    # Written and read back: the new keys survive the state file.
    again = MonitorState.from_json(runner.state.to_json())
    assert again == runner.state


def test_renamed_devices_keep_no_stale_volatile_memory() -> None:
    """A permutation gives a name to another device: the last values read under that name
    are not this device's. The persisted snapshots stand in, as after a restart."""
    runner = Runner()
    runner.poll(host(nic(0, counters={"symbol_error": 100}),
                     nic(1, counters={"symbol_error": 5}), when=0))
    swapped = runner.poll(host(nic(0, "mlx5_1", counters={"symbol_error": 100}),
                               nic(1, "mlx5_0", counters={"symbol_error": 5}), when=1))
    assert not swapped.events  # neither a reset (100 -> 5) nor a jump (5 -> 100)
    assert counter_tables(runner).last_values["mlx5_1:1:symbol_error"] == 100
    assert runner.state.section(LINK_STATE).identities["mlx5_1"].renamed_at == at(1)


def test_a_new_name_recorded_beside_the_old_one_is_merged_by_guid() -> None:
    """One poll saw both names (the old one half gone): the new one got fresh records. When
    the old one is absent and the GUIDs are equal, the old records win, under the new name."""
    same = {"mlx5_0": DeviceIdentity("0000:10:00.0", GUIDS[0]),
            "mlx5_9": DeviceIdentity("0000:10:00.0", GUIDS[0])}
    assert detect_renames(same, [nic(0, "mlx5_9")]) == {"mlx5_0": "mlx5_9"}
    assert detect_renames(same, [nic(0, "mlx5_9"), nic(1, "mlx5_0")]) == {
        "mlx5_0": alias("mlx5_0", "0000:10:00.0")}  # mlx5_0 is another device now
    unknown = {"mlx5_0": DeviceIdentity("0000:10:00.0"), "mlx5_9": DeviceIdentity("0000:10:00.0")}
    assert detect_renames(unknown, [nic(0, "mlx5_9", guid="")]) == {}


def test_flaps_blips_holds_and_a_slow_rate_follow_a_renamed_device() -> None:
    """Link families over a rename: the flap window, the blip count, a pending hold and a told rate
    degradation are the device's, under its new name."""
    from dataclasses import replace as with_rate

    from nichealthd.core.checks.link_flaps import LINK_FLAPS
    from nichealthd.core.checks.link_rate import LINK_RATE

    from .builders import DISABLED, config

    def fleet(name: str = "mlx5_3", state: Optional[str] = None, when: float = 0) -> Any:
        slow = nic(3, name, state=state, phys=DISABLED if state else None)
        slow = with_rate(slow, ports=(with_rate(slow.ports[0], rate="200 Gb/sec (4X HDR)"),))
        fast = [with_rate(d, ports=(with_rate(d.ports[0], rate="400 Gb/sec (4X NDR)"),))
                for d in (nic(0), nic(1), nic(2))]
        return host(*fast, slow, when=when)

    runner = Runner(cfg=config(stateHoldDown="30s"))
    runner.poll(fleet())
    runner.poll(fleet(state=DOWN, when=1))
    runner.poll(fleet(when=2))  # a blip, and a flap cycle
    runner.poll(fleet(state=DOWN, when=3))  # held
    result = runner.poll(fleet("mlx5_20", state=DOWN, when=4))
    assert [e for e in result.events if e.entities] == []
    links = runner.state.section(LINK_STATE)
    assert links.port_blips == {"mlx5_20_1": 1} and set(links.port_holds) == {"mlx5_20_1"}
    assert runner.state.section(LINK_FLAPS).link_flaps["mlx5_20_1"].count == 1
    assert "mlx5_3_1" not in runner.state.section(LINK_FLAPS).link_flaps
    assert set(runner.state.section(LINK_RATE).rate_degraded) == {"mlx5_20_1"}
    back = runner.poll(fleet("mlx5_20", when=5))  # the held outage was a blip too
    assert [e for e in back.events if e.entities] == []
    assert runner.state.section(LINK_STATE).port_blips == {"mlx5_20_1": 2}


def test_renames_of_a_host_with_vfs_is_detect_renames() -> None:
    """With the reader's VFs (the same tuple poll after poll) the answer is kept while
    nothing it reads changed, and made again when the identities or a PF change: a PF
    renamed, a gone device whose name a VF now has."""
    vfs = tuple(device(f"mlx5_{i}", pci=f"0000:10:00.{i}", is_vf=True,
                       node_guid=GUIDS[i]) for i in range(2, 8))
    pf = nic(0)

    def snapshot(first: DeviceSnapshot) -> HostSnapshot:
        devices = (first, *vfs)
        return HostSnapshot(at(0), "boot-1", devices, index=DeviceIndex(
            frozenset(d.name for d in devices), (first,), vfs))

    identities = {"mlx5_0": DeviceIdentity(pf.pci_address or "", GUIDS[0])}
    assert renames_of(identities, snapshot(pf), ["mlx5_0"]) == {}
    assert renames_of(identities, snapshot(pf), ["mlx5_0"]) == {}
    moved = nic(0, name="mlx5_9")
    assert renames_of(identities, snapshot(moved), ["mlx5_0"]) == {"mlx5_0": "mlx5_9"}
    gone = {**identities, "mlx5_3": DeviceIdentity("0000:20:00.0", GUIDS[20])}
    expected = detect_renames(gone, snapshot(pf).devices, ["mlx5_0", "mlx5_3"])
    assert expected == {"mlx5_3": alias("mlx5_3", "0000:20:00.0")}
    assert renames_of(gone, snapshot(pf), ["mlx5_0", "mlx5_3"]) == expected


def test_renames_of_a_host_without_vfs_is_detect_renames_poll_after_poll() -> None:
    """Without VFs the answer is kept as well (most hosts: asked every poll): the same as
    detect_renames's through a rename, a GUID that changed, a device gone and back, and a
    table of identities that grew."""
    fleet = [nic(i) for i in range(4)]
    identities = {d.name: DeviceIdentity(d.pci_address or "", d.node_guid or "")
                  for d in fleet}
    known = [d.name for d in fleet]
    grown = {**identities, "mlx5_7": DeviceIdentity("0000:20:00.0", GUIDS[20])}
    polls = [
        (identities, fleet), (identities, fleet), (identities, fleet[:3]),
        (identities, [*fleet[:3], nic(3, name="mlx5_9")]),
        (identities, [*fleet[:3], nic(3, guid="b8ce:f603:00ff:0000")]),
        (identities, fleet), (grown, fleet), (grown, fleet), (identities, fleet),
    ]
    for table, devices in polls:
        snapshot = HostSnapshot(at(0), "boot-1", tuple(devices))
        assert not snapshot.parts.vfs
        assert renames_of(table, snapshot, known) == detect_renames(table, tuple(devices), known)
    assert renames_of(identities, HostSnapshot(at(0), "boot-1", (*fleet[:3], nic(
        3, name="mlx5_9"))), known) == {"mlx5_3": "mlx5_9"}
