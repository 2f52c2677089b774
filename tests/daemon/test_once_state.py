"""Port state and roles, end to end on the platform profiles of the spec."""

from __future__ import annotations

import re
from typing import Callable

import pytest

from nichealthd.sim import mutate, pcibus

from .conftest import SimHost

PROFILES = ["dgx-h100", "oci-h100", "a100-roce", "l40s-oci", "l40s-onprem", "gb200-nvl4",
            "h100-34", "l40-dualport", "l40-dualport-3", "l40s-onprem-bond", "l40s-onprem-vlan",
            "l40s-onprem-ipv6", "l40s-onprem-multiroute"]


@pytest.mark.parametrize("profile", PROFILES)
def test_classification_matches_the_spec_tables(sim_host: Callable[..., SimHost],
                                                profile: str) -> None:
    host = sim_host(profile)
    run = host.once("--log-level", "info")
    assert run.returncode == 0, run.stderr
    logged = dict(re.findall(r"NIC (\S+): (\w+) \(", run.stderr))
    assert logged == host.manifest["roles"]
    # Nothing unhealthy is reported on a healthy host at first sight.
    assert run.fatal() == []


@pytest.mark.parametrize("profile", ["l40s-onprem-bond", "l40s-onprem-vlan",
                                     "l40s-onprem-ipv6", "l40s-onprem-multiroute"])
def test_management_nic_behind_bond_vlan_or_ipv6_route_is_not_monitored(
        sim_host: Callable[..., SimHost], profile: str) -> None:
    """Without following the route it would be a storage NIC (NODE to GPUs);
    with several default routes, every one of them counts."""
    host = sim_host(profile)
    first = host.once("--log-level", "info")
    assert first.returncode == 0, first.stderr
    management = sorted(d for d, r in host.manifest["roles"].items() if r == "management")
    for name in management:
        assert f"NIC {name}: management (carries the host's default route)" in first.stderr
        assert not [e for e in first.events if ["NIC", name] in
                    [[x["entityType"], x["entityValue"]] for x in e["entitiesImpacted"]]]
        mutate.counter(host.root, name, 1, "link_downed", add=1)
        mutate.set_port(host.root, name, 1, state="DOWN", phys_state="Disabled")
    assert host.once().events == []


def test_vfs_down_never_produce_events(sim_host: Callable[..., SimHost]) -> None:
    host = sim_host("h100-34")
    events = host.once().events
    vfs = [d for d, r in host.manifest["roles"].items() if r == "vf"]
    assert len(vfs) == 16
    assert not [e for e in events for vf in vfs if f"{vf} " in e["message"] + " "]


def test_uncabled_second_ports_then_a_card_drop(sim_host: Callable[..., SimHost]) -> None:
    host = sim_host("l40-dualport")
    assert [e for e in host.once().events if not e["isHealthy"]] == []
    mutate.uncable(host.root, "mlx5_0", 1)
    run = host.once()
    cards = run.by_code("card_active_ports")
    assert len(cards) == 1 and cards[0]["isFatal"]
    assert re.fullmatch(r"Card \S+ \(compute\) has 0 active ports, expected 1 - suspect: "
                        r"unknown \(card_active_ports: the facts do not decide\)",
                        cards[0]["message"])


def test_runtime_down_recovery_and_intermediate_states(
        sim_host: Callable[..., SimHost]) -> None:
    host = sim_host()
    host.once()
    mutate.set_port(host.root, "mlx5_0", 1, state="DOWN", phys_state="Disabled")
    down = host.once()
    fatal_ib = [e for e in down.events
                if e["isFatal"] and e["checkName"] == "InfiniBandStateCheck"]
    assert [e["message"] for e in fatal_ib] == [
        "Port mlx5_0 port 1: state DOWN, phys_state Disabled - no connectivity"
        " - suspect: unknown (port disabled)"]
    mutate.set_port(host.root, "mlx5_0", 1, state="DOWN", phys_state="Polling")
    assert host.once().events == []
    mutate.set_port(host.root, "mlx5_0", 1, state="ACTIVE", phys_state="LinkUp")
    up = host.once()
    assert [(e["isHealthy"], e["message"]) for e in up.events] == [
        (True, "Port mlx5_0 port 1: healthy (ACTIVE, LinkUp)")]


def test_device_off_the_bus_is_fatal_on_the_third_poll(sim_host: Callable[..., SimHost]
                                                       ) -> None:
    host = sim_host()
    host.once()
    pcibus.pci_remove(host.root, "mlx5_3")
    assert host.once().by_code("device_missing") == []
    assert host.once().by_code("device_missing") == []
    gone = host.once().by_code("device_missing")
    assert [(e["isFatal"], e["message"]) for e in gone] == [
        (True, "NIC mlx5_3 disappeared from /sys/class/infiniband/ - hardware failure - "
               "suspect: nic (device_missing is the adapter's own condition)")]
    pcibus.pci_rescan(host.root, "mlx5_3")
    back = host.once().by_code("device_missing")
    assert [e["isHealthy"] for e in back] == [True]


def test_transient_read_failures_are_never_events(sim_host: Callable[..., SimHost]) -> None:
    host = sim_host()
    host.once()
    link_layer = "sys/class/infiniband/mlx5_0/ports/1/link_layer"
    mutate.unreadable(host.root, link_layer)
    assert host.once().events == []
    mutate.readable(host.root, link_layer)
    mutate.hide_class(host.root)  # a briefly absent /sys/class/infiniband
    for _ in range(4):
        assert host.once().events == []
    mutate.unhide_class(host.root)
    assert host.once().events == []


def test_reboot_reports_healthy_ports_and_only_proven_anomalies(
        sim_host: Callable[..., SimHost]) -> None:
    host = sim_host()
    host.once()
    mutate.reboot(host.root)
    mutate.set_port(host.root, "mlx5_5", 1, state="DOWN", phys_state="Disabled")
    run = host.once()
    healthy_ports = [e for e in run.by_code("port_state") if e["isHealthy"]]
    assert len(healthy_ports) == 11  # 12 monitored ports, one of them down
    fatal = sorted(e["message"] for e in run.fatal())
    assert ("Port mlx5_5 port 1: state DOWN, phys_state Disabled - no connectivity"
            " - suspect: unknown (port disabled)") in fatal
    assert all("mlx5_5" in m or "Card" in m for m in fatal)


def test_a_first_start_clears_nothing_of_earlier_boots_a_lost_state_does(
        sim_host: Callable[..., SimHost]) -> None:
    """A host where nichealthd never ran (no state file, an empty event journal) has no
    conditions of earlier boots: the first start sends the ports' baselines and no check-wide
    clear. A state file lost later, with the journal saying events were sent, clears them."""
    host = sim_host()
    first = host.once()
    assert first.returncode == 0, first.stderr
    assert [e["message"] for e in first.events if not e["entitiesImpacted"]] == []
    assert any("healthy (ACTIVE, LinkUp)" in e["message"] for e in first.events)
    host.state_file.unlink()
    again = host.once()
    clears = [e for e in again.events if not e["entitiesImpacted"]]
    assert clears and all("clearing conditions of earlier boots" in e["message"]
                          for e in clears), clears
