"""The Slurm surface's keys (nichealthd.toml(5)), declared beside it as a family declares its own.

Plugged into the configuration's declarations when the surface is found (``..seam``): the
keys, defaults, bounds and man-page lines are those the daemon always had.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Tuple

from ...core.settings import Duration, Integer, Settings, boolean, command, setting, string


@dataclass(frozen=True)
class SlurmSettings(Settings):
    """A consumer of committed events with its own journal cursor that drains this node on a
    fatal event and may resume it once the node has recovered."""

    drain: bool = setting(
        "slurmDrain", False, boolean,
        "Drain this node in Slurm on a fatal event")
    resume: bool = setting(
        "slurmResume", False, boolean,
        "Resume the node once every fatal condition it was drained for has recovered")
    dry_run: bool = setting(
        "slurmDryRun", False, boolean,
        "Log the Slurm commands instead of running them")
    node_name: str = setting(
        "slurmNodeName", "", string,
        "The node's name in Slurm; empty means nodeName")
    drain_command: Tuple[str, ...] = setting(
        "slurmDrainCommand", ("scontrol", "update", "NodeName={node}", "State=DRAIN",
                              "Reason={reason}"), command,
        "The command that drains the node")
    resume_command: Tuple[str, ...] = setting(
        "slurmResumeCommand", ("scontrol", "update", "NodeName={node}", "State=RESUME"),
        command, "The command that resumes the node")
    reason_command: Tuple[str, ...] = setting(
        "slurmReasonCommand", ("sinfo", "-h", "-N", "-n", "{node}", "-o", "%E"), command,
        "The command that prints the node's current drain reason")
    command_timeout: float = setting(
        "slurmCommandTimeout", 10.0, Duration(1.0, 300.0),
        "Deadline of one Slurm command")
    retries: int = setting(
        "slurmRetries", 5, Integer(1, 100),
        "Attempts of one Slurm action, with backoff, before it counts as failed")

    def commands(self) -> Tuple[Tuple[str, Tuple[str, ...]], ...]:
        """Its three commands, only while ``slurmDrain`` is on (they run only then)."""
        if not self.drain:
            return ()
        return (("slurmDrainCommand", self.drain_command),
                ("slurmResumeCommand", self.resume_command),
                ("slurmReasonCommand", self.reason_command))
