"""Real journal files for the kernel-log tests: systemd-journal-remote writes them from
the export format, python3-systemd's reader reads them."""

from __future__ import annotations

from typing import Any, Iterator

import pytest

from nichealthd.sources.kernel_log import JournalSource, KmsgSource

needs_journal = pytest.mark.usefixtures("journal_reader")  # tests/conftest.py


@pytest.fixture(autouse=True)
def close_sources() -> Iterator[None]:
    """Every source a test opens is closed after it (the fd check counts them)."""
    opened: list[Any] = []
    real = (JournalSource.__init__, KmsgSource.__init__)

    def track(cls_init: Any) -> Any:
        def init(self: Any, *args: Any, **kw: Any) -> None:
            cls_init(self, *args, **kw)
            opened.append(self)
        return init

    JournalSource.__init__ = track(real[0])  # type: ignore[method-assign]
    KmsgSource.__init__ = track(real[1])  # type: ignore[method-assign]
    try:
        yield
    finally:
        JournalSource.__init__, KmsgSource.__init__ = real  # type: ignore[method-assign]
        for source in opened:
            source.close()
