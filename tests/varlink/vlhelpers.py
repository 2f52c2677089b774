"""Helpers of the varlink tests: nichealthd on a sim tree serving varlink, and a raw client.

The daemon is a real subprocess (``python -m nichealthd.runtime.daemon --dbus none
--varlink-socket DIR/io.nichealthd.Monitor``) polling a ``nichealthd-sim`` DGX-H100 tree; the
clients are the stock PyPI ``varlink`` package and :class:`Raw`, plain socket bytes (what a
bad client sends), which holds every reply to the interface file (:mod:`idl_values`). The temp
directory is world-readable so that a test can connect as nobody.
"""

from __future__ import annotations

import json
import os
import select
import shutil
import socket
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any, Callable, Optional

from idl_values import Replies

from nichealthd.surfaces.varlink import DESCRIPTION_FILE
from nichealthd.surfaces.varlink_protocol import NotACall, encode_call, parse_call, parse_reply
from tests.harness import SimDaemon, world_readable_sim

SOCKET_NAME = "io.nichealthd.Monitor"
_SHIPPED: list[Replies] = []  # the interface file's checker, parsed once


def shipped_replies() -> Replies:
    """The checker of the interface file the package ships."""
    if not _SHIPPED:
        with open(DESCRIPTION_FILE, encoding="utf-8") as handle:
            _SHIPPED.append(Replies(handle.read()))
    return _SHIPPED[0]


class Raw:
    """A varlink connection at the byte level: send anything, read NUL-framed replies.

    Every reply to a call it sent is checked against the interface (``replies``: the shipped
    file's unless given): a field the interface lacks, a wrong type or a missing field fails
    the test there. Bytes that are not a call get no check of what follows them."""

    def __init__(self, path: str, timeout: float = 10.0,
                 replies: Optional[Replies] = None) -> None:
        self.sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        self.sock.connect(path)  # blocking: waits while the listen backlog is full
        self.sock.settimeout(timeout)
        self.buffer = b""
        self.replies = replies or shipped_replies()
        self.sent = b""  # the part of a call sent so far
        self.pending: list[Optional[str]] = []  # the methods awaiting replies (None: unknown)

    def send(self, data: bytes) -> None:
        self.sock.sendall(data)
        self.sent += data
        while b"\0" in self.sent:
            frame, _, self.sent = self.sent.partition(b"\0")
            try:
                call = parse_call(frame)
            except NotACall:
                self.pending.append(None)
                continue
            if not call.oneway:
                self.pending.append(call.method)

    def call(self, method: str, parameters: Optional[dict[str, Any]] = None,
             more: bool = False, oneway: bool = False) -> None:
        self.send(encode_call(method, parameters, more=more, oneway=oneway))

    def reply(self) -> dict[str, Any]:
        """The next message as a dict (``error``, ``parameters``, ``continues``)."""
        while b"\0" not in self.buffer:
            chunk = self.sock.recv(1 << 16)
            if not chunk:
                raise ConnectionError("closed by the daemon")
            self.buffer += chunk
        data, _, self.buffer = self.buffer.partition(b"\0")
        error, parameters, continues = parse_reply(data)
        method = self.pending[0] if self.pending else None
        if self.pending and not continues:
            self.pending.pop(0)
        if method is not None:
            self.replies.check(method, error, parameters)
        return {"error": error, "parameters": parameters, "continues": continues}

    def ask(self, method: str, parameters: Optional[dict[str, Any]] = None) -> dict[str, Any]:
        self.call(method, parameters)
        return self.reply()

    def closed_by_peer(self) -> bool:
        """True once the daemon closed the connection (reads EOF or a reset)."""
        try:
            while True:
                chunk = self.sock.recv(1 << 16)
                if not chunk:
                    return True
        except (ConnectionResetError, BrokenPipeError):
            return True
        except socket.timeout:
            return False

    def close(self) -> None:
        self.sock.close()

    def __enter__(self) -> Raw:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


def make_sim(profile: str = "dgx-h100", **kwargs: Any) -> Path:
    return world_readable_sim(profile, **kwargs)


class VarlinkDaemon(SimDaemon):
    """nichealthd on a sim tree with the varlink API on ``self.socket``."""

    def __init__(self, root: Path, interval: str = "200ms",
                 extra: Optional[list[str]] = None, flag: bool = True,
                 preexec_fn: Optional[Callable[[], None]] = None) -> None:
        self.socket = str(root.parent / SOCKET_NAME)
        if not flag:  # the socket from the config file (varlinkSocket), as a reload sees it
            config = root / "nichealthd.toml"
            config.write_text(config.read_text().replace(
                'varlinkSocket = ""', f'varlinkSocket = "{self.socket}"'))
        super().__init__(root, ["--dbus", "none", "--polling-interval", interval,
                                *(["--varlink-socket", self.socket] if flag else []),
                                "--log-level", "debug", *(extra or [])],
                         preexec_fn=preexec_fn)

    def polls(self) -> int:
        with Raw(self.socket, timeout=5.0) as conn:
            answer = conn.ask("io.nichealthd.Monitor.GetStatus")
        return int(answer["parameters"]["status"]["poll_count"])

    def wait_ready(self) -> None:
        self.wait_until(lambda: self.polls() > 0, "nichealthd answering on varlink after a poll")

    def wait_polls(self, more: int) -> int:
        """Until ``more`` polls completed after this call (a change made before is seen)."""
        target = self.polls() + more
        self.wait_until(lambda: self.polls() >= target, f"{more} more polls")
        return target


def run_as(user: list[str], script: str, timeout: float = 30
           ) -> subprocess.CompletedProcess[str]:
    """A stdlib-only Python snippet run as another user: with the system's python3, which
    every user can run (a pyenv interpreter under /root may not be)."""
    return subprocess.run([*user, system_python(), "-c", script], capture_output=True,
                          text=True, timeout=timeout, cwd="/",
                          env={"PATH": os.environ.get("PATH", "/usr/bin:/bin")})


def system_python() -> str:
    """A python3 every user can run (a pyenv interpreter under /root may not be)."""
    return shutil.which("python3", path="/usr/bin:/bin") or sys.executable


def as_uid(uid: int) -> list[str]:
    """argv prefix: run as ``uid`` (its own group, no others)."""
    return ["setpriv", f"--reuid={uid}", f"--regid={uid}", "--clear-groups"]


def uid_switch_problem() -> str:
    """Why this process cannot run clients as other uids ("" when it can)."""
    if os.geteuid() != 0:
        return "switches to other uids with setpriv, which needs root (the suite runs as " \
               "an unprivileged user here)"
    if shutil.which("setpriv") is None:
        return "setpriv is not installed"
    return ""


class Holders:
    """Local users each holding ``each`` idle connections to ``path`` (holder.py run as each
    uid); ``held`` is what the daemon kept of each user's connections. Close to let go."""

    def __init__(self, path: str, uids: list[int], each: int, timeout: float = 60) -> None:
        self.work = tempfile.mkdtemp(prefix="nichealthd-holders-")
        os.chmod(self.work, 0o755)
        script = os.path.join(self.work, "holder.py")
        shutil.copy(Path(__file__).with_name("holder.py"), script)
        os.chmod(script, 0o644)
        self.procs: list[subprocess.Popen[str]] = []
        self.held: dict[int, int] = {}
        try:
            for uid in uids:
                self.procs.append(subprocess.Popen(
                    [*as_uid(uid), system_python(), script, path, str(each)], cwd="/",
                    stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True,
                    env={"PATH": os.environ.get("PATH", "/usr/bin:/bin")}))
            deadline = time.monotonic() + timeout
            for uid, proc in zip(uids, self.procs):
                assert proc.stdout is not None
                ready, _, _ = select.select([proc.stdout], [], [],
                                            max(0.0, deadline - time.monotonic()))
                line = proc.stdout.readline() if ready else ""
                if not line:
                    raise AssertionError(f"the holder of uid {uid} said nothing "
                                         f"(exit {proc.poll()})")
                self.held[uid] = int(json.loads(line)["held"])
        except BaseException:
            self.close()
            raise

    def close(self) -> None:
        for proc in self.procs:
            if proc.stdin is not None:
                proc.stdin.close()
            try:
                proc.wait(10)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait()
            if proc.stdout is not None:
                proc.stdout.close()
        self.procs = []
        shutil.rmtree(self.work, ignore_errors=True)

    def __enter__(self) -> Holders:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


def records(answer: dict[str, Any], key: str) -> list[dict[str, Any]]:
    assert answer["error"] is None, answer
    return list(answer["parameters"][key])


def dumps(value: Any) -> str:
    return json.dumps(value, sort_keys=True)
