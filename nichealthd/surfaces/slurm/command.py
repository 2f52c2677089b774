"""Running a Slurm command: an argv list without a shell, with a deadline, never raising.

``{node}`` and ``{reason}`` are filled into each argument on its own, so a reason with
spaces, quotes or semicolons stays one argument (``Reason=...``) and can never become a
command. A missing program is an outcome like any failure, with what to install. What a
command prints is bounded (:data:`OUTPUT_MAX`): no output, however large, grows the daemon.
"""

from __future__ import annotations

import os
import selectors
import subprocess
import time
from dataclasses import dataclass
from typing import Optional, Sequence

from ...sources import trust

STDERR_MAX = 300  # characters of a failing command's message kept for the status
# Bytes kept of each of a command's outputs: a reason, or ``scontrol show node``'s few lines
# around it, is far less; more is read and dropped (a broken or hostile command's flood).
OUTPUT_MAX = 64 * 1024
CHUNK = 64 * 1024
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
    """Run ``argv`` (stdin closed, output captured) within ``timeout`` seconds.

    The program is found in the trusted directories, not the inherited ``PATH``, and checked
    again right before it runs (:mod:`...sources.trust`): what the config check passed at
    start may have been moved or made writable since."""
    program = trust.resolve(argv[0])
    refused = trust.command_problem(program, trust.owners())
    if refused:
        return Outcome(argv, error=f"refused to run {argv[0]}: {refused}", retry=False)
    missing = Outcome(argv, error=f"{argv[0]} not found: install Slurm's client commands "
                      f"(Debian: slurm-client; RHEL: slurm) or set the slurm*Command keys",
                      retry=False)
    if "/" not in program:  # in none of the trusted directories: never looked up in PATH
        return missing
    try:
        proc = subprocess.Popen(argv, executable=program, stdin=subprocess.DEVNULL,
                                stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    except FileNotFoundError:
        return missing
    except OSError as exc:
        return Outcome(argv, error=f"cannot run {argv[0]}: {exc.strerror}", retry=False)
    with proc:
        captured = _bounded_output(proc, timeout)
        if captured is None:
            proc.kill()
            proc.wait()
            return Outcome(argv, error=f"{argv[0]} did not finish within {timeout:g} s")
    stdout, stderr = (_text(data) for data in captured)
    if proc.returncode != 0:
        said = " ".join((stderr.strip() or stdout.strip()).split())[:STDERR_MAX]
        if any(text in said for text in NOT_ADMIN):
            said += f" ({ADMIN_HINT})"
        return Outcome(argv, stdout, f"{argv[0]} exited with status {proc.returncode}"
                       + (f": {said}" if said else ""))
    return Outcome(argv, stdout)


def _text(data: bytes) -> str:
    """Decoded as ``text=True`` does: bad bytes replaced, any line ending read as ``\\n``."""
    return data.decode(errors="replace").replace("\r\n", "\n").replace("\r", "\n")


def _bounded_output(proc: subprocess.Popen[bytes], timeout: float
                    ) -> Optional[tuple[bytes, bytes]]:
    """The first :data:`OUTPUT_MAX` bytes of the process's stdout and stderr once it ended;
    None when it did not end (and close both) within ``timeout`` seconds.

    A reason is one short line, so no more is kept: the rest is read and dropped as it comes
    (the command is not stopped by a full pipe, nor made to fail by a closed one), and a
    command that prints without end costs a fixed buffer until its deadline."""
    assert proc.stdout is not None and proc.stderr is not None
    deadline = time.monotonic() + timeout
    kept = {proc.stdout.fileno(): bytearray(), proc.stderr.fileno(): bytearray()}
    with selectors.DefaultSelector() as selector:
        for fd in kept:
            os.set_blocking(fd, False)
            selector.register(fd, selectors.EVENT_READ)
        while selector.get_map():
            left = deadline - time.monotonic()
            if left <= 0:
                return None
            for key, _ in selector.select(left):
                fd = int(key.fd)
                try:
                    chunk = os.read(fd, CHUNK)
                except BlockingIOError:
                    continue
                if not chunk:
                    selector.unregister(fd)
                    continue
                room = OUTPUT_MAX - len(kept[fd])
                if room > 0:
                    kept[fd] += chunk[:room]
    try:
        proc.wait(max(0.0, deadline - time.monotonic()))
    except subprocess.TimeoutExpired:
        return None
    return bytes(kept[proc.stdout.fileno()]), bytes(kept[proc.stderr.fileno()])
