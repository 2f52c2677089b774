"""The daemon's text exposition (surfaces/metrics_text.py, metrics_process.py) beside
prometheus-client's, which it replaces in the daemon and which stays a test dependency for this.

The same code builds the same families twice, once through the daemon's family classes and once
through prometheus-client's (the names in surfaces/metrics.py swapped for the test), and the two
writers must give the same bytes: on a faulted DGX H100 sim host polled by the daemon's monitor,
with label values holding quotes, backslashes, newlines and non-ASCII text, and on hand-made
families with NaN, infinities and Go's exponent forms. promtool lints the daemon's output, and
prometheus-client's parser reads it back to the same values.
"""

from __future__ import annotations

import math
import os
import random
import shutil
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from prometheus_client import CollectorRegistry, ProcessCollector, generate_latest
from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, HistogramMetricFamily
from prometheus_client.parser import text_string_to_metric_families
from prometheus_client.utils import floatToGoString

from nichealthd.core.picture import PollPicture
from nichealthd.runtime.monitor import Monitor
from nichealthd.runtime.startup import load_topology
from nichealthd.sim import mutate
from nichealthd.sources.config_file import load_config
from nichealthd.storage.store import Journal
from nichealthd.surfaces import metrics
from nichealthd.surfaces.connector.status import ConnectorStatus
from nichealthd.surfaces.context import PollStats, ServiceContext
from nichealthd.surfaces.metrics_process import ProcessFamilies
from nichealthd.surfaces.metrics_text import (
    CounterFamily,
    GaugeFamily,
    HistogramFamily,
    exposition,
    go_float,
)
from nichealthd.surfaces.slurm.status import SlurmStatus

from .. import simtrees
from .test_promtool import check

# Label values a sysfs file or a configuration can hold: every character the format escapes.
ODD = ('say "hi"', "back\\slash", "two\nlines", "ünïcødé ✓ 日本", "", "\\n not a newline",
       'end\\', "tab\there")
VALUES = (0.0, -0.0, 1.0, -1.0, 0.5, 1e-7, 123456.0, 1234567.0, 1e6, 999999.9, 1e15, 1e16,
          1e21, 2.0**53, 2.0**64, 1.5e300, 5e-324, -1234567.0, math.inf, -math.inf, math.nan,
          3, 2**40, 1 / 3)


class _Collector:
    def __init__(self, families: list[Any]) -> None:
        self._families = families

    def collect(self) -> Iterator[Any]:
        return iter(self._families)


def theirs(families: list[Any]) -> bytes:
    """prometheus-client's text format of its own families."""
    registry = CollectorRegistry(auto_describe=False)
    registry.register(_Collector(families))  # type: ignore[arg-type]
    return generate_latest(registry)


def both(monkeypatch: pytest.MonkeyPatch, build: Any) -> tuple[bytes, bytes]:
    """``build()`` run through the daemon's families and through prometheus-client's, each
    written by its own library."""
    ours = exposition(build())
    with monkeypatch.context() as swapped:
        swapped.setattr(metrics, "GaugeFamily", GaugeMetricFamily)
        swapped.setattr(metrics, "CounterFamily", CounterMetricFamily)
        swapped.setattr(metrics, "HistogramFamily", HistogramMetricFamily)
        return ours, theirs(build())


def test_go_float_is_floattogostring() -> None:
    rng = random.Random(56)
    values = [*VALUES, *(rng.uniform(-1e9, 1e9) for _ in range(2000)),
              *(10.0 ** rng.uniform(-30, 30) for _ in range(2000)),
              *(float(rng.randrange(10 ** rng.randrange(1, 20))) for _ in range(2000))]
    for value in values:
        assert go_float(value) == floatToGoString(value), value  # type: ignore[no-untyped-call]


def test_odd_values_labels_and_help_are_written_as_prometheus_client_writes_them() -> None:
    def build(gauge: Any, counter: Any, histogram: Any) -> list[Any]:
        out = [gauge("plain", "no labels", value=7),
               counter("events_total", "given with _total", value=3),
               counter("sends", 'help with a back\\slash and\na newline and "quotes"', value=0)]
        odd = gauge("odd", "odd label values", labels=["b_label", "a_label", "zeta"])
        for i, text in enumerate(ODD):
            odd.add_metric([text, ODD[-1 - i], str(i)], VALUES[i])
        out.append(odd)
        numbers = counter("numbers", "every kind of number", labels=["i"])
        for i, value in enumerate(VALUES):
            numbers.add_metric([str(i)], value)
        out.append(numbers)
        out.append(gauge("empty", "a family without samples", labels=["x"]))
        out.append(histogram("seconds", "a histogram", buckets=[
            (go_float(0.0005), 1), (go_float(1e7), 4), ("+Inf", 9)], sum_value=12.25))
        return out

    ours = exposition(build(GaugeFamily, CounterFamily, HistogramFamily))
    assert ours == theirs(build(GaugeMetricFamily, CounterMetricFamily, HistogramMetricFamily))
    parsed = {(s.name, tuple(sorted(s.labels.items()))): s.value
              for family in text_string_to_metric_families(ours.decode())
              for s in family.samples}
    for i, text in enumerate(ODD):
        got = parsed[("odd", (("a_label", ODD[-1 - i]), ("b_label", text), ("zeta", str(i))))]
        assert got == VALUES[i] or (math.isnan(got) and math.isnan(VALUES[i]))
    assert parsed[("numbers_total", (("i", "22"),))] == 2**40


def test_invalid_names_are_refused() -> None:
    with pytest.raises(ValueError):
        GaugeFamily("2bad", "x", value=1)
    with pytest.raises(ValueError):
        GaugeFamily("ok", "x", labels=["bad-label"])
    with pytest.raises(ValueError):
        GaugeFamily("ok", "x", labels=["a"], value=1)


def _faulted_host() -> tuple[Monitor, PollPicture, list[Any]]:
    """A DGX H100 sim host with faults of several families, polled three times by the
    daemon's monitor; odd text in a device's board id and firmware version."""
    root = simtrees.take("dgx-h100")
    config = load_config(str(root / "nichealthd.toml"))
    os.makedirs(config.state_dir, exist_ok=True)
    monitor = Monitor(config, load_topology(config))
    monitor.start()
    board = next(root.rglob("infiniband/mlx5_2/board_id"))
    board.write_text('MT_"0000"\\0970\n')  # sysfs text is read as Latin-1
    next(root.rglob("infiniband/mlx5_6/fw_ver")).write_text('28.39.1000 "beta"\\x\n')
    outcomes = [monitor.poll()]
    mutate.set_port(root, "mlx5_10", 1, state="DOWN", phys_state="Disabled")
    mutate.counter(root, "mlx5_9", 1, "symbol_error", set_to=65535)
    mutate.counter(root, "mlx5_3", 1, "link_downed", add=4)
    mutate.flap(root, "mlx5_5", 1, cycles=3, down=0, sleep=lambda _: None)
    outcomes += [monitor.poll(), monitor.poll()]
    last = outcomes[-1]
    return monitor, PollPicture(last.snapshot, last.result, monitor.state, monitor.config), \
        outcomes


def test_a_faulted_host_is_written_as_prometheus_client_writes_it(
        monkeypatch: pytest.MonkeyPatch) -> None:
    monitor, picture, outcomes = _faulted_host()
    try:
        when = picture.snapshot.taken_at
        stats = PollStats(3, 1.7e9, 12.5, when, "reading: mlx5_7 \"gone\"",
                          {"read": 2, "commit": 1}, 17, 4, {"pcie_aer": "raised\nValueError"},
                          {"link_state": when, "link_counters": when})
        context = ServiceContext(
            journal=Journal("/nonexistent"), config_path="/nonexistent/nichealthd.toml",
            config=lambda: monitor.config, view=lambda: picture, stats=lambda: stats,
            status=lambda: {"topology_source": "nvidia-smi", "topology": 'ünï "b"\\c\n✓'},
            reload_error=str, request_reload=lambda: None,
            connector=lambda: ConnectorStatus(state="odd \"state\""),
            slurm=lambda: SlurmStatus(mode="on", actions={("drain", "ok"): 2},
                                      holds_drain=True))
        service = metrics.MetricsService(context)
        for i, outcome in enumerate(outcomes):
            outcome.duration = (0.0007, 0.3, 42.0)[i]
            service.on_poll(outcome)
        ours, prometheus = both(monkeypatch, service.families)
    finally:
        monitor.close()
    assert ours == prometheus
    text = ours.decode()
    for expected in ('nichealthd_port_health{device="mlx5_10",port="1"} 2.0',
                     'nichealthd_saturated{counter="symbol_error",device="mlx5_9"',
                     'nichealthd_port_link_flaps{device="mlx5_5",port="1"} 3.0',
                     'nichealthd_connector_state{state="odd \\"state\\""} 1.0',
                     'board_id="MT_\\"0000\\"\\\\0970"',
                     'topology="ünï \\"b\\"\\\\c\\n✓"',
                     'fw_ver="28.39.1000 \\"beta\\"\\\\x"',
                     'nichealthd_poll_duration_seconds_bucket{le="0.001"} 1.0',
                     'nichealthd_poll_duration_seconds_bucket{le="+Inf"} 3.0'):
        assert expected in text, expected
    check(text)


def _frozen_proc(tmp_path: Path) -> Path:
    """This process's stat, limits and descriptors, and the boot time, copied once: the two
    collectors read the same numbers."""
    proc = tmp_path / "proc"
    (proc / "self" / "fd").mkdir(parents=True)
    shutil.copy("/proc/stat", proc / "stat")
    for name in ("stat", "limits"):
        (proc / "self" / name).write_bytes(Path("/proc/self", name).read_bytes())
    for fd in os.listdir("/proc/self/fd"):
        (proc / "self" / "fd" / fd).touch()
    return proc


def test_process_series_are_process_collectors(tmp_path: Path) -> None:
    proc = _frozen_proc(tmp_path)
    registry = CollectorRegistry(auto_describe=False)
    ProcessCollector(proc=str(proc), registry=registry)
    assert exposition(ProcessFamilies(str(proc)).families()) == generate_latest(registry)
    live = ProcessFamilies().families()
    assert [f.name for f in live] == ["process_virtual_memory_bytes",
                                      "process_resident_memory_bytes",
                                      "process_start_time_seconds", "process_cpu_seconds",
                                      "process_open_fds", "process_max_fds"]
    (proc / "self" / "stat").unlink()
    assert [f.name for f in ProcessFamilies(str(proc)).families()] == \
        ["process_open_fds", "process_max_fds"]  # what cannot be read has no series
    assert ProcessFamilies(str(tmp_path / "none")).families() == []

