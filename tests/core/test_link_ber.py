"""The link-BER family's rules on snapshots with an injected clock (core/checks/link_ber.py)."""

from __future__ import annotations

import random
import statistics
from dataclasses import replace
from typing import Any, Optional

from nichealthd.core.checks.link_ber import (
    KP4_LIMIT,
    KR4_LIMIT,
    LINK_BER,
    BerPicture,
    _median,
    fec_limit,
)
from nichealthd.core.checks.link_rate import parse_rate
from nichealthd.core.evaluate import CycleResult
from nichealthd.core.model import HostSnapshot
from nichealthd.sources.phy import (
    CORRECTED_BITS,
    PHY,
    RX_BITS,
    SYMBOL_ERRORS,
    FecStats,
    PhyReading,
)

from .builders import Runner, config, device, host, port

RATE = 400e9  # bits per second of the port below
WINDOW = 60.0


def snapshot(when: float, counters: Optional[dict[str, int]], *, fec: str = "RS",
             stats: Optional[FecStats] = None, rate: str = "400 Gb/sec (4X NDR)",
             state: str = "4: ACTIVE") -> HostSnapshot:
    """One RoCE port with a netdev, its PHY reading (None: the port has none), and an IB port
    without a netdev beside it."""
    roce = replace(port("mlx5_0", 1, layer="Ethernet", state=state), rate=rate, netdev="eth0")
    ib = replace(port("mlx5_1", 1), rate=rate)
    snap = host(device("mlx5_0", ports=(roce,)), device("mlx5_1", "0000:48:00.0", ports=(ib,)),
                when=when)
    facts: dict[str, Any] = {}
    if counters is not None:
        facts["mlx5_0_1"] = PhyReading("eth0", counters, fec, stats)
    return replace(snap, facts={PHY: facts})


class Link:
    """A port's counters advancing window by window at a chosen BER."""

    def __init__(self, **overrides: Any) -> None:
        self.runner = Runner(config(linkBerInterval="60s", **overrides))
        self.when = 0.0
        self.received = 10**12
        self.corrected = 5 * 10**6
        self.symbols = 0

    def window(self, ber: float, *, symbols: int = 0, with_received: bool = True
               ) -> CycleResult:
        bits = int(RATE * WINDOW)
        self.when += WINDOW
        self.received += bits
        self.corrected += round(bits * ber)
        self.symbols += symbols
        counters = {CORRECTED_BITS: self.corrected, SYMBOL_ERRORS: self.symbols}
        if with_received:
            counters[RX_BITS] = self.received
        return self.runner.poll(snapshot(self.when, counters))


def ber_events(result: CycleResult) -> list[Any]:
    return [e for e in result.events if "LinkBer" in e.message]


def test_limit_by_fec_and_lane_rate() -> None:
    assert fec_limit("RS", parse_rate("400 Gb/sec (4X NDR)")) == KP4_LIMIT
    assert fec_limit("RS", parse_rate("100 Gb/sec (4X EDR)")) == KR4_LIMIT
    assert fec_limit("RS", parse_rate("200 Gb/sec")) == KP4_LIMIT
    assert fec_limit("RS", parse_rate("100 Gb/sec")) is None  # 4x25 NRZ or 2x50 PAM4
    assert fec_limit("BASER", parse_rate("25 Gb/sec (1X EDR)")) is None
    assert fec_limit(None, parse_rate("400 Gb/sec (4X NDR)")) is None


def test_crossing_the_limit_is_one_event_and_falling_back_one_recovery() -> None:
    link = Link()
    for _ in range(4):
        assert ber_events(link.window(1e-8)) == []
    raised = ber_events(link.window(1e-4))  # 10% of KP4's 2.4e-4 is 2.4e-5
    assert len(raised) == 1
    event = raised[0]
    assert (event.check_name, event.is_fatal, event.is_healthy, event.error_code) == (
        "EthernetDegradationCheck", False, False, ("link_ber",))
    assert event.recommended_action == "NONE"
    assert "predicted failure" in event.message and "pre-FEC BER 1.0e-04" in event.message
    assert "RS(544,514) KP4" in event.message and "2.4e-04" in event.message
    assert event.entities == (("NIC", "mlx5_0"), ("NICPort", "1"))
    for _ in range(3):
        assert ber_events(link.window(2e-4)) == []  # still raised: said once
    state = link.runner.state.section(LINK_BER)
    assert list(state.predicted) == ["mlx5_0_1"]
    recovered = ber_events(link.window(1e-8))
    assert len(recovered) == 1 and recovered[0].is_healthy
    assert "back below" in recovered[0].message
    assert ber_events(link.window(1e-8)) == []


def test_below_the_fraction_is_quiet_and_the_fraction_is_configurable() -> None:
    link = Link(linkBerRiseFactor=0)
    link.window(1e-8)
    assert ber_events(link.window(2e-5)) == []  # below 10% of 2.4e-4; rise off below
    strict = Link(linkBerLimitPercent=5, linkBerRiseFactor=0)
    strict.window(1e-8)
    assert len(ber_events(strict.window(2e-5))) == 1


def test_rise_over_the_baseline() -> None:
    link = Link()
    for _ in range(5):
        link.window(1e-8)
    assert link.runner.state.section(LINK_BER).baseline["mlx5_0_1"] == 1e-8
    assert ber_events(link.window(5e-7)) == []  # 50x: below linkBerRiseFactor 100
    # which the baseline follows a tenth of the way: 1e-8 + (5e-7 - 1e-8) / 10
    assert link.runner.state.section(LINK_BER).baseline["mlx5_0_1"] == 5.9e-8
    raised = ber_events(link.window(1e-5))  # 169x its baseline, below 10% of the limit
    assert len(raised) == 1 and "169 times its baseline 5.9e-08" in raised[0].message
    assert "2.4e-04" in raised[0].message  # the limit is named all the same
    assert len(ber_events(link.window(1e-8))) == 1


def test_missing_counters_stay_quiet() -> None:
    runner = Runner(config(linkBerInterval="60s"))
    for n in range(1, 6):
        result = runner.poll(snapshot(n * 60.0, None))  # no PHY reading at all
        assert ber_events(result) == []
        result = runner.poll(snapshot(n * 60.0 + 30, {}))  # a netdev without the counters
        assert ber_events(result) == []
    assert runner.state.section(LINK_BER).predicted == {}


def test_counter_reset_gives_no_false_event() -> None:
    link = Link()
    for _ in range(3):
        link.window(1e-8)
    link.received, link.corrected = 0, 0  # a driver reload zeroes the counters
    assert ber_events(link.window(1e-8)) == []  # went backwards: no window
    assert ber_events(link.window(1e-8)) == []
    assert link.runner.state.section(LINK_BER).predicted == {}


def test_without_rx_bits_the_rate_times_the_window_is_the_denominator() -> None:
    link = Link()
    link.window(1e-8, with_received=False)
    assert ber_events(link.window(1e-8, with_received=False)) == []
    picture = link.runner.last.pictures[LINK_BER.id] if link.runner.last else None
    assert isinstance(picture, BerPicture)
    ber = picture.ports["mlx5_0_1"].ber
    assert ber is not None and abs(ber - 1e-8) < 1e-10
    assert len(ber_events(link.window(1e-4, with_received=False))) == 1


def test_errors_after_fec_are_one_event_and_recover_after_clean_windows() -> None:
    link = Link()
    link.window(1e-8)
    told = ber_events(link.window(1e-8, symbols=3))
    assert len(told) == 1 and told[0].error_code == ("link_fec_uncorrectable",)
    assert "3 PCS symbol errors" in told[0].message and not told[0].is_fatal
    assert ber_events(link.window(1e-8, symbols=1)) == []
    results = [ber_events(link.window(1e-8)) for _ in range(10)]
    assert [len(r) for r in results] == [0] * 9 + [1]
    assert results[-1][0].is_healthy


def test_uncorrectable_blocks_from_the_fec_statistics() -> None:
    runner = Runner(config(linkBerInterval="60s"))
    runner.poll(snapshot(60, {}, stats=FecStats((10, 5, 5), (0, 0, 0))))
    result = runner.poll(snapshot(120, {}, stats=FecStats((20, 10, 10), (7, 3, 4))))
    told = ber_events(result)
    assert len(told) == 1 and "7 uncorrectable FEC blocks" in told[0].message


def test_a_restart_keeps_what_was_told() -> None:
    link = Link()
    link.window(1e-8)
    assert len(ber_events(link.window(1e-4))) == 1
    link.runner.restart()  # the last sample is in the state: the window spans the restart
    assert ber_events(link.window(1e-4)) == []
    assert len(ber_events(link.window(1e-8))) == 1


def test_fields_and_series() -> None:
    link = Link()
    link.window(1e-8)
    result = link.window(1e-4)
    picture = result.pictures[LINK_BER.id]
    section = result.state.section(LINK_BER)
    fields = LINK_BER.port_fields(section, picture, ("mlx5_0", 1))
    assert fields["phy_predicted_failure"] is True and fields["phy_fec"] == "RS"
    ber = fields["phy_pre_fec_ber"]
    assert fields["phy_ber_limit"] == 2.4e-4 and isinstance(ber, float) and abs(ber - 1e-4) < 1e-9
    assert LINK_BER.port_fields(section, picture, ("mlx5_1", 1)) == {}
    series = {s.name: s for s in LINK_BER.series(section, picture)}
    assert series["phy_pre_fec_ber"].samples[0][0] == ("mlx5_0", "1", "eth0")
    assert series["phy_predicted_failure"].samples == ((("mlx5_0", "1"), 1.0),)
    assert series["phy_corrected_errors_total"].kind == "counter"
    assert [c.reason for c in LINK_BER.conditions(section, picture)] == [
        "pre-FEC BER 1.0e-04: predicted failure"]


class Peers:
    """Five RoCE ports of one model, their counters advancing window by window, each at its
    own BER."""

    def __init__(self, **overrides: Any) -> None:
        self.runner = Runner(config(linkBerInterval="60s", **overrides))
        self.when = 0.0
        self.counters = {n: [10**12, 5 * 10**6] for n in range(5)}  # received, corrected

    def window(self, bers: list[float]) -> CycleResult:
        bits = int(RATE * WINDOW)
        self.when += WINDOW
        devices, facts = [], {}
        for n, ber in enumerate(bers):
            self.counters[n][0] += bits
            self.counters[n][1] += round(bits * ber)
            name = f"mlx5_{n}"
            roce = replace(port(name, 1, layer="Ethernet"), rate="400 Gb/sec (4X NDR)",
                           netdev=f"eth{n}")
            devices.append(device(name, f"0000:{0x47 + n:02x}:00.0", ports=(roce,)))
            facts[f"{name}_1"] = PhyReading(f"eth{n}", {RX_BITS: self.counters[n][0],
                                                       CORRECTED_BITS: self.counters[n][1]},
                                            "RS", None)
        return self.runner.poll(replace(host(*devices, when=self.when), facts={PHY: facts}))


def test_a_port_bad_from_its_first_window_is_told_by_its_peers() -> None:
    """No baseline to rise from and below the limit's fraction (2.4e-5): only the peers
    (median 1.5e-8) tell that 5e-6 is wrong; one event naming them, one recovery."""
    peers = Peers()
    bad = [5e-6, 1e-8, 2e-8, 1e-8, 3e-8]
    assert ber_events(peers.window(bad)) == []  # the first read: no window yet
    (event,) = ber_events(peers.window(bad))
    assert event.entities[0][1] == "mlx5_0" and not event.is_healthy
    assert not event.is_fatal and "333 times its peers' median 1.5e-08 (linkBerPeerFactor 100)" \
        in event.message
    assert ber_events(peers.window(bad)) == []  # told once
    (back,) = ber_events(peers.window([1e-8] * 5))
    assert back.is_healthy and back.entities[0][1] == "mlx5_0"


def test_peers_judge_nothing_below_their_minimum_or_when_switched_off() -> None:
    for overrides, bers in (({}, [5e-6, 1e-8, 1e-8]),  # two peers: too few for a median
                            ({"linkBerPeerFactor": 0}, [5e-6, 1e-8, 1e-8, 1e-8, 1e-8])):
        peers = Peers(**overrides)
        for _ in range(3):
            assert ber_events(peers.window(bers)) == []


def test_the_peers_median_is_statistics_median() -> None:
    """link_ber's own median (it spares the daemon the statistics module) gives what
    ``statistics.median`` gives, for odd and even counts."""
    rng = random.Random(56)
    for n in range(1, 40):
        values = [rng.choice([1e-12, 3e-9, 2.5e-6]) * rng.random() for _ in range(n)]
        assert _median(values) == statistics.median(values)
    assert _median([4e-9, 1e-9]) == 2.5e-9
