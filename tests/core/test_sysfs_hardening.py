"""Reader hardening: fd budget, malformed sysfs content, FIFOs."""

from __future__ import annotations

import errno
import logging
import os
import threading
import time
from pathlib import Path

import pytest

from nichealthd.core.model import ABSENT, Unreadable
from nichealthd.sources.attribute import AttributeFiles
from nichealthd.sources.sysfs import fd_budget

from .builders import at
from .conftest import reader_for

IB = "sys/class/infiniband/mlx5_0"
PORT = f"{IB}/ports/1"


# ----------------------------------------------------------------- fd budget

@pytest.mark.parametrize("soft,budget", [
    (64, 0), (128, 0), (256, 128), (1024, 896), (65536, 65536 - 8192),
])
def test_fd_budget_leaves_a_reserve(soft: int, budget: int) -> None:
    assert fd_budget(soft) == budget


def test_fd_budget_unlimited() -> None:
    import resource
    assert fd_budget(resource.RLIM_INFINITY) is None


def test_files_beyond_the_budget_are_read_and_closed(tmp_path: Path) -> None:
    paths = []
    for i in range(5):
        path = tmp_path / f"f{i}"
        path.write_text(f"{i}\n")
        paths.append(str(path))
    files = AttributeFiles(budget=3)
    for _ in range(2):
        assert [files.read(p) for p in paths] == [f"{i}\n".encode() for i in range(5)]
    assert files.open_files == 3 and files.transient_reads == 4
    files.close()


def test_a_small_budget_logs_one_line_and_reads_everything(
        host: Path, caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level(logging.INFO, logger="nichealthd.sources.sysfs")
    full = reader_for(host).observe(at(0))
    reader = reader_for(host, AttributeFiles(budget=10))
    for poll in range(3):
        snapshot = reader.observe(at(poll))
        assert snapshot.devices == full.devices
    assert reader.files.open_files == 10
    lines = [r.getMessage() for r in caplog.records if "without keeping" in r.getMessage()]
    assert len(lines) == 1 and "LimitNOFILE=" in lines[0], lines


def test_emfile_sheds_kept_files_and_never_floods_the_log(
        host: Path, caplog: pytest.LogCaptureFixture) -> None:
    """The real limit is below the budget assumed: one line, then fewer files kept open."""
    caplog.set_level(logging.INFO, logger="nichealthd.sources.sysfs")
    kept: list[int] = []

    def opener(path: str, flags: int) -> int:
        if len(kept) >= 40:
            kept[:] = [fd for fd in kept if _is_open(fd)]
            if len(kept) >= 40:
                raise OSError(errno.EMFILE, "Too many open files")
        fd = os.open(path, flags)
        kept.append(fd)
        return fd

    full = reader_for(host).observe(at(0))
    reader = reader_for(host, AttributeFiles(opener=opener, budget=None))
    for poll in range(3):
        snapshot = reader.observe(at(poll))
    assert snapshot.devices == full.devices
    assert reader.files.budget is not None and reader.files.budget < 40
    assert not [r for r in caplog.records if "Too many open files" in r.getMessage()]


def _is_open(fd: int) -> bool:
    try:
        os.fstat(fd)
    except OSError:
        return False
    return True


def test_fd_exhaustion_everywhere_is_one_log_line(
        host: Path, caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level(logging.INFO, logger="nichealthd.sources.sysfs")

    def opener(path: str, flags: int) -> int:
        raise OSError(errno.EMFILE, "Too many open files")

    reader = reader_for(host, AttributeFiles(opener=opener))
    for poll in range(3):
        snapshot = reader.observe(at(poll))
    port = snapshot.device("mlx5_0").ports[0]  # type: ignore[union-attr]
    assert port.state is None and isinstance(port.counters["link_downed"], Unreadable)
    warnings = [r for r in caplog.records if r.levelno >= logging.WARNING]
    assert len(warnings) == 1 and "file descriptors" in warnings[0].getMessage()


# ------------------------------------------------------------ malformed sysfs

@pytest.mark.parametrize("relative,content", [
    (f"{IB}/device/numa_node", "--1"), (f"{IB}/device/numa_node", "²"),
    (f"{IB}/device/numa_node", "1_0"), (f"{IB}/device/numa_node", "\xff\xfe"),
    (f"{IB}/device/vendor", "\x00\x01"), (f"{IB}/device/uevent", "PCI_SLOT_NAME\n==\n\xff"),
    (f"{IB}/hca_type", ""), (f"{IB}/fw_ver", "\xff"), (f"{IB}/node_guid", "²"),
    (f"{PORT}/state", "²: ACTIVE"), (f"{PORT}/state", "\xff\xfe"), (f"{PORT}/state", ""),
    (f"{PORT}/phys_state", "--1"), (f"{PORT}/phys_state", "+5: LinkUp"),
    (f"{PORT}/state", "ACTIVE"), (f"{PORT}/state", "99: ACTIVE"),
    (f"{PORT}/state", f"{'4' * 5000}: ACTIVE"),
    (f"{PORT}/rate", "² Gb/sec"), (f"{PORT}/rate", "\xff"),
    (f"{PORT}/link_layer", "\xff"), (f"{PORT}/counters/link_downed", "²"),
    (f"{PORT}/counters/link_downed", "--1"), (f"{PORT}/counters/link_downed", "1_000"),
    (f"{PORT}/counters/link_downed", "١٢"), (f"{PORT}/gids/0", "\xff²"),
    (f"{IB}/device/sriov_numvfs", "²"), (f"{IB}/device/sriov_totalvfs", "--1"),
])
def test_malformed_values_never_raise(host: Path, relative: str, content: str) -> None:
    path = os.path.realpath(host / relative)
    with open(path, "wb") as handle:
        handle.write(content.encode("utf-8", "surrogateescape"))
    reader = reader_for(host)
    for poll in range(2):
        snapshot = reader.observe(at(poll))
    device = snapshot.device("mlx5_0")
    assert device is not None and device.ports
    port = device.ports[0]
    if relative.endswith("numa_node"):
        assert device.numa_node is None
    if relative.endswith("state"):  # without a state number of its kind: unknown
        assert (port.phys_state if relative.endswith("phys_state") else port.state) is None
    if "counters/" in relative:
        assert isinstance(port.counters["link_downed"], Unreadable)
    others = [d for d in snapshot.devices if d.name != "mlx5_0" and not d.is_vf]
    assert others and all(p.state == "4: ACTIVE" for d in others for p in d.ports)


@pytest.mark.parametrize("content", ["UP", "garbage", "\xff", "1"])
def test_an_operstate_the_kernel_does_not_print_is_unknown(host: Path, content: str) -> None:
    """net/core/net-sysfs.c prints one of operstates[]; anything else is no state (an EFA
    port's health is its netdev's: garbage there must not read as "not up")."""
    reader = reader_for(host)
    port = reader.observe(at(0)).device("mlx5_1").ports[0]  # type: ignore[union-attr]
    assert port.operstate == "up" and port.netdev
    (host / "sys/class/net" / port.netdev / "operstate").write_bytes(
        content.encode("utf-8", "surrogateescape") + b"\n")
    assert reader.observe(at(1)).device("mlx5_1").ports[0].operstate is None  # type: ignore


@pytest.mark.parametrize("name", ["²", "١", "1_0", "-1", "01x"])
def test_odd_port_directory_names_are_skipped(host: Path, name: str) -> None:
    ports = os.path.realpath(host / IB / "ports")
    os.mkdir(os.path.join(ports, name))
    (Path(ports) / name / "state").write_text("4: ACTIVE\n")
    snapshot = reader_for(host).observe(at(0))
    device = snapshot.device("mlx5_0")
    assert device is not None and [p.port for p in device.ports] == [1]


def test_odd_gid_and_dev_port_names(host: Path) -> None:
    gids = Path(os.path.realpath(host / PORT / "gids"))
    (gids / "²").write_text("fe80:0000:0000:0000:0000:0000:0000:0001\n")
    snapshot = reader_for(host).observe(at(0))
    assert snapshot.device("mlx5_0").ports[0].gid_count == 1  # type: ignore[union-attr]


# ----------------------------------------------------------------- FIFOs

def _fifo(host: Path, relative: str) -> None:
    path = os.path.realpath(host / relative)
    os.unlink(path)
    os.mkfifo(path)


def test_fifos_in_place_of_sysfs_files_do_not_hang_the_poll(host: Path) -> None:
    _fifo(host, f"{PORT}/counters/link_downed")
    _fifo(host, f"{PORT}/state")
    _fifo(host, f"{IB}/device/numa_node")
    _fifo(host, f"{IB}/fw_ver")
    result: list[object] = []
    reader = reader_for(host)

    def polls() -> None:
        for poll in range(3):
            result.append(reader.observe(at(poll)))

    started = time.monotonic()
    thread = threading.Thread(target=polls, daemon=True)
    thread.start()
    thread.join(10)
    assert not thread.is_alive(), "a FIFO hung the poll"
    assert time.monotonic() - started < 10
    snapshot = result[-1]
    port = snapshot.device("mlx5_0").ports[0]  # type: ignore[attr-defined]
    assert port.state is None
    assert isinstance(port.counters["link_downed"], Unreadable)
    assert port.counters["symbol_error"] == 0 and port.phys_state == "5: LinkUp"
    others = [d for d in snapshot.devices if d.name != "mlx5_0" and not d.is_vf]  # type: ignore[attr-defined]
    assert all(p.state == "4: ACTIVE" and p.counters["link_downed"] == 0
               for d in others for p in d.ports)
    assert ABSENT is not None
