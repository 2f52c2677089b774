"""The suite runs in a clean environment whatever starts it: a daemon under test never
inherits the NOTIFY_SOCKET of a container's manager (systemd-nspawn sets one, and the daemon
then logged "sd_notify ... Permission denied"), LISTEN_FDS, WATCHDOG_* or DBUS_*
(tests/harness.py: clean_environment)."""

from __future__ import annotations

import os
import subprocess
import sys

import pytest

from .harness import INHERITED, INHERITED_PREFIXES, REPO, clean_environment

SET_BY_A_CONTAINER = {"NOTIFY_SOCKET": "/run/host/notify", "LISTEN_FDS": "3",
                      "LISTEN_PID": "1", "WATCHDOG_USEC": "1000000",
                      "DBUS_SESSION_BUS_ADDRESS": "unix:path=/nonexistent/bus",
                      "INVOCATION_ID": "0123456789abcdef"}


PROBE = "NICHEALTHD_ENVIRONMENT_PROBE"  # set for the inner run below


def test_no_inherited_variable_is_left() -> None:
    """Run alone by the test below (in the whole suite, fixtures set DBUS_SYSTEM_BUS_ADDRESS
    for their own bus, as they may)."""
    if not os.environ.get(PROBE):
        pytest.skip("run by test_a_suite_started_with_a_containers_variables_does_not_see_them")
    left = [name for name in os.environ
            if name in INHERITED or name.startswith(INHERITED_PREFIXES)]
    assert not left


def test_clean_environment_keeps_the_rest() -> None:
    environ = dict(SET_BY_A_CONTAINER, PATH="/usr/bin", HOME="/root")
    assert sorted(clean_environment(environ)) == sorted(SET_BY_A_CONTAINER)
    assert environ == {"PATH": "/usr/bin", "HOME": "/root"}


def test_a_suite_started_with_a_containers_variables_does_not_see_them() -> None:
    done = subprocess.run(
        [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "-p", "no:xdist",
         f"{__file__}::test_no_inherited_variable_is_left"],
        cwd=REPO, env=dict(os.environ, **SET_BY_A_CONTAINER, **{PROBE: "1"}),
        capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-2000:]
    assert "1 passed" in done.stdout
