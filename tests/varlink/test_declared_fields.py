"""The varlink interface and the D-Bus introspection say what the daemon and the families
declare of the port and device records (ARCHITECTURE.md, "Adding a check family"), and a reply
the interface does not describe fails the test that reads it (vlhelpers.Raw)."""

from __future__ import annotations

from typing import Any

import pytest
from idl_values import Replies, ReplyMismatch
from interface_check import dbus_signature, problems

from nichealthd.core.checks.link_flaps import LinkFlaps
from nichealthd.surfaces.varlink import DESCRIPTION_FILE, INTERFACE

M = INTERFACE + "."


def test_the_interfaces_say_what_is_declared() -> None:
    assert problems() == []


def test_a_field_the_interface_lacks_names_itself_and_where_to_declare_it(
        monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(LinkFlaps, "port_field_types",
                        {**LinkFlaps.port_field_types, "flap_rate": "?float"})
    (problem,) = problems()
    assert problem.startswith("Port.flap_rate: family link_flaps (nichealthd/core/checks/"
                              "link_flaps.py, port_field_types) declares it ?float; type Port")
    assert "add `  flap_rate: ?float` there" in problem


def test_a_declared_type_the_interface_contradicts_fails(monkeypatch: pytest.MonkeyPatch
                                                         ) -> None:
    monkeypatch.setattr(LinkFlaps, "port_field_types",
                        {"flaps": "?string", "flapping": "?bool"})
    assert problems() == [
        "Port.flaps: family link_flaps (nichealthd/core/checks/link_flaps.py, "
        "port_field_types) declares it ?string, io.nichealthd.Monitor.varlink says ?int"]


def test_a_field_declared_by_no_one_fails(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(LinkFlaps, "port_field_types", {"flaps": "?int"})
    assert problems() == [
        "Port.flapping (?bool) of io.nichealthd.Monitor.varlink is declared by no family nor "
        "the daemon: declare it where it is made (port_field_types) or take it out"]


def test_two_types_for_one_field_fail(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(LinkFlaps, "port_field_types",
                        {**LinkFlaps.port_field_types, "since": "?string"})
    (problem,) = problems()
    assert problem.startswith("port field since: family link_flaps")
    assert "the daemon (nichealthd/core/views.py, PORT_FIELD_TYPES) string" in problem


@pytest.mark.parametrize("varlink,dbus", [("int", "x"), ("?float", "d"), ("?[]string", "as"),
                                          ("?[]PcieHop", "aa{ss}"), ("bool", "b")])
def test_dbus_signatures(varlink: str, dbus: str) -> None:
    assert dbus_signature(varlink) == dbus


def _replies() -> Replies:
    with open(DESCRIPTION_FILE, encoding="utf-8") as handle:
        return Replies(handle.read())


LANE = {"lane": "1", "rx_power_dbm": "-1.2"}
PORT: dict[str, Any] = {
    "device": "mlx5_0", "port": 1, "link_layer": "InfiniBand", "state": "ACTIVE",
    "phys_state": "LinkUp", "rate": "400 Gb/sec (4X NDR)", "operstate": "", "netdev": "",
    "role": "compute", "monitored": True, "excluded": "", "healthy": True, "fatal": False,
    "health": "healthy", "reasons": [], "since": "", "pci_address": "0000:0c:00.0",
    "gid_count": 2, "present": True, "suspect": "", "suspect_evidence": "", "flaps": 0,
    "module_lanes": [LANE],
    "phy_pre_fec_ber": 1,  # an int is a float too
}


def test_a_reply_as_declared_passes() -> None:
    _replies().check(M + "ListPorts", None, {"ports": [PORT]})
    _replies().check(M + "UnknownPort", M + "UnknownPort",
                     {"device": "mlx5_0", "port": 7, "message": "no port 7"})
    _replies().check("org.varlink.service.GetInfo", None, {
        "vendor": "v", "product": "p", "version": "1", "url": "u", "interfaces": ["a"]})


@pytest.mark.parametrize("change,why", [
    ({"roce_mtu": ["eth0=1500"]}, "ListPorts.ports[0].roce_mtu: not declared in"),
    ({"port": "1"}, "ListPorts.ports[0].port: '1' is not int"),
    ({"healthy": 1}, "ListPorts.ports[0].healthy: 1 is not bool"),
    ({"port": True}, "ListPorts.ports[0].port: True is not int"),
    ({"reasons": "down"}, "ListPorts.ports[0].reasons: 'down' is not an array"),
    ({"reasons": [1]}, "ListPorts.ports[0].reasons[0]: 1 is not string"),
    ({"device": None}, "ListPorts.ports[0].device: missing, and its type string is not "
                       "optional"),
    ({"module_lanes": [{**LANE, "lane": 1}]},
     "ListPorts.ports[0].module_lanes[0].lane: 1 is not string"),
    ({"module_lanes": [{"rx_power_dbm": "1"}]},
     "ListPorts.ports[0].module_lanes[0].lane: missing"),
])
def test_a_reply_the_interface_does_not_describe_fails(change: dict[str, Any], why: str
                                                       ) -> None:
    port = {k: v for k, v in {**PORT, **change}.items() if v is not None}
    with pytest.raises(ReplyMismatch) as refused:
        _replies().check(M + "ListPorts", None, {"ports": [port]})
    assert str(refused.value).startswith(M + why), str(refused.value)


def test_a_family_giving_a_field_it_does_not_declare_fails_where_it_gives_it(
        monkeypatch: pytest.MonkeyPatch) -> None:
    """Every record the in-process tests build is checked (tests/declared_records.py)."""
    from nichealthd.core.checks.link_flaps import LINK_FLAPS
    from tests.declared_records import UndeclaredField

    monkeypatch.setattr(LinkFlaps, "port_field_types", {"flaps": "?int"})
    with pytest.raises(UndeclaredField) as refused:
        LINK_FLAPS.port_fields(LINK_FLAPS.fresh(), None, ("mlx5_0", 1))
    assert str(refused.value) == (
        "family link_flaps gives the port field 'flapping' (False) and does not declare it: "
        "add it with its type to port_field_types of LinkFlaps "
        "(nichealthd/core/checks/link_flaps.py) and to type Port of "
        "io.nichealthd.Monitor.varlink")
    monkeypatch.setattr(LinkFlaps, "port_field_types", {"flaps": "?string", "flapping": "?bool"})
    with pytest.raises(UndeclaredField, match="'flaps' 0, declared [?]string"):
        LINK_FLAPS.port_fields(LINK_FLAPS.fresh(), None, ("mlx5_0", 1))
