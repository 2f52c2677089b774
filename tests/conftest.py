"""Shared test setup: fast temp dirs, markers, and helpers to run the real programs."""

from __future__ import annotations

import os
import shutil
import tempfile

import pytest


def pytest_configure(config: pytest.Config) -> None:
    # Sim trees are thousands of small files; on a tmpfs they build ten times faster.
    if config.option.basetemp is None and os.access("/dev/shm", os.W_OK):
        config.option.basetemp = tempfile.mkdtemp(prefix="nichealthd-tests-", dir="/dev/shm")
        config._nichealthd_tmp = config.option.basetemp  # type: ignore[attr-defined]
    for marker, text in (("slow", "takes more than ~10 s"),
                         ("e2e", "boots a real systemd in a container"),
                         ("packaging", "builds the .deb/.rpm packages")):
        config.addinivalue_line("markers", f"{marker}: {text}")


def pytest_unconfigure(config: pytest.Config) -> None:
    created = getattr(config, "_nichealthd_tmp", None)
    if created:
        shutil.rmtree(created, ignore_errors=True)
