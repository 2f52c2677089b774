"""#18: the sysfs reader on a simulated p5: EFA discovery, netdev pairing, carrier, counters."""

from __future__ import annotations

import errno
import logging
import os
from pathlib import Path

import pytest

from nichealthd.core.config import DEFAULT_COUNTERS, DEFAULT_EFA_COUNTERS
from nichealthd.core.model import ABSENT
from nichealthd.sim import mutate, tree
from nichealthd.sources.sysfs import AttributeFiles

from .builders import at
from .conftest import reader_for

DEV = "rdmap71s0"


@pytest.fixture
def p5(tmp_path: Path) -> Path:
    root = tmp_path / "p5"
    tree.create(root, "p5")
    return root


def test_efa_devices_their_netdev_partner_and_their_own_counters(p5: Path) -> None:
    snapshot = reader_for(p5).observe(at(0))
    assert len(snapshot.devices) == 32
    device = snapshot.device(DEV)
    assert device is not None and device.adapter == "efa" and device.driver == "efa"
    assert device.netdevs == ()  # the ENA's interface is the port's, not the device's
    (port,) = device.ports
    assert (port.link_layer, port.netdev, port.operstate, port.carrier) == (
        "Unknown", "enp71s1", "up", 1)
    assert set(port.counters) == {c.name for c in DEFAULT_EFA_COUNTERS}
    assert not {c.name for c in DEFAULT_COUNTERS} & set(port.counters)
    assert port.counter_paths["no_completion_cmds"].endswith(f"{DEV}/hw_counters/"
                                                             "no_completion_cmds")
    assert port.counter_paths["rx_drops"].endswith(f"{DEV}/ports/1/hw_counters/rx_drops")
    assert all(kind.width == 64 and not kind.saturating for kind in port.counter_kinds.values())


def test_efa_only_cards_have_no_netdev(tmp_path: Path) -> None:
    root = tmp_path / "p5o"
    tree.create(root, "p5-efa-only")
    snapshot = reader_for(root).observe(at(0))
    with_netdev = [d.name for d in snapshot.devices if d.ports[0].netdev]
    assert with_netdev == ["rdmap67s0"]


def test_absent_counters_are_absent_not_zero(p5: Path) -> None:
    for dev in tree.load(p5)["devices"]:  # an older Nitro: none of them has the group
        for name in ("retrans_timeout_events", "unresponsive_remote_events",
                     "impaired_remote_conn_events"):
            os.unlink(mutate.counter_path(p5, dev["name"], 1, name))
    reader = reader_for(p5)
    port = reader.observe(at(0)).device(DEV).ports[0]  # type: ignore[union-attr]
    assert port.counters["retrans_timeout_events"] is ABSENT
    available, missing = reader.counter_availability()
    # Named once, in the start log's list of counters found nowhere.
    assert "rx_drops" in available and "retrans_timeout_events" in missing


def test_carrier_einval_on_an_admin_down_interface_is_no_signal(p5: Path, caplog) -> None:  # type: ignore[no-untyped-def]
    mutate.set_port(p5, DEV, 1, operstate="down")
    paths: dict[int, str] = {}

    def opener(path: str, flags: int) -> int:
        fd = os.open(path, flags)
        paths[fd] = path
        return fd

    def preader(fd: int, size: int, offset: int) -> bytes:
        if paths[fd].endswith("enp71s1/carrier"):
            raise OSError(errno.EINVAL, "Invalid argument")
        return os.pread(fd, size, offset)

    reader = reader_for(p5, AttributeFiles(opener, preader))
    with caplog.at_level(logging.WARNING):
        for second in range(3):
            port = reader.observe(at(second)).device(DEV).ports[0]  # type: ignore[union-attr]
            assert (port.operstate, port.carrier) == ("down", None)
    assert not [r for r in caplog.records if "carrier" in r.getMessage()]
    assert not reader.einval  # not remembered: the interface may come up again
    mutate.carrier(p5, DEV, 1, 0)
