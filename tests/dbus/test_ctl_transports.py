"""nichealthctl over D-Bus and over varlink says the same, and falls back to varlink when
the system bus cannot be reached (nichealthctl(1))."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

from dbushelpers import ctl, wait_polls

from nichealthd.sim import mutate
from tests.harness import DEADLINE, REPO

COMMANDS = [
    ("show", "ports"), ("show", "devices"), ("show", "counters"), ("show", "counters", "mlx5_0"),
    ("events", "-n", "50", "--all"), ("events",), ("check",), ("show", "counters", "mlx5_99"),
    ("show", "counters", "mlx5_12"), ("show", "counters", "mlx5_0/9"),
    ("show", "pcie"),  # the PCI side
]


def answers_of_one_poll(varlink_socket: str, commands: list[list[str]]) -> list[Any]:
    """Each command's answer over D-Bus and over varlink; where they differ, both from one
    poll (tests/dbus/ctlpairs.py): a poll in between may change a device line (a counter's
    rate, an adapter fact read at its own cadence) and say nothing about the transports."""
    done = subprocess.run(
        [sys.executable, str(Path(__file__).with_name("ctlpairs.py"))],
        input=json.dumps({"varlink": varlink_socket, "commands": commands,
                          "deadline": DEADLINE}),
        cwd=REPO, env=dict(os.environ, PYTHONPATH=str(REPO)), capture_output=True,
        text=True, timeout=4 * DEADLINE)
    assert done.returncode == 0, done.stderr[-3000:]
    return json.loads(done.stdout)  # type: ignore[no-any-return]


def test_every_command_prints_the_same_over_both(start_daemon: Any) -> None:
    # Polls 2 s apart: a pair of answers that differ is asked again until one falls
    # between two polls.
    daemon = start_daemon(interval="2s")
    mutate.set_port(daemon.root, "mlx5_5", 1, state="DOWN", phys_state="Disabled")
    mutate.counter(daemon.root, "mlx5_1", 1, "carrier_changes", add=50)
    wait_polls(2)
    varlink = f"--varlink={daemon.varlink_socket}"
    commands = [[*command, *extra] for command in COMMANDS
                for extra in ((), ("--json",), ("--wide",))]
    for pair in answers_of_one_poll(daemon.varlink_socket, commands):
        assert pair["same"] or pair["one_poll"], \
            f"the answers kept changing with the polls: {pair['command']}"
        assert pair["dbus"] == pair["varlink"], pair["command"]
    dbus_status = json.loads(ctl("status", "--json").stdout)
    varlink_status = json.loads(ctl(varlink, "status", "--json").stdout)
    assert dbus_status["transport"]["kind"] == "dbus"
    assert varlink_status["transport"] == {"kind": "varlink", "address": daemon.varlink_socket}
    volatile = {"transport", "dbus_library", "last_poll", "poll_count"}
    assert {k: v for k, v in dbus_status.items() if k not in volatile} == \
        {k: v for k, v in varlink_status.items() if k not in volatile}
    assert f"via        varlink, {daemon.varlink_socket}" in \
        ctl(varlink, "status", "--wide").stdout


def test_show_pcie_and_devices_show_the_pci_side_over_both(start_daemon: Any) -> None:
    """The hops of every NIC, a degraded one flagged; PCIe, AER and temperature in
    ``show devices``; the same over D-Bus and varlink."""
    from dbushelpers import make_sim

    from nichealthd.sim import pcifiles, tree
    root = make_sim()
    with open(root / "nichealthd.toml", "a") as config:
        config.write('pcieLinkInterval = "200ms"\npcieAerInterval = "200ms"\n'
                     'nicTemperatureInterval = "200ms"\n')
    daemon = start_daemon(root)
    nic = pcifiles.device_function(daemon.root, tree.device(tree.load(daemon.root), "mlx5_0"))
    up, down = pcifiles.hop_ends(nic, 0)
    pcifiles.pcie_degrade(nic, 0, 8, None)
    pcifiles.aer(nic, "correctable", 3)
    pcifiles.temperature(nic, 61)
    varlink = f"--varlink={daemon.varlink_socket}"

    def shown() -> bool:
        devices = json.loads(ctl("show", "devices", "--json").stdout)
        mine = [d for d in devices if d["device"] == "mlx5_0"][0]
        return mine.get("aer_dev_correctable") == 3 and mine.get("temperature_c") == 61.0

    from tests.harness import wait_until
    wait_until(shown, "the PCI facts of mlx5_0 in show devices")
    for transport in ((), (varlink,)):
        table = ctl(*transport, "show", "pcie", "--wide").stdout
        row = [line for line in table.splitlines() if down.name in line and "mlx5_0" in line]
        assert row and "x8 at 32.0 GT/s" in row[0] and "DEGRADED" in row[0], table
        hops = json.loads(ctl(*transport, "show", "pcie", "--json").stdout)
        assert [h["upstream"] for h in hops[0]["pcie_hops"]][0] == up.name
        devices = ctl(*transport, "show", "devices", "--wide").stdout
        root_port = pcifiles.chain(nic)[0].name  # it counted the NIC's errors too
        assert "mlx5_0: PCIe x8 at 32.0 GT/s (1 hop(s) DEGRADED), AER fatal 0 non-fatal 0 " \
               f"correctable 3, root port {root_port} AER fatal 0 non-fatal 0 correctable " \
               "3, 61.0 °C (crit 105.0)" in devices, devices


def test_show_devices_lists_a_lost_nic_with_its_address_and_why_over_both(
        start_daemon: Any) -> None:
    """A Mellanox PF without an RDMA device is a LOST row of ``show devices``."""
    from dbushelpers import make_sim

    from nichealthd.sim import adapter
    from tests.harness import wait_until
    root = make_sim()
    with open(root / "nichealthd.toml", "a") as config:
        config.write('adapterCheckInterval = "1s"\ndriverReloadGrace = "0s"\n')  # third read
    address = adapter.unbind(root, "mlx5_4")
    daemon = start_daemon(root)
    varlink = f"--varlink={daemon.varlink_socket}"

    def lost() -> list[dict[str, Any]]:
        return [d for d in json.loads(ctl("show", "devices", "--json").stdout) if d.get("lost")]

    wait_until(lambda: bool(lost()), "the lost NIC in show devices --json")
    (row,) = lost()
    assert (row["device"], row["pci_address"], row["present"]) == (address, address, False)
    assert row["lost_reason"] == "no driver is bound to it"
    for transport in ((), (varlink,)):
        assert [d for d in json.loads(ctl(*transport, "show", "devices", "--json").stdout)
                if d.get("lost")] == [row]
        table = ctl(*transport, "show", "devices", "--wide").stdout
        line = next(ln for ln in table.splitlines() if ln.startswith(address))
        assert line.split()[-2:] == ["LOST", "-"], table  # STATE, NETDEVS (unbound: none)
        assert f"{address}: lost NIC, no RDMA device: no driver is bound to it (since " \
               f"{row['lost_since']})" in table, table
    adapter.bind(root, "mlx5_4")
    wait_until(lambda: not lost(), "the lost NIC's row gone once it registers")


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
