"""The /dev/kmsg fallback on files of real records (Documentation/ABI/testing/dev-kmsg)."""

from __future__ import annotations

from pathlib import Path

from nichealthd.sources.kernel_log import KmsgSource, parse_kmsg

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
