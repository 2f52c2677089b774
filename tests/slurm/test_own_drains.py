"""Through the real daemon on a simulated host, with slurmctld stood in for by three
``sh -c`` scripts that keep the node's reason in a file (tests/slurm/test_real_slurm.py runs
the real one, as root): nichealthd knows its own drains by the reasons it recorded, never by
their ``nichealthd: `` prefix. An administrator's reason that starts like nichealthd's
survives a fatal event and its recovery; nichealthd's own drain is resumed, also when the
daemon was killed (SIGKILL) between the drain command and its record."""

from __future__ import annotations

import json
import shlex
import signal
from pathlib import Path

from nichealthd.sim import mutate

from .. import simtrees
from ..harness import SimDaemon, wait_until

ADMIN = "nichealthd: held by admin bob for cable check INC-4711"
REASON = "nichealthd: mlx5_0 1: state DOWN, phys_state Polling - no connectivity"


class FakeSlurm:
    """The node's reason in ``reason`` (absent: none); each command run appended to
    ``calls``; with ``kill`` present, the drain command kills its caller (the daemon) with
    SIGKILL right after setting the reason, once."""

    def __init__(self, root: Path) -> None:
        self.reason_file = root / "slurm-reason"
        self.calls_file = root / "slurm-calls"
        self.kill_file = root / "slurm-kill"
        reason, calls, kill = (shlex.quote(str(p)) for p in
                               (self.reason_file, self.calls_file, self.kill_file))
        query = f"cat {reason} 2>/dev/null || echo none"
        drain = (f'echo drain >> {calls}; printf "%s\\n" "$1" > {reason}; '
                 f'if [ -e {kill} ]; then rm {kill}; kill -9 $PPID; fi')
        resume = f"echo resume >> {calls}; rm -f {reason}"
        self.config = (
            "slurmDrain = true\nslurmResume = true\nslurmRetries = 1\n"
            f"slurmReasonCommand = {json.dumps(shlex.join(['sh', '-c', query]))}\n"
            f"slurmDrainCommand = "
            f"{json.dumps(shlex.join(['sh', '-c', drain, 'scontrol']) + ' {reason}')}\n"
            f"slurmResumeCommand = {json.dumps(shlex.join(['sh', '-c', resume]))}\n")

    def reason(self) -> str:
        return self.reason_file.read_text().strip() if self.reason_file.exists() else "none"

    def calls(self) -> list[str]:
        return self.calls_file.read_text().split() if self.calls_file.exists() else []


def host() -> tuple[Path, FakeSlurm]:
    root = simtrees.take()
    slurm = FakeSlurm(root)
    config = root / "nichealthd.toml"
    config.write_text(config.read_text() + slurm.config)
    return root, slurm


def start(root: Path) -> SimDaemon:
    daemon = SimDaemon(root, ["--polling-interval", "200ms"])
    daemon.wait_log("ready")
    return daemon


def recable(root: Path) -> None:
    mutate.set_port(root, "mlx5_0", 1, state="ACTIVE", phys_state="LinkUp")


def record(root: Path) -> dict[str, object]:
    return json.loads((root / "var/lib/nichealthd/slurm.json").read_text())  # type: ignore[no-any-return]


def test_an_administrators_reason_like_ours_survives_a_fault_and_its_recovery() -> None:
    root, slurm = host()
    slurm.reason_file.write_text(ADMIN + "\n")
    daemon = start(root)
    try:
        mutate.uncable(root, "mlx5_0", 1)
        daemon.wait_log(f"has another reason ({ADMIN})")
        recable(root)
        daemon.wait_log("nothing to resume")
        assert slurm.reason() == ADMIN and slurm.calls() == []
        assert record(root)["reason"] == ""
    finally:
        assert daemon.stop() == 0, daemon.log()


def test_our_drain_resumes_after_a_kill_between_the_drain_and_its_record() -> None:
    root, slurm = host()
    slurm.kill_file.touch()
    daemon = start(root)
    try:
        mutate.uncable(root, "mlx5_0", 1)
        wait_until(lambda: daemon.proc.poll() is not None, "the daemon killed",
                   detail=daemon.log)
    finally:
        assert daemon.stop() == -signal.SIGKILL, daemon.log()
    assert slurm.reason() == REASON and slurm.calls() == ["drain"]
    assert record(root)["reason"] == "" and record(root)["draining"] == REASON
    daemon = start(root)
    try:
        daemon.wait_log("already drained by nichealthd")
        recable(root)
        daemon.wait_until(lambda: slurm.reason() == "none", "the node resumed")
        assert slurm.calls() == ["drain", "resume"]
        daemon.wait_until(lambda: record(root)["reason"] == "", "the record without a drain")
    finally:
        assert daemon.stop() == 0, daemon.log()
