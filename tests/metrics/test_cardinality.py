"""What a fleet stores per host: the series of a healthy 34-device host (bench/'s target
host), against node_exporter's infiniband collector on the same tree (nichealthd(8), METRICS).

Before the bound, this host exported 2,362 series (442 ``nichealthd_threshold_breached``,
442 ``nichealthd_port_value``, 272 ``nichealthd_saturated``, 408 AER, 306 PCIe link, ...);
node_exporter exports 850 ``node_infiniband_*`` series for it (node_exporter 1.5.0, Debian
12; bench/results-2026-11-25.txt). Flags are series only while true, the facts node_exporter
exports are left to it, and the PCIe speed and width are the NIC's own link's.

node_exporter is the Debian package ``prometheus-node-exporter`` (.ci/metrics-deps.sh, with
promtool): its part is skipped without it unless NICHEALTHD_REQUIRE_PROMTOOL is set.
"""

from __future__ import annotations

import os
from collections import Counter
from pathlib import Path
from typing import Callable, Iterator

import pytest

from nichealthd.sim import mutate
from nichealthd.surfaces.metrics import NODE_EXPORTER_COUNTERS

from .conftest import (
    RunningDaemon,
    Samples,
    get,
    node_exporter,
    node_exporter_binary,
    parse,
    series,
)

Start = Callable[[Path], RunningDaemon]
DEVICES = 34
NODE_EXPORTER_SERIES = 850  # node_infiniband_* of this host, node_exporter 1.5.0
# The series that grow with the host, for 34 single-port devices: 5 counters node_exporter
# does not export per port (4 hw_counters and carrier_changes), 3 AER totals of the NIC's
# function and 3 of the port above it, 2 temperatures, the NIC's own PCIe link.
HOST_SERIES = {
    "nichealthd_port_health": 34,
    "nichealthd_device_info": 34,
    "nichealthd_port_value": 170,
    "nichealthd_port_link_flaps": 34,
    "nichealthd_port_state_blips_total": 34,
    "nichealthd_pcie_aer_errors_total": 204,
    "nichealthd_pcie_aer_rootport_errors_total": 24,
    "nichealthd_pcie_link_speed_gts": 34,
    "nichealthd_pcie_link_width": 34,
    "nichealthd_nic_temperature_celsius": 34,
    "nichealthd_nic_temperature_crit_celsius": 34,
}
DAEMON_SERIES_MAX = 100  # the daemon's own (polls, events, connector, families, process_*)


def required_node_exporter() -> str:
    found = node_exporter_binary()
    if found is None:
        if os.environ.get("NICHEALTHD_REQUIRE_PROMTOOL"):
            pytest.fail("prometheus-node-exporter is not installed but "
                        "NICHEALTHD_REQUIRE_PROMTOOL is set (.ci/metrics-deps.sh)")
        pytest.skip("prometheus-node-exporter not installed (.ci/metrics-deps.sh)")
    return found


@pytest.fixture
def host(sim: Callable[..., Path]) -> Path:
    return sim("synthetic", devices=DEVICES)


@pytest.fixture
def steady(host: Path, daemon: Start) -> RunningDaemon:
    """The daemon on the host once every family, the slow PCI ones too, has judged."""
    running = daemon(host)
    running.wait_for(lambda: all(series(running.scrape(), name) for name in HOST_SERIES),
                     what="every family's series")
    running.next_polls(2)
    return running


@pytest.fixture
def node_exporter_scrape(host: Path) -> Iterator[Samples]:
    """One scrape of node_exporter's infiniband collector on the host."""
    with node_exporter(host, required_node_exporter()) as address:
        yield {k: v for k, v in parse(get(f"http://{address}/metrics")[1]).items()
               if k[0].startswith("node_infiniband_")}


def by_name(samples: Samples) -> Counter[str]:
    """Series per metric (histogram buckets under their own sample names)."""
    return Counter(name for name, _ in samples)


def test_a_healthy_34_device_host_exports_at_most_node_exporters_series(
        steady: RunningDaemon) -> None:
    counts = by_name(steady.scrape())
    host = {name: counts[name] for name in HOST_SERIES}
    assert host == HOST_SERIES, f"series that grow with the host changed: {host}"
    daemon = sum(n for name, n in counts.items() if name not in HOST_SERIES)
    assert daemon <= DAEMON_SERIES_MAX, counts
    total = sum(counts.values())
    assert total == sum(HOST_SERIES.values()) + daemon
    assert total <= NODE_EXPORTER_SERIES, counts
    # No flag series on a healthy host: each is a series only while it is true.
    for flag in ("threshold_breached", "saturated", "pcie_aer_breached",
                 "pcie_aer_rootport_breached", "pcie_link_degraded", "nic_temperature_alert",
                 "firmware_drift", "port_rate_degraded", "char_device_missing",
                 "pci_function_unregistered"):
        assert counts["nichealthd_" + flag] == 0, flag


def test_a_breach_adds_only_its_flag(
        host: Path, steady: RunningDaemon) -> None:
    before = sum(by_name(steady.scrape()).values())
    mutate.counter(host, "mlx5_7", 1, "link_downed", add=1)
    steady.wait_for(lambda: bool(series(steady.scrape(), "nichealthd_threshold_breached")),
                    what="the breach flag")
    samples = steady.scrape()
    assert series(samples, "nichealthd_threshold_breached") == [
        {"device": "mlx5_7", "port": "1", "counter": "link_downed", "fatal": "true"}]
    # The flag and the port's suspect are the new series beside the events' counter of the
    # new event.
    assert series(samples, "nichealthd_port_suspect") == [
        {"device": "mlx5_7", "port": "1", "suspect": "unknown", "health": "fatal"}]
    assert sum(by_name(samples).values()) - before <= 3


def test_node_exporter_counts_the_same_host_and_has_the_counters_left_to_it(
        host: Path, steady: RunningDaemon, node_exporter_scrape: Samples) -> None:
    ours = len(steady.scrape())
    assert len(node_exporter_scrape) == NODE_EXPORTER_SERIES
    assert ours <= len(node_exporter_scrape)
    # Every counter of ports/N/counters/ the host has, whose value nichealthd leaves to
    # node_exporter, is a node_infiniband series of the same device and port.
    counters = next(host.glob("sys/devices/**/infiniband/mlx5_0/ports/1/counters"))
    files = sorted(p.name for p in counters.iterdir() if p.name in NODE_EXPORTER_COUNTERS)
    assert "link_downed" in files and "symbol_error" in files
    for file in files:
        name = "node_infiniband_" + NODE_EXPORTER_COUNTERS[file]
        assert series(node_exporter_scrape, name, device="mlx5_0", port="1"), name
    for name in ("state_id", "physical_state_id", "rate_bytes_per_second"):
        assert series(node_exporter_scrape, "node_infiniband_" + name, device="mlx5_0",
                      port="1")
