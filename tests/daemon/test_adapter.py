"""Adapter facts: the real daemon (``--once``, one adapter read per run) on a sim tree."""

from __future__ import annotations

from typing import Any, Callable

from nichealthd.sim import adapter, tree

from .conftest import SimHost

CHARDEV = "InfiniBandCharDeviceCheck"


def compute(host: SimHost) -> list[dict[str, Any]]:
    return [d for d in host.manifest["devices"] if d["role"] == "compute"]


def with_entities(events: list[dict[str, Any]], check: str) -> list[dict[str, Any]]:
    return [e for e in events if e["checkName"] == check and e["entitiesImpacted"]]


def test_a_umad_entry_removed_for_three_reads_is_one_fatal_event(
        sim_host: Callable[..., SimHost]) -> None:
    host = sim_host()
    first = host.once()
    assert first.returncode == 0, first.stderr
    assert not with_entities(first.events, CHARDEV)
    dev = next(d for d in compute(host) if d["link_layer"] == "InfiniBand")
    adapter.remove_chardev(host.root, dev["name"], "umad", 1)
    runs = [host.once() for _ in range(4)]
    got = [e for run in runs for e in with_entities(run.events, CHARDEV)]
    assert len(got) == 1, got
    event = got[0]
    assert with_entities(runs[2].events, CHARDEV) == got  # the third read
    assert event["isFatal"] and event["recommendedAction"] == "REPLACE_VM"
    assert event["errorCode"] == ["umad"]
    assert {"entityType": "NIC", "entityValue": dev["name"]} in event["entitiesImpacted"]
    adapter.restore_chardev(host.root, dev["name"], "umad", 1)
    back = with_entities(host.once().events, CHARDEV)
    assert len(back) == 1 and back[0]["isHealthy"]


def test_the_class_directory_removed_entirely_is_no_event(
        sim_host: Callable[..., SimHost]) -> None:
    host = sim_host()
    host.once()
    adapter.remove_class(host.root, "mad")
    adapter.remove_class(host.root, "verbs")
    for _ in range(5):
        run = host.once()
        assert run.returncode == 0, run.stderr
        assert not with_entities(run.events, CHARDEV)
        assert not run.fatal()


def test_a_mellanox_pf_without_infiniband_entry_is_one_fatal_event_with_its_address(
        sim_host: Callable[..., SimHost]) -> None:
    """Unbound before the first start (never a known device), its siblings registered: with
    no driver grace, the three-read floor decides (the grace itself: test_lost_nic_boot)."""
    host = sim_host()
    with host.config.open("a") as config:
        config.write('driverReloadGrace = "0s"\n')
    dev = compute(host)[0]
    address = adapter.unbind(host.root, dev["name"])
    runs = [host.once() for _ in range(5)]
    assert all(r.returncode == 0 for r in runs), runs[0].stderr
    got = [e for r in runs for e in r.by_code("nic_unregistered")]
    assert len(got) == 1, got
    assert got[0]["isFatal"] and got[0]["recommendedAction"] == "REPLACE_VM"
    assert got[0]["entitiesImpacted"] == [{"entityType": "PCI", "entityValue": address}]
    assert address in got[0]["message"]
    assert not [e for r in runs for e in r.fatal() if e is not got[0] and e != got[0]]
    adapter.bind(host.root, dev["name"])
    back = host.once().by_code("nic_unregistered")
    assert len(back) == 1 and back[0]["isHealthy"]
    assert tree.load(host.root).get(adapter.UNBOUND) == {}


def test_one_card_of_eight_on_another_firmware_is_one_event_all_equal_none(
        sim_host: Callable[..., SimHost]) -> None:
    host = sim_host()
    cards = [d for d in compute(host) if d["link_layer"] == "InfiniBand"]
    assert len(cards) == 8
    equal = [host.once() for _ in range(2)]
    assert not [e for r in equal for e in r.by_code("firmware_drift")]
    adapter.set_firmware(host.root, cards[5]["name"], "28.99.9999")
    runs = [host.once() for _ in range(2)]
    got = [e for r in runs for e in r.by_code("firmware_drift")]
    assert len(got) == 1, got
    assert not got[0]["isFatal"] and "28.99.9999" in got[0]["message"]
    assert got[0]["entitiesImpacted"] == [{"entityType": "NIC",
                                           "entityValue": cards[5]["name"]}]
    assert "firmware changed" in runs[0].stderr


def test_an_active_port_with_its_netdev_down_is_a_degradation_unless_admin_down(
        sim_host: Callable[..., SimHost]) -> None:
    from nichealthd.sim import mutate

    host = sim_host()
    cards = [d for d in compute(host) if d["link_layer"] == "InfiniBand"]
    host.once()
    mutate.set_port(host.root, cards[0]["name"], 1, operstate="down")
    adapter.link_admin(host.root, cards[1]["name"], up=False)
    runs = [host.once() for _ in range(3)]
    got = [e for r in runs for e in r.by_code("netdev_down")]
    assert len(got) == 1, got
    assert {"entityType": "NIC", "entityValue": cards[0]["name"]} in got[0]["entitiesImpacted"]
    assert not got[0]["isFatal"]
    mutate.set_port(host.root, cards[0]["name"], 1, operstate="up")
    back = host.once().by_code("netdev_down")
    assert len(back) == 1 and back[0]["isHealthy"]
