"""Whether a file the daemon obeys may be trusted: the config, and the commands it names.

The config names the commands nichealthd runs (the Slurm ones; under the Slurm drop-in it
runs them as root), so whoever can change the config or a command's file, or a directory
on the way to it, gets to run anything as the daemon's user. A file is trusted when it is
owned by root or by the user the daemon runs as and nobody else may write it, which is
sudo's rule for sudoers and the commands it runs, and OpenSSH's ``StrictModes``. Like
Debian's OpenSSH, a file writable by its group is accepted when that group is its owner's
private group (no other member): what ``umask 002`` makes for users with a group of their
own. A directory is held to the same rule, sticky or not (``/tmp`` is never trusted).

A command named without a ``/`` is looked up in :data:`TRUSTED_PATH`, never in the
``PATH`` the daemon inherited, and run by that absolute path.
"""

from __future__ import annotations

import grp
import os
import pwd
import stat
from typing import Collection, Optional

# systemd's default PATH for services, then the merged-/usr links: where a distribution
# installs Slurm's client commands (scontrol, sinfo).
TRUSTED_PATH = ("/usr/local/sbin", "/usr/local/bin", "/usr/sbin", "/usr/bin", "/sbin", "/bin")


def owners() -> frozenset[int]:
    """The owners a trusted file may have: root and the user this process runs as."""
    return frozenset({0, os.geteuid()})


def _user(uid: int) -> str:
    try:
        return f"{pwd.getpwuid(uid).pw_name} (uid {uid})"
    except KeyError:
        return f"uid {uid}"


def _group(gid: int) -> str:
    try:
        return grp.getgrgid(gid).gr_name
    except KeyError:
        return f"gid {gid}"


def _private_group(info: os.stat_result) -> bool:
    """Whether the file's group has exactly one member, its owner (Debian's OpenSSH rule)."""
    try:
        group = grp.getgrgid(info.st_gid)
        owner = pwd.getpwuid(info.st_uid)
    except KeyError:
        return False
    members = 0
    for user in pwd.getpwall():
        if user.pw_gid == group.gr_gid:
            if user.pw_uid != info.st_uid:
                return False
            members += 1
    if group.gr_mem:
        if group.gr_mem != [owner.pw_name]:
            return False
        members += 1
    return members > 0


def problem(info: os.stat_result, allowed: Collection[int]) -> Optional[str]:
    """Why a file or directory with this status may not be trusted; None when it may."""
    if info.st_uid not in allowed:
        names = " or ".join(_user(uid) for uid in sorted(allowed))
        return f"is owned by {_user(info.st_uid)}, not by {names}"
    mode = stat.S_IMODE(info.st_mode)
    if mode & stat.S_IWOTH:
        return f"is writable by others (mode {mode:04o})"
    if mode & stat.S_IWGRP and not _private_group(info):
        return f"is writable by its group {_group(info.st_gid)} (mode {mode:04o})"
    return None


def fix(info: os.stat_result, path: str, allowed: Collection[int]) -> str:
    """The command that makes ``path`` trusted, for the message."""
    if info.st_uid not in allowed:
        return f"chown root {path}" + ("" if not stat.S_IMODE(info.st_mode) & 0o022
                                        else f" && chmod go-w {path}")
    return f"chmod go-w {path}"


def resolve(program: str) -> str:
    """The absolute path a command's program is run by: as given when it has a ``/``, else
    the first executable file of that name in :data:`TRUSTED_PATH` (``program`` itself when
    there is none: running it then fails as a missing program)."""
    if "/" in program:
        return program
    for directory in TRUSTED_PATH:
        candidate = os.path.join(directory, program)
        if os.path.isfile(candidate) and os.access(candidate, os.X_OK):
            return candidate
    return program


def command_problem(path: str, allowed: Collection[int]) -> Optional[str]:
    """Why the program at ``path`` (as :func:`resolve` gives it) may not be run; None when
    it may. A program that does not exist may be run (it fails as missing) when the part of
    its path that exists is trusted: nobody else can create it there."""
    if "/" not in path:
        return None  # found nowhere in TRUSTED_PATH: missing
    if not os.path.isabs(path):
        return (f"{path} is not an absolute path: name the program by its full path "
                f"(or by its bare name, looked up in {':'.join(TRUSTED_PATH)})")
    chains = [path]
    real = os.path.realpath(path)
    if real != path:
        chains.append(real)
    for chain in chains:
        found = _chain_problem(chain, allowed)
        if found:
            return found
    return None


def _chain_problem(path: str, allowed: Collection[int]) -> Optional[str]:
    """The first untrusted directory from ``/`` down to ``path``, or ``path`` itself."""
    parts = [p for p in path.split("/") if p]
    where = "/"
    for index in range(len(parts) + 1):
        if index:
            where = os.path.join(where, parts[index - 1])
        try:
            info = os.stat(where)
        except FileNotFoundError:
            return None
        except OSError as exc:
            return f"cannot check {where}: {exc.strerror}"
        last = index == len(parts)
        if last and not stat.S_ISREG(info.st_mode):
            return f"{where} is not a regular file"
        found = problem(info, allowed)
        if found and last:
            return (f"{where} {found}: whoever can write it chooses what nichealthd runs; "
                    f"{fix(info, where, allowed)}")
        if found:
            return (f"{where}, a directory on the way to {path}, {found}: whoever can write "
                    f"it chooses what nichealthd runs; keep the program in directories only "
                    f"root can change, such as /usr/local/sbin")
    return None
