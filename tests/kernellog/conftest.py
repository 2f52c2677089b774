"""Real journal files for the kernel-log tests (#17): systemd-journal-remote writes them from
the export format, python3-systemd's reader reads them."""

from __future__ import annotations

import importlib.util

import pytest

from nichealthd.sim.journal import remote_binary

HAVE_READER = importlib.util.find_spec("systemd") is not None and \
    importlib.util.find_spec("systemd.journal") is not None
HAVE_REMOTE = remote_binary() is not None

needs_journal = pytest.mark.skipif(
    not (HAVE_READER and HAVE_REMOTE),
    reason="needs python3-systemd (or systemd-python) and systemd-journal-remote "
           "(.ci/system-deps.sh installs both)")
