"""nichealthctl end to end against a running nichealthd on a sim DGX-H100 tree.

Every test that talks to a daemon runs twice: over D-Bus and over varlink (``--varlink=``
the daemon's socket); the output and exit statuses must be the same.
"""

from __future__ import annotations

import contextlib
import json
import os
import re
import subprocess
import sys
from pathlib import Path
from typing import Any, Callable, Iterator

import dbushelpers
import pytest
from dbushelpers import make_sim, wait_polls
from testbus import REPO

from nichealthd.sim import mutate, tree
from tests.harness import NOBODY, Lines, wait_until

ANSI = re.compile(r"\x1b\[")
TRANSPORT = ["dbus"]  # the transport of the test running now


def pytest_generate_tests(metafunc: Any) -> None:
    """Tests with a daemon run over both transports."""
    if {"daemon", "start_daemon"} & set(metafunc.fixturenames):
        metafunc.fixturenames.append("transport")
        metafunc.parametrize("transport", ["dbus", "varlink"])


@pytest.fixture(autouse=True)
def _transport(request: Any) -> Any:
    callspec = getattr(request.node, "callspec", None)
    TRANSPORT[0] = callspec.params.get("transport", "dbus") if callspec else "dbus"
    yield
    TRANSPORT[0] = "dbus"


def transport_args() -> list[str]:
    """``--varlink=SOCKET`` of the newest daemon when the test runs over varlink."""
    if TRANSPORT[0] == "varlink":
        return [f"--varlink={dbushelpers.RUNNING[-1].varlink_socket}"]
    return []


def ctl(*args: str, **kw: Any) -> subprocess.CompletedProcess[str]:
    """nichealthctl over the transport of this test run."""
    return dbushelpers.ctl(*transport_args(), *args, **kw)


def monitored(root: Path) -> set[str]:
    return {f"{d['name']}/{p}" for d in tree.load(root)["devices"]
            if d["role"] in ("compute", "storage") for p in d["ports"]}


def event_heads(text: str) -> list[str]:
    """The first line of each event ``events`` printed (a long message wraps onto indented
    lines)."""
    return [line for line in text.splitlines() if line and not line[0].isspace()]


def assert_one_line_no_traceback(out: subprocess.CompletedProcess[str]) -> str:
    text = (out.stdout + out.stderr).strip()
    assert "Traceback" not in text
    assert len(text.splitlines()) == 1, text
    return text


def test_show_ports_lists_every_monitored_port(daemon: Any) -> None:
    out = ctl("show", "ports")
    assert out.returncode == 0, out.stderr
    lines = out.stdout.splitlines()
    assert all(len(line) <= 80 for line in lines)
    assert not ANSI.search(out.stdout)  # not a TTY: no colour
    shown = {line.split()[0] for line in lines[1:] if line and not line.startswith(" ")
             and "/" in line.split()[0]}
    assert monitored(daemon.root) <= shown
    assert "Not monitored:" in out.stdout and "default route" in out.stdout


def test_show_ports_json_has_the_design_keys(daemon: Any) -> None:
    for args in (("--json", "show", "ports"), ("show", "ports", "--json")):
        out = ctl(*args)
        assert out.returncode == 0, out.stderr
        ports = json.loads(out.stdout)
        assert isinstance(ports, list)
        for p in ports:
            assert {"device", "port", "link_layer", "state", "phys_state", "healthy", "fatal",
                    "role"} <= set(p)
            assert isinstance(p["device"], str) and isinstance(p["port"], int)
            assert isinstance(p["healthy"], bool) and isinstance(p["fatal"], bool)
        assert {f"{p['device']}/{p['port']}" for p in ports if p["monitored"]} == \
            monitored(daemon.root)
        assert all(p["state"] == "ACTIVE" and p["phys_state"] == "LinkUp" for p in ports)


def test_port_down_shows_unhealthy_within_two_polls_and_check_exits_2(daemon: Any) -> None:
    assert ctl("check").returncode == 0
    mutate.set_port(daemon.root, "mlx5_0", 1, state="DOWN", phys_state="Disabled")
    wait_polls(2)  # two polls completed after the change: the second one started after it
    ports = {f"{p['device']}/{p['port']}": p for p in json.loads(ctl("show", "ports",
                                                                   "--json").stdout)}
    assert ports["mlx5_0/1"]["healthy"] is False
    assert ports["mlx5_0/1"]["fatal"] is True
    assert ports["mlx5_0/1"]["state"] == "DOWN"
    check = ctl("check")
    assert check.returncode == 2, check.stdout
    assert check.stdout.startswith("NICHEALTH CRITICAL - ")
    assert "mlx5_0/1 DOWN/Disabled" in check.stdout
    assert len(check.stdout.splitlines()) == 1
    human = ctl("show", "ports").stdout
    assert re.search(r"^mlx5_0/1 .*DOWN\s+Disabled.*fatal\s+unknown\s+DOWN/Disabled$", human,
                     re.M)  # SUSPECT: an InfiniBand port disabled, no module facts


def test_check_ok_line_and_json(daemon: Any) -> None:
    out = ctl("check")
    n = len(monitored(daemon.root))
    assert out.returncode == 0
    assert out.stdout.startswith(f"NICHEALTH OK - {n} ports healthy")
    data = json.loads(ctl("check", "--json").stdout)
    assert data["status"] == "OK" and data["exit"] == 0 and data["problems"] == []


def test_check_exits_1_on_degradation(daemon: Any) -> None:
    # carrier_changes is a non-fatal delta counter (threshold 2 per poll)
    mutate.counter(daemon.root, "mlx5_1", 1, "carrier_changes", add=50)
    wait_until(lambda: ctl("check").returncode == 1, "nichealthctl check exit 1")
    out = ctl("check")
    assert out.returncode == 1, out.stdout
    assert out.stdout.startswith("NICHEALTH WARNING - ")
    assert "mlx5_1/1 carrier_changes breached" in out.stdout
    counters = json.loads(ctl("show", "counters", "mlx5_1/1", "--json").stdout)
    breached = [c for c in counters if c["breached"]]
    assert [c["counter"] for c in breached] == ["carrier_changes"]
    assert breached[0]["fatal"] is False and isinstance(breached[0]["value"], int)


def test_show_devices(daemon: Any) -> None:
    out = ctl("show", "devices")
    assert out.returncode == 0
    assert all(len(line) <= 80 for line in out.stdout.splitlines())
    names = {d["name"] for d in tree.load(daemon.root)["devices"]}
    table, _, details = out.stdout.partition("\n\n")  # the table, then per-NIC detail lines
    assert {line.split()[0] for line in table.splitlines()[1:]} == names
    # Below the table: "<device>: PCIe ...", "<device> driver fault: ...", ...
    assert {line.split()[0].rstrip(":") for line in details.splitlines() if line} <= names
    devices = json.loads(ctl("--json", "show", "devices").stdout)
    assert {d["device"] for d in devices} == names


def test_show_counters_all_device_port_and_bad_arguments(daemon: Any) -> None:
    everything = json.loads(ctl("show", "counters", "--json").stdout)
    assert {f"{c['device']}/{c['port']}" for c in everything} == monitored(daemon.root)
    for c in everything:
        assert {"device", "port", "counter", "value", "breached", "fatal"} <= set(c)
        assert c["value"] is None or isinstance(c["value"], int)
    one = json.loads(ctl("show", "counters", "mlx5_0/1", "--json").stdout)
    assert {c["device"] for c in one} == {"mlx5_0"} and len(one) == len(
        [c for c in everything if c["device"] == "mlx5_0"])
    human = ctl("show", "counters", "mlx5_0")
    assert human.returncode == 0
    assert human.stdout.splitlines()[0] == "mlx5_0/1"
    assert "link_downed" in human.stdout
    assert all(len(line) <= 80 for line in human.stdout.splitlines())
    bad = ctl("show", "counters", "mlx5_99")
    assert bad.returncode == 3 and "no NIC named mlx5_99" in assert_one_line_no_traceback(bad)
    bad = ctl("show", "counters", "mlx5_0/x")
    assert bad.returncode == 3 and "PORT must be a number" in assert_one_line_no_traceback(bad)


def test_events_history_json_and_follow(daemon: Any) -> None:
    out = ctl("events", "-n", "5", "--all")  # a fresh start: only baselines, shown by --all
    assert out.returncode == 0 and len(event_heads(out.stdout)) == 5
    events = json.loads(ctl("events", "-n", "5", "--json", "--all").stdout)
    assert len(events) == 5 and [e["seq"] for e in events] == sorted(e["seq"] for e in events)
    assert {"checkName", "isFatal", "isHealthy", "entitiesImpacted", "generatedTimestamp",
            "nodeName", "processingStrategy", "recommendedAction"} <= set(events[0])

    # -n 1 --all: the last event is printed after the subscription (ctl subscribes first), so
    # its line says the follower is listening before the port goes down.
    with following("-n", "1", "--all") as (follow, follower):
        wait_until(lambda: len(follower.lines) >= 1, "the follower's history line", proc=follow)
        assert json.loads(follower.lines[0])["seq"] == events[-1]["seq"]
        mutate.set_port(daemon.root, "mlx5_5", 1, state="DOWN", phys_state="Polling")
        wait_until(lambda: len(follower.lines) >= 2, "a followed event", proc=follow,
                   detail=follower.tail)
        event = json.loads(follower.lines[1])
        assert "mlx5_5" in event["message"] and event["isHealthy"] is False
        assert event["seq"] > events[-1]["seq"]


@contextlib.contextmanager
def following(*args: str) -> Iterator[tuple[subprocess.Popen[str], Lines]]:
    """``nichealthctl events ARGS --follow --json`` running, its lines read as they come."""
    env = dict(os.environ, PYTHONPATH=str(REPO))
    follow = subprocess.Popen([sys.executable, "-m", "nichealthd.cli.ctl", *transport_args(),
                               "events", *args, "--follow", "--json"], cwd=REPO, env=env,
                              stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    assert follow.stdout is not None and follow.stderr is not None
    follower = Lines(follow.stdout)
    try:
        yield follow, follower
    finally:
        follow.terminate()
        follow.wait(10)
        follow.stderr.close()
        follower.join()
        follow.stdout.close()


def test_status_human_and_json(daemon: Any) -> None:
    out = ctl("status")
    assert out.returncode == 0
    assert out.stdout.startswith("nichealthd ") and "HEALTHY" in out.stdout
    assert "systemd is not running on this host" in out.stdout or "systemd" in out.stdout
    data = json.loads(ctl("status", "--json").stdout)
    for key in ("version", "node_name", "boot_id", "last_poll", "poll_count",
                "polling_interval", "connector_state", "outbox_depth", "health", "systemd"):
        assert key in data, key
    assert "slurm" in {surface["name"] for surface in data["surfaces"]}  # every surface's
    if not os.path.isdir("/run/systemd/system"):
        assert data["systemd"] == {"running": False,
                                   "summary": "systemd is not running on this host"}


def test_colour_only_on_a_tty_and_never_with_no_color(daemon: Any) -> None:
    script = ("import pty, os, sys\n"
              f"ARGS = {transport_args()!r}\n"
              "pid, fd = pty.fork()\n"
              "if pid == 0:\n"
              "    os.execvp(sys.executable,"
              " [sys.executable, '-m', 'nichealthd.cli.ctl', *ARGS, 'show', 'ports'])\n"
              "out = b''\n"
              "while True:\n"
              "    try:\n"
              "        chunk = os.read(fd, 65536)\n"
              "    except OSError:\n"
              "        break\n"
              "    if not chunk:\n"
              "        break\n"
              "    out += chunk\n"
              "os.waitpid(pid, 0)\n"
              "sys.stdout.write(out.decode())\n")
    env = dict(os.environ, PYTHONPATH=str(REPO), TERM="xterm", COLUMNS="80")
    env.pop("NO_COLOR", None)
    tty = subprocess.run([sys.executable, "-c", script], cwd=REPO, env=env,
                         capture_output=True, text=True, timeout=30)
    assert ANSI.search(tty.stdout), tty.stdout
    env["NO_COLOR"] = "1"
    plain = subprocess.run([sys.executable, "-c", script], cwd=REPO, env=env,
                           capture_output=True, text=True, timeout=30)
    assert "healthy" in plain.stdout and not ANSI.search(plain.stdout)


def test_daemon_not_running_gives_one_line_and_exit_3(system_bus: Any) -> None:
    for args in (("status",), ("show", "ports"), ("show", "devices"), ("show", "counters"),
                 ("events",), ("events", "--follow")):
        out = ctl(*args)
        assert out.returncode == 3, (args, out.stdout, out.stderr)
        line = assert_one_line_no_traceback(out)
        assert line == ("nichealthctl: cannot reach nichealthd on the system bus "
                        "(org.nichealthd.NicHealth1): is the daemon running? Try: "
                        "systemctl status nichealthd"), line
    for json_args in (("show", "ports", "--json"), ("--json", "status"), ("events", "--json")):
        out = ctl(*json_args)
        assert out.returncode == 3 and "Traceback" not in out.stderr, (json_args, out.stderr)
        assert json.loads(out.stdout) == {
            "error": "cannot reach nichealthd on the system bus (org.nichealthd.NicHealth1): "
                     "is the daemon running? Try: systemctl status nichealthd", "exit": 3}
    data = json.loads(ctl("check", "--json").stdout)
    assert (data["status"], data["exit"]) == ("UNKNOWN", 3)
    check = ctl("check")
    assert check.returncode == 3
    assert check.stdout.startswith("NICHEALTH UNKNOWN - cannot reach nichealthd")
    assert_one_line_no_traceback(check)


def test_no_bus_at_all_gives_one_line_and_exit_3(tmp_path: Path) -> None:
    """Without a bus, nichealthctl falls back to the varlink socket: this test names one of
    its own (absent), so a daemon running on this machine at the default socket is never
    reached."""
    env = {"DBUS_SYSTEM_BUS_ADDRESS": f"unix:path={tmp_path}/no-such-socket",
           "NICHEALTHCTL_VARLINK_SOCKET": str(tmp_path / "no-such-varlink")}
    for args in (("show", "ports"), ("status",), ("check",)):
        out = ctl(*args, env=env)
        assert out.returncode == 3
        line = assert_one_line_no_traceback(out)
        assert "no-such-socket" in line and ("is dbus running?" in line)
        assert f"{tmp_path}/no-such-varlink" in line, line


def test_config_check(tmp_path: Path) -> None:
    good = tmp_path / "good.toml"
    good.write_text('pollingInterval = "2s"\nnodeName = "n1"\n')
    out = ctl("config", "check", str(good))
    assert (out.returncode, out.stdout.strip()) == (0, f"{good}: OK")
    bad = tmp_path / "bad.toml"
    bad.write_text('pollingInterval = "soon"\n')
    out = ctl("config", "check", str(bad))
    assert out.returncode == 2
    line = assert_one_line_no_traceback(out)
    assert line.startswith(f"{bad}:1: pollingInterval: ")
    data = json.loads(ctl("config", "check", str(bad), "--json").stdout)
    assert data["ok"] is False and data["key"] == "pollingInterval"
    missing = ctl("config", "check", str(tmp_path / "absent.toml"))
    assert missing.returncode == 2 and "file not found" in missing.stderr
    broken = tmp_path / "broken.toml"
    broken.write_text("pollingInterval = \n")
    assert ctl("config", "check", str(broken)).returncode == 2


def test_events_hide_the_boot_baselines_unless_all(daemon: Any) -> None:
    everything = json.loads(ctl("events", "-n", "1000", "--all", "--json").stdout)
    assert any("healthy after reboot" in e["message"] for e in everything)
    # A new host (no state, nothing sent before): no check-scoped clear, nothing to clear.
    assert not any(not e["entitiesImpacted"] for e in everything)
    assert json.loads(ctl("events", "--json").stdout) == []  # a fresh boot: only baselines
    quiet = ctl("events").stdout  # says so, rather than nothing at all
    assert quiet.startswith("no events besides the boot baselines (") and "--all" in quiet
    mutate.set_port(daemon.root, "mlx5_5", 1, state="DOWN", phys_state="Disabled")
    wait_until(lambda: json.loads(ctl("events", "--json").stdout), "the DOWN event")
    shown = json.loads(ctl("events", "--json").stdout)
    assert [e["isFatal"] for e in shown] == [True] and "mlx5_5" in shown[0]["message"]
    human = ctl("events", "-n", "5").stdout
    assert len(event_heads(human)) == 1 and all(len(x) <= 80 for x in human.splitlines())
    # The reason is at the end of the message: wrapped within 80 columns, never cut.
    assert " ".join(human.split()).endswith(shown[0]["message"]), human
    assert len(event_heads(ctl("events", "-n", "5", "--all").stdout)) == 5
    wide = ctl("events", "--wide").stdout
    assert len(wide.splitlines()) == 1 and wide.strip().endswith(
        "no connectivity - suspect: unknown (port disabled)")


def test_tables_fit_80_columns(daemon: Any) -> None:
    mutate.counter(daemon.root, "mlx5_5", 1, "link_downed", add=1)
    wait_until(lambda: ctl("check").returncode == 2, "the breach")
    for args in (("show", "ports"), ("show", "devices"), ("status",), ("events", "--all"),
                 ("show", "counters")):
        out = ctl(*args)
        assert out.returncode == 0, (args, out.stderr)
        assert all(len(line) <= 80 for line in out.stdout.splitlines()), (args, out.stdout)
    # REASON is cut (at 16 characters at least) beside SUSPECT: --wide shows it all.
    assert "link_downed bre" in ctl("show", "ports").stdout
    assert re.search(r"fatal\s+unknown\s+link_downed breached$",
                     ctl("show", "ports", "--wide").stdout, re.M)


def test_check_is_a_warning_when_every_device_is_excluded(
        start_daemon: Callable[..., Any]) -> None:
    root = make_sim()
    config = root / "nichealthd.toml"
    config.write_text(config.read_text() + 'nicExclusionRegex = "^mlx5_"\n')
    start_daemon(root)
    out = ctl("check")
    assert out.returncode == 1, out.stdout
    assert out.stdout.startswith("NICHEALTH WARNING - ")
    assert "RDMA devices present but none monitored: mlx5_0 (excluded" in out.stdout


def test_status_shows_the_connector_last_error(start_daemon: Callable[..., Any],
                                               tmp_path: Path) -> None:
    socket_path = tmp_path / "no-connector.sock"
    start_daemon(extra=["--platform-connector-socket", f"unix://{socket_path}"])
    wait_until(lambda: json.loads(ctl("status", "--json").stdout).get("connector_last_error"),
             "a connector error")
    status = json.loads(ctl("status", "--json").stdout)
    human = ctl("status", "--wide").stdout
    assert f"last error: {status['connector_last_error']}" in human


@pytest.mark.root
@pytest.mark.skipif(os.geteuid() != 0,
                    reason="reloads as root and is refused as nobody: needs root")
def test_reload_is_for_root_and_says_what_happened(daemon: Any) -> None:
    ok = ctl("reload")
    assert ok.returncode == 0, ok.stderr
    assert ok.stdout.startswith("configuration reloaded from ")
    data = json.loads(ctl("reload", "--json").stdout)
    assert data["accepted"] is True
    config = daemon.root / "nichealthd.toml"
    config.write_text(config.read_text() + 'pollingInterval = "soon"\n')
    bad = ctl("reload")
    assert bad.returncode == 1 and "pollingInterval" in bad.stderr, (bad.stdout, bad.stderr)
    nobody = ctl("reload", user=NOBODY)
    if "ModuleNotFoundError" in nobody.stderr:  # as in test_policy: site-packages unreadable
        pytest.skip("user nobody cannot import the D-Bus library on this machine")
    assert nobody.returncode == 1
    assert "root only" in assert_one_line_no_traceback(nobody)


def _about(events: list[dict[str, Any]]) -> set[str]:
    """DEV/PORT (or DEV) of each event."""
    names = []
    for e in events:
        ents = {x["entityType"]: x["entityValue"] for x in e["entitiesImpacted"]}
        names.append(f"{ents.get('NIC')}/{ents['NICPort']}" if "NICPort" in ents
                     else str(ents.get("NIC")))
    return set(names)


def test_events_since_and_device(daemon: Any) -> None:
    mutate.set_port(daemon.root, "mlx5_3", 1, state="DOWN", phys_state="Disabled")
    mutate.set_port(daemon.root, "mlx5_5", 1, state="DOWN", phys_state="Disabled")
    wait_until(lambda: len(json.loads(ctl("events", "--json").stdout)) >= 2, "two DOWN events")
    assert _about(json.loads(ctl("events", "--device", "mlx5_3", "--json").stdout)) == \
        {"mlx5_3/1"}
    assert _about(json.loads(ctl("events", "--device", "mlx5_5/1", "--json").stdout)) == \
        {"mlx5_5/1"}
    assert json.loads(ctl("events", "--device", "mlx5_5/2", "--json").stdout) == []
    # --all --device: the card's baselines too, and nothing of another card
    assert {a.split("/")[0] for a in _about(json.loads(
        ctl("events", "-n", "1000", "--all", "--device", "mlx5_3", "--json").stdout))} == \
        {"mlx5_3"}

    recent = json.loads(ctl("events", "--since", "1h", "--json").stdout)
    assert recent == json.loads(ctl("events", "--json").stdout) and len(recent) == 2
    last = recent[-1]["generatedTimestamp"]
    assert json.loads(ctl("events", "--since", last, "--json").stdout)[-1] == recent[-1]
    later = "2999-01-01T00:00:00Z"
    assert json.loads(ctl("events", "--since", later, "--json").stdout) == []
    quiet = ctl("events", "--since", later, "--device", "mlx5_3").stdout.strip()
    assert quiet.startswith("no events since 2999-01-01") and quiet.endswith("about mlx5_3")

    bad = ctl("events", "--since", "last tuesday")
    assert bad.returncode == 3 and "expected 30m, 2h, 1d" in assert_one_line_no_traceback(bad)

    # --follow --device: the other card's event is not printed, this card's is
    with following("-n", "1", "--device", "mlx5_3") as (follow, follower):
        wait_until(lambda: len(follower.lines) >= 1, "the follower's history line", proc=follow)
        mutate.set_port(daemon.root, "mlx5_5", 1, state="ACTIVE", phys_state="LinkUp")
        wait_until(lambda: "mlx5_5" in json.dumps(json.loads(ctl("events", "--json").stdout)
                                                  [-1]), "mlx5_5's recovery")
        mutate.set_port(daemon.root, "mlx5_3", 1, state="ACTIVE", phys_state="LinkUp")
        wait_until(lambda: len(follower.lines) >= 2, "mlx5_3's recovery", proc=follow,
                   detail=follower.tail)
        assert [_about([json.loads(line)]) for line in follower.lines] == \
            [{"mlx5_3/1"}, {"mlx5_3/1"}]
