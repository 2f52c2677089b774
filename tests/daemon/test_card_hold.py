"""Card homogeneity end to end: the real daemon (``--once`` and running) on a sim tree,
the port changed through the ``nichealthd-sim port`` command line."""

from __future__ import annotations

import json
import subprocess
import sys
import time
from typing import Callable

import pytest

from nichealthd.sim import mutate

from ..harness import DEADLINE, NotifySocket, wait_until
from .conftest import REPO, SimHost
from .test_service import Daemon, events, notify  # noqa: F401 (fixture)

HOLD = 3.0  # seconds: short, so the tests can outwait it


def sim_port(host: SimHost, dev: str, *args: str) -> None:
    """``nichealthd-sim port ROOT DEV 1 ...`` as a separate process, like an operator would."""
    proc = subprocess.run([sys.executable, "-m", "nichealthd.sim", "port", str(host.root), dev,
                           "1", *args], cwd=REPO, capture_output=True, text=True, timeout=60)
    assert proc.returncode == 0, proc.stderr


def with_hold(host: SimHost) -> SimHost:
    with host.config.open("a") as config:
        config.write(f'cardVerdictHoldTime = "{HOLD:g}s"\n')
    return host


def fatal_cards(run_events: list[dict]) -> list[dict]:
    return [e for e in run_events if e["isFatal"] and e["errorCode"] == ["card_active_ports"]]


# Single-port cards (dgx-h100), and dual-port cards whose second port is uncabled on every
# card (l40-dualport-3): mlx5_0 is the cabled port of its card either way.
LAYOUTS = ["dgx-h100", "l40-dualport-3"]


@pytest.mark.parametrize("profile", LAYOUTS)
@pytest.mark.parametrize("state,phys", [("INIT", "LinkUp"), ("ARMED", "LinkUp"),
                                        ("ACTIVE", "LinkErrorRecovery"),
                                        ("ACTIVE_DEFER", "LinkUp")])
def test_once_transient_for_one_poll_then_stuck(sim_host: Callable[..., SimHost],
                                                state: str, phys: str, profile: str) -> None:
    host = with_hold(sim_host(profile))
    assert host.once().fatal() == []
    sim_port(host, "mlx5_0", "--state", state, "--phys-state", phys)
    blip = host.once()
    assert blip.returncode == 0, blip.stderr
    assert blip.fatal() == []
    assert [(e["isHealthy"], e["errorCode"]) for e in blip.events] == [(False, ["port_state"])]
    sim_port(host, "mlx5_0", "--state", "ACTIVE", "--phys-state", "LinkUp")
    back = host.once()
    assert back.fatal() == [] and [e["isHealthy"] for e in back.events] == [True]
    # Stuck: the hold starts at the first poll that sees it and survives the process exit.
    sim_port(host, "mlx5_0", "--state", state, "--phys-state", phys)
    assert host.once().fatal() == []
    started = time.monotonic()  # after the poll that started the hold, however slow its start
    assert "card_pending" in json.loads(host.state_file.read_text())
    time.sleep(max(0.0, HOLD + 0.2 - (time.monotonic() - started)))
    stuck = host.once()
    assert len(stuck.fatal()) == 1
    assert fatal_cards(stuck.events)[0]["message"].endswith(
        "has 0 active ports, expected 1 - suspect: unknown (card_active_ports: the facts do "
        "not decide)")
    assert host.once().fatal() == []
    sim_port(host, "mlx5_0", "--state", "ACTIVE", "--phys-state", "LinkUp")
    healed = host.once()
    assert sorted(e["errorCode"][0] for e in healed.events if e["isHealthy"]) == [
        "card_active_ports", "port_state"]


@pytest.mark.parametrize("profile", LAYOUTS)
def test_once_garbage_state_is_never_a_card_verdict(sim_host: Callable[..., SimHost],
                                                    profile: str) -> None:
    host = with_hold(sim_host(profile))
    host.once()
    state_file = host.root / "sys/class/infiniband/mlx5_0/ports/1/state"
    state_file.write_text("\x07garbage\n")
    assert host.once().fatal() == []
    time.sleep(HOLD + 0.2)
    assert host.once().fatal() == []


def test_once_baseline_verdict_is_immediate(sim_host: Callable[..., SimHost]) -> None:
    host = with_hold(sim_host())
    sim_port(host, "mlx5_0", "--state", "INIT", "--phys-state", "Polling")
    first = host.once()
    assert [e["errorCode"] for e in first.fatal()] == [["card_active_ports"]]


def test_once_baseline_port_waiting_for_the_sm_is_held(sim_host: Callable[..., SimHost]) -> None:
    """INIT with the link up at the first poll (a reboot, the SM not there yet): the card is
    held from that poll, and fatal once the hold is over."""
    host = with_hold(sim_host())
    sim_port(host, "mlx5_0", "--state", "INIT", "--phys-state", "LinkUp")
    assert host.once().fatal() == []
    time.sleep(HOLD + 0.2)  # after the run that started the hold clock
    assert [e["errorCode"] for e in host.once().fatal()] == [["card_active_ports"]]


@pytest.mark.parametrize("profile", LAYOUTS)
def test_running_daemon_holds_a_transient_and_reports_a_stuck_port(
        sim_host: Callable[..., SimHost], notify: NotifySocket,  # noqa: F811
        profile: str) -> None:
    host = with_hold(sim_host(profile))
    daemon = Daemon(host, notify)
    try:
        notify.wait_for("READY=1")
        sim_port(host, "mlx5_0", "--state", "INIT", "--phys-state", "LinkUp")
        notify.wait_for("1 degraded")
        sim_port(host, "mlx5_0", "--state", "ACTIVE", "--phys-state", "LinkUp")
        notify.collect(1.0)
        assert [e for e in events(host) if e["isFatal"]] == []
        sim_port(host, "mlx5_0", "--state", "ARMED", "--phys-state", "LinkUp")
        notify.collect(HOLD / 2)
        assert [e for e in events(host) if e["isFatal"]] == []
        wait_until(lambda: bool(fatal_cards(events(host))), "the stuck port's fatal card",
                   HOLD + DEADLINE)
        assert len(fatal_cards(events(host))) == 1
        assert [e for e in events(host) if e["isFatal"]] == fatal_cards(events(host))
    finally:
        code, err = daemon.stop()
    assert code == 0, err


def test_once_short_dual_port_card_clears_everything_on_repair(
        sim_host: Callable[..., SimHost]) -> None:
    """Short cards on the L40 profile (port of function .1 uncabled on both cards).

    With two cards the first poll is a tie (no evidence), so the card falls
    short at runtime here; the first-poll variant needs three or more cards and is covered
    in tests/core/test_card_hold.py.
    """
    host = sim_host("l40-dualport")
    assert host.once().fatal() == []
    mutate.uncable(host.root, "mlx5_0", 1)
    short = host.once()
    assert short.returncode == 0, short.stderr
    assert all(e["message"].startswith(("Card ", "Port mlx5_0 port 1: "))
               for e in short.fatal())
    assert len(fatal_cards(short.events)) == 1
    sim_port(host, "mlx5_0", "--state", "ACTIVE", "--phys-state", "LinkUp")
    repaired = host.once()
    assert repaired.fatal() == []
    assert sorted(e["errorCode"][0] for e in repaired.events if e["isHealthy"]) == [
        "card_active_ports", "port_state"]
    state = json.loads(host.state_file.read_text())
    assert state["card_anomalies"] == {}
    assert [k for k, v in state["port_states"].items() if v["health"] == "fatal"] == []


def test_once_short_card_at_first_poll_reports_only_what_it_lacks(
        sim_host: Callable[..., SimHost]) -> None:
    """Short cards at first sight: three dual-port cards, function .1 uncabled on every card, and
    card 1a's port 1 down too. Only the card is short of a port; its uncabled function .1 is
    like its peers' and never gets a fatal of its own; the repair clears everything."""
    host = sim_host("l40-dualport-3")
    names = {d["pci"]: d["name"] for d in host.manifest["devices"]}
    short, uncabled = names["0000:1a:00.0"], names["0000:1a:00.1"]
    mutate.uncable(host.root, short, 1)
    first = host.once()
    assert first.returncode == 0, first.stderr
    assert [e["message"] for e in fatal_cards(first.events)] != []
    assert all(uncabled not in e["message"] for e in first.fatal()), first.fatal()
    assert all(e["message"].startswith(("Card 0000:1a:00", f"Port {short} port 1: "))
               for e in first.fatal()), first.fatal()
    sim_port(host, short, "--state", "ACTIVE", "--phys-state", "LinkUp")
    repaired = host.once()
    assert repaired.fatal() == []
    state = json.loads(host.state_file.read_text())
    assert state["card_anomalies"] == {}
    assert [k for k, v in state["port_states"].items() if v["health"] == "fatal"] == []
    assert state["port_states"][f"{short}_1"]["health"] == "healthy"
