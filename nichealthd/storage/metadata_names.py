"""The GPU metadata file's device names as resolved to PCI functions, kept across restarts.

NVSentinel's metadata file (link-state-detection §12.2) keys its GPU↔NIC matrix by RDMA device name,
the name each device had when the collector wrote the file. A driver reload may permute the names
while the file stays as it was, so the daemon resolves each name to the PCI function it named
the first time it reads that content (:func:`nichealthd.sources.gpu_metadata.resolve_names`),
and keeps that resolution, here, for as long as the content is the same: a re-read of the
same (stale) file after a rename, or a restart after a rename made while the daemon was
stopped, must not resolve the old names to the devices that carry them now. A rewritten file
(another digest) is resolved afresh.

Keyed by content, not by time: comparing the file's mtime with a rename's ``renamed_at``
cannot order a file written while the daemon was stopped against a reload made then (the
rename is only seen, and stamped, at the first poll after the start). Where the content is
the same, its rows are the same for every function it was resolved to, whoever wrote it and
when; what stays unknowable is a file first read after a rename that it predates.

The record is small (``{"version", "sha256", "names": {name: address}}``) and lives beside the
state file (``metadata-names.json``); anything unusable in it is no record (resolved afresh).
"""

from __future__ import annotations

import json
import logging
import os
import stat
from typing import Mapping, Optional

from .store import atomic_write

log = logging.getLogger("nichealthd.store")

NAMES_FILE = "metadata-names.json"
VERSION = 1
MAX_BYTES = 1024 * 1024  # a 72-GPU host has a few hundred names


def names_path(state_dir: str) -> str:
    return os.path.join(state_dir, NAMES_FILE)


def load_names(path: str, digest: str) -> Optional[dict[str, str]]:
    """The resolution kept for the metadata content of ``digest``; None when there is none
    (no record, another content, or a record that cannot be used)."""
    try:  # never blocks: a FIFO put here is not a regular file
        fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK | os.O_CLOEXEC)
        try:
            raw = os.read(fd, MAX_BYTES + 1) if stat.S_ISREG(os.fstat(fd).st_mode) else b""
        finally:
            os.close(fd)
    except FileNotFoundError:
        return None
    except OSError as exc:
        log.debug("cannot read %s: %s; the GPU metadata's device names are resolved afresh",
                  path, exc.strerror)
        return None
    try:
        data = json.loads(raw) if len(raw) <= MAX_BYTES else None
    except (ValueError, RecursionError):
        data = None
    names = data.get("names") if isinstance(data, dict) else None
    if (not isinstance(data, dict) or data.get("version") != VERSION
            or not isinstance(data.get("sha256"), str) or not isinstance(names, dict)
            or not all(isinstance(k, str) and isinstance(v, str) for k, v in names.items())):
        log.debug("%s is not a record of resolved device names; the GPU metadata's device "
                  "names are resolved afresh (and the record rewritten)", path)
        return None
    return dict(names) if data["sha256"] == digest else None


def save_names(path: str, digest: str, names: Mapping[str, str]) -> bool:
    """Keep ``names`` for the content of ``digest``; False when it cannot be written: the
    resolution then holds for this read only."""
    data = {"version": VERSION, "sha256": digest, "names": dict(sorted(names.items()))}
    try:  # at the first start, the topology is read before the state directory is made
        os.makedirs(os.path.dirname(os.path.abspath(path)), exist_ok=True)
        atomic_write(path, json.dumps(data, indent=1).encode() + b"\n", 0o644)
    except OSError as exc:
        # Debug only: the state file lives in the same directory, and its commits say loudly
        # that the directory is unusable (a start before it is made says only that).
        log.debug("cannot write %s: %s; the GPU metadata's device names will be resolved "
                  "afresh at its next read", path, exc.strerror or exc)
        return False
    return True
