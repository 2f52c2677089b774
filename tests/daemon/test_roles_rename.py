"""Roles by PCI function end to end: the real daemon on a DGX-H100 sim tree through a driver
reload that permutes two names of different roles, driven by ``nichealthd-sim`` as an
operator's drill would.

mlx5_0 is the InfiniBand compute function 0000:18:00.0, mlx5_1 the Ethernet storage function
0000:29:00.0 (one of the two ports of the storage card 0000:29:00, mlx5_2 the other).
``driver-reload --swap mlx5_0 mlx5_1`` brings them back under each other's names while the
GPU metadata file still lists ``mlx5_0`` with the IB function's PXB row. The sim's manifest
roles move with the functions, so they say what each name's role must be afterwards.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any, Callable

from nichealthd.sim import tree

from ..harness import NotifySocket, ctl_output
from .conftest import SimHost
from .test_driver_reload import configure, fatal, sim, state
from .test_service import Daemon, events, notify  # noqa: F401 (fixture)

IB, ETH = "0000:18:00.0", "0000:29:00.0"


def ports(socket: Path) -> dict[str, dict[str, Any]]:
    """``nichealthctl show ports --json`` over varlink, by device (one port each here)."""
    return {p["device"]: p for p in json.loads(ctl_output(socket, "show", "ports", "--json"))}


def assert_roles_by_function(host: SimHost, socket: Path) -> None:
    shown = ports(socket)
    assert (shown["mlx5_0"]["pci_address"], shown["mlx5_0"]["link_layer"],
            shown["mlx5_0"]["role"]) == (ETH, "Ethernet", "storage")
    assert (shown["mlx5_1"]["pci_address"], shown["mlx5_1"]["link_layer"],
            shown["mlx5_1"]["role"]) == (IB, "InfiniBand", "compute")
    intended = tree.load(host.root)["roles"]  # VFs list no port
    assert {name: p["role"] for name, p in shown.items()} == {
        name: role for name, role in intended.items() if role != "vf"}


def test_a_reload_that_swaps_a_compute_and_a_storage_name_keeps_each_role(
        sim_host: Callable[..., SimHost], notify: NotifySocket,  # noqa: F811
        tmp_path: Path) -> None:
    """Each function keeps its role under its new name, nothing but recoveries follows, and
    the storage card's real fault is still judged as the storage card's."""
    host = configure(sim_host(), cardVerdictHoldTime="1s")
    socket = tmp_path / "vl"
    daemon = Daemon(host, notify, "--varlink-socket", str(socket))
    try:
        notify.wait_for("READY=1")
        before = len(events(host))
        out = sim(host, "driver-reload", "--down", "1", "--swap", "mlx5_0", "mlx5_1")
        assert "mlx5_0 -> mlx5_1, mlx5_1 -> mlx5_0" in out
        daemon.lines.wait_for("mlx5_1 is now mlx5_0", proc=daemon.proc)
        daemon.wait_polls(3)
        assert_roles_by_function(host, socket)
        assert daemon.lines.count("NIC mlx5_0: storage (Ethernet, NODE/PHB to a GPU)") == 1
        assert daemon.lines.count("NIC mlx5_1: compute (shares a PCIe switch") == 1
        summaries = [ln for ln in daemon.lines.lines if "topology from metadata: 8 GPUs" in ln]
        assert summaries[-1].rstrip().endswith("8 compute, 4 storage, 1 management NIC")
        after = events(host)[before:]
        assert fatal(after) == [] and all(e["isHealthy"] for e in after), after
        identities = state(host)["device_identities"]
        assert (identities["mlx5_0"]["pci_address"], identities["mlx5_0"]["renamed_from"]) \
            == (ETH, "mlx5_1")
        # The other port of the storage card drops to INIT: the card is short among the
        # storage cards (judged as compute, by the file's stale mlx5_0 row, it was not).
        sim(host, "port", "mlx5_2", "1", "--state", "INIT")
        daemon.wait_until(lambda: bool(fatal(events(host)[before:])), "the card verdict")
        daemon.wait_polls(3)
        assert [(e["checkName"], e["recommendedAction"], e["message"])
                for e in fatal(events(host)[before:])] == [
            ("EthernetStateCheck", "REPLACE_VM",
             "Card 0000:29:00 (storage) has 1 active ports, expected 2"
             " - suspect: unknown (card_active_ports: the facts do not decide)")]
    finally:
        code, err = daemon.stop()
    assert code == 0, err
    assert "Traceback" not in err


def test_a_swap_while_the_daemon_was_stopped_is_followed_at_the_next_start(
        sim_host: Callable[..., SimHost], notify: NotifySocket,  # noqa: F811
        tmp_path: Path) -> None:
    """The resolution made at the first start is kept beside the state file: the same file,
    read again at the next start after the swap, still names the functions it was written
    for."""
    host = sim_host()
    socket = tmp_path / "vl"
    daemon = Daemon(host, notify, "--varlink-socket", str(socket))
    notify.wait_for("READY=1")
    code, err = daemon.stop()
    assert code == 0, err
    assert (host.state_file.parent / "metadata-names.json").is_file()
    sim(host, "driver-reload", "--swap", "mlx5_0", "mlx5_1")
    before = len(events(host))
    notify.close()
    again = NotifySocket(notify.path.parent / "notify2.sock")
    daemon = Daemon(host, again, "--varlink-socket", str(socket))
    try:
        again.wait_for("READY=1")
        daemon.wait_polls(2)
        assert_roles_by_function(host, socket)
        assert daemon.lines.count("predates a rename: mlx5_0 is 0000:18:00.0, now mlx5_1; "
                                  "mlx5_1 is 0000:29:00.0, now mlx5_0") == 1
        assert fatal(events(host)[before:]) == []
    finally:
        code, err = daemon.stop()
        again.close()
    assert code == 0, err
