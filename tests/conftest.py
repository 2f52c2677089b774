"""Shared test setup: fast temp dirs, markers, and helpers to run the real programs."""

from __future__ import annotations

import gc
import importlib.util
import os
import shutil
import tempfile
import time
from typing import Dict, Iterator, List, Tuple

import pytest

from nichealthd.sim.journal import remote_binary
from nichealthd.surfaces.seam import surfaces
from tests import simtrees
from tests.declared_records import hold_families
from tests.harness import clean_environment

# Before any test starts a daemon: nothing inherited from the shell, systemd unit or
# container that runs the suite (its NOTIFY_SOCKET, LISTEN_FDS, DBUS_* ...) reaches one.
clean_environment()

# A test may leave this many fds open over the whole session without failing: libraries that
# open one on first use and keep it (grpc's epoll, an import's cache) are not leaks. Anything
# more is: the suite must pass under the default ``ulimit -n`` 1024.
LAZY_FDS = 8
# What /dev/shm must have free to take the suite's temp files: the sim trees kept between tests
# (tests/simtrees.py: up to 200,000 entries, 600 MiB), those in use, the tests' tmp_path dirs.
SHM_BYTES = 2 << 30
SHM_INODES = 300_000
_FD_KEY = pytest.StashKey[List[Tuple[str, List[str]]]]()

# Every record key a family gives in this process is one it declares, of its declared type.
hold_families()
# The surfaces' settings are keys of every configuration read here, as in the daemon.
surfaces()


def open_fds() -> Dict[int, str]:
    """fd -> what it points at, for this process (empty where /proc is missing)."""
    fds: Dict[int, str] = {}
    try:
        names = os.listdir("/proc/self/fd")
    except OSError:
        return fds
    for name in names:
        try:
            fds[int(name)] = os.readlink(f"/proc/self/fd/{name}")
        except OSError:
            pass  # the fd listdir itself used, already closed
    return fds


def _grown(before: Dict[int, str], after: Dict[int, str]) -> List[str]:
    return [f"{fd} -> {target}" for fd, target in sorted(after.items())
            if before.get(fd) != target]


def _settled_growth(before: Dict[int, str], wait: float = 2.0) -> List[str]:
    """fds opened since ``before`` that stay open: objects already dropped get collected, and
    libraries that close on a thread of their own (gRPC shuts its poller down in the
    background once its last channel/server is gone) get ``wait`` seconds to do so."""
    deadline = time.monotonic() + wait
    while True:
        grown = _grown(before, open_fds())
        if not grown or time.monotonic() >= deadline:
            return grown
        gc.collect()
        time.sleep(0.05)


def _brief(fds: List[str], limit: int = 4) -> str:
    """A leak report short enough to read: the count and the first few fds."""
    more = f" and {len(fds) - limit} more" if len(fds) > limit else ""
    return f"{len(fds)} fd(s): {', '.join(fds[:limit])}{more}"


@pytest.fixture(autouse=True)
def _closes_what_it_opens(request: pytest.FixtureRequest) -> Iterator[None]:
    """Fail a test (and its function-scoped fixtures) that leaves fds open.

    Set up before and torn down after every other function-scoped fixture, so what a fixture
    opens and closes again is not counted; module and session fixtures are checked as a whole
    at the end of the session (pytest_sessionfinish).
    """
    before = open_fds()
    yield
    grown = _settled_growth(before)
    if not grown:
        return
    leaks = request.config.stash.setdefault(_FD_KEY, [])
    leaks.append((request.node.nodeid, grown))
    total = sum(len(fds) for _, fds in leaks)
    if total > LAZY_FDS:
        earlier = "; ".join(f"{nodeid}: {len(fds)}" for nodeid, fds in leaks[:-1]) or "none"
        pytest.fail(f"this test left {_brief(grown)} open (the session allows {LAZY_FDS} "
                    f"lazily-opened library fds in all; fds left by earlier tests: {earlier})",
                    pytrace=False)


@pytest.fixture
def journal_reader() -> None:
    """For the tests that read real journal files: python3-systemd's reader reads them and
    systemd-journal-remote writes them. Skipped without them; failed without them where
    NICHEALTHD_REQUIRE_JOURNAL is set (CI, whose .ci/system-deps.sh installs both)."""
    reader = importlib.util.find_spec("systemd") is not None \
        and importlib.util.find_spec("systemd.journal") is not None
    missing = [part for part, there in (
        ("python3-systemd's journal reader (pip: the [journal] extra)", reader),
        ("systemd-journal-remote", remote_binary() is not None)) if not there]
    if missing:
        why = f"needs {' and '.join(missing)} (.ci/system-deps.sh installs them)"
        if os.environ.get("NICHEALTHD_REQUIRE_JOURNAL"):
            pytest.fail(f"{why}, and NICHEALTHD_REQUIRE_JOURNAL is set")
        pytest.skip(why)


@pytest.fixture(autouse=True)
def _sim_trees_back() -> Iterator[None]:
    """The sim trees a test takes (tests/simtrees.py) are its own until it ends, after every
    other fixture of it (its daemons stopped)."""
    simtrees.begin_test()
    yield
    simtrees.end_test()


def pytest_sessionstart(session: pytest.Session) -> None:
    session.config._nichealthd_fds = open_fds()  # type: ignore[attr-defined]


def roomy_shm(path: str = "/dev/shm") -> bool:
    """Whether ``path`` is a tmpfs with room for the suite's temp files (a container's /dev/shm
    is often 64 MiB: then the suite stays in TMPDIR)."""
    try:
        fs = os.statvfs(path)
    except OSError:
        return False
    return (os.access(path, os.W_OK) and fs.f_bavail * fs.f_frsize >= SHM_BYTES
            and fs.f_favail >= SHM_INODES)


def pytest_configure(config: pytest.Config) -> None:
    # Sim trees are thousands of small files; on a tmpfs they build ten times faster.
    if config.option.basetemp is None and roomy_shm():
        config.option.basetemp = tempfile.mkdtemp(prefix="nichealthd-tests-", dir="/dev/shm")
        config._nichealthd_tmp = config.option.basetemp  # type: ignore[attr-defined]
    simtrees.open_pool("/dev/shm" if getattr(config, "_nichealthd_tmp", None) else None)
    for marker, text in (("slow", "takes more than ~10 s"),
                         ("e2e", "boots a real systemd in a container"),
                         ("packaging", "builds the .deb/.rpm packages"),
                         ("root", "acts as root and as other users: needs root, else skipped")):
        config.addinivalue_line("markers", f"{marker}: {text}")


def pytest_terminal_summary(terminalreporter: pytest.TerminalReporter) -> None:
    said = simtrees.summary()
    if said:
        terminalreporter.write_line(said)


def pytest_unconfigure(config: pytest.Config) -> None:
    simtrees.close_pool()
    created = getattr(config, "_nichealthd_tmp", None)
    if created:
        shutil.rmtree(created, ignore_errors=True)


def pytest_sessionfinish(session: pytest.Session, exitstatus: int) -> None:
    """Fail the run if the session as a whole (module/session fixtures too) leaked fds."""
    grown = _settled_growth(getattr(session.config, "_nichealthd_fds", {}))
    leaks = session.config.stash.get(_FD_KEY, [])
    if leaks:
        print("\nfds left open by tests:")
        for nodeid, fds in leaks:
            print(f"  {nodeid}: {_brief(fds)}")
    if len(grown) > LAZY_FDS:
        print(f"\nthe test session left {_brief(grown, 12)} open (at most {LAZY_FDS} allowed "
              f"for lazily-opened library fds)")
        if session.exitstatus == 0:
            session.exitstatus = pytest.ExitCode.TESTS_FAILED
