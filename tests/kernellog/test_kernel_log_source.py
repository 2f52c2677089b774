"""The kernel log as a source of the seam (sources/kernel_log.py), through the real monitor on
a sim host: its own failure policy (a log that cannot be read is said once and gives no
lines; its family is judged, never unknown) and its cursor committed with the poll."""

from __future__ import annotations

import logging
from pathlib import Path

import pytest

from nichealthd.core.checks.kernel_log import CHECK_NAME, KERNEL_LOG
from nichealthd.core.evaluate import PollMemory, due_reads
from nichealthd.runtime.monitor import Monitor
from nichealthd.runtime.startup import load_topology
from nichealthd.sources.config_file import load_config
from nichealthd.sources.kernel_log import KmsgSource
from nichealthd.sources.kernel_log_facts import KERNEL_LINES

from .. import simtrees
from ..core.builders import at, config

RECORD = ("3,1,6000000,-;mlx5_core 0000:18:00.0: poll_health:825:(pid 0): device's health "
          "compromised - reached miss count\n")


def test_an_unreadable_kernel_log_is_said_once_and_its_family_judges_on(
        tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    root = simtrees.take("dgx-h100")
    cfg = load_config(str(root / "nichealthd.toml"),
                      {"stateFile": str(tmp_path / "state" / "state.json")})
    kmsg = tmp_path / "kmsg"  # not there yet: cannot be read
    monitor = Monitor(cfg, load_topology(cfg), kernel_log=KmsgSource(str(kmsg)))
    monitor.start()
    caplog.set_level(logging.INFO, "nichealthd.monitor")
    try:
        for _ in range(2):
            outcome = monitor.poll()
            assert outcome.commit_error is None
            assert outcome.result.failed == {} and outcome.snapshot.unread == {}
        said = [r.getMessage() for r in caplog.records
                if r.getMessage().startswith(f"cannot read the kernel log ({kmsg}): ")]
        assert len(said) == 1 and "FileNotFoundError" in said[0], said
        assert monitor.state.section(KERNEL_LOG).cursor == ""
        kmsg.write_text(RECORD)
        outcome = monitor.poll()
        assert f"kernel log ({kmsg}) readable again" in caplog.messages
        got = [(e.event.error_code, e.event.entities[0][1]) for e in outcome.committed
               if e.event.check_name == CHECK_NAME]
        assert got == [(("health_poll_failed",), "mlx5_0")]
        cursor = monitor.state.section(KERNEL_LOG).cursor
        assert cursor.startswith("kmsg:") and cursor.endswith(":1"), cursor
        assert not [e for e in monitor.poll().committed if e.event.check_name == CHECK_NAME]
    finally:
        monitor.close()


def test_its_fact_is_due_in_every_poll_while_the_family_is_on() -> None:
    memory = PollMemory()
    for seconds in (0, 1, 2, 3600):
        assert KERNEL_LINES in due_reads(config(), memory, at(seconds))
    assert KERNEL_LINES not in due_reads(config(kernelLog="off"), memory, at(0))
