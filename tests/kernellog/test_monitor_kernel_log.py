"""The kernel log through the real monitor on a sim host reading real journal files."""

from __future__ import annotations

import time
from pathlib import Path
from typing import Any

import pytest

from nichealthd.core.checks.kernel_log import CHECK_NAME, KERNEL_LOG
from nichealthd.runtime import monitor as monitor_module
from nichealthd.runtime.monitor import Monitor
from nichealthd.runtime.startup import load_topology
from nichealthd.sim.journal import kernel_log
from nichealthd.sources.config_file import load_config
from nichealthd.storage import store

from .. import simtrees
from .conftest import needs_journal

pytestmark = needs_journal


def host() -> tuple[Path, Any]:
    root = simtrees.take("dgx-h100")
    cfg = load_config(str(root / "nichealthd.toml"), {"kernelLogPath": str(root / "journal")})
    return root, cfg


def run(cfg: Any) -> tuple[Monitor, list[Any]]:
    monitor = Monitor(cfg, load_topology(cfg))
    monitor.start()
    outcome = monitor.poll()
    events = [e.event for e in outcome.committed if e.event.check_name == CHECK_NAME]
    return monitor, events


def test_done_when(tmp_path: Path) -> None:
    root, cfg = host()
    t0 = time.time() - 3 * 86400
    kernel_log(root, "mlx5_0", "unrelated", start=t0)
    kernel_log(root, "mlx5_0", "health_poll_failed", start=t0 + 1)
    kernel_log(root, "mlx5_3", "netdev_watchdog", start=t0 + 2)
    kernel_log(root, "mlx5_3", "netdev_watchdog_6.8", start=t0 + 1000)  # after the 5 min
    kernel_log(root, "mlx5_0", "access_reg_failed", count=50, interval=3600, start=t0 + 3)
    kernel_log(root, "host", "", text="EXT4-fs (nvme0n1p1): mounted filesystem", start=t0 + 4)
    monitor, events = run(cfg)
    got = [(e.error_code[0], e.entities[0][1], e.is_fatal) for e in events]
    assert got.count(("health_poll_failed", "mlx5_0", True)) == 1
    assert got.count(("netdev_watchdog", "mlx5_3", False)) == 2
    assert got.count(("access_reg_failed", "mlx5_0", False)) == 3  # 0 h, 24 h, 48 h
    assert len(got) == 6
    poll_line = next(e for e in events if e.error_code == ("health_poll_failed",))
    assert "0000:18:00.0: poll_health" in poll_line.metadata["kernel_log_line"]
    monitor.close()
    # a restart re-reads nothing
    monitor, events = run(cfg)
    assert events == []
    kernel_log(root, "mlx5_0", "module_unplugged")
    outcome = monitor.poll()
    assert [e.event.error_code for e in outcome.committed
            if e.event.check_name == CHECK_NAME] == [("module_unplugged",)]
    monitor.close()


def test_a_failed_commit_reads_the_lines_again(tmp_path: Path,
                                               monkeypatch: pytest.MonkeyPatch) -> None:
    root, cfg = host()
    monitor = Monitor(cfg, load_topology(cfg))
    monitor.start()
    monitor.poll()  # the baseline
    kernel_log(root, "mlx5_0", "cmd_exec_timeout")
    real = store.save_state

    def failing(path: str, state: Any) -> None:
        raise OSError(28, "No space left on device")

    monkeypatch.setattr(monitor_module, "save_state", failing)
    failed = monitor.poll()
    assert failed.commit_error and monitor.state.section(KERNEL_LOG).cursor == ""
    monkeypatch.setattr(monitor_module, "save_state", real)
    again = monitor.poll()
    assert [e.event.error_code for e in again.committed
            if e.event.check_name == CHECK_NAME] == [("cmd_exec_timeout",)]
    assert monitor.state.section(KERNEL_LOG).cursor
    monitor.close()


def test_a_reboot_reads_the_new_boot_only(tmp_path: Path) -> None:
    root, cfg = host()
    kernel_log(root, "mlx5_0", "health_poll_failed")
    monitor, events = run(cfg)
    assert len(events) == 1
    monitor.close()
    from nichealthd.sim import mutate
    mutate.reboot(root)
    kernel_log(root, "mlx5_0", "module_unplugged")
    monitor, events = run(cfg)
    assert [e.error_code for e in events] == [("module_unplugged",)]
    monitor.close()


def test_without_a_path_a_simulated_host_reads_no_kernel_log() -> None:
    root = simtrees.take("dgx-h100")
    cfg = load_config(str(root / "nichealthd.toml"))
    monitor = Monitor(cfg, load_topology(cfg))
    assert monitor.kernel_log is None
    monitor.close()


def test_a_repeating_fault_across_a_restart(tmp_path: Path) -> None:
    """Repeated faults on real journal files: lines of one non-fatal rule a minute apart are one
    SysLogsNICDriverError event per dedup window, and the third within the hour one
    CONTACT_SUPPORT repetition; the window is in the state file (a restart keeps it)."""
    root, cfg = host()
    t0 = time.time() - 600
    kernel_log(root, "mlx5_3", "mlx5_tx_timeout_detected", count=2, interval=60, start=t0)
    monitor, events = run(cfg)
    assert [e.error_code for e in events] == [("mlx5_tx_timeout_detected",)]
    monitor.close()
    kernel_log(root, "mlx5_3", "mlx5_tx_timeout_detected", start=t0 + 120)
    monitor = Monitor(cfg, load_topology(cfg))
    monitor.start()
    outcome = monitor.poll()
    got = [e.event for e in outcome.committed if e.event.error_code[0].startswith("mlx5_tx")]
    assert [(e.check_name, e.error_code, e.recommended_action, e.is_fatal) for e in got] == [
        ("InfiniBandDegradationCheck", ("mlx5_tx_timeout_detected_repeated",),
         "CONTACT_SUPPORT", False)]  # the third line is within the first's dedup window
    assert ("NIC", "mlx5_3") in got[0].entities
    monitor.close()
