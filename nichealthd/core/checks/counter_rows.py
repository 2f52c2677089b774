"""The ``show counters`` records of one device: each configured counter of each port, with
what the last poll read and computed of it and what the counter family holds of it.

Shared by the counter engine's families (ConnectX and EFA), each for the devices whose
counters it judges (:meth:`~nichealthd.core.family.CheckFamily.counter_rows`); the keys are
nichealthctl(1)'s.
"""

from __future__ import annotations

from typing import Iterator, Mapping, Sequence

from ..config import CounterSpec
from ..events import format_timestamp
from ..jsontypes import JsonObject
from ..model import DeviceSnapshot, Unreadable, is_value
from ..observed import CounterObservation
from ..state import counter_key
from .counter_section import CounterSection
from .counters import saturation_key


def counter_rows(section: CounterSection, observations: Mapping[str, CounterObservation],
                 dev: DeviceSnapshot, port: int, specs: Sequence[CounterSpec]
                 ) -> Iterator[JsonObject]:
    """Every counter of ``specs`` on each port of ``dev`` (``port`` 0) or on that one."""
    for p in dev.ports:
        if port and p.port != port:
            continue
        for spec in specs:
            key = counter_key(dev.name, p.port, spec.name)
            file_key = saturation_key(dev.name, p.port, p.counter_kinds.get(spec.name))
            reading = p.counters.get(spec.name)
            seen = observations.get(key)
            flag = section.breach_flags.get(key)
            yield {
                "device": dev.name,
                "port": p.port,
                "counter": spec.name,
                "path": p.counter_paths.get(spec.name, spec.path),
                "value": reading if is_value(reading) else None,
                "error": reading.reason if isinstance(reading, Unreadable) else "",
                "delta": seen.delta if seen else None,
                "rate": seen.rate if seen else None,
                "threshold": spec.threshold,
                "type": spec.threshold_type,
                "unit": spec.velocity_unit or "poll",
                "fatal": spec.is_fatal,
                "breached": flag is not None,
                "since": format_timestamp(flag.since) if flag else "",
                # Per file (both symbol_error entries), reported or only shown.
                "saturated": file_key is not None and (
                    file_key in section.saturated or file_key in section.saturated_quiet),
            }
