"""The Slurm consumer over a real journal, with a stand-in for slurmctld (the node's reason
as the real one keeps it; tests/slurm/test_real_slurm.py runs the real one): at-least-once
from its own cursor, bounded attempts with backoff, dry run, the record across restarts,
and what a missing or failing command does."""

from __future__ import annotations

import json
import logging
from dataclasses import replace
from pathlib import Path
from typing import Optional

import pytest

from nichealthd.core.config import Config
from nichealthd.core.config_build import build_config
from nichealthd.core.events import HealthEvent
from nichealthd.storage.store import Journal
from nichealthd.surfaces.metrics import _slurm_families
from nichealthd.surfaces.slurm import command
from nichealthd.surfaces.slurm.command import Outcome
from nichealthd.surfaces.slurm.consumer import CONSUMER, SlurmConsumer
from nichealthd.surfaces.slurm.status import SlurmStatus

from .test_decide import down, event, up

REASON = "nichealthd: mlx5_0 1: state DOWN, phys_state Polling - no connectivity"


class Slurmctld:
    """The node's drain reason, changed by the default commands' argv; ``fail`` makes the
    next that many calls fail as an unreachable controller does."""

    def __init__(self) -> None:
        self.reason: Optional[str] = None
        self.calls: list[tuple[str, ...]] = []
        self.fail = 0

    def __call__(self, argv: tuple[str, ...], timeout: float) -> Outcome:
        self.calls.append(argv)
        if self.fail:
            self.fail -= 1
            return Outcome(argv, error="scontrol exited with status 1: Unable to contact "
                                       "slurm controller (connect failure)")
        if argv[0] == "sinfo":
            return Outcome(argv, (self.reason or "none") + "\n")
        if "State=DRAIN" in argv:
            self.reason = next(a for a in argv if a.startswith("Reason="))[len("Reason="):]
        elif "State=RESUME" in argv:
            self.reason = None
        return Outcome(argv)

    def changes(self) -> list[str]:
        return [a[3] for a in self.calls if a[0] == "scontrol"]


class Host:
    """A journal committed as the monitor commits, and consumers made on it."""

    def __init__(self, tmp_path: Path, **settings: object) -> None:
        values = {"stateFile": str(tmp_path / "state.json"), "nodeName": "node-a",
                  "slurmDrain": True, "slurmResume": True, **settings}
        self.config: Config = build_config(values, None, {})
        self.journal = Journal(self.config.state_dir)
        self.journal.recover(None)
        self.journal.register([CONSUMER])
        self.slurm = Slurmctld()
        self.sleeps: list[float] = []
        self.statuses: list[SlurmStatus] = []

    def commit(self, *events: HealthEvent) -> None:
        entries = self.journal.stamp(events, self.journal.last_seq + 1, "node-a",
                                     "EXECUTE_REMEDIATION")
        self.journal.append(entries)
        self.journal.committed()

    def consumer(self) -> SlurmConsumer:
        return SlurmConsumer(self.config, self.journal, runner=self.slurm,
                             sleep=self.sleep,
                             on_status=self.statuses.append)

    def sleep(self, seconds: float) -> bool:
        self.sleeps.append(seconds)
        return True

    @property
    def pending(self) -> int:
        return self.journal.depth(CONSUMER)


def test_drain_then_resume_from_its_own_cursor(tmp_path: Path) -> None:
    host = Host(tmp_path)
    consumer = host.consumer()
    host.commit(event(code="symbol_error", message="degraded"), down())
    consumer.step()
    assert host.slurm.reason == REASON and host.pending == 0
    assert host.slurm.changes() == ["State=DRAIN"]
    status = host.statuses[-1]
    assert status.holds_drain and status.drained_for == \
        ("InfiniBandStateCheck mlx5_0/1 port_state",)
    assert status.actions == {("drain", "ok"): 1} and status.last_action.startswith("drain ok")
    host.commit(down("mlx5_3"), up())
    consumer.step()
    assert host.slurm.changes() == ["State=DRAIN"]  # mlx5_3 still down: held, not resumed
    host.commit(up("mlx5_3"))
    consumer.step()
    assert host.slurm.reason is None and host.slurm.changes() == ["State=DRAIN", "State=RESUME"]
    assert host.statuses[-1].actions == {("drain", "ok"): 1, ("drain", "held"): 1,
                                         ("resume", "ok"): 1}
    assert host.statuses[-1].status_keys()["slurm_drained_for"] == []


def test_no_resume_when_a_fatal_event_follows_in_the_same_commit(tmp_path: Path) -> None:
    """A reboot's baselines clear every condition, then the port still down is fatal again:
    the node is not opened to the scheduler in between."""
    host = Host(tmp_path)
    consumer = host.consumer()
    host.commit(down())
    consumer.step()
    host.commit(HealthEvent("InfiniBandStateCheck", False, True, "clearing conditions of "
                            "earlier boots", "NONE", (), (), down().generated_at),
                down())
    consumer.step()
    assert host.slurm.changes() == ["State=DRAIN"] and host.slurm.reason == REASON
    assert consumer.record.reason == REASON and len(consumer.record.conditions) == 1
    host.commit(up())
    consumer.step()
    assert host.slurm.changes() == ["State=DRAIN", "State=RESUME"]


def test_an_administrators_reason_is_never_replaced_nor_lifted(tmp_path: Path) -> None:
    host = Host(tmp_path)
    consumer = host.consumer()
    host.commit(down())
    consumer.step()
    host.slurm.reason = "admin: replacing a DIMM"  # scontrol update ... Reason=...
    host.commit(up())
    consumer.step()
    assert host.slurm.reason == "admin: replacing a DIMM"
    assert host.slurm.changes() == ["State=DRAIN"]
    host.commit(down())  # drained by the administrator before the fault
    consumer.step()
    host.commit(up())
    consumer.step()
    assert host.slurm.reason == "admin: replacing a DIMM"
    assert host.slurm.changes() == ["State=DRAIN"]
    assert host.statuses[-1].actions[("drain", "skipped")] == 1
    assert host.statuses[-1].actions[("resume", "skipped")] == 1


def test_attempts_are_bounded_with_backoff_and_the_event_stays_pending(
        tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    host = Host(tmp_path, slurmRetries=4)
    consumer = host.consumer()
    host.commit(down())
    host.slurm.fail = 4  # the reason query fails every attempt
    with caplog.at_level(logging.ERROR, "nichealthd.slurm"):
        delay = consumer.step()
        assert len(host.slurm.calls) == 4 and host.sleeps == [1.0, 2.0, 4.0]
        assert delay == consumer.pause and host.pending == 1
        assert consumer.step() > 0 and len(host.slurm.calls) == 4  # paused, not hammering
        assert "Unable to contact slurm controller" in host.statuses[-1].last_error
        assert host.statuses[-1].actions == {("drain", "failed"): 1}
        consumer._retry_at = 0.0  # the pause is over
        host.slurm.fail = 4
        consumer.step()  # the same error again: logged once
    assert len([r for r in caplog.records if "failed" in r.getMessage()]) == 1
    consumer._retry_at = 0.0
    host.slurm.fail = 1  # one failure, then slurmctld answers: within this step's attempts
    consumer.step()
    assert host.slurm.reason == REASON and host.pending == 0
    assert host.statuses[-1].last_error == ""


def test_a_refused_drain_is_failing_on_every_surface_until_one_succeeds(tmp_path: Path
                                                                         ) -> None:
    """slurmctld refuses the daemon's user: the drain is not done, and the status says so
    (``failing``, the metric) instead of holding no condition as if none were open."""
    host = Host(tmp_path, slurmRetries=1)
    consumer = host.consumer()
    refused = "scontrol exited with status 1: slurm_update error: Invalid user id"
    answer = host.slurm.__call__

    def refusing(argv: tuple[str, ...], timeout: float) -> Outcome:
        if argv[0] == "scontrol":
            host.slurm.calls.append(argv)
            return Outcome(argv, error=refused)
        return answer(argv, timeout)

    consumer.runner = refusing
    host.commit(down())
    assert consumer.step() == consumer.pause and host.pending == 1
    status = host.statuses[-1]
    assert status.failing == f"drain of node node-a: {refused}"
    assert status.status_keys()["slurm_failing"] == status.failing
    assert not status.holds_drain and status.status_keys()["slurm_drain_held"] is False
    assert host.slurm.reason is None
    values = {m.name: m.samples[0].value for m in _slurm_families(status)
              if m.name != "nichealthd_slurm_actions"}
    assert values == {"nichealthd_slurm_drained": 0, "nichealthd_slurm_failing": 1}
    consumer.runner = host.slurm  # Admin granted: the retry drains, failing is over
    consumer._retry_at = 0.0
    consumer.step()
    status = host.statuses[-1]
    assert (status.failing, status.holds_drain) == ("", True)
    assert str(host.slurm.reason) == REASON  # (narrowed to None above for mypy)
    values = {m.name: m.samples[0].value for m in _slurm_families(status)
              if m.name != "nichealthd_slurm_actions"}
    assert values == {"nichealthd_slurm_drained": 1, "nichealthd_slurm_failing": 0}
    host.commit(down("mlx5_3"))
    consumer.runner = refusing
    host.config = replace(host.config, slurm_drain=False)  # switched off by a reload
    consumer.reconfigure(host.config)
    consumer.step()
    assert host.statuses[-1].failing == ""


def test_the_record_and_cursor_survive_a_restart(tmp_path: Path) -> None:
    host = Host(tmp_path)
    host.commit(down())
    host.consumer().step()
    record = json.loads((tmp_path / "slurm.json").read_text())
    assert record["reason"] == REASON and record["node"] == "node-a"
    host.commit(up())
    restarted = Journal(host.config.state_dir)  # a new process: cursor and record from disk
    restarted.recover(None)
    restarted.register([CONSUMER])
    assert restarted.depth(CONSUMER) == 1
    consumer = SlurmConsumer(host.config, restarted, runner=host.slurm)
    assert consumer.record.reason == REASON
    consumer.step()
    assert host.slurm.reason is None and restarted.depth(CONSUMER) == 0


def test_a_replayed_event_is_a_no_op(tmp_path: Path) -> None:
    """A crash after the command and before the cursor moved replays the event."""
    host = Host(tmp_path)
    host.commit(down())
    consumer = host.consumer()
    consumer.step()
    cursor = host.journal.cursor(CONSUMER)
    host.journal._cursors[CONSUMER] = cursor - 1  # the cursor as it was before the crash
    consumer.step()
    assert host.slurm.changes() == ["State=DRAIN"]


def test_dry_run_logs_and_runs_nothing(tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    host = Host(tmp_path, slurmDryRun=True)
    consumer = host.consumer()
    with caplog.at_level(logging.INFO, "nichealthd.slurm"):
        host.commit(down())
        consumer.step()
        host.commit(up())
        consumer.step()
    assert host.slurm.calls == []
    assert ("would run: scontrol update NodeName=node-a State=DRAIN Reason=" + REASON
            in caplog.text)
    assert "would run: scontrol update NodeName=node-a State=RESUME" in caplog.text
    assert host.statuses[-1].mode == "dry-run"
    assert host.statuses[-1].actions == {("drain", "dry_run"): 1, ("resume", "dry_run"): 1}


def test_off_consumes_nothing(tmp_path: Path) -> None:
    host = Host(tmp_path)
    consumer = host.consumer()
    consumer.reconfigure(replace(host.config, slurm_drain=False))
    host.commit(down())
    consumer.step()
    assert host.slurm.calls == [] and host.pending == 1


def test_a_missing_scontrol_is_a_status_error_not_a_crash(tmp_path: Path) -> None:
    host = Host(tmp_path, slurmReasonCommand="/nonexistent/sinfo -n {node}")
    consumer = SlurmConsumer(host.config, host.journal, sleep=lambda s: True,
                             on_status=host.statuses.append)
    host.commit(down())
    assert consumer.step() == consumer.pause
    assert "/nonexistent/sinfo not found: install Slurm's client commands" in \
        host.statuses[-1].last_error
    assert host.pending == 1


FAKE_SCONTROL = ("printf '%s\\n' \"$@\"\n[ \"$1\" = sleep ] && exec sleep 5\n"
                 "[ \"$1\" = fail ] && { echo 'Invalid node name specified' >&2; exit 1; }\n"
                 "[ \"$1\" = user ] && { echo 'slurm_update error: Invalid user id' >&2; "
                 "exit 1; }\nexit 0\n")


def test_commands_run_without_a_shell_with_a_deadline() -> None:
    """The stand-in is a script given to the system's sh (a program only root can change:
    one in a temp directory is refused, tests/slurm/test_trusted_commands.py); the reason
    reaches it as one argument, never as shell text."""
    fake = ("sh", "-c", FAKE_SCONTROL, "fake-scontrol")
    argv = command.fill((*fake, "update", "NodeName={node}", "Reason={reason}"),
                        "node-a", "nichealthd: a b; $(reboot) \"x\"")
    outcome = command.run(argv, 5.0)
    assert outcome.ok and outcome.output.splitlines() == \
        ["update", "NodeName=node-a", "Reason=nichealthd: a b; $(reboot) \"x\""]
    failed = command.run((*fake, "fail"), 5.0)
    assert failed.error == "sh exited with status 1: Invalid node name specified"
    assert failed.retry
    denied = command.run((*fake, "user"), 5.0)
    assert denied.error.endswith("Invalid user id (the daemon's user is not a Slurm "
                                 "administrator: grant it AdminLevel=Admin (sacctmgr) or "
                                 "install the drop-in /usr/share/doc/nichealthd/examples/"
                                 "slurm.conf)")
    slow = command.run((*fake, "sleep"), 0.5)
    assert slow.error == "sh did not finish within 0.5 s" and slow.retry


def test_the_command_keys_are_validated() -> None:
    with pytest.raises(Exception, match="unknown placeholder or stray brace"):
        build_config({"slurmDrainCommand": "scontrol update NodeName={host}"}, None, {})
    with pytest.raises(Exception, match="cannot split"):
        build_config({"slurmResumeCommand": "scontrol 'update"}, None, {})
    config = build_config({"slurmDrainCommand": 'scontrol update "NodeName={node}" '
                                                "State=DRAIN 'Reason={reason}'"}, None, {})
    assert config.slurm_drain_command == ("scontrol", "update", "NodeName={node}",
                                          "State=DRAIN", "Reason={reason}")


ADMIN = "nichealthd: held by admin bob for cable check INC-4711"


def test_an_administrators_reason_that_starts_like_ours_is_not_ours(tmp_path: Path) -> None:
    """nichealthd knows its drains by the exact reasons its record holds, never by the
    prefix: an administrator's ``nichealthd: ...`` survives a fatal event and its recovery,
    before and after a restart."""
    host = Host(tmp_path)
    host.slurm.reason = ADMIN
    consumer = host.consumer()
    host.commit(down())
    consumer.step()
    assert host.slurm.reason == ADMIN and host.slurm.changes() == []
    assert consumer.record.reason == "" and host.statuses[-1].actions == \
        {("drain", "skipped"): 1}
    host.commit(up())
    consumer.step()
    assert host.slurm.reason == ADMIN and host.slurm.changes() == []
    restarted = host.consumer()  # a new process reads the record from slurm.json
    assert not restarted.record.set_by_us(ADMIN)
    host.commit(down())
    restarted.step()
    host.commit(up())
    restarted.step()
    assert host.slurm.reason == ADMIN and host.slurm.changes() == [] and host.pending == 0


def test_an_administrators_reason_over_ours_is_left_when_it_starts_like_ours(
        tmp_path: Path) -> None:
    host = Host(tmp_path)
    consumer = host.consumer()
    host.commit(down())
    consumer.step()
    host.slurm.reason = ADMIN  # the administrator takes the drain over
    host.commit(down("mlx5_3"))  # a second fault: not drained over the administrator's
    consumer.step()
    assert host.slurm.reason == ADMIN and consumer.record.reason == ""
    host.commit(up(), up("mlx5_3"))
    consumer.step()
    assert host.slurm.reason == ADMIN and host.slurm.changes() == ["State=DRAIN"]


class Killed(BaseException):
    """The process dying (SIGKILL) right after slurmctld took the drain."""


def test_our_drain_is_known_after_a_kill_between_the_command_and_the_record(
        tmp_path: Path) -> None:
    host = Host(tmp_path)
    consumer = host.consumer()
    host.commit(down())

    def dies_after_the_drain(argv: tuple[str, ...], timeout: float) -> Outcome:
        outcome = host.slurm(argv, timeout)
        if "State=DRAIN" in argv:
            raise Killed
        return outcome

    consumer.runner = dies_after_the_drain
    with pytest.raises(Killed):
        consumer.step()
    record = json.loads((tmp_path / "slurm.json").read_text())
    assert record["reason"] == "" and record["draining"] == REASON
    restarted = Journal(host.config.state_dir)
    restarted.recover(None)
    restarted.register([CONSUMER])
    assert restarted.depth(CONSUMER) == 1
    host.journal = restarted
    consumer = host.consumer()
    consumer.step()  # the replayed fatal event: the node holds the reason being set
    assert host.slurm.changes() == ["State=DRAIN"] and consumer.record.reason == REASON
    assert consumer.record.draining == "" and host.statuses[-1].actions == {("drain", "held"): 1}
    host.commit(up())
    consumer.step()
    assert host.slurm.reason is None and host.slurm.changes() == ["State=DRAIN", "State=RESUME"]


def test_a_record_of_an_earlier_version_without_draining_is_read(tmp_path: Path) -> None:
    (tmp_path / "slurm.json").write_text(json.dumps(
        {"version": 1, "node": "node-a", "reason": REASON, "conditions": []}))
    consumer = Host(tmp_path).consumer()
    assert consumer.record.reason == REASON and consumer.record.draining == ""
