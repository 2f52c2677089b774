"""SIGHUP with an invalid config never stops the running daemon: each is rejected
with file and key in STATUS=, the old configuration stays, and polling goes on."""

from __future__ import annotations

import signal
from pathlib import Path
from typing import Callable, Iterator

import pytest

from nichealthd.sim import mutate

from ..harness import NotifySocket, wait_until
from .conftest import SimHost
from .test_service import Daemon, events

# appended to the valid sim config -> what STATUS= must name ({n}: the first added line)
INVALID_RELOADS: list[tuple[bytes, str]] = [
    (b"pollingInterval = nan\n", "{n}: pollingInterval: duration must be a finite number"),
    (b"pollingInterval = {a = 1}\n", "{n}: pollingInterval: expected a duration"),
    (b"connectorTimeout = inf\n", "connectorTimeout"),
    (b'[[counterDetection.counters]]\nname = "link_downed"\nthreshold = nan\n',
     "{n2}: counterDetection.counters[link_downed].threshold: threshold must be a finite"),
    (b'bootIdPath = "/proc/x\\u0000"\n', "{n}: bootIdPath: must not contain a NUL byte"),
    (b"x = " + b"[" * 5000 + b"]" * 5000 + b"\n", "{n}: not valid TOML: arrays or inline"),
    (b'nodeName = "\xff"\n', "{n}:13: not valid UTF-8"),
    (b"pollingInterval = = 1\n", "{n}:19: not valid TOML"),
    (b'pollingIntervall = "5s"\n', "did you mean 'pollingInterval'?"),
]


@pytest.fixture
def notify(tmp_path: Path) -> Iterator[NotifySocket]:
    sock = NotifySocket(tmp_path / "notify.sock")
    yield sock
    sock.close()


def wait_for_event(host: SimHost, code: str) -> None:
    wait_until(lambda: any(e["errorCode"] == [code] and e["isFatal"] for e in events(host)),
               f"fatal {code} event")


def test_sighup_with_invalid_configs_keeps_the_old_one_and_keeps_polling(
        sim_host: Callable[..., SimHost], notify: NotifySocket) -> None:
    host = sim_host()
    original = host.config.read_bytes()
    first = original.count(b"\n") + 1
    daemon = Daemon(host, notify)
    try:
        notify.wait_for("READY=1")
        for content, expected in INVALID_RELOADS:
            host.config.write_bytes(original + content)
            daemon.proc.send_signal(signal.SIGHUP)
            notify.wait_for("RELOADING=1")
            status = notify.wait_for("READY=1")  # sent right after the rejection
            expected = expected.format(n=f":{first}", n2=f":{first + 2}")
            assert f"reload rejected: {host.config}" in status and expected in status, status
            assert "\n" not in status.split("STATUS=", 1)[1]  # one line, as sd_notify needs
            assert daemon.proc.poll() is None
        # Still polling on the old configuration: a fatal counter is still seen, at 200 ms.
        mutate.counter(host.root, "mlx5_0", 1, "link_downed", add=5)
        wait_for_event(host, "link_downed")
        host.config.write_bytes(original)
        daemon.proc.send_signal(signal.SIGHUP)
        notify.wait_for("RELOADING=1")
        assert "reload rejected" not in notify.wait_for("READY=1")
    finally:
        code, err = daemon.stop()
    assert code == 0, err
    assert "Traceback" not in err
    assert err.count("reload rejected, keeping the running configuration") == len(INVALID_RELOADS)
