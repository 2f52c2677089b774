"""``/metrics`` of a real nichealthd on a sim tree: names, labels, values and promtool."""

from __future__ import annotations

from pathlib import Path
from typing import Callable

import pytest

from nichealthd.sim import mutate

from .conftest import RunningDaemon, count, series, value
from .test_promtool import check, promtool

Start = Callable[[Path], RunningDaemon]


def test_port_health_follows_sysfs(sim: Callable[..., Path], daemon: Start) -> None:
    root = sim("dgx-h100")
    running = daemon(root)
    s = running.scrape()
    port = {"device": "mlx5_0", "port": "1"}
    assert value(s, "nichealthd_port_health", **port) == 0
    assert value(s, "nichealthd_health") == 0
    # The port's state, physical state and rate are node_exporter's (node_infiniband_*).
    for name in ("port_state_id", "port_physical_state_id", "port_rate_bytes_per_second"):
        assert not series(s, "nichealthd_" + name)

    mutate.set_port(root, "mlx5_0", 1, state="DOWN", phys_state="Disabled")
    s = running.next_polls()
    assert value(s, "nichealthd_port_health", **port) == 2
    assert value(s, "nichealthd_health") == 2
    assert count(s, "nichealthd_events_total", check="InfiniBandStateCheck", fatal="true",
                  healthy="false") >= 1


def test_device_info_and_daemon_series(sim: Callable[..., Path], daemon: Start) -> None:
    s = daemon(sim("dgx-h100")).scrape()
    infos = series(s, "nichealthd_device_info", device="mlx5_0")
    assert infos == [{"device": "mlx5_0", "hca_type": "MT4129", "fw_ver": "28.41.1000",
                      "board_id": "MT_0000000838", "role": "compute",
                      "pci_address": "0000:18:00.0", "numa_node": "0", "netdev": "ibp24s0",
                      "adapter": "mlx5"}]
    assert {i["role"] for i in series(s, "nichealthd_device_info")} >= {
        "compute", "storage", "management", "vf"}
    assert value(s, "nichealthd_polls_total") >= 1
    assert value(s, "nichealthd_poll_duration_seconds_count") >= 1
    assert value(s, "nichealthd_poll_duration_seconds_bucket", le="+Inf") >= 1
    # The first poll after a fresh start sends healthy baselines.
    assert value(s, "nichealthd_events_total", check="InfiniBandStateCheck", fatal="false",
                 healthy="true") >= 8
    assert value(s, "nichealthd_connector_up") == 0
    # The sim's config disables forwarding: said so, not mistaken for a connector that is down.
    assert value(s, "nichealthd_connector_state", state="disabled") == 1
    assert value(s, "nichealthd_connector_state", state="down") == 0
    for name in ("connector_sends_total", "connector_errors_total", "outbox_depth",
                 "dead_letters", "unreadable_reads_total", "einval_ignored_files",
                 "commit_errors_total"):
        assert value(s, "nichealthd_" + name) == 0, name
    (build,) = series(s, "nichealthd_build_info")
    assert build["topology_source"] == "metadata"  # the sim writes NVSentinel's file
    assert build["topology"] == ("topology from metadata: 8 GPUs on 2 NUMA nodes; 8 compute, "
                                 "4 storage, 1 management NIC")
    # Only monitored ports report health; the management NIC's port does not.
    assert not series(s, "nichealthd_port_health", device="mlx5_12", port="1")
    assert series(s, "nichealthd_device_info", device="mlx5_12", role="management")


# port_xmit_wait is off by default (nichealthd.toml(5)): switched on where a test needs it.
XMIT_WAIT_ON = '\n[[counterDetection.counters]]\nname = "port_xmit_wait"\nenabled = true\n'


def test_counter_value_follows_the_file(sim: Callable[..., Path], daemon: Start) -> None:
    root = sim("dgx-h100")
    with (root / "nichealthd.toml").open("a") as config:
        config.write(XMIT_WAIT_ON)
    running = daemon(root)
    labels = {"device": "mlx5_0", "port": "1", "counter": "out_of_sequence",
              "file": "out_of_sequence"}
    assert value(running.scrape(), "nichealthd_port_value", **labels) == 0
    mutate.counter(root, "mlx5_0", 1, "out_of_sequence", add=1234)
    s = running.next_polls()
    assert value(s, "nichealthd_port_value", **labels) == 1234
    # The files of ports/N/counters/ are node_exporter's (node_infiniband_*): no value here.
    for name in ("port_xmit_wait", "symbol_error", "symbol_error_fatal", "link_downed"):
        assert not series(s, "nichealthd_port_value", counter=name)


def test_fatal_breach_sets_the_flag(sim: Callable[..., Path], daemon: Start) -> None:
    root = sim("dgx-h100")
    running = daemon(root)
    labels = {"device": "mlx5_0", "port": "1", "counter": "link_downed", "fatal": "true"}
    assert not series(running.scrape(), "nichealthd_threshold_breached")  # only while true
    mutate.counter(root, "mlx5_0", 1, "link_downed", add=1)
    s = running.next_polls()
    assert value(s, "nichealthd_threshold_breached", **labels) == 1
    assert series(s, "nichealthd_threshold_breached") == [labels]
    assert value(s, "nichealthd_health") == 2
    assert value(s, "nichealthd_events_total", check="InfiniBandDegradationCheck",
                 fatal="true", healthy="false") == 1


def test_saturation_is_shown_per_counter_and_degrades_only_for_error_counters(
        sim: Callable[..., Path], daemon: Start) -> None:
    """A saturated traffic counter is a flag, not a degradation."""
    root = sim("dgx-h100")
    with (root / "nichealthd.toml").open("a") as config:
        config.write(XMIT_WAIT_ON)
    # A long-running busy host: the congestion counter has reached its limit (a jump there
    # within one poll would be a rate breach of its own).
    mutate.counter(root, "mlx5_0", 1, "port_xmit_wait", set_to=2**32 - 1)
    running = daemon(root)
    wait = {"device": "mlx5_0", "port": "1", "counter": "port_xmit_wait",
            "file": "port_xmit_wait"}
    s = running.scrape()
    assert value(s, "nichealthd_saturated", **wait) == 1
    assert series(s, "nichealthd_saturated") == [wait]  # a flag only while true
    assert value(s, "nichealthd_health") == 0
    assert count(s, "nichealthd_events_total", check="InfiniBandDegradationCheck",
                  fatal="false", healthy="false") == 0
    mutate.counter(root, "mlx5_0", 1, "symbol_error", set_to=65535)
    s = running.next_polls()
    for name in ("symbol_error", "symbol_error_fatal"):  # one file, shown on both entries
        assert value(s, "nichealthd_saturated", device="mlx5_0", port="1", counter=name,
                     file="symbol_error") == 1
    assert value(s, "nichealthd_health") == 1


def test_missing_counter_file_gives_no_series(sim: Callable[..., Path], daemon: Start) -> None:
    root = sim("dgx-h100")
    path = mutate.counter_path(root, "mlx5_0", 1, "out_of_sequence")
    mutate.remove_file(root, path.relative_to(root))
    s = daemon(root).scrape()
    gone = {"device": "mlx5_0", "port": "1", "counter": "out_of_sequence"}
    assert series(s, "nichealthd_port_value", **gone) == []
    assert series(s, "nichealthd_threshold_breached", **gone) == []
    assert value(s, "nichealthd_port_value", device="mlx5_3", port="1",
                 counter="out_of_sequence", file="out_of_sequence") == 0


@pytest.mark.promtool
def test_output_passes_promtool(sim: Callable[..., Path], daemon: Start) -> None:
    """The plain host (every family faulted: test_promtool.py)."""
    promtool()
    root = sim("dgx-h100")
    running = daemon(root)
    mutate.counter(root, "mlx5_0", 1, "link_downed", add=1)
    running.next_polls()
    check(running.text())


def test_efa_devices_are_named_by_their_adapter(sim: Callable[..., Path], daemon: Start
                                                 ) -> None:
    """The device info series names the adapter family; EFA counters are series."""
    s = daemon(sim("p5")).scrape()
    infos = series(s, "nichealthd_device_info", device="rdmap79s0")
    assert [(i["adapter"], i["role"], i["hca_type"]) for i in infos] == [("efa", "compute", "")]
    assert {i["adapter"] for i in series(s, "nichealthd_device_info")} == {"efa"}

