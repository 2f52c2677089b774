"""The link-BER family on impossible inputs and on healthy PAM4 ports, with an injected clock.

Each impossible input (an all-ones counter read, a rate that carries fewer bits than were
corrected, the corrected bits read from another counter, a corrupt baseline in the state
file) gives no event and is said once (``CycleResult.notes``); a PAM4 port at 1e-7 among
peers at 1e-12 is healthy (core/checks/link_ber.py, ``relative_floor``).
"""

from __future__ import annotations

from typing import Any, Optional

from nichealthd.core.checks.link_ber import (
    KP4_LIMIT,
    KR4_LIMIT,
    LINK_BER,
    RISE_FLOOR,
    BerPicture,
    LinkBerSettings,
    relative_floor,
)
from nichealthd.core.checks.link_rate import parse_rate
from nichealthd.core.evaluate import CycleResult
from nichealthd.core.state import MonitorState
from nichealthd.sources.phy import CORRECTED_BITS, RX_BITS, SYMBOL_ERRORS, FecStats

from .builders import Runner, config
from .test_link_ber import RATE, WINDOW, Peers, ber_events, snapshot

U64 = 2**64 - 1
BITS = int(RATE * WINDOW)  # what a 400G port carries in a window


def ber_notes(result: CycleResult) -> list[str]:
    return [n for n in result.notes if n.startswith("link BER")]


class Port:
    """One RoCE port whose reads the test writes out, one poll per read."""

    def __init__(self, interval: str = "60s", state: Optional[MonitorState] = None,
                 **overrides: Any) -> None:
        self.runner = Runner(config(linkBerInterval=interval, **overrides), state=state)
        self.when = 0.0
        self.results: list[CycleResult] = []

    def read(self, counters: Optional[dict[str, int]], *, after: float = WINDOW,
             **kw: Any) -> CycleResult:
        self.when += after
        result = self.runner.poll(snapshot(self.when, counters, **kw))
        self.results.append(result)
        return result

    def events(self) -> list[Any]:
        return [e for r in self.results for e in ber_events(r)]

    def notes(self) -> list[str]:
        return [n for r in self.results for n in ber_notes(r)]

    def ber(self) -> Optional[float]:
        picture = self.results[-1].pictures[LINK_BER.id]
        assert isinstance(picture, BerPicture)
        return picture.ports["mlx5_0_1"].ber


def healthy(n: int, ber: float = 1e-8) -> list[dict[str, int]]:
    """``n`` reads of a port at ``ber``, a window apart."""
    return [{RX_BITS: 10**12 + i * BITS, CORRECTED_BITS: 5 * 10**6 + round(i * BITS * ber),
             SYMBOL_ERRORS: 0} for i in range(n)]


def test_an_all_ones_read_of_the_corrected_bits_is_unreadable_and_said_once() -> None:
    """Taken as a count it was "pre-FEC BER 4.9e+07"."""
    port = Port()
    reads = healthy(8)
    for n in (3, 6):
        reads[n] = {**reads[n], CORRECTED_BITS: U64}
    for n, counters in enumerate(reads):
        port.read(counters)
        if n in (3, 4, 6, 7):  # the all-ones read and the window after it have no BER
            assert port.ber() is None
    assert port.events() == []
    assert port.runner.state.section(LINK_BER).predicted == {}
    notes = port.notes()
    assert len(notes) == 1, notes
    assert "rx_corrected_bits_phy read 18446744073709551615" in notes[0]
    assert "mlx5_0_1" in notes[0] and "unreadable" in notes[0]
    port.read(healthy(10)[9])
    assert port.ber() is not None and abs(port.ber() - 1e-8) < 1e-10  # type: ignore[operator]


def test_uncorrectable_blocks_that_no_link_carries_give_no_verdict() -> None:
    """All ones (1.8e19 blocks) and 2^63 blocks in 2 s: neither is an error after FEC."""
    port = Port(interval="1s")
    for blocks in (0, U64, 0, 2**63, 2**63, 2**63 + 1):
        port.read({}, after=2.0, stats=FecStats((), (blocks,), ()))
    told = port.events()
    assert len(told) == 1 and "1 uncorrectable FEC blocks" in told[0].message  # the real one
    assert not told[0].is_fatal and told[0].recommended_action == "NONE"
    notes = port.notes()
    assert len(notes) == 2, notes
    assert "FEC uncorrectable blocks read 18446744073709551615" in notes[0]
    assert "9223372036854775808 uncorrectable FEC blocks in 2 s" in notes[1]


def test_a_rate_too_small_to_carry_the_window_is_no_rate() -> None:
    """Without rx_bits_phy the rate is the denominator: 1e-6 Gb/s made a BER of 2.0."""
    port = Port()
    for n in range(5):
        port.read({CORRECTED_BITS: n * 120_000}, rate="0.000001 Gb/sec")
        assert port.ber() is None
    slow = Port()
    for n in range(5):  # a line rate, but more bits corrected than it carries
        slow.read({CORRECTED_BITS: n * 10**11}, rate="1 Gb/sec")
        assert slow.ber() is None
    assert port.events() == slow.events() == []
    (said,) = port.notes()
    assert "'0.000001 Gb/sec' is no line rate" in said
    (said,) = slow.notes()
    assert "a rate too small to carry them is no rate" in said


def test_a_change_of_the_corrected_bits_counter_starts_a_new_window() -> None:
    """One read from the FEC statistics between reads of rx_corrected_bits_phy: 2.3e-03
    once, as a difference of two different counters."""
    port = Port()
    fec_bits = 60 * 10**9
    reads = healthy(7)
    for n, counters in enumerate(reads):
        if n in (2, 5):  # the driver counter missing: the FEC statistics' corrected bits
            del counters[CORRECTED_BITS]
        port.read(counters, stats=FecStats((), (0,), (fec_bits + n * 240,)))
        if n in (2, 3, 5, 6):
            assert port.ber() is None
        elif n:
            assert port.ber() is not None
    assert port.events() == []
    notes = port.notes()
    assert len(notes) == 2, notes  # each way once, though it switched twice each way
    assert "from rx_corrected_bits_phy and now from the FEC statistics'" in notes[0]
    assert "from the FEC statistics' corrected bits and now from rx_corrected_bits_phy" \
        in notes[1]


def test_rx_bits_beyond_any_rate_is_unreadable() -> None:
    port = Port()
    reads = healthy(4)
    reads[2] = {**reads[2], RX_BITS: 2**63}
    for counters in reads:
        port.read(counters)
    assert port.events() == []
    (said,) = port.notes()
    assert "rx_bits_phy rose by" in said and "more bits than the link can carry" in said


def test_a_baseline_outside_zero_to_one_in_the_state_file_is_healed_and_said_once() -> None:
    """A negative baseline made every port "predicted failure" (any BER is 100 times it)."""
    data = MonitorState(boot_id="boot-1").to_json()
    data["link_ber_baseline"] = {"mlx5_0_1": -1e-5, "mlx5_9_1": 5.0, "mlx5_8_1": 1e-8}
    port = Port(state=MonitorState.from_json(data))
    for counters in healthy(5):
        port.read(counters)
    assert port.events() == []
    baseline = port.runner.state.section(LINK_BER).baseline
    assert baseline["mlx5_0_1"] == 1e-8 and baseline["mlx5_8_1"] == 1e-8
    assert "mlx5_9_1" not in baseline
    notes = port.notes()
    assert len(notes) == 2, notes
    assert "link_ber_baseline -1e-05 is no bit error ratio" in notes[0]
    assert "link_ber_baseline 5.0 is no bit error ratio" in notes[1]


def test_a_healthy_pam4_port_among_cleaner_peers_is_no_predicted_failure() -> None:
    """1e-7 is normal before FEC on a 400G PAM4 link, a hundred thousand times its peers'
    1e-12 or not: the relative rules judge from a tenth of the limit rule's level."""
    peers = Peers()
    for _ in range(5):
        assert ber_events(peers.window([1e-7, 1e-12, 1e-12, 1e-12, 1e-12])) == []
    # ... and its own baseline of 1e-12, a hundred thousand times lower, neither
    port = Port()
    for ber in (1e-12,) * 4 + (1e-7,) * 3:
        port.read(healthy(1)[0] if not port.results else _next(port, ber))
    assert port.events() == []
    # above the floor (2.4e-6) the peers still tell: 1e-5 is a port going bad
    peers = Peers()
    peers.window([1e-5, 1e-12, 1e-12, 1e-12, 1e-12])
    (event,) = ber_events(peers.window([1e-5, 1e-12, 1e-12, 1e-12, 1e-12]))
    assert "its peers' median" in event.message and not event.is_fatal


def _next(port: Port, ber: float) -> dict[str, int]:
    last = port.runner.state.section(LINK_BER).samples["mlx5_0_1"]
    assert last.received is not None and last.corrected is not None
    return {RX_BITS: last.received + BITS, CORRECTED_BITS: last.corrected + round(BITS * ber),
            SYMBOL_ERRORS: 0}


def test_the_relative_floor_is_a_share_of_the_fec_limit() -> None:
    settings = LinkBerSettings()
    ndr, edr = parse_rate("400 Gb/sec (4X NDR)"), parse_rate("100 Gb/sec (4X EDR)")
    assert relative_floor(KP4_LIMIT, settings, ndr, "RS") == 2.4e-4 * 0.10 * 0.1
    assert abs(relative_floor(KR4_LIMIT, settings, edr, "RS") - 5e-7) < 1e-20
    assert relative_floor(None, settings, ndr, None) == relative_floor(KP4_LIMIT, settings,
                                                                       ndr, "RS")
    assert relative_floor(None, settings, edr, None) == RISE_FLOOR  # NRZ: no FEC known
    assert relative_floor(None, settings, ndr, "off") == RISE_FLOOR
    unknown = parse_rate("100 Gb/sec")  # RS of a code the rate does not tell: KR4's at least
    assert relative_floor(None, settings, unknown, "RS") == relative_floor(KR4_LIMIT, settings,
                                                                           edr, "RS")


def test_ber_is_never_replace_vm() -> None:
    """It predicts: a failed link is the port state's verdict or link_downed's."""
    port = Port()
    reads = healthy(2)
    for ber, symbols in ((0.5, 10**6), (1e-2, 0), (1e-3, 5)):
        last = reads[-1]
        reads.append({RX_BITS: last[RX_BITS] + BITS,
                      CORRECTED_BITS: last[CORRECTED_BITS] + round(BITS * ber),
                      SYMBOL_ERRORS: last[SYMBOL_ERRORS] + symbols})
    for counters in reads:
        port.read(counters)
    told = port.events()
    assert {e.error_code for e in told} == {("link_ber",), ("link_fec_uncorrectable",)}
    assert all(not e.is_fatal and e.recommended_action == "NONE" for e in told)


def test_a_sample_of_an_older_state_file_starts_a_window_quietly() -> None:
    """Its corrected bits' counter was not recorded: no window across it, nothing said."""
    port = Port()
    reads = healthy(3)
    port.read(reads[0])
    data = port.runner.state.to_json()
    assert data["link_ber_samples"]["mlx5_0_1"].pop("source") == "driver"
    port.runner.state = MonitorState.from_json(data)
    port.read(reads[1])
    assert port.ber() is None and port.notes() == []
    port.read(reads[2])
    assert port.ber() is not None
