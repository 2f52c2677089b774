"""The /dev/kmsg fallback on files of real records (Documentation/ABI/testing/dev-kmsg)."""

from __future__ import annotations

import errno
import os
import shutil
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from nichealthd.sources.kernel_log import (
    KMSG_DROPIN,
    KMSG_DROPIN_TARGET,
    KmsgSource,
    KmsgUnavailable,
    kmsg_unavailable,
    parse_kmsg,
)

from ..harness import NOBODY

REPO = Path(__file__).resolve().parents[2]

BOOT = "11111111-2222-3333-4444-555555555555"
RECORDS = (
    "6,1001,5000000,-;usb 1-1: new high-speed USB device\n"
    "3,1002,6000000,-;mlx5_core 0000:19:00.0: poll_health:825:(pid 0): device's health "
    "compromised - reached miss count\n"
    " SUBSYSTEM=pci\n"
    " DEVICE=+pci:0000:19:00.0\n"
    "4,1003,7000000,c;NETDEV WATCHDOG: ib0 (mlx5_core): transmit queue 3 timed out 5120 ms\n"
    "4,1004,7500000,-,caller=T12;x\\x09y\n"
)


def source(tmp_path: Path, text: str = RECORDS) -> KmsgSource:
    path = tmp_path / "kmsg"
    path.write_text(text)
    return KmsgSource(str(path), clock=lambda: 1_000_000.0, monotonic=lambda: 100.0)


def test_records_continuations_and_times(tmp_path: Path) -> None:
    lines, cursor = source(tmp_path).read("", BOOT, 100)
    assert [line.text for line in lines][1:3] == [
        "mlx5_core 0000:19:00.0: poll_health:825:(pid 0): device's health compromised - "
        "reached miss count",
        "NETDEV WATCHDOG: ib0 (mlx5_core): transmit queue 3 timed out 5120 ms"]
    assert lines[3].text == "x\ty"
    assert lines[0].at.timestamp() == 1_000_000.0 - 100.0 + 5.0  # boot time + 5 s
    assert cursor == f"kmsg:{BOOT}:1004"


def test_resumes_after_the_sequence_number(tmp_path: Path) -> None:
    src = source(tmp_path)
    assert [line.text for line in src.read(f"kmsg:{BOOT}:1002", BOOT, 100)[0]][0].startswith(
        "NETDEV")
    restarted = source(tmp_path)
    assert restarted.read(f"kmsg:{BOOT}:1004", BOOT, 100) == ((), f"kmsg:{BOOT}:1004")


def test_rewinds_to_the_committed_sequence(tmp_path: Path) -> None:
    src = source(tmp_path)
    first, _ = src.read("", BOOT, 2)
    assert len(first) == 2
    again, cursor = src.read("", BOOT, 100)  # the commit of the first read failed
    assert len(again) == 4 and cursor == f"kmsg:{BOOT}:1004"


def test_another_boot_starts_at_the_beginning(tmp_path: Path) -> None:
    lines, _ = source(tmp_path).read("kmsg:other-boot:1003", BOOT, 100)
    assert len(lines) == 4


def test_a_partial_last_record_waits(tmp_path: Path) -> None:
    lines, cursor = source(tmp_path, RECORDS + "3,1005,8000000,-;half").read("", BOOT, 100)
    assert len(lines) == 4 and cursor == f"kmsg:{BOOT}:1004"


def test_malformed_records_are_skipped() -> None:
    assert parse_kmsg(b"garbage") is None
    assert parse_kmsg(b"6,x,1,-;t") is None
    assert parse_kmsg(b"6,7,8,-;text") == (7, 8, "text")


def test_a_missing_kmsg_file_is_a_plain_error(tmp_path: Path) -> None:
    """Only /dev/kmsg itself gets the drop-in hint; a kernelLogPath file is the user's."""
    with pytest.raises(FileNotFoundError) as info:
        KmsgSource(str(tmp_path / "absent")).read("", BOOT, 10)
    assert not isinstance(info.value, KmsgUnavailable)


@pytest.mark.parametrize("code, why", [
    (errno.ENOENT, "there is no /dev/kmsg in the service's /dev (PrivateDevices=yes)"),
    (errno.EPERM, "kernel.dmesg_restrict = 1 without CAP_SYSLOG"),
])
def test_the_reason_and_the_drop_in_to_install(code: int, why: str) -> None:
    error = kmsg_unavailable(OSError(code, os.strerror(code)))
    text = str(error)
    assert text.startswith("/dev/kmsg cannot be opened: ") and why in text
    assert f"install the drop-in {KMSG_DROPIN} as {KMSG_DROPIN_TARGET}" in text
    assert error.errno == code


@pytest.mark.skipif(os.geteuid() != 0 or shutil.which("setpriv") is None,
                    reason="needs root to drop to an unprivileged user with setpriv")
def test_an_unprivileged_reader_gets_the_drop_in_hint() -> None:
    """The real /dev/kmsg opened by a user without CAP_SYSLOG: refused where
    kernel.dmesg_restrict = 1 (kernel/printk/printk.c check_syslog_permissions)."""
    if Path("/proc/sys/kernel/dmesg_restrict").read_text().strip() != "1":
        pytest.skip("kernel.dmesg_restrict is 0 here: every user may read /dev/kmsg")
    code = ("from nichealthd.sources.kernel_log import KmsgSource\n"
            "try:\n    KmsgSource().read('', 'boot', 10)\n"
            "except Exception as exc:\n    print(type(exc).__name__, exc.errno, exc)\n")
    run = subprocess.run([*NOBODY, sys.executable, "-c", code], capture_output=True, text=True,
                         env={**os.environ, "PYTHONPATH": str(REPO)}, check=False)
    assert run.stdout.startswith(f"KmsgUnavailable {errno.EPERM} /dev/kmsg cannot be opened: "
                                 "not permitted"), run.stdout + run.stderr
    assert KMSG_DROPIN in run.stdout


def heal_warnings(caplog: Any) -> list[str]:
    return [r.getMessage() for r in caplog.records if "cannot be followed" in r.getMessage()]


@pytest.mark.parametrize("cursor, why", [
    (f"kmsg:{BOOT}:99999", "it is past the last record (sequence number 1004)"),
    (f"kmsg:{BOOT}:x1", "its sequence number is not one"),
    (f"kmsg:{BOOT}:{'9' * 40}", "its sequence number is not one"),
])
def test_a_sequence_number_past_the_end_resumes_after_the_last_record(
        tmp_path: Path, caplog: Any, cursor: str, why: str) -> None:
    """Before: every record up to 99999 was skipped, silently."""
    src = source(tmp_path)
    assert src.read(cursor, BOOT, 100) == ((), f"kmsg:{BOOT}:1004")
    [warning] = heal_warnings(caplog)
    assert why in warning and "the 4 record(s) now in the buffer are taken as read" in warning
    with (tmp_path / "kmsg").open("a") as fh:
        fh.write("3,1005,8000000,-;mlx5_core 0000:19:00.0: new line\n")
    # the commit of the heal failed: the old cursor again, no second warning, nothing lost
    lines, healed = src.read(cursor, BOOT, 100)
    assert [line.text for line in lines] == ["mlx5_core 0000:19:00.0: new line"]
    assert healed == f"kmsg:{BOOT}:1005" and len(heal_warnings(caplog)) == 1
