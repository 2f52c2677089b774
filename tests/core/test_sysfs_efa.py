"""The sysfs reader on simulated AWS hosts: EFA discovery, netdev pairing, carrier,
counters (p4d, whose real tree puts each EFA's ENA on its root bus; p5 and p6-b200, whose
real trees put every function on a bus of its own, paired by the MAC of the EFA's GID)."""

from __future__ import annotations

import errno
import logging
import os
from pathlib import Path

import pytest

from nichealthd.core.config import DEFAULT_COUNTERS, DEFAULT_EFA_COUNTERS
from nichealthd.core.model import ABSENT
from nichealthd.sim import mutate, tree
from nichealthd.sources.attribute import AttributeFiles
from nichealthd.sources.sysfs import mac_of_link_local_gid

from .. import simtrees
from .builders import at
from .conftest import reader_for

DEV = "rdmap32s27"


@pytest.fixture
def p4d() -> Path:
    root = simtrees.take("p4d")
    return root


def test_efa_devices_their_netdev_partner_and_their_own_counters(p4d: Path) -> None:
    snapshot = reader_for(p4d).observe(at(0))
    assert len(snapshot.devices) == 4
    device = snapshot.device(DEV)
    assert device is not None and device.adapter == "efa" and device.driver == "efa"
    assert device.netdevs == ()  # the ENA's interface is the port's, not the device's
    (port,) = device.ports
    # ens65 is the one netdev of the other Amazon functions on root bus 20 (the ENA at
    # 20:01.0); the GPUs beside them are not Amazon's.
    assert (port.link_layer, port.netdev, port.operstate, port.carrier) == (
        "Unknown", "ens65", "up", 1)
    assert set(port.counters) == {c.name for c in DEFAULT_EFA_COUNTERS}
    assert not {c.name for c in DEFAULT_COUNTERS} & set(port.counters)
    assert port.counter_paths["no_completion_cmds"].endswith(f"{DEV}/hw_counters/"
                                                             "no_completion_cmds")
    assert port.counter_paths["rx_drops"].endswith(f"{DEV}/ports/1/hw_counters/rx_drops")
    assert all(kind.width == 64 and not kind.saturating for kind in port.counter_kinds.values())


@pytest.mark.parametrize("profile", ["p5", "p5-efa-only", "p6-b200"])
def test_from_p5_on_an_efa_is_paired_by_the_mac_its_gid_was_made_from(profile: str) -> None:
    """The real p5en/p6-b200 trees (and a p5's lstopo) put every ENA behind a downstream
    port of its own, so no ENA shares an EFA's bus; an "EFA with ENA" interface's GID 0 is
    the link-local GID of its ENA's MAC (the real p5 GID fe80::14b0:33ff:fef8:77cd is
    16:b0:33:f8:77:cd's): each EFA gets exactly its own ENA, an efa-only one none."""
    root = simtrees.take(profile)
    snapshot = reader_for(root).observe(at(0))
    efa = {d.name: d for d in snapshot.devices if d.is_efa}
    assert len(efa) in (8, 32)
    wanted = {d["name"]: d["ports"]["1"]["netdev"] for d in tree.load(root)["devices"]
              if d.get("adapter") == "efa"}
    assert {name: d.ports[0].netdev for name, d in efa.items()} == wanted
    assert any(wanted.values()) and (profile != "p5-efa-only" or None in wanted.values())
    assert all(set(d.ports[0].counters) >= {"rx_drops", "no_completion_cmds"}
               for d in efa.values())


@pytest.mark.parametrize("gid,mac", [
    ("fe80:0000:0000:0000:14b0:33ff:fef8:77cd", "16:b0:33:f8:77:cd"),
    ("FE80:0000:0000:0000:0000:00ff:fe00:0001\n", "02:00:00:00:00:01"),
    ("fe80:0000:0000:0000:0a1b:2c3d:4e5f:6071", None),  # no ff:fe: not made from a MAC
    ("fe80:0000:0000:0001:14b0:33ff:fef8:77cd", None),  # not link-local
    ("0000:0000:0000:0000:0000:0000:0000:0000", None),
    ("fe80::14b0:33ff:fef8:77cd", None),  # sysfs writes all eight groups
    ("fe80:0000:0000:0000:14b0:33ff:fef8:77zz", None),
    ("", None),
])
def test_the_mac_of_a_link_local_gid(gid: str, mac: object) -> None:
    assert mac_of_link_local_gid(gid) == mac


def test_a_gid_pairs_nothing_when_no_netdev_or_two_netdevs_have_its_mac() -> None:
    """A MAC matches one netdev exactly or the EFA is watched for presence only: an ENA
    whose address is another (or a copy of it on a second interface) is no partner."""
    root = simtrees.take("p5")
    record = next(d for d in tree.load(root)["devices"]
                  if d.get("adapter") == "efa" and d["ports"]["1"]["netdev"])
    name, netdev = record["name"], record["ports"]["1"]["netdev"]
    address = root / "sys/class/net" / netdev / "address"
    mac = address.read_text()
    other = next(d["ports"]["1"]["netdev"] for d in tree.load(root)["devices"]
                 if d.get("adapter") == "efa" and d["ports"]["1"]["netdev"] not in (None, netdev))
    others = root / "sys/class/net" / other / "address"
    kept = others.read_text()

    def partner() -> object:
        device = reader_for(root).observe(at(0)).device(name)
        assert device is not None
        return device.ports[0].netdev

    assert partner() == netdev
    others.write_text(mac)  # two interfaces with the MAC: ambiguous
    assert partner() is None
    others.write_text(kept)
    address.write_text("02:00:00:00:00:99\n")  # no interface with it
    assert partner() is None


def test_absent_counters_are_absent_not_zero(p4d: Path) -> None:
    for dev in tree.load(p4d)["devices"]:  # an older Nitro: none of them has the group
        for name in ("retrans_timeout_events", "unresponsive_remote_events",
                     "impaired_remote_conn_events"):
            os.unlink(mutate.counter_path(p4d, dev["name"], 1, name))
    reader = reader_for(p4d)
    port = reader.observe(at(0)).device(DEV).ports[0]  # type: ignore[union-attr]
    assert port.counters["retrans_timeout_events"] is ABSENT
    available, missing = reader.counter_availability()
    # Named once, in the start log's list of counters found nowhere.
    assert "rx_drops" in available and "retrans_timeout_events" in missing


def test_carrier_einval_on_an_admin_down_interface_is_no_signal(p4d: Path, caplog) -> None:  # type: ignore[no-untyped-def]
    mutate.set_port(p4d, DEV, 1, operstate="down")
    paths: dict[int, str] = {}

    def opener(path: str, flags: int) -> int:
        fd = os.open(path, flags)
        paths[fd] = path
        return fd

    def preader(fd: int, size: int, offset: int) -> bytes:
        if paths[fd].endswith("ens65/carrier"):
            raise OSError(errno.EINVAL, "Invalid argument")
        return os.pread(fd, size, offset)

    reader = reader_for(p4d, AttributeFiles(opener, preader))
    with caplog.at_level(logging.WARNING):
        for second in range(3):
            port = reader.observe(at(second)).device(DEV).ports[0]  # type: ignore[union-attr]
            assert (port.operstate, port.carrier) == ("down", None)
    assert not [r for r in caplog.records if "carrier" in r.getMessage()]
    assert not reader.einval  # not remembered: the interface may come up again
    mutate.carrier(p4d, DEV, 1, 0)
