"""Driver reloads end to end: the real daemon on a sim tree through driver reloads,
firmware resets and renames, driven by the ``nichealthd-sim`` command line as an operator's
drill would."""

from __future__ import annotations

import json
import subprocess
import sys
import time
from datetime import datetime
from typing import Any, Callable

from ..harness import DEADLINE, NotifySocket, wait_until
from .conftest import REPO, Run, SimHost
from .test_service import Daemon, events, notify  # noqa: F401 (fixture)

GONE = "device_missing"


def sim(host: SimHost, *args: str) -> str:
    proc = subprocess.run([sys.executable, "-m", "nichealthd.sim", args[0], str(host.root),
                           *args[1:]], cwd=REPO, capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stderr
    return proc.stdout


def fatal(run_events: list[dict[str, Any]]) -> list[dict[str, Any]]:
    return [e for e in run_events if e["isFatal"]]


def state(host: SimHost) -> dict[str, Any]:
    data: dict[str, Any] = json.loads(host.state_file.read_text())
    return data


def held_all(host: SimHost) -> bool:
    """Every known device held by the driver event (the unload may have been seen half-way:
    then the log names the devices as they left, not "all gone at once")."""
    data = state(host)
    held = data.get("driver_event") or {}
    return len(held.get("devices", ())) == len(data["known_devices"])


def timed_once(host: SimHost) -> tuple[float, Run, float]:
    """``host.once()`` between the wall-clock times (the state file's clock) it started and
    ended at: its poll is somewhere between the two."""
    started = time.time()
    run = host.once()
    return started, run, time.time()


def configure(host: SimHost, **keys: str) -> SimHost:
    with host.config.open("a") as config:
        for key, value in keys.items():
            config.write(f'{key} = "{value}"\n')
    return host


def test_every_device_gone_for_ten_polls_then_back_is_no_fatal(
        sim_host: Callable[..., SimHost], notify: NotifySocket) -> None:  # noqa: F811
    """The class directory empty for 3 s (15 polls at 200 ms), then every device back under
    shifted names: no fatal event, no event at all but the counter resets'."""
    host = sim_host()
    sim(host, "counter", "mlx5_0", "1", "link_downed", "--add", "1")
    daemon = Daemon(host, notify)
    try:
        notify.wait_for("READY=1")
        daemon.wait_polls(2)
        before = len(events(host))
        reload = subprocess.Popen(
            [sys.executable, "-m", "nichealthd.sim", "driver-reload", str(host.root),
             "--down", "3", "--rename"], cwd=REPO, stdout=subprocess.PIPE,
            stderr=subprocess.PIPE, text=True)
        daemon.wait_until(lambda: held_all(host), "every device held by a driver event")
        out, err = reload.communicate(timeout=60)
        assert reload.returncode == 0, err
        assert "mlx5_0 -> mlx5_17" in out
        daemon.lines.wait_for("RDMA devices are back", proc=daemon.proc)
        daemon.wait_polls(3)
        assert daemon.lines.count("is now mlx5_") >= 8
        after = events(host)[before:]
        assert fatal(after) == []
        assert all(e["isHealthy"] for e in after), after
        links = state(host)
        assert links["driver_event"] is None
        assert "mlx5_0" not in links["known_devices"] and "mlx5_17" in links["known_devices"]
        assert links["device_identities"]["mlx5_17"]["renamed_from"] == "mlx5_0"
    finally:
        code, err = daemon.stop()
    assert code == 0, err
    assert "Traceback" not in err


def test_a_rename_keeps_a_latched_breach_under_the_new_name(
        sim_host: Callable[..., SimHost], notify: NotifySocket) -> None:  # noqa: F811
    host = sim_host()
    daemon = Daemon(host, notify)
    try:
        notify.wait_for("READY=1")
        sim(host, "counter", "mlx5_0", "1", "link_downed", "--add", "1")
        daemon.wait_until(lambda: any(e["errorCode"] == ["link_downed"] and e["isFatal"]
                                      for e in events(host)), "the link_downed breach")
        before = len(events(host))
        sim(host, "rename", "mlx5_0", "mlx5_20")
        daemon.lines.wait_for("mlx5_0 is now mlx5_20", proc=daemon.proc)
        daemon.wait_polls(5)  # past the three polls that would declare mlx5_0 gone
        assert [e["message"] for e in events(host)[before:]] == []
        flags = state(host)["breach_flags"]
        assert "mlx5_20:1:link_downed" in flags and "mlx5_0:1:link_downed" not in flags
        sim(host, "counter", "mlx5_20", "1", "link_downed", "--set", "0")
        daemon.wait_until(lambda: len(events(host)) > before, "the recovery")
        recovered = events(host)[before:]
        assert [(e["isHealthy"], e["entitiesImpacted"][0]["entityValue"]) for e in recovered] \
            == [(True, "mlx5_20")]
    finally:
        code, err = daemon.stop()
    assert code == 0, err


def test_every_device_gone_longer_than_the_timeout_is_per_device_fatal(
        sim_host: Callable[..., SimHost], notify: NotifySocket) -> None:  # noqa: F811
    host = configure(sim_host(), driverReloadGrace="1s", driverReloadTimeout="2s")
    daemon = Daemon(host, notify)
    try:
        notify.wait_for("READY=1")
        known = state(host)["known_devices"]
        sim(host, "driver-unload")
        wait_until(lambda: len(fatal(events(host))) >= len(known), "a fatal event per device",
                   DEADLINE + 2, daemon.proc, lambda: explain(host, daemon, known))
        gone = [e for e in events(host) if e["errorCode"] == [GONE]]
        assert sorted(e["entitiesImpacted"][0]["entityValue"] for e in gone) == sorted(known)
        assert all(e["recommendedAction"] == "REPLACE_VM" for e in gone)
        # One non-fatal event per state check (compute InfiniBand, storage Ethernet), each
        # reported before any per-device fatal event and closed before those of its poll.
        driver = [e for e in events(host) if e["errorCode"] == ["driver_event"]]
        assert sorted((e["checkName"], e["isHealthy"]) for e in driver) == [
            ("EthernetStateCheck", False), ("EthernetStateCheck", True),
            ("InfiniBandStateCheck", False), ("InfiniBandStateCheck", True)]
        assert all(not e["isFatal"] for e in driver)
        assert driver[0]["message"].startswith(f"all {len(known)} RDMA devices gone at once: "
                                               f"driver unloaded or firmware reset")
        assert_closed_before_the_verdicts_of_its_poll(events(host))
    finally:
        code, err = daemon.stop()
    assert code == 0, err


def explain(host: SimHost, daemon: Daemon, known: list[str]) -> str:
    """What a failed wait needs to be understood: the devices judged, the driver event held
    in the state, and what the daemon logged besides its per-poll debug lines."""
    judged = sorted(e["entitiesImpacted"][0]["entityValue"] for e in fatal(events(host)))
    held = state(host).get("driver_event")
    said = [line for line in daemon.lines.lines if " DEBUG " not in line][-30:]
    return (f"known {known}, judged fatal {judged}, driver event {held}; the daemon said:\n"
            + "".join(said))


def assert_closed_before_the_verdicts_of_its_poll(run_events: list[dict[str, Any]]) -> None:
    """The driver event's reports come before every per-device verdict, its close before
    those of the poll it closes in. A poll that saw the unload half-way (the sim takes the
    devices one by one) times the first ones out a poll earlier: their verdicts may precede
    the close, which comes when the last held device leaves (core/checks/driver.py)."""
    order = [(e["errorCode"][0], e["isHealthy"], e["generatedTimestamp"]) for e in run_events
             if e["errorCode"] in (["driver_event"], [GONE])]
    first_verdict = next(i for i, (code, _, _) in enumerate(order) if code == GONE)
    reports = [i for i, (code, healthy, _) in enumerate(order)
               if code == "driver_event" and not healthy]
    assert max(reports) < first_verdict, order
    closes = [(i, stamp) for i, (code, healthy, stamp) in enumerate(order)
              if code == "driver_event" and healthy]
    for index, stamp in closes:
        assert all(i > index for i, (code, _, at) in enumerate(order)
                   if code == GONE and at == stamp), order


def test_a_daemon_restart_in_the_middle_of_a_reload(
        sim_host: Callable[..., SimHost], notify: NotifySocket) -> None:  # noqa: F811
    """Stopped while every device is gone, started again before they return (under new
    names): the driver event goes on from the state file; no fatal event."""
    host = sim_host()
    daemon = Daemon(host, notify)
    notify.wait_for("READY=1")
    sim(host, "driver-unload")
    daemon.wait_until(lambda: held_all(host), "every device held by a driver event")
    daemon.wait_polls(3)
    code, err = daemon.stop()
    assert code == 0, err
    since = state(host)["driver_event"]["since"]
    notify.close()
    again = NotifySocket(notify.path.parent / "notify2.sock")
    daemon = Daemon(host, again)
    try:
        again.wait_for("READY=1")
        daemon.wait_polls(3)
        assert state(host)["driver_event"]["since"] == since
        sim(host, "driver-load", "--rename")
        daemon.lines.wait_for("RDMA devices are back", proc=daemon.proc)
        daemon.wait_polls(4)
        assert fatal(events(host)) == []
        assert state(host)["driver_event"] is None
    finally:
        code, err = daemon.stop()
        again.close()
    assert code == 0, err


def test_once_runs_through_a_reload_each_poll_a_new_process(
        sim_host: Callable[..., SimHost]) -> None:
    """``--once`` is a restart at every poll: the grace clock and the held devices live in
    the state file.

    A run's poll happens between its start and its end, and the grace runs from the
    ``since`` the first held run wrote: a run that ended before ``since + grace`` polled
    within the grace and must stay silent, one that started after it must find the event
    reported (once, by itself or by a run that straddled the end of the grace). Judged by
    those times, not by how long a Python start takes on a loaded machine."""
    grace = 20.0  # a restart under a load of 15 on 2 cores took 8 s
    host = configure(sim_host(), driverReloadGrace=f"{grace:g}s")
    assert host.once().fatal() == []
    sim(host, "driver-unload")
    first = host.once()  # sees the devices gone: the grace starts at its poll
    assert first.returncode == 0, first.stderr
    assert first.events == []
    since = state(host)["driver_event"]["since"]
    over = datetime.fromisoformat(since.replace("Z", "+00:00")).timestamp() + grace
    reported: list[list[dict[str, Any]]] = []
    within, took = 0, list[float]()  # restarts judged within the grace, their times
    for _ in range(2):  # restarts in the grace
        started, held, ended = timed_once(host)
        took.append(ended - started)
        assert held.returncode == 0, held.stderr
        assert state(host)["driver_event"]["since"] == since  # the clock goes on
        if ended < over:
            assert held.events == [], f"reported {over - ended:.1f} s before the grace ends"
            within += 1
        elif held.events:  # polled on either side of the end of the grace
            reported.append(held.events)
    assert within, f"no restart ended within the {grace:g} s grace (they took {took} s)"
    wait_until(lambda: time.time() > over, "the end of the grace", grace + DEADLINE)
    started, told, _ = timed_once(host)
    assert started > over
    assert told.returncode == 0, told.stderr
    if told.events:
        reported.append(told.events)
    assert len(reported) == 1, f"the driver event reported more than once: {reported}"
    assert sorted((e["checkName"], e["isFatal"], e["isHealthy"], e["errorCode"][0])
                  for e in reported[0]) == [
        ("EthernetStateCheck", False, False, "driver_event"),
        ("InfiniBandStateCheck", False, False, "driver_event")]
    sim(host, "driver-load", "--rename")
    back = host.once()
    assert back.fatal() == []
    assert [e["errorCode"] for e in back.events] == [["driver_event"]] * 2
    assert all(e["isHealthy"] for e in back.events)
