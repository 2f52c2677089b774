"""Every source fed garbage, at random, through the real monitor on a sim tree.

Files that a reader turns into numbers or states get what a broken or hostile sysfs may hold
(huge, negative, non-ASCII, non-numeric, empty), fail with EIO (injected where the reader
reads through an injectable seam: the kept-open attribute files, the AER tables, hwmon) or
EISDIR (the file made a directory, for those read once with open/read/close), and the kernel
log gets garbage records. No poll may raise, fail or fail to commit, and no unhealthy event
may come out of it: a value that is not one is unreadable, never a fault (ARCHITECTURE.md).
"""

from __future__ import annotations

import errno
import os
import random
import shutil
from datetime import datetime, timedelta, timezone
from pathlib import Path
from typing import Callable

import pytest

from nichealthd.runtime.monitor import Monitor
from nichealthd.runtime.startup import load_topology
from nichealthd.sources.attribute import AttributeFiles
from nichealthd.sources.config_file import load_config
from nichealthd.sources.hwmon import HwmonReader
from nichealthd.sources.kernel_log import KmsgSource
from nichealthd.sources.sysfs import SysfsReader
from tests import simtrees

NUMERIC = {"numa_node", "current_link_speed", "current_link_width", "max_link_speed",
           "max_link_width", "aer_dev_fatal", "aer_dev_nonfatal", "aer_dev_correctable",
           "aer_rootport_total_err_cor", "aer_rootport_total_err_fatal",
           "aer_rootport_total_err_nonfatal", "carrier", "carrier_changes", "flags", "port",
           "dev_port", "sm_lid", "vendor", "class"}
TEXT = {"state", "phys_state", "rate", "operstate", "link_layer"}
ROUNDS = 25


def garbage(rng: random.Random) -> bytes:
    """Huge, negative, non-ASCII, non-numeric or empty content."""
    pick = rng.randrange(6)
    if pick == 0:  # beyond every kind: more than 2^64, up to 5000 digits
        return ("1" + "".join(rng.choice("0123456789")
                              for _ in range(rng.randrange(20, 5000)))).encode() + b"\n"
    if pick == 1:
        return f"-{rng.randrange(2, 10**30)}\n".encode()
    if pick == 2:
        return bytes(rng.randrange(128, 256) for _ in range(rng.randrange(1, 40)))
    if pick == 3:
        return rng.choice([b"--1\n", b"garbage\n", b"1e99\n", b"nan\n", b"0x\n", b"1_0\n",
                           "\u0663\u0664\n".encode(), b"\x00\x00\n", b"+5\n"])
    if pick == 4:  # an AER table whose total is not one
        total = rng.choice(["TOTAL_ERR_FATAL", "TOTAL_ERR_NONFATAL", "TOTAL_ERR_COR"])
        return f"MalfTLP 0\n{total} {'9' * rng.randrange(21, 5000)}\n".encode()
    return b""


def kmsg_garbage(rng: random.Random, seq: int) -> str:
    return rng.choice([
        f"6,{'9' * 30},1,-;huge sequence\n", f"6,-{seq},1,-;negative\n",
        f"6,{seq},{'9' * 5000},-;huge time\n", "garbage\n", "6,x,y,-;z\n",
        f"6,{seq},5000000,-;\udcff not ascii\n".encode("utf-8", "surrogateescape").decode(
            "utf-8", "replace"),
        f"6,{seq},5000000,-;mlx5_core 0000:18:00.0: firmware version: 28.39.1002\n"])


class Faults:
    """Paths whose reads fail with EIO, through the readers' injectable seams."""

    def __init__(self) -> None:
        self.eio: set[str] = set()
        self._paths: dict[int, str] = {}

    def opener(self, path: str, flags: int) -> int:
        fd = os.open(path, flags)
        self._paths[fd] = path
        return fd

    def preader(self, fd: int, size: int, offset: int) -> bytes:
        if self._paths.get(fd) in self.eio:
            raise OSError(errno.EIO, os.strerror(errno.EIO))
        return os.pread(fd, size, offset)

    def read(self, path: str) -> bytes:
        if path in self.eio:
            raise OSError(errno.EIO, os.strerror(errno.EIO))
        with open(path, "rb") as handle:
            return handle.read(64)


def targets(root: Path) -> list[Path]:
    """Every file under sys/devices that a reader turns into a number or a state."""
    found = []
    for directory, _, files in os.walk(root / "sys" / "devices"):
        parent = os.path.basename(directory)
        for name in files:
            if (name in NUMERIC or name in TEXT
                    or parent in ("counters", "hw_counters", "statistics")
                    or (name.startswith("temp") and not name.endswith("_label"))):
                found.append(Path(directory, name))
    return sorted(found)


@pytest.mark.parametrize("profile, seed", [("dgx-h100", 39), ("p5", 40), ("l40-dualport", 41)])
def test_garbage_in_every_source_is_never_an_exception_or_an_unhealthy_event(
        tmp_path: Path, profile: str, seed: int) -> None:
    rng = random.Random(seed)
    root = simtrees.take(profile)  # its garbage is undone for the next test
    kmsg = tmp_path / "kmsg"
    kmsg.write_text("6,1,1000000,-;Linux version 6.8.0\n")
    config = load_config(str(root / "nichealthd.toml"),
                         {"stateFile": str(tmp_path / "state" / "state.json")})
    faults = Faults()
    now = [datetime(2026, 11, 26, tzinfo=timezone.utc)]
    ticks = [1000.0]
    clock: Callable[[], datetime] = lambda: now[0]  # noqa: E731
    monotonic: Callable[[], float] = lambda: ticks[0]  # noqa: E731
    reader = SysfsReader(config, files=AttributeFiles(faults.opener, faults.preader),
                         monotonic=monotonic)
    monitor = Monitor(config, load_topology(config), reader=reader, clock=clock,
                      monotonic=monotonic, kernel_log=KmsgSource(str(kmsg)))
    monitor.pci_facts.hwmon = HwmonReader(monotonic, read=faults.read)
    monitor.pci_facts.aer_files = AttributeFiles(  # whole tables, as the AER reader reads
        faults.opener, lambda fd, _size, offset: faults.preader(fd, 4096, offset))
    monitor.start()
    try:
        files = targets(root)
        assert len(files) > 100
        seen = monitor.poll()
        assert seen.commit_error is None
        assert not [e for e in seen.result.events if not e.is_healthy]
        saved: dict[Path, bytes] = {}
        for round_ in range(ROUNDS):
            for path, content in saved.items():  # last round's garbage goes, the real is back
                if path.is_dir():
                    shutil.rmtree(path)
                path.write_bytes(content)
            saved.clear()
            faults.eio.clear()
            for path in rng.sample(files, rng.randrange(5, 40)):
                saved[path] = path.read_bytes()
                how = rng.random()
                if how < 0.15:
                    faults.eio.add(str(path))
                elif how < 0.25:
                    path.unlink()
                    path.mkdir()  # EISDIR, for the files read with open/read/close
                else:
                    path.write_bytes(garbage(rng))
            with kmsg.open("a") as fh:
                for seq in range(2 + round_ * 3, 5 + round_ * 3):
                    fh.write(kmsg_garbage(rng, seq))
            now[0] += timedelta(seconds=61)  # every slow family is due each round
            ticks[0] += 61
            outcome = monitor.poll()  # raises PollFailed if anything escaped a reader or rule
            assert outcome.commit_error is None
            unhealthy = [e for e in outcome.result.events if not e.is_healthy]
            assert not unhealthy, (round_, [e.message for e in unhealthy],
                                   {str(p.relative_to(root)): c[:60] for p, c in saved.items()})
    finally:
        monitor.close()
