"""nichealthctl over D-Bus and over varlink says the same, and falls back to varlink when
the system bus cannot be reached (#14.6, DESIGN §2.9)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from dbushelpers import ctl, wait_polls

from nichealthd.sim import mutate

COMMANDS = [
    ("show", "ports"), ("show", "devices"), ("show", "counters"), ("show", "counters", "mlx5_0"),
    ("events", "-n", "50", "--all"), ("events",), ("check",), ("show", "counters", "mlx5_99"),
    ("show", "counters", "mlx5_12"), ("show", "counters", "mlx5_0/9"),
]


def test_every_command_prints_the_same_over_both(daemon: Any) -> None:
    mutate.set_port(daemon.root, "mlx5_5", 1, state="DOWN", phys_state="Disabled")
    mutate.counter(daemon.root, "mlx5_1", 1, "carrier_changes", add=50)
    wait_polls(2)
    varlink = f"--varlink={daemon.varlink_socket}"
    for command in COMMANDS:
        for extra in ((), ("--json",), ("--wide",)):
            over_dbus = ctl(*command, *extra)
            over_varlink = ctl(varlink, *command, *extra)
            assert over_dbus.returncode == over_varlink.returncode, (command, extra)
            assert over_dbus.stdout == over_varlink.stdout, (command, extra)
            assert over_dbus.stderr == over_varlink.stderr, (command, extra)
    dbus_status = json.loads(ctl("status", "--json").stdout)
    varlink_status = json.loads(ctl(varlink, "status", "--json").stdout)
    assert dbus_status["transport"]["kind"] == "dbus"
    assert varlink_status["transport"] == {"kind": "varlink", "address": daemon.varlink_socket}
    volatile = {"transport", "dbus_library", "last_poll", "poll_count"}
    assert {k: v for k, v in dbus_status.items() if k not in volatile} == \
        {k: v for k, v in varlink_status.items() if k not in volatile}
    assert f"via        varlink, {daemon.varlink_socket}" in \
        ctl(varlink, "status", "--wide").stdout


def test_no_bus_falls_back_to_the_varlink_socket(daemon: Any, tmp_path: Path) -> None:
    env = {"DBUS_SYSTEM_BUS_ADDRESS": f"unix:path={tmp_path}/no-such-socket",
           "NICHEALTHCTL_VARLINK_SOCKET": daemon.varlink_socket}
    ports = ctl("show", "ports", "--json", env=env)
    assert ports.returncode == 0, ports.stderr
    assert ports.stdout == ctl("show", "ports", "--json").stdout
    status = json.loads(ctl("status", "--json", env=env).stdout)
    assert status["transport"] == {"kind": "varlink", "address": daemon.varlink_socket}
    assert ctl("check", env=env).returncode == 0


def test_no_bus_and_no_varlink_socket_is_one_line_naming_both(tmp_path: Path) -> None:
    env = {"DBUS_SYSTEM_BUS_ADDRESS": f"unix:path={tmp_path}/no-such-socket",
           "NICHEALTHCTL_VARLINK_SOCKET": str(tmp_path / "no-varlink")}
    out = ctl("show", "ports", env=env)
    assert out.returncode == 3
    lines = (out.stdout + out.stderr).strip().splitlines()
    assert len(lines) == 1 and "Traceback" not in lines[0]
    assert "no-such-socket" in lines[0] and "is dbus running?" in lines[0]
    assert f"varlink socket {tmp_path / 'no-varlink'}" in lines[0]


def test_varlink_without_a_daemon_is_one_line(tmp_path: Path) -> None:
    out = ctl(f"--varlink={tmp_path}/absent", "status")
    assert out.returncode == 3
    assert out.stderr.strip() == (
        f"nichealthctl: cannot reach nichealthd at its varlink socket {tmp_path}/absent: No "
        f"such file or directory (is the daemon running with varlinkSocket set? Try: "
        f"systemctl status nichealthd)")
    check = ctl("check", f"--varlink={tmp_path}/absent")
    assert check.returncode == 3 and check.stdout.startswith("NICHEALTH UNKNOWN - cannot reach")


def test_varlink_flag_alone_does_not_eat_the_command(tmp_path: Path) -> None:
    out = ctl("--varlink", "show", "ports", env={})
    # the default socket does not exist on a test host: the error names it, not "show"
    assert out.returncode == 3
    assert "/run/nichealthd/io.nichealthd.Monitor" in out.stderr
