"""The physical-layer files of a simulated host's netdevs: what ``ethtool -S`` and FEC would say.

nichealthd reads these instead of the kernel when ``ethtoolPath`` is set (the sim's config sets
it to ``ROOT/ethtool``; the reader is ``nichealthd/sources/phy.py``, whose docstring is the
format's definition): ``ROOT/ethtool/<netdev>/stats`` (``name: value`` lines) and
``ROOT/ethtool/<netdev>/fec`` (JSON). The optics files of the same directories are
``module*``; these two names are the BER's.

The simulator has no clock loop, so a counter that must advance with time is written as a
line ``name: BASE +RATE/s @EPOCH``, which the reader evaluates as ``BASE + floor(RATE × (now −
EPOCH))``: ``rx_bits_phy`` advances at the port's rate (bits per second), and
``rx_corrected_bits_phy`` at the rate times the port's pre-FEC BER. ``create`` writes them for
every RoCE (Ethernet) netdev of a profile at :data:`HEALTHY_BER` with the FEC of its lane rate
(RS), so the default hosts stay quiet; ``set-ber`` rewrites both lines from the values they
have at that moment (no counter jumps or goes backwards), so the BER is the new one from now
on. The counters advance whether or not the port is up: a simplification a test that takes a
port down must keep in mind.
"""

from __future__ import annotations

import json
import math
import re
import time
from pathlib import Path
from typing import Dict, Optional, Tuple

from .fsio import SimError, write_in_place, write_new

ETHTOOL_DIR = "ethtool"
STATS = "stats"
FEC = "fec"
HEALTHY_BER = 1e-8  # a healthy PAM4 link: four decades below KP4's 2.4e-4
RX_BITS = "rx_bits_phy"
CORRECTED_BITS = "rx_corrected_bits_phy"
_LINE = re.compile(r"\s*([A-Za-z0-9_.\-]+):?\s+([0-9]+)"
                   r"(?:\s+\+([0-9.eE+\-]+)/s\s+@([0-9.eE+\-]+))?\s*")
_GBPS = re.compile(r"\s*([0-9]+(?:\.[0-9]+)?) Gb/sec")


def bits_per_second(rate: str) -> float:
    """``"400 Gb/sec (4X NDR)"`` -> 4e11; a rate the sim cannot read is a SimError."""
    match = _GBPS.match(rate)
    if match is None:
        raise SimError(f"cannot read the port's rate {rate!r}")
    return float(match.group(1)) * 1e9


def _stats_text(netdev: str, values: Dict[str, Tuple[int, float, float]]) -> str:
    lines = [f"# ethtool -S {netdev} (nichealthd-sim): BASE +RATE/s @EPOCH advances with time"]
    for name in sorted(values):
        base, rate, epoch = values[name]
        lines.append(f"{name}: {base}" if rate == 0 else
                     f"{name}: {base} +{rate!r}/s @{epoch:.6f}")
    return "\n".join(lines) + "\n"


def write_healthy(root: Path, netdev: str, rate: str, now: Optional[float] = None) -> None:
    """A new netdev's files: counters at 0, advancing at :data:`HEALTHY_BER`, FEC RS."""
    when = time.time() if now is None else now
    bps = bits_per_second(rate)
    top = root / ETHTOOL_DIR / netdev
    values = {RX_BITS: (0, bps, when), CORRECTED_BITS: (0, bps * HEALTHY_BER, when),
              "rx_pcs_symbol_err_phy": (0, 0.0, when), "rx_crc_errors_phy": (0, 0.0, when),
              "link_down_events_phy": (0, 0.0, when)}
    write_new(top / STATS, _stats_text(netdev, values))
    write_new(top / FEC, json.dumps({"active": "RS", "corrected_blocks": [0],
                                     "uncorrectable_blocks": [0]}) + "\n")


def read_stats(path: Path) -> Dict[str, Tuple[int, float, float]]:
    """The lines of a stats file: name -> (base, rate per second, epoch). A line the
    simulator could not have written (a base beyond 64 bits, a rate or an epoch that is no
    finite number) is a SimError naming it, never a traceback."""
    try:
        text = path.read_text(errors="replace")
    except OSError as exc:
        raise SimError(f"{path}: {exc.strerror}") from None
    out: Dict[str, Tuple[int, float, float]] = {}
    for number, line in enumerate(text.splitlines(), 1):
        match = _LINE.fullmatch(line)
        if match is None:
            continue
        base, rate, epoch = match.group(2), match.group(3) or "0", match.group(4) or "0"
        try:
            if len(base) > 20 or int(base) >= 2**64:
                raise ValueError("a base beyond 64 bits")
            values = (int(base), float(rate), float(epoch))
            if not all(math.isfinite(v) and v >= 0 for v in values[1:]):
                raise ValueError("a rate or an epoch that is no finite, non-negative number")
        except ValueError as exc:
            raise SimError(f"{path}, line {number}: not 'name: BASE +RATE/s @EPOCH' of "
                           f"nichealthd-sim ({exc})") from None
        out[match.group(1)] = values
    return out


def now_value(entry: Tuple[int, float, float], now: float) -> int:
    """A line's value at ``now`` (the reader's formula); a SimError past 64 bits."""
    base, rate, epoch = entry
    rise = rate * max(0.0, now - epoch) if rate else 0.0
    if not rise < 2**64 - base:
        raise SimError(f"a counter at {base} +{rate:g}/s @{epoch:.0f} is beyond 64 bits now")
    return base + math.floor(rise)


def set_ber(root: Path, netdev: str, ber: float) -> None:
    """``netdev``'s pre-FEC BER from now on (``nichealthd-sim set-ber``, sim/mutate.py)."""
    if not (math.isfinite(ber) and 0 <= ber < 1):
        raise SimError(f"a bit error ratio is at least 0 and below 1, got {ber}")
    path = root / ETHTOOL_DIR / netdev / STATS
    if not path.is_file():
        raise SimError(f"{path} does not exist: {netdev} has no physical-layer counters")
    values = read_stats(path)
    now = time.time()
    received = values.get(RX_BITS)
    if received is None or not received[1]:
        raise SimError(f"{path} has no advancing {RX_BITS}")
    bps = received[1]
    corrected = values.get(CORRECTED_BITS, (0, 0.0, now))
    values[RX_BITS] = (now_value(received, now), bps, now)
    values[CORRECTED_BITS] = (now_value(corrected, now), bps * ber, now)
    write_in_place(path, _stats_text(netdev, values))
