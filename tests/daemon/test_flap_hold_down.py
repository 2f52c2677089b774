"""The hold-down escalation end to end (``core/checks/link_flaps.py``): the real daemon at
200 ms polls on two sim hosts, one with ``stateHoldDown = "10s"``, while ``nichealthd-sim
flap`` takes a port down 4 times for 3 s on each: both are REPLACE_VM for that port."""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path
from typing import Any, Callable

from ..harness import NotifySocket
from .conftest import REPO, SimHost
from .test_driver_reload import configure, state
from .test_service import Daemon, events, notify  # noqa: F401 (fixture)

PORT = [{"entityType": "NIC", "entityValue": "mlx5_0"},
        {"entityType": "NICPort", "entityValue": "1"}]


def kinds(run_events: list[dict[str, Any]]) -> list[tuple[str, str, str]]:
    """(errorCode, severity, recommendedAction) of each event, sorted."""
    return sorted((e["errorCode"][0], "fatal" if e["isFatal"] else
                   "healthy" if e["isHealthy"] else "degraded", e["recommendedAction"])
                  for e in run_events)


def test_four_flaps_are_replace_vm_with_a_hold_down_as_without(
        sim_host: Callable[..., SimHost], notify: NotifySocket,  # noqa: F811
        tmp_path: Path) -> None:
    plain = sim_host()
    held = configure(sim_host(), stateHoldDown="10s")
    held_notify = NotifySocket(tmp_path / "held-notify.sock")
    daemons = [Daemon(plain, notify), Daemon(held, held_notify)]
    try:
        for sock in (notify, held_notify):
            sock.wait_for("READY=1")
        for daemon in daemons:
            daemon.wait_polls(2)
        before = [len(events(plain)), len(events(held))]
        flaps = [subprocess.Popen(
            [sys.executable, "-m", "nichealthd.sim", "flap", str(host.root), "mlx5_0", "1",
             "--cycles", "4", "--down", "3", "--up", "3"], cwd=REPO,
            stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
            for host in (plain, held)]
        for flap in flaps:
            _, err = flap.communicate(timeout=60)
            assert flap.returncode == 0, err
        for daemon in daemons:
            daemon.wait_polls(3)
        got = [events(plain)[before[0]:], events(held)[before[1]:]]
    finally:
        results = [daemon.stop() for daemon in daemons]
        held_notify.close()
    for code, err in results:
        assert code == 0, err
        assert "Traceback" not in err
    without, with_hold = got
    # Without the hold-down: each outage fatal and back, the first link_downed rise a latched
    # fatal breach, the third cycle the non-fatal flap (what it gave before the escalation).
    assert kinds(without) == sorted(
        [("port_state", "fatal", "REPLACE_VM")] * 4 + [("port_state", "healthy", "NONE")] * 4
        + [("link_downed", "fatal", "REPLACE_VM"),
           ("link_flap", "degraded", "CONTACT_SUPPORT")])
    # With it: 4 blips, and the third absorbed outage one fatal flap, nothing else.
    assert kinds(with_hold) == [("link_flap", "fatal", "REPLACE_VM")]
    (event,) = with_hold
    assert (event["checkName"], event["entitiesImpacted"]) == ("InfiniBandStateCheck", PORT)
    # Fatal at the third absorbed outage; on a loaded machine the poll that judges it may come
    # after the fourth, so the event counts the outages it saw by then: 3 or 4, each absorbed.
    told = re.match(r"Port mlx5_0 port 1: LinkFlap - ([34]) down/up cycles within 1h, (\d) "
                    r"absorbed by stateHoldDown 10s \(fatal at 3\) - unstable link - suspect: "
                    r"unknown \(", event["message"])  # no module read
    assert told and told[1] == told[2], event["message"]
    assert state(held)["port_blips"] == {"mlx5_0_1": 4}
    # The same verdict on the port both ways: REPLACE_VM, for mlx5_0 port 1 only.
    for run in got:
        assert {str(e["entitiesImpacted"]) for e in run
                if e["recommendedAction"] == "REPLACE_VM"} == {str(PORT)}
