"""Running a Slurm command: an argv list without a shell, with a deadline, never raising.

``{node}`` and ``{reason}`` are filled into each argument on its own, so a reason with
spaces, quotes or semicolons stays one argument (``Reason=...``) and can never become a
command. A missing program is an outcome like any failure, with what to install.
"""

from __future__ import annotations

import subprocess
from dataclasses import dataclass
from typing import Sequence

STDERR_MAX = 300  # characters of a failing command's message kept for the status
# What slurmctld answers a user who may not change nodes (Slurm 22.05 and later).
NOT_ADMIN = ("Invalid user id", "Access/permission denied")
ADMIN_HINT = ("the daemon's user is not a Slurm administrator: grant it AdminLevel=Admin "
              "(sacctmgr) or install the drop-in /usr/share/doc/nichealthd/examples/slurm.conf")


@dataclass(frozen=True)
class Outcome:
    """What one run gave; ``error`` is ``""`` on success. ``retry`` is False when running it
    again cannot help before something changes on the host (the program is missing)."""

    argv: tuple[str, ...]
    output: str = ""
    error: str = ""
    retry: bool = True

    @property
    def ok(self) -> bool:
        return not self.error


def fill(template: Sequence[str], node: str, reason: str = "") -> tuple[str, ...]:
    """The argv of a configured command (placeholders were checked by the config)."""
    return tuple(word.replace("{node}", node).replace("{reason}", reason)
                 for word in template)


def run(argv: tuple[str, ...], timeout: float) -> Outcome:
    """Run ``argv`` (stdin closed, output captured) within ``timeout`` seconds."""
    try:
        proc = subprocess.run(argv, stdin=subprocess.DEVNULL, capture_output=True, text=True,
                              errors="replace", timeout=timeout, check=False)
    except FileNotFoundError:
        return Outcome(argv, error=f"{argv[0]} not found: install Slurm's client commands "
                       f"(Debian: slurm-client; RHEL: slurm) or set the slurm*Command keys",
                       retry=False)
    except subprocess.TimeoutExpired:
        return Outcome(argv, error=f"{argv[0]} did not finish within {timeout:g} s")
    except OSError as exc:
        return Outcome(argv, error=f"cannot run {argv[0]}: {exc.strerror}", retry=False)
    if proc.returncode != 0:
        said = " ".join((proc.stderr.strip() or proc.stdout.strip()).split())[:STDERR_MAX]
        if any(text in said for text in NOT_ADMIN):
            said += f" ({ADMIN_HINT})"
        return Outcome(argv, proc.stdout, f"{argv[0]} exited with status {proc.returncode}"
                       + (f": {said}" if said else ""))
    return Outcome(argv, proc.stdout)
