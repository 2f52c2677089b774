"""Prometheus metric families and their text exposition format, version 0.0.4.

The daemon builds every family on each scrape (:mod:`.metrics`) and writes them in the text
format that Prometheus, node_exporter and promtool read (Prometheus' "Exposition formats",
text format 0.0.4): per family a ``# HELP`` and a ``# TYPE`` line, then one line per sample,
``name{label="value",...} value``. This module is that format and nothing else, so that the
daemon needs no client library (prometheus-client's exposition alone brings ``ssl``,
``http.server``, ``urllib``, ``email`` and ``wsgiref`` into the process). Its output is the one
prometheus-client writes for the same families, byte for byte: labels sorted by name, values
as Go prints floats (:func:`go_float`), a counter's samples named ``<name>_total``
(tests/metrics/test_metrics_text.py holds the two side by side).
"""

from __future__ import annotations

import math
import re
from typing import Iterable, NamedTuple, Optional, Sequence

CONTENT_TYPE = "text/plain; version=0.0.4; charset=utf-8"
_NAME = re.compile(r"[a-zA-Z_:][a-zA-Z0-9_:]*\Z")
_LABEL = re.compile(r"[a-zA-Z_][a-zA-Z0-9_]*\Z")


def go_float(value: float) -> str:
    """``value`` as Go's ``strconv.FormatFloat(v, 'g', -1, 64)`` writes a sample: ``+Inf``,
    ``-Inf``, ``NaN``, the shortest repr, exponent form from 1e+06 up (Python waits for
    1e+16). Equal to prometheus-client's ``floatToGoString``."""
    number = float(value)
    if number == math.inf:
        return "+Inf"
    if number == -math.inf:
        return "-Inf"
    if math.isnan(number):
        return "NaN"
    text = repr(number)
    dot = text.find(".")
    if number > 0 and dot > 6:
        mantissa = f"{text[0]}.{text[1:dot]}{text[dot + 1:]}".rstrip("0.")
        return f"{mantissa}e+{dot - 1:02d}"
    return text


def _escape_label(value: str) -> str:
    return value.replace("\\", r"\\").replace("\n", r"\n").replace('"', r"\"")


def _escape_help(text: str) -> str:
    return text.replace("\\", r"\\").replace("\n", r"\n")


class Sample(NamedTuple):
    """One line of a family: the sample's name, its labels and its value."""

    name: str
    labels: dict[str, str]
    value: float


class Family:
    """One metric family: its name, help, type and samples (name, labels, value)."""

    kind = "untyped"
    suffix = ""  # of the name of each plain sample (a counter's ``_total``)

    def __init__(self, name: str, documentation: str, value: Optional[float] = None,
                 labels: Optional[Sequence[str]] = None) -> None:
        if not _NAME.match(name):
            raise ValueError(f"invalid metric name: {name!r}")
        for label in labels or ():
            if not _LABEL.match(label) or label.startswith("__"):
                raise ValueError(f"invalid label name: {label!r}")
        if labels and value is not None:
            raise ValueError("a family with labels takes its values by add_metric")
        self.name = name
        self.documentation = documentation
        self.labelnames = tuple(labels or ())
        self.samples: list[Sample] = []
        if value is not None:
            self.add_metric((), value)

    def add_metric(self, labels: Sequence[str], value: float) -> None:
        """A sample with these label values (in the order of the family's label names)."""
        self.samples.append(Sample(self.name + self.suffix,
                                   dict(zip(self.labelnames, labels)), value))


class GaugeFamily(Family):
    """A gauge: a value that goes up and down."""

    kind = "gauge"


class CounterFamily(Family):
    """A counter; its name is given without ``_total``, which each sample's name has."""

    kind = "counter"
    suffix = "_total"

    def __init__(self, name: str, documentation: str, value: Optional[float] = None,
                 labels: Optional[Sequence[str]] = None) -> None:
        super().__init__(name[:-6] if name.endswith("_total") else name, documentation,
                         value, labels)


class HistogramFamily(Family):
    """A histogram without labels: cumulative buckets (``le`` as written), count and sum."""

    kind = "histogram"

    def __init__(self, name: str, documentation: str, buckets: Sequence[tuple[str, float]],
                 sum_value: float) -> None:
        super().__init__(name, documentation)
        for bound, count in buckets:
            self.samples.append(Sample(name + "_bucket", {"le": bound}, count))
        self.samples.append(Sample(name + "_count", {}, buckets[-1][1]))
        self.samples.append(Sample(name + "_sum", {}, sum_value))


def _sample_line(name: str, labels: dict[str, str], value: float) -> str:
    if not labels:
        return f"{name} {go_float(value)}\n"
    pairs = ",".join(f'{key}="{_escape_label(labels[key])}"' for key in sorted(labels))
    return f"{name}{{{pairs}}} {go_float(value)}\n"


def exposition(families: Iterable[Family]) -> bytes:
    """The text format (0.0.4) of ``families``, in their order, as UTF-8."""
    out: list[str] = []
    for family in families:
        name = family.name + family.suffix
        out.append(f"# HELP {name} {_escape_help(family.documentation)}\n")
        out.append(f"# TYPE {name} {family.kind}\n")
        out.extend(_sample_line(*sample) for sample in family.samples)
    return "".join(out).encode("utf-8")
