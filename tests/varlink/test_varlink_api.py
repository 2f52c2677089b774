"""The varlink API of a running nichealthd, driven by the stock PyPI ``varlink`` client.

What is checked from outside: GetInfo lists the
interface, the description is the shipped file and parses, ListPorts has the design keys, a
port set DOWN reads ``healthy: false`` within two polls; plus every record field is declared
in the interface with its type, and the standard errors where they apply.
"""

from __future__ import annotations

import socket
import time
from typing import Any

import pytest
from vlhelpers import Raw, VarlinkDaemon, make_sim, records

from nichealthd.sim import adapter, mutate, tree
from nichealthd.surfaces.varlink import DESCRIPTION_FILE, INTERFACE
from tests.harness import DEADLINE, wait_until

varlink = pytest.importorskip("varlink", reason="the PyPI varlink client (test extra)")

M = INTERFACE + "."


def client(daemon: VarlinkDaemon) -> Any:
    return varlink.Client(address=f"unix:{daemon.socket}")


def monitored(root: Any) -> set[str]:
    return {f"{d['name']}/{p}" for d in tree.load(root)["devices"]
            if d["role"] in ("compute", "storage") for p in d["ports"]}


def test_stock_client_sees_the_interface_and_its_description(daemon: VarlinkDaemon) -> None:
    with client(daemon) as c:
        assert c.get_interfaces() == ["org.varlink.service", INTERFACE]
        with c.open("org.varlink.service", namespaced=False) as service:
            info = service.GetInfo()
            text = service.GetInterfaceDescription(INTERFACE)["description"]
        assert info["vendor"] == "nichealthd" and info["product"] == "nichealthd"
        assert info["version"] and info["url"].startswith("https://")
        assert INTERFACE in info["interfaces"]
        with open(DESCRIPTION_FILE, encoding="utf-8") as handle:
            assert text == handle.read()  # verbatim
        parsed = varlink.Interface(text)  # the stock parser accepts it
        assert parsed.name == INTERFACE
        for member in ("GetStatus", "ListPorts", "ListDevices", "ListCounters", "ListEvents",
                       "WatchEvents", "Reload", "PermissionDenied"):
            assert member in parsed.members, member


def test_list_ports_has_the_design_keys_and_sees_a_port_go_down(daemon: VarlinkDaemon) -> None:
    with client(daemon) as c, c.open(INTERFACE, namespaced=False) as monitor:
        ports = monitor.ListPorts()["ports"]
        for p in ports:
            assert {"device", "port", "state", "healthy", "role", "link_layer", "phys_state",
                    "fatal"} <= set(p)
            assert isinstance(p["port"], int) and isinstance(p["healthy"], bool)
        assert {f"{p['device']}/{p['port']}" for p in ports if p["monitored"]} == \
            monitored(daemon.root)
        mutate.set_port(daemon.root, "mlx5_0", 1, state="DOWN", phys_state="Disabled")
        daemon.wait_polls(2)
        port = next(p for p in monitor.ListPorts()["ports"]
                    if (p["device"], p["port"]) == ("mlx5_0", 1))
        assert port["healthy"] is False and port["fatal"] is True and port["state"] == "DOWN"
        status = monitor.GetStatus()["status"]
        assert status["health"] == "fatal" and "mlx5_0/1" in status["fatal_ports"]


def _declared(stock: Any, raw: Any, where: str) -> None:
    """The stock client keeps only fields the interface declares, with their types (it
    raises InvalidParameter on a wrong type), and drops nulls: what is left must be all."""
    if isinstance(raw, dict):
        assert isinstance(stock, dict), where
        for key, value in raw.items():
            if value is None:
                continue
            assert key in stock, f"{where}.{key} is not declared in {DESCRIPTION_FILE}"
            _declared(stock[key], value, f"{where}.{key}")
    elif isinstance(raw, list):
        assert len(stock) == len(raw), where
        for i, (s, r) in enumerate(zip(stock, raw)):
            _declared(s, r, f"{where}[{i}]")
    else:
        assert stock == raw, where


def test_every_record_field_is_declared_with_its_type(daemon: VarlinkDaemon) -> None:
    mutate.counter(daemon.root, "mlx5_1", 1, "carrier_changes", add=50)
    mutate.remove_device(daemon.root, "mlx5_3")  # a missing device has missing_polls
    daemon.wait_polls(2)
    calls: list[tuple[str, dict[str, Any]]] = [
        ("GetStatus", {}), ("ListPorts", {}), ("ListDevices", {}), ("ListCounters", {}),
        ("ListCounters", {"device": "mlx5_1", "port": 1}), ("ListEvents", {"limit": 0})]
    with client(daemon) as c, c.open(INTERFACE, namespaced=False) as monitor, \
            Raw(daemon.socket) as raw:
        for method, params in calls:
            stock, answer = _one_poll(monitor, raw, method, params)
            assert answer["error"] is None, answer
            _declared(stock, answer["parameters"], method)


def _one_poll(monitor: Any, raw: Raw, method: str, params: dict[str, Any]
              ) -> tuple[Any, dict[str, Any]]:
    """The stock client's answer and the raw one from the same poll: a poll between two
    calls changes values such as ``missing_polls``, so the pair is taken again until no poll
    completed between them (a loaded machine may poll in between)."""
    def polls() -> int:
        return int(raw.ask(M + "GetStatus", {})["parameters"]["status"]["poll_count"])

    end = time.monotonic() + DEADLINE
    while True:
        before = polls()
        answer, plain = getattr(monitor, method)(**params), raw.ask(M + method, params)
        if polls() == before or time.monotonic() > end:
            return answer, plain


def test_a_lost_nic_is_a_device_row_with_its_address_and_why(
        start_daemon: Any) -> None:
    """The PF without an RDMA device is listed (fields declared, optional ones)."""
    root = make_sim()
    with (root / "nichealthd.toml").open("a") as fh:
        fh.write('adapterCheckInterval = "1s"\ndriverReloadGrace = "0s"\n')  # third read
    address = adapter.unbind(root, "mlx5_4")
    daemon = start_daemon(root)
    with client(daemon) as c, c.open(INTERFACE, namespaced=False) as monitor, \
            Raw(daemon.socket) as raw:
        def lost() -> list[dict[str, Any]]:
            return [d for d in monitor.ListDevices()["devices"] if d.get("lost")]
        wait_until(lambda: bool(lost()), "the lost NIC's row", 60, daemon.proc, daemon.log)
        (row,) = lost()
        assert row["device"] == row["pci_address"] == address
        assert row["present"] is False and row["lost_reason"] == "no driver is bound to it"
        assert row["lost_since"].endswith("Z") and row["link_layer"] == "InfiniBand"
        others = [d for d in monitor.ListDevices()["devices"] if not d.get("lost")]
        assert all("lost" not in d for d in others)  # the field exists only on such rows
        stock = monitor.ListDevices()
        answer = raw.ask(M + "ListDevices", {})
        _declared(stock, answer["parameters"], "ListDevices")


def test_counters_filters_and_their_errors(daemon: VarlinkDaemon) -> None:
    with client(daemon) as c, c.open(INTERFACE, namespaced=False) as monitor:
        everything = monitor.ListCounters()["counters"]
        assert {f"{x['device']}/{x['port']}" for x in everything} == monitored(daemon.root)
        one = monitor.ListCounters("mlx5_0", 1)["counters"]
        assert one and {x["device"] for x in one} == {"mlx5_0"}
        for args, error, text in ((("mlx5_99", None), "UnknownDevice", "no NIC named mlx5_99"),
                                  (("mlx5_12", None), "NotMonitored", "is not monitored"),
                                  (("mlx5_0", 7), "UnknownPort", "has no port 7")):
            with pytest.raises(varlink.VarlinkError) as caught:
                monitor.ListCounters(*args)
            assert caught.value.error() == M + error
            assert text in caught.value.parameters()["message"]


def test_standard_errors(daemon: VarlinkDaemon) -> None:
    with Raw(daemon.socket) as raw:
        assert raw.ask("org.example.Nothing.Foo")["error"] == \
            "org.varlink.service.InterfaceNotFound"
        answer = raw.ask(M + "Nope")
        assert (answer["error"], answer["parameters"]) == (
            "org.varlink.service.MethodNotFound", {"method": M + "Nope"})
        assert raw.ask("org.varlink.service.Nope")["error"] == \
            "org.varlink.service.MethodNotFound"
        for params, name in (({"limit": "ten"}, "limit"), ({"limit": -1}, "limit"),
                             ({"limit": True}, "limit"), ({"bogus": 1}, "bogus")):
            answer = raw.ask(M + "ListEvents", params)
            assert (answer["error"], answer["parameters"]) == (
                "org.varlink.service.InvalidParameter", {"parameter": name}), params
        answer = raw.ask(M + "ListCounters", {"device": 5})
        assert answer["parameters"] == {"parameter": "device"}
        answer = raw.ask("org.varlink.service.GetInterfaceDescription", {"interface": "a.b"})
        assert (answer["error"], answer["parameters"]) == (
            "org.varlink.service.InterfaceNotFound", {"interface": "a.b"})
        assert raw.ask(M + "WatchEvents")["error"] == "org.varlink.service.ExpectedMore"
        # oneway: no reply at all, so the next reply is the next call's
        raw.call(M + "ListPorts", oneway=True)
        raw.call(M + "Nope", oneway=True)
        status = raw.ask(M + "GetStatus")
        assert status["error"] is None and "status" in status["parameters"]
        # the connection still works after every error
        assert records(raw.ask(M + "ListDevices"), "devices")


def test_the_socket_is_for_every_local_user(daemon: VarlinkDaemon) -> None:
    import os
    import stat
    mode = stat.S_IMODE(os.stat(daemon.socket).st_mode)
    assert mode == 0o666, oct(mode)
    assert stat.S_ISSOCK(os.stat(daemon.socket).st_mode)
    with socket.socket(socket.AF_UNIX) as probe:
        probe.connect(daemon.socket)
