"""The link-BER family: pre-FEC bit error ratio against the FEC's limit and the port's baseline.

On PAM4 links FEC corrects errors long before anything above it counts one; the pre-FEC BER
says a link is running out of margin first. Each run (``linkBerInterval``, default 60 s) the
family takes one window per port with a netdev from the ``phy`` fact (``sources/phy.py``):

- pre-FEC BER = Δ``rx_corrected_bits_phy`` ÷ Δ``rx_bits_phy``; where ``rx_bits_phy`` is
  missing, ÷ (port rate × window length) while the port is ACTIVE; without corrected bits
  (the driver counter or the FEC statistics' corrected bits), no BER;
- a "predicted failure": one non-fatal event under the layer's degradation check
  (``errorCode`` ``link_ber``, naming the BER and the limit) when the BER reaches
  ``linkBerLimitPercent`` of the correction limit of the port's FEC, ``linkBerRiseFactor``
  times the port's own baseline, or ``linkBerPeerFactor`` times the median of its peers'
  (the other ports of the same role, card model, link layer, rate and FEC mode, at least
  :data:`MIN_PEERS` of them with a BER in the same run: no table, as for the link rate; it
  finds a port that was bad from its first window, which has no baseline to rise from), the
  last two only from :func:`relative_floor` (a tenth of the first one's level: a PAM4 port
  at 1e-7 is healthy beside peers at 1e-12); one healthy event when none holds any more. The
  baseline is the average of the port's windows while it is not raised (an exponential
  average, weight :data:`BASELINE_WEIGHT`), kept in the state;
- post-FEC errors (uncorrectable FEC blocks, ``rx_pcs_symbol_err_phy``) in a window: one
  non-fatal event (``errorCode`` ``link_fec_uncorrectable``), and one healthy event after
  :data:`CLEAN_WINDOWS` windows without any.

Nothing here is fatal and nothing recommends REPLACE_VM: the family predicts; a link that has
failed is the port-state rule's verdict (DOWN) or the counters' (``link_downed``).

A counter that went backwards (a reset, a driver reload) gives no window: the next one starts
from it. Ports without physical-layer counters, and windows without a BER, say nothing; what
was said stands until a window says otherwise. Inputs that cannot all be true give no window
either, and are said once per port and kind while the process runs (the notes; the family's
volatile :class:`BerMemory`): every count is held to ``core/numbers.py``'s 64-bit PHY
counter (all ones is a failed read), a BER to a bit error ratio (more bits corrected than the
window carried is a wrong counter, or a rate too small to be the port's: no rate), a line
rate to ``LINE_RATE``, the errors after FEC to what the link can carry; the corrected bits
read from another counter than at the window's start (``rx_corrected_bits_phy`` or the FEC
statistics') start a new window; a baseline in the state that is no bit error ratio is
corrupt: dropped, and the port's baseline starts afresh.

The correction limits (:data:`KP4_LIMIT`, :data:`KR4_LIMIT`): the kernel reports one FEC mode
"RS" for both Reed-Solomon codes, so the code is told by the lane rate: 50 Gb/s lanes and
faster (PAM4) run RS(544,514) "KP4", whose PMDs are specified at a BER of 2.4e-4 (IEEE 802.3,
Clause 91 RS-FEC as used by 802.3cd/bs, e.g. 50GBASE-CR Clause 136 and 200/400GBASE-DR4,
"BER ≤ 2.4 × 10^-4"); slower lanes (NRZ 25 Gb/s) run RS(528,514) "KR4", specified at 5e-5
(IEEE 802.3by Clause 110, 25GBASE-CR with RS-FEC). BASE-R, LLRS and no FEC have no limit
here: only the baseline rule judges them.
"""

from __future__ import annotations

from dataclasses import dataclass, field, replace
from datetime import datetime
from typing import Iterable, Mapping, NamedTuple, Optional, Sequence, Union

from ...sources.phy import CORRECTED_BITS, PHY, RX_BITS, SYMBOL_ERRORS, PhyReading
from ..codec import Section, stored
from ..config import Config
from ..events import HealthEvent, make_event, port_entities
from ..family import READS_PORTS, CheckFamily, Condition, Cycle, PortId, Series, Verdict
from ..jsontypes import Json
from ..model import DeviceSnapshot, PortSnapshot
from ..numbers import BIT_ERROR_RATIO, LINE_RATE, PHY_COUNTER, Unreadable, measure
from ..settings import Duration, Integer, Settings, setting
from ..state import DEGRADED
from .link_rate import CHECK_OF, Rate, parse_rate
from .ports import is_active, port_label

CODE_BER = "link_ber"
CODE_POST_FEC = "link_fec_uncorrectable"
KP4_LIMIT = (2.4e-4, "RS(544,514) KP4")
KR4_LIMIT = (5e-5, "RS(528,514) KR4")
RISE_FLOOR = 1e-9  # without a known FEC limit: below it a rise is noise, however many times
FLOOR_SHARE = 0.1  # of the limit rule's level: where the relative rules start to judge
MIN_BLOCK_BITS = 2112  # the shortest FEC codeword (Clause 74 BASE-R FEC); RS ones are longer
RATE_SLACK = 2.0  # a window's bits may exceed rate x seconds this much (clocks, line coding)
DRIVER, FEC_STATS = "driver", "fec"  # where a sample's corrected bits came from
BASELINE_WEIGHT = 0.1
CLEAN_WINDOWS = 10
MIN_PEERS = 3  # peers with a BER in the same run, besides the port, for a median to judge by


@dataclass(frozen=True)
class LinkBerSettings(Settings):
    """nichealthd.toml(5): linkBerInterval (0 switches the family off), linkBerLimitPercent,
    linkBerRiseFactor."""

    link_ber_interval: float = setting(
        "linkBerInterval", 60.0, Duration(0.0, 86400.0),
        "How often the physical-layer counters of each monitored port's netdev are read and "
        "the pre-FEC bit error ratio of the window since the last read is judged")
    link_ber_limit_percent: int = setting(
        "linkBerLimitPercent", 10, Integer(1, 100),
        "Percent of the FEC's correction limit at which a port's pre-FEC BER is a predicted "
        "failure")
    link_ber_rise_factor: int = setting(
        "linkBerRiseFactor", 100, Integer(0, 1_000_000),
        "How many times its own baseline a port's pre-FEC BER may rise before it is a "
        "predicted failure")
    link_ber_peer_factor: int = setting(
        "linkBerPeerFactor", 100, Integer(0, 1_000_000),
        "How many times the median pre-FEC BER of its peers a port's may be before it is a "
        "predicted failure")


def fec_limit(mode: Optional[str], rate: Optional[Rate]) -> Optional[tuple[float, str]]:
    """(pre-FEC BER limit, the code's name) of an active FEC on a link of ``rate``; None when
    no limit is known (see the module's docstring for the sources)."""
    if mode != "RS" or rate is None:
        return None
    if _pam4(rate):
        return KP4_LIMIT
    return KR4_LIMIT if rate.lanes else None  # 100G without its lanes: 4x25 NRZ or 2x50 PAM4


def _pam4(rate: Rate) -> bool:
    """Whether the rate runs PAM4 lanes: 50 Gb/s a lane and up, or 200G and up whatever its
    lanes (no NRZ port is that fast)."""
    return rate.gbps / rate.lanes >= 50 if rate.lanes else rate.gbps >= 200


@dataclass(frozen=True)
class Sample:
    """The counters of one read of a port (None: not available), kept in the state so that a
    restart (or ``--once``) measures the window from the last read, like the counter
    snapshots of link-counter-detection §6.6 (the persisted timestamp is authoritative)."""

    at: datetime
    corrected: Optional[int]
    received: Optional[int]
    uncorrectable: Optional[int]
    symbols: Optional[int]
    # The counter ``corrected`` was read from: :data:`DRIVER` (``rx_corrected_bits_phy``) or
    # :data:`FEC_STATS` (the FEC statistics' corrected bits); "" in a file of an older
    # nichealthd, which did not record it: a window across it starts anew.
    source: str = field(default="", metadata=stored(legacy=""))


@dataclass(frozen=True)
class PortBer:
    """What the last run saw of a port, for its record and the metrics."""

    netdev: str
    fec: str
    ber: Optional[float]
    limit: Optional[float]
    corrected: Optional[int]
    uncorrectable: Optional[int]
    symbols: Optional[int]


@dataclass(frozen=True)
class BerPicture:
    """The family's picture (kept in its volatile slot between runs): what the last run saw."""

    ports: Mapping[str, PortBer] = field(default_factory=dict)


@dataclass(frozen=True)
class BerMemory:
    """The family's volatile memory: the inputs it has said it could not use (port key and
    what), so that each is logged once while this process runs."""

    noted: frozenset[str] = frozenset()


@dataclass(frozen=True)
class BerRecord:
    """A port told "predicted failure" (or post-FEC errors): the figures then."""

    device: str
    port: int = field(metadata=stored(high=2**16))
    link_layer: str
    ber: float
    limit: float  # 0: none known
    since: datetime
    clean: int = field(default=0, metadata=stored(high=2**32, legacy=0))


@dataclass
class LinkBerSection(Section):
    """Ports raised (port key -> record), post-FEC errors told, each port's baseline and its
    last sample."""

    predicted: dict[str, BerRecord] = field(default_factory=dict,
                                            metadata=stored(key="link_ber_predicted"))
    post_fec: dict[str, BerRecord] = field(default_factory=dict,
                                           metadata=stored(key="link_ber_post_fec"))
    baseline: dict[str, float] = field(default_factory=dict,
                                       metadata=stored(key="link_ber_baseline"))
    samples: dict[str, Sample] = field(default_factory=dict,
                                       metadata=stored(key="link_ber_samples"))


Problems = dict[str, str]  # what of a port's window could not be used -> why (its note)


def _count(value: Optional[int], name: str, problems: Problems) -> Optional[int]:
    """A counter's value held to its kind (``core/numbers.py``, PHY_COUNTER): an all-ones
    read (or anything else no 64-bit count can be) is unreadable, never a count."""
    if value is None or PHY_COUNTER.holds(value):
        return value
    problems[f"counter {name}"] = (f"{name} read {value}, which no 64-bit counter holds "
                                   f"(all ones is a failed read): unreadable")
    return None


def _sample(reading: PhyReading, at: datetime, problems: Problems) -> Sample:
    """The counters of one read; one that is not a count is None (not available)."""
    fec = reading.fec
    corrected = _count(reading.counters.get(CORRECTED_BITS), CORRECTED_BITS, problems)
    source = DRIVER if corrected is not None else ""
    if corrected is None and CORRECTED_BITS not in reading.counters and fec is not None \
            and fec.corrected_bits:
        corrected = _count(fec.corrected_bits[0], "FEC corrected bits", problems)
        source = FEC_STATS if corrected is not None else ""
    uncorrectable = (_count(fec.uncorrectable_blocks[0], "FEC uncorrectable blocks", problems)
                     if fec and fec.uncorrectable_blocks else None)
    return Sample(at, corrected, _count(reading.counters.get(RX_BITS), RX_BITS, problems),
                  uncorrectable,
                  _count(reading.counters.get(SYMBOL_ERRORS), SYMBOL_ERRORS, problems),
                  source)


def _held(sample: Sample, problems: Problems) -> Sample:
    """A sample from the state held to the same kinds (a state file is input too)."""
    values = [_count(getattr(sample, name), f"stored {name}", problems)
              for name in ("corrected", "received", "uncorrectable", "symbols")]
    if values == [sample.corrected, sample.received, sample.uncorrectable, sample.symbols]:
        return sample
    return replace(sample, corrected=values[0], received=values[1], uncorrectable=values[2],
                   symbols=values[3])


def _delta(new: Optional[int], old: Optional[int]) -> Optional[int]:
    """The rise of a counter; None when either is missing or it went backwards (a reset)."""
    if new is None or old is None or new < old:
        return None
    return new - old


@dataclass(frozen=True)
class Impossible(Unreadable):
    """Inputs that cannot all be true, and which (``what``: said once per port and what)."""

    what: str = ""


Ber = Union[float, Unreadable, None]  # a window's BER; Unreadable: impossible; None: none


def _line_bps(port: PortSnapshot) -> Union[float, Unreadable, None]:
    """The port's line rate in bits per second while it is ACTIVE; None when it has none
    (not read, not up); Unreadable when its rate is no line rate (``LINE_RATE``)."""
    rate = parse_rate(port.rate)
    if rate is None or not is_active(port.state, port.phys_state):
        return None
    held = measure(rate.gbps, LINE_RATE)
    if isinstance(held, Unreadable):
        return Impossible(f"its rate {rate.text!r} is no line rate ({held.reason})", "rate")
    return held * 1e9


def _most_bits(bps: Union[float, Unreadable, None], seconds: float) -> float:
    """The most bits a window can carry: :data:`RATE_SLACK` × the port's rate (the fastest
    line rate where it has none) over the window and a second more (the reads are not at
    the window's edges to the millisecond)."""
    rate = bps if isinstance(bps, float) else LINE_RATE.high * 1e9
    return rate * RATE_SLACK * (max(seconds, 0.0) + 1)


def window_bits(new: Sample, old: Sample, port: PortSnapshot
                ) -> Union[int, float, Unreadable, None]:
    """The bits the window carried: Δ``rx_bits_phy`` where it is counted, else the port's
    rate × the window; None when neither is known. Unreadable when Δ``rx_bits_phy`` is more
    than any rate could carry (:data:`RATE_SLACK` × the rate, or × the fastest line rate)."""
    seconds = (new.at - old.at).total_seconds()
    bps = _line_bps(port)
    if new.received is not None or old.received is not None:
        received = _delta(new.received, old.received)
        if received is None:
            return None
        if received > _most_bits(bps, seconds):
            return Impossible(f"{RX_BITS} rose by {received} in {seconds:.0f} s, more bits "
                              f"than the link can carry: unreadable", RX_BITS)
        return received
    if isinstance(bps, Unreadable) or bps is None:
        return bps
    return bps * seconds


def window_ber(new: Sample, old: Sample, port: PortSnapshot) -> Ber:
    """The pre-FEC BER between two samples: Δcorrected ÷ the window's bits (a
    :data:`~nichealthd.core.numbers.BIT_ERROR_RATIO`); None when it cannot be told;
    Unreadable when the inputs are impossible (more bits corrected than carried, a rate that
    is no rate, the corrected bits read from another counter than at the window's start)."""
    seconds = (new.at - old.at).total_seconds()
    if new.corrected is None or old.corrected is None or seconds <= 0:
        return None
    if not old.source:  # a sample of an older nichealthd: its counter is not known
        return None
    if new.source != old.source:
        return Impossible(f"its corrected bits were read from {_SOURCE_NAMES[old.source]} "
                          f"and now from {_SOURCE_NAMES[new.source]}: a new window starts",
                          f"source {new.source}")
    corrected = _delta(new.corrected, old.corrected)
    if corrected is None:
        return None
    bits = window_bits(new, old, port)
    if isinstance(bits, Unreadable):  # falsy, like None: told apart first
        return bits
    if not bits:
        return None
    if corrected > bits:
        by_rate = new.received is None
        return Impossible(
            f"{corrected} bits corrected in a window that carried {bits:.4g} bits "
            + (f"at its rate {port.rate!r}: a rate too small to carry them is no rate"
               if by_rate else "(rx_bits_phy): one of the counters is wrong"),
            "rate" if by_rate else "corrected")
    return measure(corrected / bits, BIT_ERROR_RATIO)


_SOURCE_NAMES = {DRIVER: CORRECTED_BITS, FEC_STATS: "the FEC statistics' corrected bits"}


def _significant(value: float) -> float:
    return float(f"{value:.3g}")


class Window(NamedTuple):
    """One port's window of one run: what its BER is judged with."""

    port: PortSnapshot
    layer: str
    group: tuple[str, ...]  # its peers: role, HCA type, board, link layer, rate, FEC mode
    sample: Sample
    old: Optional[Sample]
    ber: Optional[float]
    limit: Optional[tuple[float, str]]
    floor: float  # the least BER the relative rules judge (relative_floor)


def peer_medians(windows: Sequence[Window]) -> dict[str, float]:
    """Port key -> the median BER of its peers in this run (the port itself left out), for
    the ports of a group with at least :data:`MIN_PEERS` other ports with a BER."""
    groups: dict[tuple[str, ...], list[Window]] = {}
    for w in windows:
        if w.ber is not None:
            groups.setdefault(w.group, []).append(w)
    out: dict[str, float] = {}
    for members in groups.values():
        if len(members) <= MIN_PEERS:
            continue
        for w in members:
            out[w.port.key] = _median(
                [m.ber for m in members if m is not w and m.ber is not None])
    return out


def _median(values: list[float]) -> float:
    """The median of a non-empty list, as ``statistics.median`` gives it (without importing
    statistics, decimal and fractions: half a megabyte of the daemon's memory)."""
    ordered = sorted(values)
    half = len(ordered) // 2
    return ordered[half] if len(ordered) % 2 else (ordered[half - 1] + ordered[half]) / 2


def relative_floor(limit: Optional[tuple[float, str]], settings: LinkBerSettings,
                   rate: Optional[Rate], mode: Optional[str]) -> float:
    """The least BER the relative rules (the baseline's rise, the peers) judge: a tenth of
    the limit rule's level (``linkBerLimitPercent`` of the FEC's limit: 2.4e-6 for KP4 by
    default, 5e-7 for KR4). Below it a port is healthy however it compares: PAM4 links run
    at 1e-8 to 1e-6 before FEC by design, and one at 1e-7 beside peers at 1e-12 is not
    failing. A PAM4 lane rate whose FEC mode is not told runs KP4 all the same (IEEE 802.3
    makes RS(544,514) mandatory on every PAM4 PMD); an RS FEC whose code the rate does not
    tell ("100 Gb/sec" without its lanes) corrects at least what KR4 does; without a known
    limit (no FEC, BASE-R, NRZ with the mode unknown), :data:`RISE_FLOOR`."""
    if limit is None and mode is None and rate is not None and _pam4(rate):
        limit = KP4_LIMIT
    elif limit is None and mode == "RS":
        limit = KR4_LIMIT
    if limit is None:
        return RISE_FLOOR
    return limit[0] * settings.link_ber_limit_percent / 100 * FLOOR_SHARE


def _raised(w: Window, base: Optional[float], peers: Optional[float],
            settings: LinkBerSettings) -> list[str]:
    """Why a window's BER is a predicted failure (empty: it is not)."""
    ber, limit, floor = w.ber, w.limit, w.floor
    assert ber is not None
    why = []
    if limit is not None and ber >= limit[0] * settings.link_ber_limit_percent / 100:
        why.append(f"at {settings.link_ber_limit_percent}% or more of the {limit[1]} FEC's "
                   f"correction limit {limit[0]:.1e}")
    rise, peer = settings.link_ber_rise_factor, settings.link_ber_peer_factor
    if rise and base is not None and ber >= floor and ber >= base * rise:
        times = f"{ber / base:.0f} times" if base else "above"
        why.append(f"{times} its baseline {base:.1e} (linkBerRiseFactor {rise})")
    if peer and peers is not None and ber >= floor and ber >= peers * peer:
        times = f"{ber / peers:.0f} times" if peers else "above"
        why.append(f"{times} its peers' median {peers:.1e} (linkBerPeerFactor {peer})")
    return why


def post_fec_errors(new: Sample, old: Sample, port: PortSnapshot
                    ) -> Union[tuple[Optional[int], Optional[int]], Unreadable]:
    """(uncorrectable FEC blocks, PCS symbol errors) of the window, each None when not
    available or reset; Unreadable when either is more than the link could carry: a block
    holds at least :data:`MIN_BLOCK_BITS` bits and a symbol error is at least one bit, of
    at most :data:`RATE_SLACK` × the port's rate (or the fastest line rate) a second."""
    seconds = (new.at - old.at).total_seconds()
    blocks = _delta(new.uncorrectable, old.uncorrectable)
    symbols = _delta(new.symbols, old.symbols)
    most = _most_bits(_line_bps(port), seconds)
    if blocks is not None and blocks * MIN_BLOCK_BITS > most:
        return Impossible(f"{blocks} uncorrectable FEC blocks in {seconds:.0f} s are more "
                          f"than the link can carry: unreadable", "blocks")
    if symbols is not None and symbols > most:
        return Impossible(f"{symbols} PCS symbol errors in {seconds:.0f} s are more than "
                          f"the link can carry: unreadable", "symbols")
    return blocks, symbols


def _what(problem: Unreadable) -> str:
    return problem.what if isinstance(problem, Impossible) else ""


def _healed(baseline: Mapping[str, float], problems: dict[str, Problems]) -> dict[str, float]:
    """The baselines that are bit error ratios; any other (a negative one would raise every
    port with it) is a corrupt state: dropped, said once, and the port's baseline starts
    afresh."""
    kept = {}
    for key, base in baseline.items():
        if BIT_ERROR_RATIO.holds(base):
            kept[key] = base
        else:
            problems.setdefault(key, {})["baseline"] = (
                f"the state's link_ber_baseline {base!r} is no bit error ratio (0 to 1): "
                f"corrupt, dropped; its baseline starts afresh")
    return kept


def _notes(problems: Mapping[str, Problems], noted: frozenset[str]
           ) -> tuple[tuple[str, ...], frozenset[str]]:
    """A log line for each input not used that was not said before in this process, and
    what has been said now."""
    lines = []
    said = set(noted)
    for key, found in sorted(problems.items()):
        for what, why in sorted(found.items()):
            if f"{key}: {what}" not in said:
                said.add(f"{key}: {what}")
                lines.append(f"link BER: port {key}: {why} (said once)")
    return tuple(lines), frozenset(said) if len(said) != len(noted) else noted


class LinkBer(CheckFamily[LinkBerSection, BerPicture, BerMemory]):
    """Each port's pre-FEC BER and post-FEC errors, window by window."""

    id = "link_ber"
    order = 42
    keys = LinkBerSection.keys()
    section_type = LinkBerSection
    reads = frozenset({READS_PORTS, PHY})
    port_field_types = {
        "phy_predicted_failure": "?bool", "phy_post_fec_errors": "?bool", "phy_fec": "?string",
        "phy_pre_fec_ber": "?float", "phy_ber_limit": "?float", "phy_ber_baseline": "?float",
    }
    cadence = 60.0
    settings = LinkBerSettings

    def interval(self, config: Config) -> float:
        return config.settings(LinkBerSettings).link_ber_interval

    def enabled(self, config: Config) -> bool:
        return config.settings(LinkBerSettings).link_ber_interval > 0

    def urgent(self, old: LinkBerSection, new: LinkBerSection, config: Config) -> bool:
        """A sample or a baseline's drift waits for the next flush (within a minute); what
        was told is written at once."""
        return old.predicted != new.predicted or old.post_fec != new.post_fec

    def evaluate(self, previous: LinkBerSection, cycle: Cycle, volatile: Optional[BerMemory]
                 ) -> Verdict[LinkBerSection, BerPicture, BerMemory]:
        readings = cycle.snapshot.fact(PHY) or {}
        settings = cycle.config.settings(LinkBerSettings)
        old_samples = previous.samples
        problems: dict[str, Problems] = {}  # port key -> what could not be used -> why
        section = LinkBerSection(dict(previous.predicted), dict(previous.post_fec),
                                 _healed(previous.baseline, problems))
        samples = section.samples
        ports: dict[str, PortBer] = {}
        windows: list[Window] = []
        for device in cycle.monitored:
            for port in device.ports:
                reading = readings.get(port.key)
                layer = port.link_layer or ""
                if reading is None or layer not in CHECK_OF:
                    continue
                found = problems.setdefault(port.key, {})
                sample = samples[port.key] = _sample(reading, cycle.now, found)
                old = old_samples.get(port.key)
                if old is not None:
                    old = _held(old, found)
                rate = parse_rate(port.rate)
                limit = fec_limit(reading.fec_mode, rate)
                ber = window_ber(sample, old, port) if old else None
                if isinstance(ber, Unreadable):
                    found[f"window {_what(ber)}"] = f"no pre-FEC BER this window: {ber.reason}"
                    ber = None
                ports[port.key] = PortBer(reading.netdev, reading.fec_mode or "",
                                          ber, limit[0] if limit else None, sample.corrected,
                                          sample.uncorrectable, sample.symbols)
                group = (cycle.roles[device.name].role, device.hca_type or "",
                         device.board_id or "", layer, port.rate or "", reading.fec_mode or "")
                floor = relative_floor(limit, settings, rate, reading.fec_mode)
                windows.append(Window(port, layer, group, sample, old, ber, limit, floor))
        peers = peer_medians(windows)
        events: list[tuple[str, HealthEvent]] = []
        for w in windows:
            said = []
            if w.ber is not None:
                said.append(self._judge_ber(section, w, peers.get(w.port.key), settings, cycle))
            if w.old is not None:
                said.append(self._judge_post_fec(section, w, problems[w.port.key], cycle))
            events.extend((w.port.device, event) for event in said
                          if event is not None and event.check_name in cycle.enabled)
        noted = volatile.noted if volatile is not None else frozenset()
        notes, noted = _notes(problems, noted)
        return Verdict(section, tuple(events), BerPicture(ports), notes=notes,
                       volatile=BerMemory(noted))

    @staticmethod
    def _judge_ber(section: LinkBerSection, w: Window, peers: Optional[float],
                   settings: LinkBerSettings, cycle: Cycle) -> Optional[HealthEvent]:
        port, layer, ber, limit = w.port, w.layer, w.ber, w.limit
        assert ber is not None
        key = port.key
        base = section.baseline.get(key)
        why = _raised(w, base, peers, settings)
        told = key in section.predicted
        label = port_label(port.device, port.port, layer)
        limit_text = (f"the {limit[1]} FEC's correction limit {limit[0]:.1e}" if limit
                      else "no known FEC correction limit")
        if not why:
            section.baseline[key] = _significant(
                ber if base is None else base + BASELINE_WEIGHT * (ber - base))
        if why and not told:
            section.predicted[key] = BerRecord(port.device, port.port, layer, ber,
                                               limit[0] if limit else 0.0, cycle.now)
            if not limit or not ber >= limit[0] * settings.link_ber_limit_percent / 100:
                why.append(f"against {limit_text}")
            message = (f"{label}: LinkBer degraded - predicted failure: pre-FEC BER {ber:.1e} "
                       f"is {', '.join(why)}")
            return _event(w, CODE_BER, False, message, cycle)
        if told and not why:
            del section.predicted[key]
            message = (f"{label}: LinkBer healthy - pre-FEC BER {ber:.1e} is back below "
                       f"{settings.link_ber_limit_percent}% of {limit_text} and near its "
                       f"baseline and its peers'")
            return _event(w, CODE_BER, True, message, cycle)
        return None

    @staticmethod
    def _judge_post_fec(section: LinkBerSection, w: Window, found: Problems, cycle: Cycle
                        ) -> Optional[HealthEvent]:
        port, layer, sample, old = w.port, w.layer, w.sample, w.old
        assert old is not None
        key = port.key
        errors_after = post_fec_errors(sample, old, port)
        if isinstance(errors_after, Unreadable):
            found[f"post-FEC {_what(errors_after)}"] = (
                f"no post-FEC verdict this window: {errors_after.reason}")
            return None
        blocks, symbols = errors_after
        if blocks is None and symbols is None:
            return None  # not available, or reset: no verdict either way
        errors = (blocks or 0) + (symbols or 0)
        record = section.post_fec.get(key)
        label = port_label(port.device, port.port, layer)
        if errors and record is None:
            section.post_fec[key] = BerRecord(port.device, port.port, layer, float(errors),
                                              0.0, cycle.now)
            seconds = (sample.at - old.at).total_seconds()
            message = (f"{label}: LinkBer degraded - errors after FEC: {blocks or 0} "
                       f"uncorrectable FEC blocks and {symbols or 0} PCS symbol errors in "
                       f"{seconds:.0f} s")
            return _event(w, CODE_POST_FEC, False, message, cycle)
        if record is None:
            return None
        if errors:
            section.post_fec[key] = replace(record, clean=0)
            return None
        if record.clean + 1 < CLEAN_WINDOWS:
            section.post_fec[key] = replace(record, clean=record.clean + 1)
            return None
        del section.post_fec[key]
        message = (f"{label}: LinkBer healthy - no errors after FEC in {CLEAN_WINDOWS} "
                   f"windows")
        return _event(w, CODE_POST_FEC, True, message, cycle)

    def rename(self, section: LinkBerSection, renames: Mapping[str, str], now: datetime
               ) -> LinkBerSection:
        """Its ports of a renamed device under the new name."""

        def moved(key: str) -> str:
            device, _, number = key.rpartition("_")
            return f"{renames[device]}_{number}" if device in renames else key

        def records(table: Mapping[str, BerRecord]) -> dict[str, BerRecord]:
            return {moved(k): replace(r, device=renames.get(r.device, r.device))
                    for k, r in table.items()}

        return LinkBerSection(records(section.predicted), records(section.post_fec),
                              {moved(k): v for k, v in section.baseline.items()},
                              {moved(k): v for k, v in section.samples.items()})

    def judges(self, device: DeviceSnapshot, port: PortSnapshot) -> bool:
        """The InfiniBand and RoCE ports with a netdev (their PHY counters are read by it)."""
        return bool(port.netdev) and (port.link_layer or "") in CHECK_OF

    def conditions(self, section: LinkBerSection,
                   picture: Optional[BerPicture]) -> Iterable[Condition]:
        for key, record in sorted(section.predicted.items()):
            yield Condition(DEGRADED, f"pre-FEC BER {record.ber:.1e}: predicted failure",
                            (record.device, record.port),
                            alone=f"{key} pre-FEC BER {record.ber:.1e}: predicted failure",
                            code=CODE_BER)
        for key, record in sorted(section.post_fec.items()):
            yield Condition(DEGRADED, "errors after FEC", (record.device, record.port),
                            alone=f"{key} errors after FEC", code=CODE_POST_FEC)

    def port_fields(self, section: LinkBerSection, picture: Optional[BerPicture], port: PortId
                    ) -> Mapping[str, Json]:
        key = f"{port[0]}_{port[1]}"
        seen = picture.ports.get(key) if picture is not None else None
        if seen is None and key not in section.predicted:
            return {}
        fields: dict[str, Json] = {"phy_predicted_failure": key in section.predicted,
                                  "phy_post_fec_errors": key in section.post_fec}
        if seen is not None:
            fields["phy_fec"] = seen.fec
            if seen.ber is not None:
                fields["phy_pre_fec_ber"] = seen.ber
            if seen.limit is not None:
                fields["phy_ber_limit"] = seen.limit
        if key in section.baseline and BIT_ERROR_RATIO.holds(section.baseline[key]):
            fields["phy_ber_baseline"] = section.baseline[key]
        return fields

    def series(self, section: LinkBerSection, picture: Optional[BerPicture]) -> Iterable[Series]:
        ports = picture.ports if picture is not None else {}

        def labels(key: str, seen: PortBer) -> tuple[str, ...]:
            device, _, number = key.rpartition("_")
            return (device, number, seen.netdev)

        names = ("device", "port", "netdev")
        yield Series("phy_pre_fec_ber", "Pre-FEC bit error ratio of each port's last window",
                     "gauge", names, tuple((labels(k, p), p.ber) for k, p in sorted(
                         ports.items()) if p.ber is not None))
        yield Series("phy_corrected_errors_total",
                     "Bit errors the FEC corrected (rx_corrected_bits_phy)",
                     "counter", names, tuple((labels(k, p), float(p.corrected)) for k, p in
                                             sorted(ports.items()) if p.corrected is not None))
        yield Series("phy_uncorrectable_blocks_total", "FEC blocks the FEC could not correct",
                     "counter", names, tuple((labels(k, p), float(p.uncorrectable)) for k, p
                                             in sorted(ports.items())
                                             if p.uncorrectable is not None))
        yield Series("phy_predicted_failure",
                     "1 while a port's pre-FEC BER nears its FEC's limit or its baseline "
                     "rose by linkBerRiseFactor", "gauge", ("device", "port"),
                     tuple(((r.device, str(r.port)), 1.0)
                           for _, r in sorted(section.predicted.items())))


def _event(w: Window, code: str, healthy: bool, message: str, cycle: Cycle) -> HealthEvent:
    return make_event(CHECK_OF[w.layer], fatal=False, healthy=healthy, message=message,
                      error_code=code, entities=port_entities(w.port.device, w.port.port),
                      at=cycle.now)


FAMILY = LINK_BER = LinkBer()
