"""The session-wide fd check (tests/conftest.py) fails a test that leaves fds open
and names it, and lets a few lazily-opened library fds pass."""

from __future__ import annotations

from pathlib import Path

import pytest

pytest_plugins = ["pytester"]

CONFTEST = (Path(__file__).parent / "conftest.py").read_text()


def test_a_leaking_test_fails_and_is_named(pytester: pytest.Pytester,
                                           monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("PYTHONPATH", str(Path(__file__).parents[1]))  # its `tests` imports
    pytester.makeconftest(CONFTEST)
    pytester.makepyfile(test_leaks="""
        import os
        kept = []

        def test_clean(tmp_path):
            with open(tmp_path / "f", "w") as handle:
                handle.write("x")

        def test_lazy_library_fd():
            kept.append(os.open(os.devnull, os.O_RDONLY))  # one, like a library's cache

        def test_leaks_twenty():
            kept.extend(os.open(os.devnull, os.O_RDONLY) for _ in range(20))
    """)
    result = pytester.runpytest_subprocess("-p", "no:cacheprovider")
    result.assert_outcomes(passed=3, errors=1)
    result.stdout.fnmatch_lines([
        "*test_leaks.py::test_lazy_library_fd: 1 fd(s): * -> /dev/null",
        "*ERROR at teardown of test_leaks_twenty*",
        "*this test left 20 fd(s): * -> /dev/null*",
    ])
    assert "session left" in result.stdout.str()
    assert result.ret != 0
