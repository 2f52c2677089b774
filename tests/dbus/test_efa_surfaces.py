"""EFA on the surfaces, real daemon on a real bus and its varlink socket: an EFA port
down at first sight without evidence is "uncabled" (the presentation of a ConnectX port
uncabled at first sight), not "healthy"; when its peers come up and it does not, its card's
verdict makes it fatal - the same over D-Bus, varlink, STATUS and ``check``."""

from __future__ import annotations

import json
from typing import Any

from dbushelpers import ctl, make_sim, wait_polls

from nichealthd.sim import mutate

DOWN = ("rdmap16s27", "rdmap32s27")  # two of the p4d's four EFA: no decisive mode


def ports(*transport: str) -> dict[str, dict[str, Any]]:
    done = ctl(*transport, "show", "ports", "--json")
    assert done.returncode == 0, done.stderr
    return {r["device"]: r for r in json.loads(done.stdout)}


def test_uncabled_then_short_card_over_dbus_and_varlink(start_daemon: Any) -> None:
    root = make_sim("p4d")
    with open(root / "nichealthd.toml", "a") as config:
        config.write('cardVerdictHoldTime = "1s"\n')
    for name in DOWN:
        mutate.set_port(root, name, 1, operstate="down")
    daemon = start_daemon(root)
    varlink = f"--varlink={daemon.varlink_socket}"
    wait_polls(2)
    for transport in ((), (varlink,)):
        seen = ports(*transport)
        for name in DOWN:
            assert (seen[name]["health"], seen[name]["healthy"], seen[name]["fatal"],
                    seen[name]["reasons"], seen[name]["adapter"], seen[name]["operstate"]) == (
                "uncabled", False, False, [], "efa", "down"), transport
            assert seen[name]["since"], transport  # when it was first seen so
        assert seen["rdmap144s27"]["health"] == "healthy"
        status = json.loads(ctl(*transport, "status", "--json").stdout)
        assert (status["health"], status["ports_uncabled"], status["ports_healthy"]) == (
            "healthy", 2, 2)
        assert ctl(*transport, "check").returncode == 0
    table = ctl("show", "ports").stdout
    assert [line for line in table.splitlines() if "rdmap16s27" in line][0].count("uncabled")
    # One comes up; the other stays down while its peers are up: after cardVerdictHoldTime
    # its card is short of its group's mode, one fatal card event, and it shows fatal.
    mutate.set_port(root, DOWN[0], 1, operstate="up")
    wait_polls(10)  # 2 s at 200 ms: past the 1 s hold
    for transport in ((), (varlink,)):
        seen = ports(*transport)
        assert seen[DOWN[0]]["health"] == "healthy"
        assert (seen[DOWN[1]]["health"], seen[DOWN[1]]["fatal"], seen[DOWN[1]]["reasons"]) == (
            "fatal", True, ["card 0000:20:1b has 0 of 1 ports active"]), transport
        assert ctl(*transport, "check").returncode == 2
    log = [json.loads(line) for line in (root / "events.jsonl").read_text().splitlines()]
    cards = [e for e in log if e["errorCode"] == ["card_active_ports"]]
    assert [(e["checkName"], e["isFatal"], e["entitiesImpacted"]) for e in cards] == [
        ("EFAStateCheck", True, [{"entityType": "NIC", "entityValue": DOWN[1]}])]
    assert not [e for e in log if e["isFatal"] and e["errorCode"] != ["card_active_ports"]]
    # It comes up: the card's healthy event, and healthy everywhere.
    mutate.set_port(root, DOWN[1], 1, operstate="up")
    wait_polls(3)
    assert {r["health"] for r in ports(varlink).values()} == {"healthy"}
    log = [json.loads(line) for line in (root / "events.jsonl").read_text().splitlines()]
    assert [e["isHealthy"] for e in log if e["errorCode"] == ["card_active_ports"]] == [
        False, True]
