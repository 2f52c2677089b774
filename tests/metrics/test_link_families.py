"""The link families end to end: the real daemon on a sim tree, driven by ``nichealthd-sim flap``
and ``set-rate`` as an operator would run them, polls and windows scaled down by config.

- 3 down/up cycles within the flap window: exactly one flap event besides the port's own
  state events (and its link_downed counter breach, which the counter family reports);
- one 2-second blip with stateHoldDown = 10s: no event at all (neither the port state nor its
  link_downed rise nor its card), one blip counted;
- a port at half its peers' rate: one degradation event and one recovery when restored.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path
from typing import Any, Callable

from .conftest import REPO, RunningDaemon, count, value

Start = Callable[[Path], RunningDaemon]
PORT = [{"entityType": "NIC", "entityValue": "mlx5_0"}, {"entityType": "NICPort",
                                                           "entityValue": "1"}]


def configure(root: Path, **keys: str) -> None:
    with (root / "nichealthd.toml").open("a") as config:
        for key, text in keys.items():
            config.write(f"{key} = {text}\n")


def sim(root: Path, *args: str) -> str:
    proc = subprocess.run([sys.executable, "-m", "nichealthd.sim", args[0], str(root),
                           *args[1:]], cwd=REPO, capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stderr
    return proc.stdout


def events(root: Path) -> list[dict[str, Any]]:
    path = root / "events.jsonl"
    return [json.loads(line) for line in path.read_text().splitlines()] if path.exists() else []


def of_port(found: list[dict[str, Any]], code: str) -> list[dict[str, Any]]:
    return [e for e in found if e["entitiesImpacted"] == PORT and e["errorCode"] == [code]]


def test_three_cycles_give_exactly_one_flap_event(sim_root: Path, daemon: Start) -> None:
    configure(sim_root, linkFlapWindow='"15s"')
    running = daemon(sim_root)
    running.next_polls()
    before = len(events(sim_root))
    out = sim(sim_root, "flap", "mlx5_0", "1", "--cycles", "3", "--down", "1", "--up", "1")
    assert out.count(": up") == 3
    running.wait_for(lambda: len(of_port(events(sim_root)[before:], "port_state")) == 6,
                     what="3 fatal and 3 healthy port events")
    running.next_polls(3)
    found = events(sim_root)[before:]
    flaps = of_port(found, "link_flap")
    assert len(flaps) == 1
    flap = flaps[0]
    assert (flap["checkName"], flap["isFatal"], flap["isHealthy"], flap["recommendedAction"]) \
        == ("InfiniBandDegradationCheck", False, False, "CONTACT_SUPPORT")
    assert flap["message"].startswith(
        "Port mlx5_0 port 1: LinkFlap - 3 down/up cycles within 15s (threshold 3) - unstable "
        "link - suspect: unknown (")  # an InfiniBand port: no module read
    states = of_port(found, "port_state")
    assert [(e["isFatal"], e["isHealthy"]) for e in states] == [(True, False), (False, True)] * 3
    # nothing else but the link_downed breach of the counter family (latched: one event)
    others = [e for e in found if e not in flaps and e not in states]
    assert [(e["errorCode"], e["isFatal"]) for e in others] == [(["link_downed"], True)]
    samples = running.scrape()
    assert value(samples, "nichealthd_port_link_flaps", device="mlx5_0", port="1") == 3
    # the window (15s) empties: one recovery
    running.wait_for(lambda: len(of_port(events(sim_root), "link_flap")) == 2,
                     timeout=60, what="the flap recovery")
    assert of_port(events(sim_root), "link_flap")[1]["isHealthy"]


def test_a_short_blip_inside_the_hold_down_is_counted_not_reported(
        sim_root: Path, daemon: Start) -> None:
    configure(sim_root, stateHoldDown='"10s"')
    running = daemon(sim_root)
    running.next_polls()
    before = len(events(sim_root))
    sim(sim_root, "flap", "mlx5_0", "1", "--cycles", "1", "--down", "2")
    running.wait_for(lambda: count(running.scrape(), "nichealthd_port_state_blips_total",
                                   device="mlx5_0", port="1") == 1, what="one blip counted")
    running.next_polls(3)
    # nothing published: no port event, no link_downed breach, no short card
    assert events(sim_root)[before:] == []
    state = json.loads((sim_root / "var/lib/nichealthd/state.json").read_text())
    assert state["port_blips"] == {"mlx5_0_1": 1} and state["port_holds"] == {}


def test_a_port_at_half_its_peers_rate_is_degraded_until_restored(
        sim_root: Path, daemon: Start) -> None:
    running = daemon(sim_root)
    running.next_polls()
    full = (sim_root / "sys/class/infiniband/mlx5_0/ports/1/rate").read_text().strip()
    assert "200" in sim(sim_root, "set-rate", "mlx5_0", "1", "200")
    running.wait_for(lambda: len(of_port(events(sim_root), "link_rate")) == 1,
                     what="the degradation")
    event = of_port(events(sim_root), "link_rate")[0]
    assert (event["checkName"], event["isFatal"], event["isHealthy"]) == (
        "InfiniBandDegradationCheck", False, False)
    assert event["message"].startswith("Port mlx5_0 port 1: LinkRate degraded - runs at "
                                       f"200 Gb/sec (4X HDR), its peers at {full} - suspect: ")
    samples = running.next_polls()
    assert value(samples, "nichealthd_port_rate_degraded", device="mlx5_0", port="1",
                 rate="200 Gb/sec (4X HDR)", peer_rate=full) == 1
    assert len(of_port(events(sim_root), "link_rate")) == 1
    sim(sim_root, "set-rate", "mlx5_0", "1", full)
    running.wait_for(lambda: len(of_port(events(sim_root), "link_rate")) == 2,
                     what="the recovery")
    assert of_port(events(sim_root), "link_rate")[1]["isHealthy"]
    running.next_polls(3)
    assert len(of_port(events(sim_root), "link_rate")) == 2
