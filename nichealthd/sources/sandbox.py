"""Configured paths that the installed service's sandbox hides, and what to say about them.

The unit runs with ``PrivateTmp=yes`` (a private, empty ``/tmp`` and ``/var/tmp``) and
``ProtectHome=yes`` (``/home``, ``/root`` and ``/run/user`` empty and inaccessible): a
``nichealthd-sim`` tree an operator made under one of them exists for the operator's shell and
not for the service. Without a word, the service would watch nothing and call the host
healthy. These helpers name the setting and the way out, from the path alone; whether the path
is visible is asked of the file system, so a tree that exists (a daemon run by hand) gets no
hint.
"""

from __future__ import annotations

import os

# Path prefix -> the unit setting that hides it.
HIDDEN = (("/tmp", "PrivateTmp=yes"), ("/var/tmp", "PrivateTmp=yes"),
          ("/home", "ProtectHome=yes"), ("/root", "ProtectHome=yes"),
          ("/run/user", "ProtectHome=yes"))
WHAT_IT_DOES = {
    "PrivateTmp=yes": "makes /tmp and /var/tmp private to it and empty",
    "ProtectHome=yes": "makes /home, /root and /run/user empty and inaccessible to it",
}
ELSEWHERE = "/srv/nichealthd-sim"


def hidden_by(path: str) -> str:
    """The unit setting that hides ``path`` from the service (``PrivateTmp=yes``), or ""."""
    path = os.path.normpath(path) if path else ""
    for prefix, setting in HIDDEN:
        if path == prefix or path.startswith(prefix + "/"):
            return setting
    return ""


def sandbox_hint(path: str, key: str = "") -> str:
    """``; if this is the installed service: its PrivateTmp=yes makes /tmp …`` when ``path``
    does not exist and lies where the sandbox hides it; else ""."""
    setting = hidden_by(path)
    if not setting or os.path.exists(path):
        return ""
    target = f" and point {key} there" if key else ""
    return (f"; if this is the installed service: its {setting} {WHAT_IT_DOES[setting]}, so "
            f"put the tree elsewhere (e.g. {ELSEWHERE}){target}")


def hidden_paths(paths: dict[str, str]) -> list[str]:
    """One warning per configured path (key -> path) the service cannot see because of its
    sandbox: a directory that does not exist, or a file whose directory does not exist (a
    file alone may be absent on purpose: a tree made without GPU metadata)."""
    warnings = []
    for key, path in paths.items():
        if not path or not hidden_by(path):
            continue
        directory = path if key.endswith("Root") else os.path.dirname(path)
        if os.path.isdir(directory):
            continue
        warnings.append(f"{key} {path}: {directory} does not exist for nichealthd"
                        f"{sandbox_hint(directory, key)}")
    return warnings


def sysfs_root_problem(sysfs_root: str) -> str:
    """Why nothing under the configured sysfs root can be seen: it has no ``class`` directory
    at all (every sysfs has one; a host without RDMA devices lacks only
    ``class/infiniband``), so the daemon is blind, not looking at a host without devices.
    "" when it has one."""
    if os.path.isdir(os.path.join(sysfs_root, "class")):
        return ""
    return (f"sysfs root {sysfs_root} has no class directory: nothing is watched"
            f"{sandbox_hint(sysfs_root, 'sysfsRoot')}")
