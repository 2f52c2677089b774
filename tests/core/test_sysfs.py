"""The sysfs reader on real files of a simulated host: values, markers, errors, rediscovery."""

from __future__ import annotations

import errno
import logging
import os
from pathlib import Path
from typing import Callable, Optional

import pytest

from nichealthd.core.model import ABSENT, CounterKind, HostSnapshot, Unreadable
from nichealthd.sim import mutate, pcibus, subnet
from nichealthd.sources import sysfs
from nichealthd.sources.attribute import AttributeFiles
from nichealthd.sources.config_file import load_config
from nichealthd.sources.sysfs import (
    LIST_SECONDS,
    REDISCOVER_SECONDS,
    SysfsReader,
    counter_kind,
)

from .builders import at
from .conftest import listings, open_readers, reader_for


def port_of(snapshot, name: str = "mlx5_0"):  # type: ignore[no-untyped-def]
    device = snapshot.device(name)
    assert device is not None
    return device.ports[0]


def test_snapshot_of_a_healthy_host(host: Path) -> None:
    snapshot = reader_for(host).observe(at(0))
    assert snapshot.complete and snapshot.boot_id
    device = snapshot.device("mlx5_0")
    assert device is not None
    assert device.pci_address and device.card and device.driver == "mlx5_core"
    assert device.hca_type == "MT4129" and device.numa_node is not None
    port = device.ports[0]
    assert (port.state, port.phys_state, port.link_layer) == ("4: ACTIVE", "5: LinkUp",
                                                             "InfiniBand")
    assert port.counters["link_downed"] == 0 and port.counters["carrier_changes"] == 0
    assert port.counter_paths["carrier_changes"].endswith(f"/{port.netdev}/carrier_changes")
    vfs = [d for d in snapshot.devices if d.is_vf]
    assert vfs and all(d.ports == () for d in vfs)  # VFs are never read


def test_the_reader_says_what_each_counter_is(host: Path) -> None:
    """Width and saturating/wrapping come from the reader, decided by the file's
    directory and name, as data on the snapshot."""
    with open(host / "nichealthd.toml", "a") as config:  # port_xmit_wait is off by default
        config.write('\n[[counterDetection.counters]]\nname = "port_xmit_wait"\n'
                     'enabled = true\n')
    port = port_of(reader_for(host).observe(at(0)))
    kinds = port.counter_kinds
    assert kinds["symbol_error"] == CounterKind("symbol_error", 16, saturating=True)
    assert kinds["symbol_error_fatal"] == kinds["symbol_error"]  # one file, one kind
    assert kinds["link_downed"] == CounterKind("link_downed", 8, saturating=True)
    assert kinds["local_link_integrity_errors"].limit == 15
    assert kinds["port_xmit_wait"].limit == 2**32 - 1
    assert kinds["rnr_nak_retry_err"] == CounterKind("rnr_nak_retry_err", 32)
    assert kinds["rnr_nak_retry_err"].modulus == 2**32
    assert kinds["rnr_nak_retry_err"].limit is None
    assert kinds["carrier_changes"] == CounterKind("carrier_changes")  # 64-bit, plain
    assert (kinds["carrier_changes"].limit, kinds["carrier_changes"].modulus) == (None, None)
    assert set(kinds) == set(port.counter_paths)


def test_a_counter_file_that_vanishes_keeps_its_kind(host: Path) -> None:
    """A saturating counter absent for a poll (rediscovered without it) is still known as
    saturating, so its saturation record is not dropped and its clear is still reported."""
    mutate.remove_file(host, "sys/class/infiniband/mlx5_0/ports/1/counters/symbol_error")
    port = port_of(reader_for(host).observe(at(0)))  # discovered without the file
    assert port.counters["symbol_error"] is ABSENT and "symbol_error" not in port.counter_paths
    assert port.counter_kinds["symbol_error"] == CounterKind("symbol_error", 16, saturating=True)


@pytest.mark.parametrize("path,kind", [
    ("/s/counters/symbol_error", CounterKind("symbol_error", 16, True)),
    ("/s/counters/port_xmit_data", CounterKind("port_xmit_data")),  # 64-bit extended
    ("/s/hw_counters/symbol_error", CounterKind("symbol_error", 32)),
    ("/s/hw_counters/out_of_sequence", CounterKind("out_of_sequence", 32)),
    ("/s/statistics/symbol_error", CounterKind("symbol_error")),
    ("counters/link_downed", CounterKind("link_downed", 8, True)),
])
def test_counter_kind_by_directory_and_name(path: str, kind: CounterKind) -> None:
    assert counter_kind(path) == kind


def test_files_stay_open_and_see_in_place_updates(host: Path) -> None:
    reader = reader_for(host)
    reader.observe(at(0))
    opened = reader.files.open_files
    mutate.counter(host, "mlx5_0", 1, "link_downed", add=3)
    snapshot = reader.observe(at(1))
    assert port_of(snapshot).counters["link_downed"] == 3
    assert reader.files.open_files == opened and reader.discoveries == 1


def test_missing_garbage_and_unreadable_counters(host: Path,
                                                 caplog: pytest.LogCaptureFixture) -> None:
    counters = "sys/class/infiniband/mlx5_0/ports/1/counters"
    mutate.remove_file(host, f"{counters}/link_downed")
    mutate.garbage(host, f"{counters}/symbol_error", "oops")
    mutate.unreadable(host, f"{counters}/port_rcv_errors")
    reader = reader_for(host)
    with caplog.at_level(logging.WARNING):
        first = port_of(reader.observe(at(0)))
        second = port_of(reader.observe(at(1)))
    assert first.counters["link_downed"] is ABSENT
    assert isinstance(first.counters["symbol_error"], Unreadable)
    assert first.counters["symbol_error_fatal"] == first.counters["symbol_error"]
    assert isinstance(first.counters["port_rcv_errors"], Unreadable)
    assert second.counters["symbol_error"] == first.counters["symbol_error"]
    messages = [r.getMessage() for r in caplog.records]
    assert len([m for m in messages if "symbol_error" in m]) == 1  # logged once, not per poll
    assert len([m for m in messages if "port_rcv_errors" in m]) == 1
    assert not [m for m in messages if "link_downed" in m]


def test_einval_files_are_remembered_and_never_read_again(host: Path,
                                                          caplog: pytest.LogCaptureFixture
                                                          ) -> None:
    # A restricted function answers EINVAL on every read and logs a kernel error each time;
    # a regular file cannot do that, so the failing read is injected at the os boundary.
    reads: list[str] = []
    paths: dict[int, str] = {}

    def opener(path: str, flags: int) -> int:
        fd = os.open(path, flags)
        paths[fd] = path
        return fd

    def preader(fd: int, size: int, offset: int) -> bytes:
        reads.append(paths[fd])
        if paths[fd].endswith("hw_counters/rnr_nak_retry_err"):
            raise OSError(errno.EINVAL, "Invalid argument")
        return os.pread(fd, size, offset)

    reader = reader_for(host, AttributeFiles(opener, preader))
    with caplog.at_level(logging.WARNING):
        for second in range(3):
            port = port_of(reader.observe(at(second)))
            assert isinstance(port.counters["rnr_nak_retry_err"], Unreadable)
    failing = [p for p in reads if p.endswith("rnr_nak_retry_err")]
    assert len(failing) == len(set(failing)) == len(reader.einval) == 13  # once each, ever
    assert sum("EINVAL" in r.getMessage() for r in caplog.records) == 13


def test_device_changes_trigger_rediscovery(host: Path) -> None:
    reader = reader_for(host)
    reader.observe(at(0))
    mutate.remove_device(host, "mlx5_3")
    snapshot = reader.observe(at(1))
    assert snapshot.device("mlx5_3") is None and snapshot.complete
    assert reader.discoveries == 2
    mutate.hide_class(host)
    hidden = reader.observe(at(2))
    assert not hidden.complete and hidden.devices == ()
    mutate.unhide_class(host)
    mutate.restore_device(host, "mlx5_3")
    assert reader.observe(at(3)).device("mlx5_3") is not None


def test_the_bus_is_listed_only_when_a_watched_function_has_no_device(host: Path) -> None:
    reader = reader_for(host)
    first = reader.observe(at(0))
    assert first.pci_bus is None  # nothing watched yet
    reader.watched_functions = frozenset(d.pci_address for d in first.devices
                                         if d.pci_address)
    assert reader.observe(at(1)).pci_bus is None  # every watched function has its device
    address = first.device("mlx5_3").pci_address  # type: ignore[union-attr]
    mutate.remove_device(host, "mlx5_3")
    held = reader.observe(at(2))
    assert held.pci_bus is not None and address in held.pci_bus
    mutate.restore_device(host, "mlx5_3")
    pcibus.pci_remove(host, "mlx5_3")
    off = reader.observe(at(3))
    assert off.pci_bus is not None and address not in off.pci_bus
    pcibus.pci_rescan(host, "mlx5_3")
    mutate.remove_device(host, "mlx5_3")
    mutate.remove_file(host, "sys/bus/pci/devices")
    assert reader.observe(at(4)).pci_bus is None  # not listable: no evidence either way


def test_an_infiniband_port_reads_its_fabric_when_it_becomes_active(host: Path) -> None:
    reader = reader_for(host)
    first = reader.observe(at(0))
    assert port_of(first).fabric == "fe80:0000:0000:0000/0x1"
    assert port_of(first, "mlx5_1").fabric is None  # RoCE: no subnet manager
    subnet.stop(host)
    waiting = reader.observe(at(1))
    assert port_of(waiting).state == "2: INIT" and port_of(waiting).fabric is None
    port_dir = "sys/class/infiniband/mlx5_0/ports/1/"
    subnet.start(host)
    mutate.garbage(host, port_dir + "sm_lid", "0x7")  # failed over to the SM at LID 7
    assert port_of(reader.observe(at(2))).fabric == "fe80:0000:0000:0000/0x7"
    mutate.garbage(host, port_dir + "sm_lid", "0x9")
    assert port_of(reader.observe(at(3))).fabric == "fe80:0000:0000:0000/0x7"  # read once
    mutate.garbage(host, port_dir + "gids/0", "garbage")
    mutate.set_port(host, "mlx5_0", 1, state="INIT")
    reader.observe(at(4))
    mutate.set_port(host, "mlx5_0", 1, state="ACTIVE")
    assert port_of(reader.observe(at(5))).fabric is None  # unreadable: no fabric


def test_unreadable_state_file_makes_the_port_unknown(host: Path) -> None:
    mutate.unreadable(host, "sys/class/infiniband/mlx5_0/ports/1/state")
    port = port_of(reader_for(host).observe(at(0)))
    assert port.state is None and not port.readable


def test_steady_state_costs_one_read_per_file(host: Path) -> None:
    reader = reader_for(host)
    reader.observe(at(0))
    before = reader.files.reads
    reader.observe(at(1))
    per_poll = reader.files.reads - before
    snapshot = reader.observe(at(2))
    ports = [p for d in snapshot.devices for p in d.ports]
    roce = [p for p in ports if p.link_layer == "Ethernet"]
    # state, phys_state and rate per port (link_layer was read at discovery), operstate on
    # RoCE, and one read per counter file (the two symbol_error entries share one file;
    # port_xmit_wait is off by default).
    assert per_poll == len(ports) * 3 + len(roce) + len(ports) * 12


class Clock:
    """An injected monotonic clock for the periodic re-discovery."""

    def __init__(self) -> None:
        self.now = 0.0

    def __call__(self) -> float:
        return self.now


def counting_reader(root: Path) -> tuple[SysfsReader, list[str], Clock]:
    """A reader whose every open() of a polled file is recorded, on an injected clock."""
    opened: list[str] = []

    def opener(path: str, flags: int) -> int:
        opened.append(path)
        return os.open(path, flags)

    clock = Clock()
    reader = SysfsReader(load_config(str(root / "nichealthd.toml")),
                         files=AttributeFiles(opener), monotonic=clock)
    open_readers.append(reader)
    return reader, opened, clock


def first_port(snapshot, layer: str):  # type: ignore[no-untyped-def]
    return next(p for d in snapshot.devices for p in d.ports if p.link_layer == layer)


def test_periodic_rediscovery_keeps_open_files_and_fixed_facts(host: Path) -> None:
    reader, opened, clock = counting_reader(host)
    reader.observe(at(0))
    polled = len(opened)
    assert polled == reader.files.open_files
    ib = first_port(reader.observe(at(1)), "InfiniBand")
    roce = first_port(reader.observe(at(2)), "Ethernet")
    ib_gids = host / f"sys/class/infiniband/{ib.device}/ports/{ib.port}/gids"
    roce_gids = host / f"sys/class/infiniband/{roce.device}/ports/{roce.port}/gids"
    (ib_gids / "3").write_text("fe80:0000:0000:0000:0000:0000:0000:00aa\n")
    (roce_gids / "3").write_text("0000:0000:0000:0000:0000:0000:0000:0000\n")  # IP gone
    fw_ver = host / "sys/class/infiniband/mlx5_0/fw_ver"
    fw_ver.write_text("99.99.9999\n")

    clock.now = 61.0  # the safety net: nothing was seen to change
    snapshot = reader.observe(at(61))
    assert reader.discoveries == 2
    assert len(opened) == polled  # no polled file was closed and reopened
    ports = {(p.device, p.port): p for d in snapshot.devices for p in d.ports}
    assert roce.gid_count and ports[(roce.device, roce.port)].gid_count == roce.gid_count - 1
    assert ports[(ib.device, ib.port)].gid_count == ib.gid_count  # follows the GUID: kept
    device = snapshot.device("mlx5_0")
    assert device is not None and device.fw_ver != "99.99.9999"

    # A change (a device went away) makes the next discovery read everything afresh.
    mutate.remove_device(host, "mlx5_3")
    snapshot = reader.observe(at(62))
    ports = {(p.device, p.port): p for d in snapshot.devices for p in d.ports}
    assert ports[(ib.device, ib.port)].gid_count == (ib.gid_count or 0) + 1
    device = snapshot.device("mlx5_0")
    assert device is not None and device.fw_ver == "99.99.9999"
    assert not any("/mlx5_3/" in path for path in opened[polled:])
    assert not any("/mlx5_3/" in path for path in reader.files._fds)  # its fds were closed


def test_a_gone_file_is_reopened_and_triggers_rediscovery(host: Path) -> None:
    # sysfs answers ENODEV on an fd whose device was unregistered (a regular file cannot).
    state = str(host / "sys/class/infiniband/mlx5_0/ports/1/state")
    opened: list[str] = []
    paths: dict[int, str] = {}
    gone = [False]

    def opener(path: str, flags: int) -> int:
        opened.append(path)
        fd = os.open(path, flags)
        paths[fd] = path
        return fd

    def preader(fd: int, size: int, offset: int) -> bytes:
        if gone[0] and paths[fd] == state:
            gone[0] = False  # the re-registered device's new file reads fine
            raise OSError(errno.ENODEV, "No such device")
        return os.pread(fd, size, offset)

    reader = reader_for(host, AttributeFiles(opener, preader))
    reader.observe(at(0))
    gone[0] = True
    assert port_of(reader.observe(at(1))).state is None  # unknown this poll, no event
    assert port_of(reader.observe(at(2))).state == "4: ACTIVE"
    assert reader.discoveries == 2
    assert opened.count(state) == 2


def test_a_read_failing_in_a_steady_poll_is_that_counter_alone(host: Path) -> None:
    # A steady poll reads a port's open counter files in one batch (AttributeFiles.read_open);
    # a read failing inside it (EIO from a firmware query) must still cost that counter only.
    failing = str(host / "sys/class/infiniband/mlx5_0/ports/1/counters/symbol_error")
    paths: dict[int, str] = {}
    fail = [False]

    def opener(path: str, flags: int) -> int:
        fd = os.open(path, flags)
        paths[fd] = path
        return fd

    def preader(fd: int, size: int, offset: int) -> bytes:
        if fail[0] and paths[fd] == failing:
            raise OSError(errno.EIO, "Input/output error")
        return os.pread(fd, size, offset)

    reader = reader_for(host, AttributeFiles(opener, preader))
    healthy = port_of(reader.observe(at(0))).counters
    fail[0] = True
    counters = port_of(reader.observe(at(1))).counters
    assert isinstance(counters["symbol_error"], Unreadable)
    assert {k: v for k, v in counters.items() if not k.startswith("symbol_error")} == {
        k: v for k, v in healthy.items() if not k.startswith("symbol_error")}
    fail[0] = False
    assert port_of(reader.observe(at(2))).counters == healthy


def test_link_layer_is_read_until_known(host: Path) -> None:
    layer = "sys/class/infiniband/mlx5_0/ports/1/link_layer"
    mutate.unreadable(host, layer)
    reader, opened, _ = counting_reader(host)
    assert port_of(reader.observe(at(0))).link_layer is None
    mutate.readable(host, layer)
    assert port_of(reader.observe(at(1))).link_layer == "InfiniBand"
    reads = reader.files.reads
    reader.observe(at(2))
    assert opened.count(str(host / layer)) == 2  # failed, then read once more
    # Not read per poll: every kept file but it is.
    assert reader.files.reads - reads == reader.files.open_files - 1


def test_unchanged_counter_files_reuse_the_last_mapping(host: Path) -> None:
    reader = reader_for(host)
    first = port_of(reader.observe(at(0)))
    second = port_of(reader.observe(at(1)))
    assert second.counters is first.counters  # same bytes: not parsed again
    mutate.counter(host, "mlx5_0", 1, "link_downed", add=2)
    third = port_of(reader.observe(at(2)))
    assert third.counters is not first.counters and third.counters["link_downed"] == 2
    assert port_of(reader.observe(at(3))).counters is third.counters


def test_a_garbage_counter_is_parsed_and_counted_every_poll(host: Path) -> None:
    mutate.garbage(host, "sys/class/infiniband/mlx5_0/ports/1/counters/symbol_error", "oops")
    reader = reader_for(host)
    seen = [port_of(reader.observe(at(second))).counters for second in range(3)]
    assert all(isinstance(c["symbol_error"], Unreadable) for c in seen)
    assert seen[1] is not seen[0]  # an unclean read is never reused
    assert reader.unreadable_reads == 3  # the file two entries share: once per poll
    mutate.counter(host, "mlx5_0", 1, "symbol_error", set_to=7)
    assert port_of(reader.observe(at(3))).counters["symbol_error"] == 7


def test_an_empty_class_directory_counts_the_mellanox_functions_on_the_bus(host: Path) -> None:
    """After a driver unload the PCI functions stay (unbound): the reader counts the
    vendor 0x15b3 network/InfiniBand ones, only while the class directory is empty."""
    reader = reader_for(host)
    assert reader.observe(at(0)).pci_functions is None  # devices listed: not looked
    names = mutate.unload_driver(host)
    snapshot = reader.observe(at(1))
    assert snapshot.devices == () and snapshot.complete
    assert snapshot.pci_functions == len(names)  # PFs and VFs; the Intel eno1 is not counted
    mutate.load_driver(host)
    assert reader.observe(at(2)).pci_functions is None


def test_a_port_read_as_before_is_the_same_snapshot(host: Path) -> None:
    """A port (and a device) whose files all read the same bytes is the last poll's immutable
    snapshot; any change in a state, rate or counter file makes a new one."""
    reader = reader_for(host)
    first = reader.observe(at(0)).device("mlx5_0")
    second = reader.observe(at(1)).device("mlx5_0")
    assert first is not None and second is first and second.ports[0] is first.ports[0]
    mutate.set_port(host, "mlx5_0", 1, state="DOWN", phys_state="Disabled")
    third = reader.observe(at(2)).device("mlx5_0")
    assert third is not None and third is not first
    assert (third.ports[0].state, third.ports[0].phys_state) == ("1: DOWN", "3: Disabled")
    assert third.ports[0].counters is first.ports[0].counters
    mutate.set_rate(host, "mlx5_0", 1, "200 Gb/sec (4X HDR)")
    assert port_of(reader.observe(at(3))).rate == "200 Gb/sec (4X HDR)"
    mutate.counter(host, "mlx5_0", 1, "link_downed", add=1)
    fourth = port_of(reader.observe(at(4)))
    assert fourth.counters["link_downed"] == 1 and fourth.rate == "200 Gb/sec (4X HDR)"
    assert port_of(reader.observe(at(5))) is fourth


def test_an_attribute_that_recovers_with_its_old_bytes_is_logged_readable(
        host: Path, caplog: pytest.LogCaptureFixture) -> None:
    """The parsed text of an attribute is kept with its bytes; a failed or empty read drops
    it, so the same bytes after the failure are parsed again and the recovery logged."""
    state = "sys/class/infiniband/mlx5_0/ports/1/state"
    text = (host / state).read_bytes().decode()
    reader = reader_for(host)
    assert port_of(reader.observe(at(0))).state == "4: ACTIVE"
    for second, broken in ((1, ""), (3, "\xff")):
        mutate.garbage(host, state, broken)
        with caplog.at_level(logging.INFO):
            caplog.clear()
            assert port_of(reader.observe(at(second))).state is None
            mutate.garbage(host, state, text)
            assert port_of(reader.observe(at(second + 1))).state == "4: ACTIVE"
        messages = [r.getMessage() for r in caplog.records]
        assert any("empty or not text" in m for m in messages)
        assert any(m.endswith("readable again") for m in messages)


def test_a_device_whose_counters_are_not_read_stays_the_same_snapshot(host: Path) -> None:
    reader = reader_for(host)
    reader.skip_counters = frozenset({"mlx5_0"})  # not monitored (the monitor's choice)
    first = reader.observe(at(0)).device("mlx5_0")
    assert first is not None and dict(first.ports[0].counters) == {}
    assert reader.observe(at(1)).device("mlx5_0") is first


def test_a_host_with_vfs_lists_its_devices_when_one_it_reads_may_have_changed(host: Path
                                                                             ) -> None:
    """On a host with SR-IOV VFs the class directory is listed when a device read each poll
    is gone, while one that left is not back, and at least every LIST_SECONDS (a VF that
    comes or goes, never judged, is seen then): the listing is most of such a poll."""
    clock = [0.0]
    reader = SysfsReader(load_config(str(host / "nichealthd.toml")),
                         monotonic=lambda: clock[0])
    open_readers.append(reader)
    first = reader.observe(at(0))
    vf = next(d.name for d in first.devices if d.is_vf)
    assert reader.listings == 1 and first.parts.vfs
    again = reader.observe(at(1))
    assert reader.listings == 1 and again.parts.vfs is first.parts.vfs
    assert again.parts.names is first.parts.names and again.devices == first.devices

    mutate.remove_device(host, vf)
    clock[0] = LIST_SECONDS - 0.5
    still = reader.observe(at(2)).device(vf)
    assert still is not None and still.is_vf  # never judged
    clock[0] = LIST_SECONDS
    assert reader.observe(at(3)).device(vf) is None and reader.listings == 2
    mutate.restore_device(host, vf)
    clock[0] = 2 * LIST_SECONDS
    back = reader.observe(at(4)).device(vf)
    assert back is not None and back.is_vf

    mutate.remove_device(host, "mlx5_3")  # a PF: gone in the poll that finds it gone
    gone = reader.observe(at(5))
    assert gone.device("mlx5_3") is None and gone.complete and reader.listings == 4
    reader.observe(at(6))  # listed every poll while it is not back
    assert reader.listings == 5
    mutate.restore_device(host, "mlx5_3")
    assert reader.observe(at(7)).device("mlx5_3") is not None and reader.listings == 6
    reader.observe(at(8))
    assert reader.listings == 6


def test_a_watched_function_without_a_device_lists_the_devices_each_poll(host: Path
                                                                        ) -> None:
    """A known device missing since before the start (the monitor watches its PCI function,
    from the state) is looked for every poll on a host with VFs too."""
    reader = reader_for(host)
    device = reader.observe(at(0)).device("mlx5_3")
    assert device is not None and device.pci_address
    reader.observe(at(1))
    assert reader.listings == 1
    reader.watched_functions = frozenset({device.pci_address, "0000:ff:00.0"})
    reader.observe(at(2))
    assert reader.listings == 2


def test_the_periodic_rediscovery_keeps_unchanged_vfs_as_they_were(
        host: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """A VF that lists the same netdevs is kept whole by the periodic rediscovery (the
    passes then know every VF unchanged: the same tuple); one whose netdevs changed is
    made again. While the netdev class directory lists what it listed at the last
    discovery, no VF's own netdevs are listed."""
    clock = [0.0]
    reader = SysfsReader(load_config(str(host / "nichealthd.toml")),
                         monotonic=lambda: clock[0])
    open_readers.append(reader)
    first = reader.observe(at(0))
    listed = listings(monkeypatch, sysfs, "_listdir")
    clock[0] = REDISCOVER_SECONDS
    again = reader.observe(at(1))
    assert reader.discoveries == 2 and again.parts.vfs is first.parts.vfs
    vf_functions = {os.path.join(reader.config.sys_class_infiniband, vf.name, "device", "net")
                    for vf in first.parts.vfs}
    assert listed and not vf_functions & set(listed)
    vf = first.parts.vfs[0]
    _vf_netdev(host, vf.name, None, "vfnet0")
    clock[0] = 2 * REDISCOVER_SECONDS
    moved = reader.observe(at(2))
    assert reader.discoveries == 3 and moved.parts.vfs is not first.parts.vfs
    assert moved.parts.vfs[0].netdevs == ("vfnet0",) and moved.parts.vfs[0].is_vf
    assert all(a is b for a, b in zip(moved.parts.vfs[1:], first.parts.vfs[1:]))



def _vf_netdev(host: Path, device: str, old: Optional[str], new: Optional[str]) -> None:
    """A netdev of ``device``'s function created (``old`` None), renamed, or removed (``new``
    None): under the function's ``net/`` and in the netdev class directory at once, as the
    kernel registers, renames and unregisters one."""
    function = (host / "sys/class/infiniband" / device / "device").resolve()
    net = host / "sys/class/net"
    if old is not None:
        (net / old).unlink()
        if new is None:
            (function / "net" / old).rmdir()
        else:
            (function / "net" / old).rename(function / "net" / new)
    elif new is not None:
        (function / "net" / new).mkdir(parents=True)
    if new is not None:
        (net / new).symlink_to(function / "net" / new)


def _registered_as_pf(host: Path, device: str) -> None:
    """``device`` comes back on a function that is no SR-IOV VF (no ``physfn``)."""
    mutate.restore_device(host, device)
    (host / "sys/class/infiniband" / device / "device" / "physfn").unlink()


VF, PF = "mlx5_13", "mlx5_3"  # of the DGX-H100 tree
Step = tuple[Callable[[Path], None], float, Callable[[HostSnapshot], bool]]


def _netdevs_of_vf(snapshot: HostSnapshot, netdevs: tuple[str, ...]) -> bool:
    return any(vf.name == VF and vf.netdevs == netdevs for vf in snapshot.parts.vfs)


# What changes on a host with VFs (before the first poll, then in steps once the reader is in
# its steady state), by when each step must be seen (seconds) and what shows it. A device
# that is judged is seen in the poll after it changed (1 s); a VF (never judged: DeviceIndex)
# that comes or goes within LIST_SECONDS, as a device never seen before; a VF's netdevs
# within REDISCOVER_SECONDS.
CHANGES: dict[str, tuple[Callable[[Path], None], tuple[Step, ...]]] = {
    "a PF that goes away and comes back": (lambda host: None, (
        (lambda host: mutate.remove_device(host, PF), 1.0,
         lambda snapshot: snapshot.device(PF) is None and snapshot.complete),
        (lambda host: mutate.restore_device(host, PF), 1.0,
         lambda snapshot: snapshot.device(PF) in snapshot.parts.judged))),
    "a PF never seen before": (lambda host: mutate.remove_device(host, PF), (
        (lambda host: mutate.restore_device(host, PF), LIST_SECONDS,
         lambda snapshot: snapshot.device(PF) in snapshot.parts.judged),)),
    "a VF never seen before": (lambda host: mutate.remove_device(host, VF), (
        (lambda host: mutate.restore_device(host, VF), LIST_SECONDS,
         lambda snapshot: _netdevs_of_vf(snapshot, ())),)),
    "a VF that goes away, then is registered as a PF": (lambda host: None, (
        (lambda host: mutate.remove_device(host, VF), LIST_SECONDS,
         lambda snapshot: VF not in snapshot.parts.names),
        (lambda host: _registered_as_pf(host, VF), LIST_SECONDS,
         lambda snapshot: snapshot.device(VF) in snapshot.parts.judged))),
    "a VF's netdev created, renamed, removed": (lambda host: None, (
        (lambda host: _vf_netdev(host, VF, None, "vfnet0"), REDISCOVER_SECONDS,
         lambda snapshot: _netdevs_of_vf(snapshot, ("vfnet0",))),
        (lambda host: _vf_netdev(host, VF, "vfnet0", "vfnet1"), REDISCOVER_SECONDS,
         lambda snapshot: _netdevs_of_vf(snapshot, ("vfnet1",))),
        (lambda host: _vf_netdev(host, VF, "vfnet1", None), REDISCOVER_SECONDS,
         lambda snapshot: _netdevs_of_vf(snapshot, ())))),
}


@pytest.mark.parametrize("change", sorted(CHANGES))
def test_a_change_on_a_host_with_vfs_is_seen_in_time(host: Path, change: str) -> None:
    """Each change is seen by its deadline on the injected clock, polled once a second."""
    before, steps = CHANGES[change]
    before(host)
    clock = [0.0]
    reader = SysfsReader(load_config(str(host / "nichealthd.toml")),
                         monotonic=lambda: clock[0])
    open_readers.append(reader)
    assert reader.observe(at(0)).parts.vfs
    clock[0] = REDISCOVER_SECONDS  # a periodic rediscovery: the reader's steady state
    reader.observe(at(clock[0]))
    for number, (step, within, seen) in enumerate(steps):
        step(host)
        changed = clock[0]
        while True:
            clock[0] += 1.0
            if seen(reader.observe(at(clock[0]))):
                break
            assert clock[0] - changed < within, f"{change}: step {number} not seen in time"
