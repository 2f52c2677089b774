"""The journal source on real journal files: cursor, restart, rotation, boot change, bound."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from nichealthd.sim.journal import export_entry, write_entries
from nichealthd.sources.kernel_log import JournalSource

from .. import simtrees
from .conftest import needs_journal

pytestmark = needs_journal

BOOT_A = "0123456789abcdef0123456789abcdef"
BOOT_B = "fedcba98-7654-3210-fedc-ba9876543210"  # as /proc gives it: with dashes
T = 1_764_000_000_000_000


def entries(texts: list[str], boot: str = BOOT_A, start: int = 0) -> list[bytes]:
    return [export_entry(t, boot, T + (start + i) * 1_000_000, 1_000_000 + start + i)
            for i, t in enumerate(texts)]


def texts(batch: tuple) -> list[str]:  # type: ignore[type-arg]
    return [line.text for line in batch[0]]


def test_reads_in_order_then_only_new_lines(tmp_path: Path) -> None:
    write_entries(tmp_path, entries(["a", "b", "c"]))
    source = JournalSource(str(tmp_path))
    first = source.read("", BOOT_A, 100)
    assert texts(first) == ["a", "b", "c"] and first[1] and ";b=" + BOOT_A in first[1]
    assert first[0][0].at.timestamp() == T / 1e6
    assert texts(source.read(first[1] or "", BOOT_A, 100)) == []
    write_entries(tmp_path, entries(["d"], start=3))
    second = source.read(first[1] or "", BOOT_A, 100)
    assert texts(second) == ["d"]
    source.close()


def test_a_restart_resumes_after_the_committed_cursor(tmp_path: Path) -> None:
    write_entries(tmp_path, entries(["a", "b"]))
    cursor = JournalSource(str(tmp_path)).read("", BOOT_A, 100)[1] or ""
    write_entries(tmp_path, entries(["c"], start=2))
    restarted = JournalSource(str(tmp_path))
    assert texts(restarted.read(cursor, BOOT_A, 100)) == ["c"]


def test_an_uncommitted_read_is_read_again(tmp_path: Path) -> None:
    """The monitor passes the committed cursor: after a failed commit it is the old one."""
    write_entries(tmp_path, entries(["a", "b"]))
    source = JournalSource(str(tmp_path))
    committed = source.read("", BOOT_A, 1)[1] or ""  # "a" committed
    assert texts(source.read(committed, BOOT_A, 100)) == ["b"]  # commit fails
    assert texts(source.read(committed, BOOT_A, 100)) == ["b"]  # read again


def test_at_most_limit_lines_per_read_nothing_skipped(tmp_path: Path) -> None:
    write_entries(tmp_path, entries([str(i) for i in range(10)]))
    source = JournalSource(str(tmp_path))
    got: list[str] = []
    cursor = ""
    for _ in range(4):
        lines, new = source.read(cursor, BOOT_A, 4)
        got += [line.text for line in lines]
        cursor = new or cursor
    assert got == [str(i) for i in range(10)]


def test_a_rotated_journal_neither_misses_nor_repeats(tmp_path: Path) -> None:
    write_entries(tmp_path, entries(["a", "b"]))
    source = JournalSource(str(tmp_path))
    cursor = source.read("", BOOT_A, 100)[1] or ""
    # journald's rotation: the file is archived under a new name, a new one is started
    (tmp_path / "kernel.journal").rename(tmp_path / "kernel@0001-0002.journal")
    write_entries(tmp_path, entries(["c", "d"], start=2))
    assert texts(source.read(cursor, BOOT_A, 100)) == ["c", "d"]  # the open reader follows
    assert texts(JournalSource(str(tmp_path)).read(cursor, BOOT_A, 100)) == ["c", "d"]


def test_a_reboot_starts_at_the_first_line_of_the_new_boot(tmp_path: Path) -> None:
    write_entries(tmp_path, entries(["old-1", "old-2"]))
    cursor = JournalSource(str(tmp_path)).read("", BOOT_A, 100)[1] or ""
    write_entries(tmp_path, entries(["new-1", "new-2"], boot=BOOT_B, start=10))
    source = JournalSource(str(tmp_path))
    lines, new = source.read(cursor, BOOT_B, 100)
    assert [line.text for line in lines] == ["new-1", "new-2"]
    assert new and ";b=" + BOOT_B.replace("-", "") in new


def test_only_kernel_transport(tmp_path: Path) -> None:
    other = export_entry("not the kernel", BOOT_A, T, 1).replace(
        b"_TRANSPORT=kernel", b"_TRANSPORT=syslog")
    write_entries(tmp_path, [other, *entries(["k"], start=1)])
    assert texts(JournalSource(str(tmp_path)).read("", BOOT_A, 100)) == ["k"]


def test_a_journal_file_path(tmp_path: Path) -> None:
    path = write_entries(tmp_path / "one.journal", entries(["x"]))
    assert texts(JournalSource(str(path)).read("", BOOT_A, 100)) == ["x"]


def test_sim_kernel_log_command_writes_the_hosts_boot_and_the_devices_line(
        capsys: Any) -> None:
    from nichealthd.sim import cli, tree
    root = simtrees.take("dgx-h100")
    boot = (root / tree.BOOT_ID).read_text().strip()
    assert cli.main(["kernel-log", str(root), "mlx5_0", "netdev_watchdog_6.8",
                     "--count", "2"]) == 0
    assert "2 kernel line(s) appended" in capsys.readouterr().out
    lines, _ = JournalSource(str(root / "journal")).read("", boot, 100)
    assert [line.text for line in lines] == [
        "mlx5_core 0000:18:00.0 ibp24s0: NETDEV WATCHDOG: CPU: 7: transmit queue 3 timed out "
        "5120 ms"] * 2
    assert cli.main(["kernel-log", str(root), "mlx5_99", "health_poll_failed"]) == 2
    assert cli.main(["kernel-log", str(root), "mlx5_0", "no_such_rule"]) == 2


def test_without_a_boot_id_only_new_lines(tmp_path: Path) -> None:
    write_entries(tmp_path, entries(["old"]))
    source = JournalSource(str(tmp_path))
    assert texts(source.read("", None, 100)) == []
    write_entries(tmp_path, entries(["new"], start=1))
    assert texts(source.read("", None, 100)) == ["new"]


# ------------------------------------------------ a cursor that cannot be followed heals

def forge(cursor: str, **fields: int) -> str:
    """``cursor`` with fields moved on (``i=`` the sequence number, ``m=`` the monotonic time,
    both hex): a cursor of this boot that no line of the journal has."""
    parts = dict(p.split("=", 1) for p in cursor.split(";"))
    for key, delta in fields.items():
        parts[key] = f"{int(parts[key], 16) + delta:x}"
    return ";".join(f"{k}={v}" for k, v in parts.items())


def heal_warnings(caplog: Any) -> list[str]:
    return [r.getMessage() for r in caplog.records
            if "cannot be followed" in r.getMessage() and r.levelname == "WARNING"]


def test_a_cursor_past_the_end_resumes_at_its_time_in_this_boot(tmp_path: Path,
                                                                 caplog: Any) -> None:
    """A sequence number beyond the journal's end, with the time of a line it holds: read
    from that time (its line again), then every new line; one warning."""
    write_entries(tmp_path, entries(["a", "b", "c"]))
    cursor = JournalSource(str(tmp_path)).read("", BOOT_A, 100)[1] or ""
    future = forge(cursor, i=1000)
    source = JournalSource(str(tmp_path))
    lines, healed = source.read(future, BOOT_A, 100)
    assert [line.text for line in lines] == ["c"] and healed == cursor
    [warning] = heal_warnings(caplog)
    assert "it is past the end of the journal" in warning
    assert "resuming at its time in this boot" in warning
    assert "1 line(s) logged at that time may be read again" in warning
    write_entries(tmp_path, entries(["d"], start=3))
    assert texts(source.read(healed or "", BOOT_A, 100)) == ["d"]


def test_a_cursor_past_the_end_of_everything_resumes_at_the_end(tmp_path: Path,
                                                                caplog: Any) -> None:
    """Before: no kernel line was ever read again, and nothing was logged."""
    write_entries(tmp_path, entries(["a", "b", "c"]))
    cursor = JournalSource(str(tmp_path)).read("", BOOT_A, 100)[1] or ""
    future = forge(cursor, i=1000, m=10**9)
    source = JournalSource(str(tmp_path))
    lines, healed = source.read(future, BOOT_A, 100)
    assert lines == () and healed == cursor  # the last line's: the next commit stores it
    [warning] = heal_warnings(caplog)
    assert "resuming at the end of the journal: 3 kernel line(s) of this boot" in warning
    write_entries(tmp_path, entries(["d"], start=3))
    assert texts(source.read(healed or "", BOOT_A, 100)) == ["d"]
    # a restart with the healed cursor committed: nothing more to say
    assert texts(JournalSource(str(tmp_path)).read(healed or "", BOOT_A, 100)) == ["d"]
    assert len(heal_warnings(caplog)) == 1


def test_a_cursor_the_journal_rejects_resumes_at_its_time(tmp_path: Path,
                                                          caplog: Any) -> None:
    """Before: 'Invalid cursor; trying again each poll', forever."""
    write_entries(tmp_path, entries(["a", "b", "c"]))
    cursor = JournalSource(str(tmp_path)).read("", BOOT_A, 1)[1] or ""  # "a" read
    parts = dict(p.split("=", 1) for p in cursor.split(";"))
    bad = f"s=zz;i=q;b={BOOT_A};m={parts['m']};t=oops;x=0"
    source = JournalSource(str(tmp_path))
    lines, healed = source.read(bad, BOOT_A, 100)
    assert [line.text for line in lines] == ["a", "b", "c"]
    [warning] = heal_warnings(caplog)
    assert "the journal rejects it (Invalid cursor)" in warning
    assert "1 line(s) logged at that time may be read again" in warning
    # The commit of that poll failed: the bad cursor again reads the same, said once.
    assert texts(source.read(bad, BOOT_A, 100)) == ["a", "b", "c"]
    assert len(heal_warnings(caplog)) == 1
    write_entries(tmp_path, entries(["d"], start=3))
    assert texts(source.read(healed or "", BOOT_A, 100)) == ["d"]


def test_a_rejected_cursor_without_a_time_resumes_at_the_end(tmp_path: Path,
                                                             caplog: Any) -> None:
    write_entries(tmp_path, entries(["a", "b"]))
    source = JournalSource(str(tmp_path))
    lines, healed = source.read(f"garbage;b={BOOT_A};", BOOT_A, 100)
    assert lines == () and healed and ";b=" + BOOT_A in healed
    [warning] = heal_warnings(caplog)
    assert "rejects it" in warning and "2 kernel line(s) of this boot" in warning
    assert texts(source.read(f"garbage;b={BOOT_A};", BOOT_A, 100)) == []  # commit failed
    write_entries(tmp_path, entries(["c"], start=2))
    assert texts(source.read(f"garbage;b={BOOT_A};", BOOT_A, 100)) == ["c"]
    assert len(heal_warnings(caplog)) == 1


def test_a_rejected_cursor_before_any_line_of_this_boot(tmp_path: Path, caplog: Any) -> None:
    write_entries(tmp_path, entries(["old"], boot="f" * 32))
    source = JournalSource(str(tmp_path))
    assert source.read(f"garbage;b={BOOT_A};", BOOT_A, 100) == ((), None)
    assert "no kernel line of this boot yet" in heal_warnings(caplog)[0]
    write_entries(tmp_path, entries(["first"], start=1))
    assert texts(source.read(f"garbage;b={BOOT_A};", BOOT_A, 100)) == ["first"]
    assert len(heal_warnings(caplog)) == 1
