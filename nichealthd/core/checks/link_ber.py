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
  last two at least :data:`RISE_FLOOR`; one healthy event when none holds any more. The
  baseline is the average of the port's windows while it is not raised (an exponential
  average, weight :data:`BASELINE_WEIGHT`), kept in the state;
- post-FEC errors (uncorrectable FEC blocks, ``rx_pcs_symbol_err_phy``) in a window: one
  non-fatal event (``errorCode`` ``link_fec_uncorrectable``), and one healthy event after
  :data:`CLEAN_WINDOWS` windows without any.

A counter that went backwards (a reset, a driver reload) gives no window: the next one starts
from it. Ports without physical-layer counters, and windows without a BER, say nothing; what
was said stands until a window says otherwise.

The correction limits (:data:`KP4_LIMIT`, :data:`KR4_LIMIT`): the kernel reports one FEC mode
"RS" for both Reed-Solomon codes, so the code is told by the lane rate: 50 Gb/s lanes and
faster (PAM4) run RS(544,514) "KP4", whose PMDs are specified at a BER of 2.4e-4 (IEEE 802.3,
Clause 91 RS-FEC as used by 802.3cd/bs, e.g. 50GBASE-CR Clause 136 and 200/400GBASE-DR4,
"BER ≤ 2.4 × 10^-4"); slower lanes (NRZ 25 Gb/s) run RS(528,514) "KR4", specified at 5e-5
(IEEE 802.3by Clause 110, 25GBASE-CR with RS-FEC). BASE-R, LLRS and no FEC have no limit
here: only the baseline rule judges them.
"""

from __future__ import annotations

import statistics
from dataclasses import dataclass, field, replace
from datetime import datetime
from typing import Iterable, Mapping, NamedTuple, Optional, Sequence

from ..codec import Section, stored
from ..config import Config
from ..events import HealthEvent, make_event, port_entities
from ..family import READS_PORTS, CheckFamily, Condition, Cycle, PortId, Series, Verdict
from ..jsontypes import Json
from ..model import DeviceSnapshot, PortSnapshot
from ..phy import CORRECTED_BITS, FACT, RX_BITS, SYMBOL_ERRORS, PhyReading
from ..settings import Duration, Integer, Settings, setting
from ..state import DEGRADED
from .link_rate import CHECK_OF, Rate, parse_rate
from .ports import is_active, port_label

CODE_BER = "link_ber"
CODE_POST_FEC = "link_fec_uncorrectable"
KP4_LIMIT = (2.4e-4, "RS(544,514) KP4")
KR4_LIMIT = (5e-5, "RS(528,514) KR4")
RISE_FLOOR = 1e-9  # below it a rise over the baseline is noise, however many times
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
    if rate.lanes:
        return KP4_LIMIT if rate.gbps / rate.lanes >= 50 else KR4_LIMIT
    return KP4_LIMIT if rate.gbps >= 200 else None  # 200G and up: PAM4 lanes only


@dataclass(frozen=True)
class Sample:
    """The counters of one read of a port (None: not available), kept in the state so that a
    restart (or ``--once``) measures the window from the last read, like the counter
    snapshots of DESIGN §2.5 (the persisted timestamp is authoritative)."""

    at: datetime
    corrected: Optional[int]
    received: Optional[int]
    uncorrectable: Optional[int]
    symbols: Optional[int]


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


def _sample(reading: PhyReading, at: datetime) -> Sample:
    fec = reading.fec
    corrected = reading.counters.get(CORRECTED_BITS)
    if corrected is None and fec is not None and fec.corrected_bits:
        corrected = fec.corrected_bits[0]
    return Sample(at, corrected, reading.counters.get(RX_BITS),
                  fec.uncorrectable_blocks[0] if fec and fec.uncorrectable_blocks else None,
                  reading.counters.get(SYMBOL_ERRORS))


def _delta(new: Optional[int], old: Optional[int]) -> Optional[int]:
    """The rise of a counter; None when either is missing or it went backwards (a reset)."""
    if new is None or old is None or new < old:
        return None
    return new - old


def window_ber(new: Sample, old: Sample, port: PortSnapshot) -> Optional[float]:
    """The pre-FEC BER between two samples; None when it cannot be told."""
    seconds = (new.at - old.at).total_seconds()
    corrected = _delta(new.corrected, old.corrected)
    if corrected is None or seconds <= 0:
        return None
    if new.received is not None:
        received = _delta(new.received, old.received)
        return corrected / received if received else None
    rate = parse_rate(port.rate)
    if rate is None or not rate.gbps or not is_active(port.state, port.phys_state):
        return None
    return corrected / (rate.gbps * 1e9 * seconds)


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
            out[w.port.key] = statistics.median(
                [m.ber for m in members if m is not w and m.ber is not None])
    return out


def _raised(ber: float, limit: Optional[tuple[float, str]], base: Optional[float],
            peers: Optional[float], settings: LinkBerSettings) -> list[str]:
    """Why a window's BER is a predicted failure (empty: it is not)."""
    why = []
    if limit is not None and ber >= limit[0] * settings.link_ber_limit_percent / 100:
        why.append(f"at {settings.link_ber_limit_percent}% or more of the {limit[1]} FEC's "
                   f"correction limit {limit[0]:.1e}")
    rise, peer = settings.link_ber_rise_factor, settings.link_ber_peer_factor
    if rise and base is not None and ber >= RISE_FLOOR and ber >= base * rise:
        times = f"{ber / base:.0f} times" if base else "above"
        why.append(f"{times} its baseline {base:.1e} (linkBerRiseFactor {rise})")
    if peer and peers is not None and ber >= RISE_FLOOR and ber >= peers * peer:
        times = f"{ber / peers:.0f} times" if peers else "above"
        why.append(f"{times} its peers' median {peers:.1e} (linkBerPeerFactor {peer})")
    return why


class LinkBer(CheckFamily[LinkBerSection, BerPicture, None]):
    """Each port's pre-FEC BER and post-FEC errors, window by window."""

    id = "link_ber"
    order = 42
    keys = LinkBerSection.keys()
    section_type = LinkBerSection
    reads = frozenset({READS_PORTS, FACT})
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

    def evaluate(self, previous: LinkBerSection, cycle: Cycle, volatile: None
                 ) -> Verdict[LinkBerSection, BerPicture, None]:
        readings: Mapping[str, PhyReading] = cycle.snapshot.facts.get(FACT) or {}
        settings = cycle.config.settings(LinkBerSettings)
        old_samples = previous.samples
        section = LinkBerSection(dict(previous.predicted), dict(previous.post_fec),
                                 dict(previous.baseline))
        samples = section.samples
        ports: dict[str, PortBer] = {}
        windows: list[Window] = []
        for device in cycle.monitored:
            for port in device.ports:
                reading = readings.get(port.key)
                layer = port.link_layer or ""
                if reading is None or layer not in CHECK_OF:
                    continue
                sample = samples[port.key] = _sample(reading, cycle.now)
                old = old_samples.get(port.key)
                limit = fec_limit(reading.fec_mode, parse_rate(port.rate))
                ber = window_ber(sample, old, port) if old else None
                ports[port.key] = PortBer(reading.netdev, reading.fec_mode or "",
                                          ber, limit[0] if limit else None, sample.corrected,
                                          sample.uncorrectable, sample.symbols)
                group = (cycle.roles[device.name].role, device.hca_type or "",
                         device.board_id or "", layer, port.rate or "", reading.fec_mode or "")
                windows.append(Window(port, layer, group, sample, old, ber, limit))
        peers = peer_medians(windows)
        events: list[tuple[str, HealthEvent]] = []
        for w in windows:
            said = []
            if w.ber is not None:
                said.append(self._judge_ber(section, w, peers.get(w.port.key), settings, cycle))
            if w.old is not None:
                said.append(self._judge_post_fec(section, w.port, w.layer, w.sample, w.old,
                                                 cycle))
            events.extend((w.port.device, event) for event in said
                          if event is not None and event.check_name in cycle.enabled)
        return Verdict(section, tuple(events), BerPicture(ports))

    @staticmethod
    def _judge_ber(section: LinkBerSection, w: Window, peers: Optional[float],
                   settings: LinkBerSettings, cycle: Cycle) -> Optional[HealthEvent]:
        port, layer, ber, limit = w.port, w.layer, w.ber, w.limit
        assert ber is not None
        key = port.key
        base = section.baseline.get(key)
        why = _raised(ber, limit, base, peers, settings)
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
            return _event(port, layer, CODE_BER, False, message, cycle)
        if told and not why:
            del section.predicted[key]
            message = (f"{label}: LinkBer healthy - pre-FEC BER {ber:.1e} is back below "
                       f"{settings.link_ber_limit_percent}% of {limit_text} and near its "
                       f"baseline and its peers'")
            return _event(port, layer, CODE_BER, True, message, cycle)
        return None

    @staticmethod
    def _judge_post_fec(section: LinkBerSection, port: PortSnapshot, layer: str,
                        sample: Sample, old: Sample, cycle: Cycle) -> Optional[HealthEvent]:
        key = port.key
        blocks = _delta(sample.uncorrectable, old.uncorrectable)
        symbols = _delta(sample.symbols, old.symbols)
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
            return _event(port, layer, CODE_POST_FEC, False, message, cycle)
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
        return _event(port, layer, CODE_POST_FEC, True, message, cycle)

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
                            alone=f"{key} pre-FEC BER {record.ber:.1e}: predicted failure")
        for key, record in sorted(section.post_fec.items()):
            yield Condition(DEGRADED, "errors after FEC", (record.device, record.port),
                            alone=f"{key} errors after FEC")

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
        if key in section.baseline:
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


def _event(port: PortSnapshot, layer: str, code: str, healthy: bool, message: str,
           cycle: Cycle) -> HealthEvent:
    return make_event(CHECK_OF[layer], fatal=False, healthy=healthy, message=message,
                      error_code=code, entities=port_entities(port.device, port.port),
                      at=cycle.now)


FAMILY = LINK_BER = LinkBer()
