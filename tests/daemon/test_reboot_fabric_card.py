"""The real daemon through a reboot's SM sweep, a one-port fabric's outage and one card gone,
with the default timings (core/checks/cards.py, fabric.py, driver.py).

Each drill is the ``nichealthd-sim`` command an operator would run. Minutes pass in ``--once``
runs whose state file has every clock moved back (:func:`age`): each run is a new process
that knows the time only from the state, as after a restart. The live daemon polls every
200 ms for what takes seconds.
"""

from __future__ import annotations

import json
import re
from datetime import datetime, timedelta, timezone
from typing import Any, Callable

from nichealthd.core.events import format_timestamp, parse_timestamp

from ..harness import NotifySocket
from .conftest import Run, SimHost
from .test_driver_reload import configure, sim, state
from .test_pci_identity import replace_vm, running
from .test_service import events, notify  # noqa: F401 (fixture)

STAMP = re.compile(r"^\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d(\.\d+)?Z$")


def age(host: SimHost, seconds: float) -> None:
    """Every clock of the state file ``seconds`` back: as if that long had passed."""
    def shift(value: Any) -> Any:
        if isinstance(value, dict):
            return {k: shift(v) for k, v in value.items()}
        if isinstance(value, list):
            return [shift(v) for v in value]
        if isinstance(value, str) and STAMP.match(value):
            return format_timestamp(parse_timestamp(value) - timedelta(seconds=seconds))
        return value

    host.state_file.write_text(json.dumps(shift(state(host))))


def elapsed(stamp: str) -> float:
    """Seconds from a state file's timestamp to now."""
    return (datetime.now(timezone.utc) - parse_timestamp(stamp)).total_seconds()


def age_to(host: SimHost, stamp: Callable[[dict[str, Any]], str], seconds: float) -> None:
    """Move the state's clocks back so that the clock ``stamp`` picks is ``seconds`` old
    (the runs themselves take seconds on a loaded machine: counted, not guessed)."""
    age(host, seconds - elapsed(stamp(state(host))))


def once(host: SimHost) -> Run:
    run = host.once()
    assert run.returncode == 0, run.stderr
    return run


def coded(run_events: list[dict[str, Any]], code: str) -> list[tuple[bool, bool]]:
    return [(e["isFatal"], e["isHealthy"]) for e in run_events if e["errorCode"] == [code]]


def compute_nics(host: SimHost) -> list[str]:
    """dgx-h100's eight single-port InfiniBand compute NICs."""
    names = [d["name"] for d in host.manifest["devices"] if d["role"] == "compute"]
    assert len(names) == 8, names
    return names


# --------------------------------------------------------------------------- a reboot


def rebooted(sim_host: Callable[..., SimHost]) -> SimHost:
    """A host that ran, then rebooted with its InfiniBand ports waiting for the SM."""
    host = sim_host()
    once(host)
    assert "waiting for the SM" in sim(host, "reboot", "--sm-pending")
    return host


def test_once_a_reboot_whose_sm_activates_the_ports_over_two_polls(
        sim_host: Callable[..., SimHost]) -> None:
    host = rebooted(sim_host)
    runs = [once(host)]  # the baseline: every InfiniBand port in INIT
    for name in compute_nics(host)[:5]:
        sim(host, "sm", "activate", name)
    runs.append(once(host))
    sim(host, "sm", "start")
    runs.append(once(host))
    everything = [e for r in runs for e in r.events]
    assert replace_vm(everything) == [] and [e for e in everything if e["isFatal"]] == []
    assert not state(host)["card_pending"] and not state(host)["card_anomalies"]


def test_once_one_port_every_40_seconds_after_five_minutes_of_init(
        sim_host: Callable[..., SimHost]) -> None:
    host = rebooted(sim_host)
    runs = [once(host)]
    for _ in range(5):  # five minutes of INIT, one run a minute
        age(host, 60)
        runs.append(once(host))
    for name in compute_nics(host):  # then the SM's sweep reaches one port every 40 s
        age(host, 40)
        sim(host, "sm", "activate", name)
        runs.append(once(host))
    everything = [e for r in runs for e in r.events]
    assert replace_vm(everything) == []
    assert not state(host)["card_pending"] and not state(host)["card_anomalies"]


def test_once_a_port_the_sm_never_activates_is_one_card_replace_vm_after_the_hold(
        sim_host: Callable[..., SimHost]) -> None:
    """What the hold must not hide: one port still waiting 4 minutes after its peers."""
    host = rebooted(sim_host)
    once(host)
    names = compute_nics(host)
    for name in names[:7]:
        sim(host, "sm", "activate", name)
    assert replace_vm(once(host).events) == []

    def pending(data: dict[str, Any]) -> str:
        return str(next(iter(data["card_pending"].values())))

    age_to(host, pending, 225)
    assert replace_vm(once(host).events) == []
    age_to(host, pending, 245)
    verdict = replace_vm(once(host).events)
    assert [(e["errorCode"], e["entitiesImpacted"][0]["entityValue"]) for e in verdict] == [
        (["card_active_ports"], names[7])]


def test_once_a_port_dead_at_boot_is_still_fatal_at_once(
        sim_host: Callable[..., SimHost]) -> None:
    host = sim_host()
    sim(host, "port", "mlx5_0", "1", "--state", "DOWN", "--phys-state", "Polling")
    assert sorted(e["errorCode"][0] for e in once(host).fatal()) == [
        "card_active_ports", "port_state"]


def test_a_running_daemon_through_a_reboots_sweep(
        sim_host: Callable[..., SimHost], notify: NotifySocket) -> None:  # noqa: F811
    """The daemon starts on the rebooted host (a new boot ID: its first poll is the
    baseline) while the SM activates five ports, then the last three."""
    host = rebooted(sim_host)
    names = compute_nics(host)
    with running(host, notify) as daemon:
        before = len(events(host))
        daemon.wait_polls(3)
        for name in names[:5]:
            sim(host, "sm", "activate", name)
        daemon.wait_polls(5)
        sim(host, "sm", "start")
        daemon.wait_until(lambda: not state(host)["card_pending"], "every card back")
        daemon.wait_polls(3)
        after = events(host)[before:]
        assert replace_vm(after) == [] and [e for e in after if e["isFatal"]] == []
        assert sum(1 for e in after if e["errorCode"] == ["port_state"]
                   and e["isHealthy"]) >= 8  # each port's recovery, nothing fatal


# ------------------------------------------------------------------- a one-port fabric


def test_once_a_one_port_fabric_whose_sm_is_down_ten_minutes(
        sim_host: Callable[..., SimHost]) -> None:
    host = sim_host()
    alone = compute_nics(host)[5]
    assert sim(host, "sm", "move", alone, "--sm-lid", "0x2", "--prefix",
               "fe80:0:0:1").split() == ["fe80:0000:0000:0001/0x2"]
    once(host)
    assert sim(host, "sm", "stop", "--sm-lid", "0x2").split() == [f"{alone}/1"]
    runs = [once(host)]
    for _ in range(10):  # ten minutes, one run a minute
        age(host, 60)
        runs.append(once(host))
    assert list(state(host)["fabric_events"]) == ["fe80:0000:0000:0001/0x2"]
    sim(host, "sm", "start", "--sm-lid", "0x2")
    runs.append(once(host))
    everything = [e for r in runs for e in r.events]
    assert replace_vm(everything) == []
    assert coded(everything, "fabric_event") == [(False, False), (False, True)]
    told = next(e for e in everything if e["errorCode"] == ["fabric_event"])
    assert told["message"].startswith(
        "InfiniBand fabric fe80:0000:0000:0001 (SM LID 0x2): the one port of this host on it "
        "left ACTIVE")
    assert state(host)["fabric_events"] == {} and not state(host)["card_anomalies"]


def test_a_running_daemon_through_a_one_port_fabric_outage_longer_than_the_hold(
        sim_host: Callable[..., SimHost], notify: NotifySocket) -> None:  # noqa: F811
    host = configure(sim_host(), cardVerdictHoldTime="2s")
    alone = compute_nics(host)[2]
    sim(host, "sm", "move", alone, "--sm-lid", "0x2")
    with running(host, notify) as daemon:
        daemon.wait_polls(2)
        before = len(events(host))
        sim(host, "sm", "stop", "--sm-lid", "0x2")
        daemon.lines.wait_for("the one port of this host on it left ACTIVE", proc=daemon.proc)
        daemon.wait_polls(20)  # 4 s: twice the card hold
        sim(host, "sm", "start", "--sm-lid", "0x2")
        daemon.lines.wait_for("is back", proc=daemon.proc)
        daemon.wait_polls(3)
        after = events(host)[before:]
        assert replace_vm(after) == []
        assert coded(after, "fabric_event") == [(False, False), (False, True)]


# --------------------------------------------------------------------- one card gone


def test_once_one_card_unbound_for_good_is_replace_vm_within_three_minutes(
        sim_host: Callable[..., SimHost]) -> None:
    host = sim_host()
    once(host)
    sim(host, "unbind", "mlx5_2")
    runs = [once(host) for _ in range(3)]  # the spec's three polls: held, not judged

    def left(data: dict[str, Any]) -> str:
        event = data["driver_event"]
        return str(event.get("left", {}).get("mlx5_2", event["since"]))

    age_to(host, left, 135)
    runs.append(once(host))
    assert replace_vm([e for r in runs for e in r.events]) == []
    age_to(host, left, 155)  # past cardResetTimeout (150 s), within 3 minutes
    verdict = once(host)
    assert [(e["errorCode"], e["entitiesImpacted"][0]["entityValue"])
            for e in replace_vm(verdict.events)] == [(["device_missing"], "mlx5_2")]
    assert "cardResetTimeout" in verdict.stderr


def test_once_a_90_second_firmware_reset_of_one_card_is_no_event(
        sim_host: Callable[..., SimHost]) -> None:
    """The card's devices leave while their functions stay (as ``fw-reset`` does, here by
    unbind and bind so that ``--once`` runs can see it in between) and are back after 90 s."""
    host = sim_host()
    once(host)
    sim(host, "unbind", "mlx5_3")
    runs = [once(host) for _ in range(3)]
    age_to(host, lambda data: str(data["driver_event"]["since"]), 88)
    runs.append(once(host))
    sim(host, "bind", "mlx5_3")
    runs.append(once(host))
    assert [e for r in runs for e in r.events] == []
    assert state(host)["driver_event"] is None


def test_once_every_device_gone_keeps_the_driver_timeout(
        sim_host: Callable[..., SimHost]) -> None:
    """A driver unload: 5 minutes gone is no verdict (driverReloadTimeout, 15 min)."""
    host = sim_host()
    once(host)
    sim(host, "driver-unload")
    runs = [once(host) for _ in range(3)]
    for _ in range(5):
        age(host, 60)
        runs.append(once(host))
    assert [e["message"] for e in replace_vm([e for r in runs for e in r.events])] == []
    sim(host, "driver-load")
    assert once(host).fatal() == []


def test_a_running_daemon_tells_one_card_gone_from_the_driver(
        sim_host: Callable[..., SimHost], notify: NotifySocket) -> None:  # noqa: F811
    """cardResetTimeout shortened to 2 s: one card unbound is REPLACE_VM then, every
    device unloaded for 4 s is not (driverReloadTimeout)."""
    host = configure(sim_host(), cardResetTimeout="2s")
    with running(host, notify) as daemon:
        daemon.wait_polls(2)
        before = len(events(host))
        sim(host, "driver-unload")
        daemon.wait_polls(20)
        sim(host, "driver-load")
        daemon.lines.wait_for("RDMA devices are back", proc=daemon.proc)
        daemon.wait_polls(3)
        assert replace_vm(events(host)[before:]) == []
        sim(host, "unbind", "mlx5_4")
        daemon.wait_until(lambda: bool(replace_vm(events(host)[before:])), "the verdict")
        assert [e["entitiesImpacted"][0]["entityValue"]
                for e in replace_vm(events(host)[before:])] == ["mlx5_4"]
