"""EFA in the pure core: renames (test_identity.py), "uncabled" EFA ports, card homogeneity
of EFA cards beyond first sight.

Four EFA devices behind GPU switches (tests/core/test_efa.py's fleet), one port each, health
from the ENA netdev.
"""

from __future__ import annotations

from typing import Any, Optional

from nichealthd.core.checks.efa_counters import EFA_COUNTERS
from nichealthd.core.checks.efa_state import EFA_STATE
from nichealthd.core.config import EFA_DEGRADATION_CHECK, EFA_STATE_CHECK
from nichealthd.core.health import UNCABLED
from nichealthd.core.model import DeviceSnapshot, HostSnapshot
from nichealthd.core.state import MonitorState
from nichealthd.core.views import device_records, health_status, port_records

from .builders import Runner, config, device, host
from .test_efa import NAMES, TOPOLOGY, efa, events_of

GUID = {n: f"14b0:33ff:fef8:00{i:02x}" for i, n in enumerate(NAMES)}


def fleet(renamed: Optional[dict[str, str]] = None, /, **changes: dict[str, Any]
          ) -> list[DeviceSnapshot]:
    """The four EFA devices; ``renamed``: old name -> the name the kernel now gives it (same
    PCI function, same GUID); ``changes`` per (current) device name."""
    renamed = renamed or {}
    out = []
    for i, old in enumerate(NAMES, 1):
        name = renamed.get(old, old)
        kw: dict[str, Any] = {"netdev": f"eth{i}", **changes.get(name, {})}
        out.append(efa(name, pci=f"0000:{16 * i:02x}:1b.0", node_guid=GUID[old], **kw))
    return out


def snap(when: float, renamed: Optional[dict[str, str]] = None, /,
         **changes: dict[str, Any]) -> HostSnapshot:
    return host(*fleet(renamed, **changes), when=when)


def drops(value: int) -> dict[str, Any]:
    return {"counters": {"rx_drops": value, "no_completion_cmds": 0}}


# ------------------------------------------------------------------------------ renames

def test_a_renamed_efa_device_keeps_its_latched_breach() -> None:
    """rx_drops breached on rdmap32s27; the kernel names it efa_1 at the same PCI function:
    no disappearance, no new event, the breach latched under the new name; its reset (the
    counter decreasing) is the recovery, under the new name."""
    dev, new = NAMES[1], "efa_1"
    runner = Runner(topology=TOPOLOGY)
    runner.poll(snap(0, **{dev: drops(0)}))
    (breach,) = events_of(runner.poll(snap(1, **{dev: drops(5000)})))
    assert (breach.check_name, breach.error_code) == (EFA_DEGRADATION_CHECK, ("rx_drops",))
    renamed = {dev: new}
    result = runner.poll(snap(2, renamed, **{new: drops(5000)}))
    assert [n for n in result.notes if f"{dev} is now {new}" in n]
    for second in (3, 4, 5, 6):  # past the three misses that would declare it gone
        assert events_of(runner.poll(snap(second, renamed, **{new: drops(5000)}))) == []
    flags = runner.state.section(EFA_COUNTERS).breach_flags
    assert f"{new}:1:rx_drops" in flags and f"{dev}:1:rx_drops" not in flags
    section = runner.state.section(EFA_STATE)
    assert dev not in section.known_devices and new in section.known_devices
    assert f"{new}_1" in section.ports and f"{dev}_1" not in section.ports
    assert section.identities[new].renamed_from == dev
    assert section.identities[new].pci_address == "0000:20:1b.0"
    assert not section.device_misses and not section.missing_devices
    last = runner.poll(snap(7, renamed, **{new: drops(0)}))
    (back,) = events_of(last)
    assert back.is_healthy and back.entities[0] == ("NIC", new)
    records = {r["device"]: r for r in device_records(snap(7, renamed), last, runner.state)}
    assert records[new]["renamed_from"] == dev and dev not in records


def test_a_renamed_efa_device_keeps_its_down_port_and_its_fatal_counter() -> None:
    dev, new = NAMES[2], "efa_2"
    runner = Runner(topology=TOPOLOGY)
    runner.poll(snap(0))
    down = {"operstate": "down", "counters": {"no_completion_cmds": 0}}
    runner.poll(snap(1, **{dev: {"counters": {"no_completion_cmds": 0}}}))
    fatal = events_of(runner.poll(snap(2, **{dev: {**down,
                                                  "counters": {"no_completion_cmds": 1}}})))
    assert sorted(e.error_code[0] for e in fatal) == ["no_completion_cmds", "port_state"]
    renamed = {dev: new}
    for second in range(3, 8):
        assert events_of(runner.poll(snap(second, renamed, **{
            new: {**down, "counters": {"no_completion_cmds": 1}}}))) == [], second
    assert f"{new}:1:no_completion_cmds" in runner.state.section(EFA_COUNTERS).breach_flags
    (up,) = events_of(runner.poll(snap(8, renamed, **{
        new: {"counters": {"no_completion_cmds": 1}}})))
    assert up.is_healthy and up.error_code == ("port_state",) and ("NIC", new) in up.entities


def test_a_rename_survives_a_restart_and_an_old_state_file() -> None:
    """Identities are persisted (efa_device_identities); a state file written before them has
    none: the device then looks new under its new name (and gone under the old), as before
    does for ConnectX state files written before it."""
    dev, new = NAMES[0], "efa_0"
    runner = Runner(topology=TOPOLOGY)
    runner.poll(snap(0))
    runner.restart()
    assert events_of(runner.poll(snap(1, {dev: new}))) == []
    old = runner.state.to_json()
    assert "efa_device_identities" in old
    runner = Runner(topology=TOPOLOGY)
    runner.poll(snap(0))
    data = runner.state.to_json()
    data.pop("efa_device_identities")
    runner.state = MonitorState.from_json(data)
    results = [runner.poll(snap(s, {dev: new})) for s in (1, 2, 3)]
    assert [e.error_code for e in events_of(results[-1])] == [("device_missing",)]


def test_mlx5_renames_are_unchanged_beside_efa() -> None:
    runner = Runner(topology=TOPOLOGY)
    mlx = device("mlx5_0", pci="0000:47:00.0", node_guid="b8ce:f603:0000:0000")
    runner.poll(host(mlx, *fleet(), when=0))
    moved = device("mlx5_9", pci="0000:47:00.0", node_guid="b8ce:f603:0000:0000")
    result = runner.poll(host(moved, *fleet(), when=1))
    assert [n for n in result.notes if "mlx5_0 is now mlx5_9" in n]
    assert events_of(result) == []


# ------------------------------------------------------------------------------ uncabled

def test_a_port_suppressed_at_first_sight_is_uncabled_on_every_surface() -> None:
    """Half the ports down at first sight: no decisive mode, not reported; they show as a
    ConnectX port uncabled at first sight does (health "uncabled", healthy and fatal false,
    no reasons; STATUS counts them), not "healthy"."""
    half = {n: {"operstate": "down", "carrier": 0} for n in NAMES[:2]}
    runner = Runner(topology=TOPOLOGY)
    snapshot = snap(0, **half)
    result = runner.poll(snapshot)
    assert [e for e in result.events if not e.is_healthy] == []
    ports = {r["device"]: r for r in port_records(snapshot, result, runner.state)}
    for name in NAMES[:2]:
        record = ports[name]
        assert (record["health"], record["healthy"], record["fatal"], record["reasons"]) == (
            UNCABLED, False, False, [])
        assert record["operstate"] == "down" and record["since"] == "2026-01-01T12:00:00Z"
    assert ports[NAMES[2]]["health"] == "healthy" and ports[NAMES[2]]["healthy"] is True
    status = health_status(snapshot, result, runner.state)
    assert (status["health"], status["ports_uncabled"], status["ports_healthy"]) == (
        "healthy", 2, 2)
    # Once up it is healthy like the others, silently (it was never reported).
    up = snap(1)
    result = runner.poll(up)
    assert events_of(result) == []
    assert {r["health"] for r in port_records(up, result, runner.state)} == {"healthy"}


def test_uncabled_is_the_same_presentation_as_a_connectx_port() -> None:
    """The mlx5 reference: a dual-port card's second port DOWN at first sight on every card
    (no evidence) is "uncabled" with the same keys."""
    from .builders import DISABLED, DOWN, port

    def card(i: int) -> list[DeviceSnapshot]:
        return [device(f"mlx5_{2 * i}", pci=f"0000:{0x47 + i:02x}:00.0"),
                device(f"mlx5_{2 * i + 1}", pci=f"0000:{0x47 + i:02x}:00.1",
                       ports=(port(f"mlx5_{2 * i + 1}", state=DOWN, phys=DISABLED),))]
    runner = Runner()
    snapshot = host(*card(0), *card(1), *card(2))
    result = runner.poll(snapshot)
    mlx = {r["device"]: r for r in port_records(snapshot, result, runner.state)}["mlx5_1"]
    half = {n: {"operstate": "down", "carrier": 0} for n in NAMES[:2]}
    runner = Runner(topology=TOPOLOGY)
    snapshot = snap(0, **half)
    result = runner.poll(snapshot)
    aws = {r["device"]: r for r in port_records(snapshot, result, runner.state)}[NAMES[0]]
    keys = ("health", "healthy", "fatal", "reasons", "monitored", "present")
    assert {k: aws[k] for k in keys} == {k: mlx[k] for k in keys}


# ------------------------------------------------------------------------- card homogeneity

HOLD = 240.0  # cardVerdictHoldTime's default


def test_a_port_never_up_whose_peers_come_up_is_one_card_event_after_the_hold() -> None:
    """All four down at first sight (interfaces not configured yet): all uncabled. Three
    come up: the fourth's card is short of its group's mode; held for cardVerdictHoldTime
    (the others were coming up one by one), then one fatal card event; when it comes up,
    the card's healthy event."""
    late = NAMES[3]
    down = {"operstate": "down", "carrier": 0}
    runner = Runner(topology=TOPOLOGY)
    first = runner.poll(snap(0, **{n: down for n in NAMES}))
    assert [e for e in first.events if not e.is_healthy] == []
    held = runner.poll(snap(1, **{late: down}))
    assert events_of(held) == []
    assert any("never up since first sight" in n for n in held.notes)
    assert events_of(runner.poll(snap(HOLD, **{late: down}))) == []
    (card,) = events_of(runner.poll(snap(HOLD + 1, **{late: down})))
    assert (card.check_name, card.is_fatal, card.error_code) == (
        EFA_STATE_CHECK, True, ("card_active_ports",))
    assert card.entities == (("NIC", late),) and card.recommended_action == "REPLACE_VM"
    snapshot = snap(HOLD + 2, **{late: down})
    result = runner.poll(snapshot)
    assert events_of(result) == []  # latched
    ports = {r["device"]: r for r in port_records(snapshot, result, runner.state)}
    assert ports[late]["health"] == "fatal"
    assert ports[late]["reasons"] == ["card 0000:40:1b has 0 of 1 ports active"]
    (back,) = events_of(runner.poll(snap(HOLD + 3)))
    assert back.is_healthy and back.error_code == ("card_active_ports",)
    assert events_of(runner.poll(snap(HOLD + 4))) == []


def test_a_port_that_comes_up_within_the_hold_is_nothing() -> None:
    late = NAMES[3]
    down = {"operstate": "down", "carrier": 0}
    runner = Runner(topology=TOPOLOGY)
    runner.poll(snap(0, **{n: down for n in NAMES}))
    for second in (1, 30, 60):
        assert events_of(runner.poll(snap(second, **{late: down}))) == []
    assert events_of(runner.poll(snap(61))) == []
    assert not runner.state.section(EFA_STATE).card_pending
    assert events_of(runner.poll(snap(HOLD + 10))) == []


def test_a_port_that_goes_down_later_is_one_event_not_two() -> None:
    """A healthy port going down is its own fatal event; its card, short of it, adds nothing
    (one failure, one event, as a single-port ConnectX card), and its return is one
    recovery."""
    dev = NAMES[1]
    runner = Runner(topology=TOPOLOGY)
    runner.poll(snap(0))
    (down,) = events_of(runner.poll(snap(1, **{dev: {"operstate": "down"}})))
    assert down.error_code == ("port_state",) and down.is_fatal
    for second in (2, HOLD + 5):
        assert events_of(runner.poll(snap(second, **{dev: {"operstate": "down"}}))) == []
    section = runner.state.section(EFA_STATE)
    assert not section.card_anomalies and not section.card_pending
    assert section.group_modes == {"compute": 1}
    (up,) = events_of(runner.poll(snap(HOLD + 6)))
    assert up.is_healthy and up.error_code == ("port_state",)


def test_the_remembered_mode_breaks_a_later_tie() -> None:
    """Two EFA cards up: mode 1, remembered. One goes down (its own event); a third device
    that then appears down makes the poll's counts [1, 0, 0], no decisive mode: judged
    against the remembered one, it is anomalous, as a ConnectX card would be."""
    up, second = fleet()[:2]
    runner = Runner(topology=TOPOLOGY)
    runner.poll(host(up, second, when=0))
    second_down = efa(NAMES[1], pci="0000:20:1b.0", netdev="eth2", operstate="down")
    (fatal,) = events_of(runner.poll(host(up, second_down, when=1)))
    assert fatal.error_code == ("port_state",)
    newcomer = efa(NAMES[2], pci="0000:30:1b.0", netdev="eth3", operstate="down")
    result = runner.poll(host(up, second_down, newcomer, when=2))
    assert [(e.error_code, e.entities[0][1]) for e in events_of(result) if e.is_fatal] == [
        (("port_state",), NAMES[2])]
    # Without the remembered mode (a first poll) the same counts are no evidence.
    fresh = Runner(topology=TOPOLOGY).poll(host(up, second_down, newcomer))
    assert [e for e in fresh.events if e.is_fatal] == []


def test_card_hold_time_zero_reports_at_once_and_efa_is_never_mixed_with_connectx() -> None:
    late = NAMES[3]
    down = {"operstate": "down", "carrier": 0}
    runner = Runner(cfg=config(cardVerdictHoldTime="0s"),
                    topology=TOPOLOGY)
    runner.poll(host(device(), *fleet(**{n: down for n in NAMES})))
    (card,) = events_of(runner.poll(host(device(), *fleet(**{late: down}), when=1)))
    assert card.error_code == ("card_active_ports",) and card.check_name == EFA_STATE_CHECK
    links = runner.state.section(EFA_STATE)
    assert list(links.card_anomalies) == ["0000:40:1b"]
    assert "0000:47:00" not in links.card_anomalies


def test_the_card_state_survives_a_restart_and_json() -> None:
    late = NAMES[3]
    down = {"operstate": "down", "carrier": 0}
    runner = Runner(topology=TOPOLOGY)
    runner.poll(snap(0, **{n: down for n in NAMES}))
    runner.poll(snap(1, **{late: down}))
    runner.restart()  # the hold clock is persisted: no restart of the 4 minutes
    (card,) = events_of(runner.poll(snap(HOLD + 1, **{late: down})))
    assert card.error_code == ("card_active_ports",)
    runner.restart()
    assert events_of(runner.poll(snap(HOLD + 2, **{late: down}))) == []
    data = runner.state.to_json()
    assert data["efa_card_anomalies"]["0000:40:1b"]["ports"] == [f"{late}_1"]
    assert data["efa_group_modes"] == {"compute": 1}
