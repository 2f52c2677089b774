"""A port below the rate of its peers (same role, card model, layer; ACTIVE only)."""

from __future__ import annotations

from dataclasses import replace
from typing import Optional

from nichealthd.core.checks.link_rate import LINK_RATE, parse_rate
from nichealthd.core.model import DeviceSnapshot
from nichealthd.core.views import port_records

from .builders import DOWN, POLLING, Runner, device, host, port

NDR, HDR = "400 Gb/sec (4X NDR)", "200 Gb/sec (4X HDR)"


def nic(index: int, rate: Optional[str], state: str = "4: ACTIVE", phys: str = "5: LinkUp",
        hca: str = "MT4129", board: str = "MT_0000000838") -> DeviceSnapshot:
    name = f"mlx5_{index}"
    p = replace(port(name, state=state, phys=phys), rate=rate)
    return device(name, pci=f"0000:{0x10 + index:02x}:00.0", numa=index % 2, ports=(p,),
                  hca=hca, board_id=board)


def rated(result: object) -> list[tuple[str, bool, str]]:
    return [(e.entities[0][1], e.is_healthy, e.message) for e in result.events  # type: ignore
            if e.error_code == ("link_rate",)]


def test_rate_text_is_parsed_with_its_lanes() -> None:
    assert parse_rate("400 Gb/sec (4X NDR)\n") == (400.0, 4, "400 Gb/sec (4X NDR)")
    assert parse_rate("2.5 Gb/sec (1X SDR)") == (2.5, 1, "2.5 Gb/sec (1X SDR)")
    assert parse_rate("100 Gb/sec") == (100.0, 0, "100 Gb/sec")
    assert parse_rate("fast") is None and parse_rate(None) is None and parse_rate("") is None


def test_a_port_at_half_its_peers_rate_gets_one_degradation_and_one_recovery() -> None:
    runner = Runner()
    fleet = [nic(i, NDR) for i in range(4)]
    runner.poll(host(*fleet, when=0))
    slow = [*fleet[:3], nic(3, HDR)]
    first = runner.poll(host(*slow, when=1))
    assert rated(first) == [("mlx5_3", False, "Port mlx5_3 port 1: LinkRate degraded - runs at "
                             "200 Gb/sec (4X HDR), its peers at 400 Gb/sec (4X NDR)")]
    event = first.events[-1]
    assert (event.check_name, event.is_fatal, event.recommended_action) == (
        "InfiniBandDegradationCheck", False, "NONE")
    assert rated(runner.poll(host(*slow, when=2))) == []
    records = {r["device"]: r for r in port_records(host(*slow, when=2), runner.last,  # type: ignore
                                                   runner.state)}
    assert records["mlx5_3"]["rate_degraded"] and records["mlx5_3"]["peer_rate"] == NDR
    reasons = records["mlx5_3"]["reasons"]
    assert isinstance(reasons, list)
    assert "rate 200 Gb/sec (4X HDR) below peers' 400 Gb/sec (4X NDR)" in reasons
    assert records["mlx5_3"]["health"] == "degraded" and not records["mlx5_0"]["rate_degraded"]
    runner.restart()  # told degradation survives a restart: the recovery still comes
    back = runner.poll(host(*fleet, when=3))
    assert rated(back) == [("mlx5_3", True, "Port mlx5_3 port 1: LinkRate healthy - runs at "
                            "400 Gb/sec (4X NDR) like its peers")]
    assert runner.state.section(LINK_RATE).rate_degraded == {}


def test_no_verdict_for_a_group_of_one_a_tie_or_ports_not_active() -> None:
    runner = Runner()
    # two ports at different rates: tied mode, no verdict
    assert rated(runner.poll(host(nic(0, NDR), nic(1, HDR), when=0))) == []
    # a different card model is not a peer: two groups of one
    assert rated(runner.poll(host(nic(0, NDR), nic(1, HDR, hca="MT4123"), when=1))) == []
    # a slow port that is not ACTIVE is not judged, nor counted as a peer
    assert rated(runner.poll(host(nic(0, NDR), nic(1, NDR), nic(2, HDR, DOWN, POLLING),
                                  when=2))) == []
    # unparsable rates are left out
    assert rated(runner.poll(host(nic(0, NDR), nic(1, NDR), nic(2, "garbage"), when=3))) == []


def test_the_told_degradation_stands_while_no_verdict_is_possible() -> None:
    runner = Runner()
    runner.poll(host(nic(0, NDR), nic(1, NDR), nic(2, HDR), when=0))
    assert "mlx5_2_1" in runner.state.section(LINK_RATE).rate_degraded
    # the slow port goes down, its peers stay: no verdict on it, no recovery
    assert rated(runner.poll(host(nic(0, NDR), nic(1, NDR), nic(2, HDR, DOWN, POLLING),
                                  when=1))) == []
    assert "mlx5_2_1" in runner.state.section(LINK_RATE).rate_degraded
    # the mode comes down to it: recovered
    got = rated(runner.poll(host(nic(0, HDR), nic(1, HDR), nic(2, HDR), when=2)))
    assert [(d, h) for d, h, _ in got] == [("mlx5_2", True)]


def test_a_disabled_degradation_check_sends_nothing_but_the_port_is_still_shown() -> None:
    from .builders import config
    runner = Runner(cfg=config(checks="InfiniBandStateCheck"))
    result = runner.poll(host(nic(0, NDR), nic(1, NDR), nic(2, HDR), when=0))
    assert rated(result) == []
    assert "mlx5_2_1" in runner.state.section(LINK_RATE).rate_degraded


def test_a_poll_with_the_same_devices_as_one_that_changed_nothing_judges_nothing() -> None:
    from unittest import mock

    from nichealthd.core.checks import link_rate

    runner = Runner()
    fleet = [nic(i, NDR) for i in range(3)] + [nic(3, HDR)]
    runner.poll(host(*fleet, when=0))  # told: mlx5_3 is slow
    runner.poll(host(*fleet, when=1))  # nothing changed: its inputs are remembered
    with mock.patch.object(link_rate, "_groups", wraps=link_rate._groups) as grouped:
        same = runner.poll(host(*fleet, when=2))
        assert grouped.call_count == 0 and rated(same) == []
        # Another device object (its files read other bytes): judged again, and told.
        back = runner.poll(host(*fleet[:3], nic(3, NDR), when=3))
        assert grouped.call_count == 1
    assert rated(back) == [("mlx5_3", True, "Port mlx5_3 port 1: LinkRate healthy - runs at "
                            "400 Gb/sec (4X NDR) like its peers")]
    assert runner.state.section(LINK_RATE).rate_degraded == {}
