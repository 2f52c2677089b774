"""The real daemon through a subnet-manager outage and a port stuck ARMED (core/checks/fabric.py).

``cardVerdictHoldTime`` is shortened to 2 s (10 polls at 200 ms) so that an outage "longer
than the hold" takes seconds: the outage must still give no REPLACE_VM and one non-fatal
fabric event with its recovery; the port stuck ARMED among ACTIVE peers exactly one card
REPLACE_VM.
"""

from __future__ import annotations

from typing import Any, Callable

from ..harness import NotifySocket
from .conftest import SimHost
from .test_driver_reload import configure, sim, state
from .test_pci_identity import replace_vm, running
from .test_service import events, notify  # noqa: F401 (fixture)


def coded(run_events: list[dict[str, Any]], code: str) -> list[dict[str, Any]]:
    return [e for e in run_events if e["errorCode"] == [code]]


def test_an_sm_outage_longer_than_the_card_hold_is_one_fabric_event(
        sim_host: Callable[..., SimHost], notify: NotifySocket) -> None:  # noqa: F811
    host = configure(sim_host(), cardVerdictHoldTime="2s")
    with running(host, notify) as daemon:
        daemon.wait_polls(2)
        before = len(events(host))
        ports = sim(host, "sm", "stop").split()
        assert len(ports) == 8
        daemon.lines.wait_for("left ACTIVE together", proc=daemon.proc)
        daemon.wait_polls(25)  # 5 s: more than twice the card hold
        assert list(state(host)["fabric_events"]) == ["fe80:0000:0000:0000/0x1"]
        sim(host, "sm", "start")
        daemon.lines.wait_for("is back", proc=daemon.proc)
        daemon.wait_polls(3)
        after = events(host)[before:]
        assert replace_vm(after) == []
        fabric = coded(after, "fabric_event")
        assert [(e["isFatal"], e["isHealthy"], e["checkName"]) for e in fabric] == [
            (False, False, "InfiniBandStateCheck"), (False, True, "InfiniBandStateCheck")]
        assert len(fabric[0]["entitiesImpacted"]) == 8
        assert coded(after, "card_active_ports") == []
        assert state(host)["fabric_events"] == {}


def test_one_port_stuck_armed_among_active_peers_is_one_card_replace_vm(
        sim_host: Callable[..., SimHost], notify: NotifySocket) -> None:  # noqa: F811
    host = configure(sim_host(), cardVerdictHoldTime="2s")
    with running(host, notify) as daemon:
        before = len(events(host))
        sim(host, "port", "mlx5_6", "1", "--state", "ARMED")
        daemon.wait_until(lambda: bool(replace_vm(events(host)[before:])), "the card verdict")
        daemon.wait_polls(15)
        after = events(host)[before:]
        assert [(e["errorCode"], e["message"]) for e in replace_vm(after)] == [
            (["card_active_ports"], "Card 0000:9a:00 (compute) has 0 active ports, expected 1"
             " - suspect: unknown (card_active_ports: the facts do not decide)")]
        assert coded(after, "fabric_event") == []
