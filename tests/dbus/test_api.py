"""Every method, property and signal of org.nichealthd.NicHealth1 against a running nichealthd."""

from __future__ import annotations

import json
import xml.etree.ElementTree as ET
from typing import Any

from dbushelpers import BusClient, busctl, make_sim, poll_count, run, wait_polls

from nichealthd.sim import mutate, tree
from nichealthd.surfaces.dbus_common import (
    INTERFACE,
    OBJECT_PATH,
    ServiceInterface,
    from_variants,
    intr,
)
from nichealthd.surfaces.dbus_interface import UNSIGNALLED_PROPERTIES, NicHealthInterface
from tests.harness import wait_until_async

PORT_KEYS = {"device", "port", "link_layer", "state", "phys_state", "rate", "role", "healthy",
             "fatal", "since", "excluded", "monitored", "health"}
COUNTER_KEYS = {"device", "port", "counter", "path", "value", "threshold", "type",
                "unit", "fatal", "breached", "since"}


def records(reply: Any) -> list[dict[str, Any]]:
    assert reply.message_type.name == "METHOD_RETURN", (reply.error_name, reply.body)
    return [from_variants(r) for r in reply.body[0]]


def monitored_ports(root: Any) -> set[tuple[str, int]]:
    """What the sim built as monitored (compute + storage PF ports)."""
    manifest = tree.load(root)
    out: set[tuple[str, int]] = set()
    for dev in manifest["devices"]:
        if dev["role"] in ("compute", "storage"):
            out.update((dev["name"], int(port)) for port in dev["ports"])
    return out


# ------------------------------------------------------------------ introspection

def test_busctl_introspect_shows_the_interface(daemon: Any) -> None:
    out = busctl("introspect", "org.nichealthd.NicHealth1", OBJECT_PATH)
    assert out.returncode == 0, out.stderr
    for member in ("ListPorts", "ListDevices", "ListCounters", "ListEvents", "GetStatus",
                   "Reload", "PortHealthChanged", "EventEmitted", "Version", "NodeName",
                   "BootId", "LastPoll", "PollCount", "PollingInterval", "ConnectorState",
                   "OutboxDepth", "DeadLetters", "Health", "TopologySource", "Topology"):
        assert f".{member} " in out.stdout, member
    assert INTERFACE in out.stdout


def test_introspection_documents_every_member(daemon: Any) -> None:
    out = busctl("call", "org.nichealthd.NicHealth1", OBJECT_PATH,
                 "org.freedesktop.DBus.Introspectable", "Introspect", "--json=short")
    xml = json.loads(out.stdout)["data"][0]
    iface = next(i for i in ET.fromstring(xml).iter("interface") if i.get("name") == INTERFACE)
    members = [m for m in iface if m.tag in ("method", "signal", "property")]
    assert len(members) == 20
    for member in members:
        docs = [a for a in member if a.tag == "annotation"
                and a.get("name") == "org.gtk.GDBus.DocString"]
        assert docs and docs[0].get("value"), member.get("name")


def test_documented_xml_matches_the_implementation() -> None:
    """The served XML is data; it must not drift from the code's own signatures."""
    interface = NicHealthInterface(None)  # type: ignore[arg-type]
    generated = ServiceInterface.introspect(interface)  # what the code declares
    documented = interface.introspect()  # what the XML file says (and the bus serves)
    assert isinstance(documented, intr.Interface) and documented is not generated

    def shape(interface: Any) -> dict[str, Any]:
        return {
            "methods": {m.name: ([a.signature for a in m.in_args],
                                 "".join(a.signature for a in m.out_args))
                        for m in interface.methods},
            "signals": {s.name: "".join(a.signature for a in s.args) for s in interface.signals},
            "properties": {p.name: (p.signature, p.access.name) for p in interface.properties},
        }

    assert shape(documented) == shape(generated)
    # What the XML says is not signalled is what the code does not signal.
    assert {p.name for p in documented.properties
            if p.annotations.get("org.freedesktop.DBus.Property.EmitsChangedSignal") == "false"
            } == UNSIGNALLED_PROPERTIES


# ------------------------------------------------------------------------ methods

def test_list_ports_lists_every_monitored_port_with_the_design_keys(daemon: Any) -> None:
    async def go() -> list[dict[str, Any]]:
        async with BusClient() as client:
            return records(await client.call("ListPorts"))

    ports = run(go())
    assert all(set(p) >= PORT_KEYS for p in ports)
    seen = {(p["device"], p["port"]) for p in ports if p["monitored"]}
    assert seen == monitored_ports(daemon.root)
    for p in ports:
        assert isinstance(p["port"], int) and isinstance(p["healthy"], bool)
        if p["monitored"]:
            assert (p["state"], p["phys_state"], p["healthy"], p["fatal"]) == (
                "ACTIVE", "LinkUp", True, False)
            assert p["excluded"] == "" and p["since"]
        else:
            assert p["excluded"], p
    roles = {p["role"] for p in ports}
    assert {"compute", "storage", "management"} <= roles


def test_port_records_carry_the_families_fields(daemon: Any) -> None:
    """The flap, hold-down and rate families' port fields reach D-Bus, typed."""
    async def go() -> list[dict[str, Any]]:
        async with BusClient() as client:
            return records(await client.call("ListPorts"))

    for p in run(go()):
        if p.get("present", True):
            assert (p["flaps"], p["flapping"], p["blips"], p["held"], p["rate_degraded"],
                    p["peer_rate"]) == (0, False, 0, False, False, ""), p


def test_list_devices_includes_vfs_and_roles(daemon: Any) -> None:
    async def go() -> list[dict[str, Any]]:
        async with BusClient() as client:
            return records(await client.call("ListDevices"))

    devices = run(go())
    manifest = tree.load(daemon.root)
    assert {d["device"] for d in devices} == {d["name"] for d in manifest["devices"]}
    by_name = {d["device"]: d for d in devices}
    for dev in manifest["devices"]:
        assert by_name[dev["name"]]["role"] == dev["role"], dev["name"]
        assert by_name[dev["name"]]["present"] is True
    assert any(d["is_vf"] for d in devices)
    assert all(isinstance(d["netdevs"], list) for d in devices)


def test_list_counters_all_one_device_one_port_and_errors(daemon: Any) -> None:
    async def go() -> tuple[Any, ...]:
        async with BusClient() as client:
            every = records(await client.call("ListCounters", "su", ["", 0]))
            for _ in range(100):  # one device and its one port from the same poll
                before = await poll_count(client)
                one_dev = records(await client.call("ListCounters", "su", ["mlx5_0", 0]))
                one_port = records(await client.call("ListCounters", "su", ["mlx5_0", 1]))
                if await poll_count(client) == before:
                    break
            else:
                raise AssertionError("a poll fell between the two calls 100 times")
            unknown = await client.call("ListCounters", "su", ["mlx5_99", 0])
            bad_port = await client.call("ListCounters", "su", ["mlx5_0", 7])
            unmonitored = await client.call("ListCounters", "su", ["mlx5_12", 0])
            return every, one_dev, one_port, unknown, bad_port, unmonitored

    every, one_dev, one_port, unknown, bad_port, unmonitored = run(go())
    assert {(c["device"], c["port"]) for c in every} == monitored_ports(daemon.root)
    assert all(set(c) >= COUNTER_KEYS for c in every)
    assert one_dev and {c["device"] for c in one_dev} == {"mlx5_0"}
    assert one_port == one_dev  # a single-port NIC
    names = {c["counter"] for c in one_port}
    assert {"link_downed", "symbol_error", "port_rcv_errors"} <= names
    assert all(isinstance(c["value"], int) and c["breached"] is False for c in one_port)
    assert unknown.error_name == "org.nichealthd.NicHealth1.Error.UnknownDevice"
    assert bad_port.error_name == "org.nichealthd.NicHealth1.Error.UnknownPort"
    assert unmonitored.error_name == "org.nichealthd.NicHealth1.Error.NotMonitored"
    assert "default route" in unmonitored.body[0]


def test_counter_value_is_absent_when_unreadable(daemon: Any) -> None:
    path = mutate.counter_path(daemon.root, "mlx5_0", 1, "symbol_error")
    mutate.garbage(daemon.root, path.relative_to(daemon.root))
    wait_polls(2)

    async def go() -> list[dict[str, Any]]:
        async with BusClient() as client:
            return records(await client.call("ListCounters", "su", ["mlx5_0", 1]))

    by_name = {c["counter"]: c for c in run(go())}
    assert "value" not in by_name["symbol_error"]  # absent, not a guessed 0
    assert by_name["symbol_error"]["error"]
    assert isinstance(by_name["link_downed"]["value"], int)


def test_list_events_newest_last_limited_and_durable(start_daemon: Any) -> None:
    first = start_daemon()

    async def events(limit: int) -> list[dict[str, Any]]:
        async with BusClient() as client:
            return records(await client.call("ListEvents", "u", [limit]))

    three = run(events(3))
    assert len(three) == 3
    seqs = [e["seq"] for e in three]
    assert seqs == sorted(seqs) and seqs[-1] - seqs[0] == 2
    everything = run(events(0))
    assert everything[-3:] == three
    # The newest with entities: a family's check-wide clear may come last in its poll.
    event = next(e for e in reversed(three) if e["entitiesImpacted"])
    for key in ("version", "agent", "componentClass", "checkName", "isFatal", "isHealthy",
                "message", "recommendedAction", "errorCode", "entitiesImpacted", "metadata",
                "generatedTimestamp", "nodeName", "processingStrategy", "seq", "severity"):
        assert key in event, key
    assert event["agent"] == "nic-health-monitor" and event["componentClass"] == "NIC"
    assert isinstance(event["entitiesImpacted"], list)
    assert event["entitiesImpacted"][0].keys() == {"entityType", "entityValue"}
    assert "nichealthd.event_id" in event["metadata"]

    first.stop()  # the history survives a restart: it is the durable journal
    start_daemon(root=first.root)
    after = run(events(3))
    assert [e["seq"] for e in after] == seqs
    assert [e["metadata"]["nichealthd.event_id"] for e in after] == [
        e["metadata"]["nichealthd.event_id"] for e in three]


def test_get_status(daemon: Any) -> None:
    async def go() -> dict[str, Any]:
        async with BusClient() as client:
            reply = await client.call("GetStatus")
            assert reply.body[0]["surfaces"].signature == "aa{sv}"
            return from_variants(reply.body[0])

    status = run(go())
    # Every surface's status, typed records over the bus: Slurm's service is always made
    # (a reload may switch it on), so it has published "off".
    assert {"name": "slurm", "state": "off", "last_error": "", "last_success": ""} in \
        status["surfaces"], status["surfaces"]
    assert status["health"] == "healthy"
    assert status["node_name"] == "dgx-h100-sim"
    assert status["ports_total"] == len(monitored_ports(daemon.root))
    assert status["polling_interval"] == 0.2
    assert status["pid"] == daemon.proc.pid


def test_reload_accepts_a_valid_config_and_rejects_an_invalid_one(daemon: Any) -> None:
    config = daemon.root / "nichealthd.toml"
    original = config.read_text()

    async def reload() -> tuple[bool, str]:
        async with BusClient() as client:
            reply = await client.call("Reload")
            assert reply.message_type.name == "METHOD_RETURN", reply.body
            return reply.body[0], reply.body[1]

    accepted, message = run(reload())
    assert accepted is True and "reloaded" in message
    config.write_text(original + 'pollingInterval = "soon"\n')
    accepted, message = run(reload())
    assert accepted is False
    assert "pollingInterval" in message and str(config) in message
    config.write_text(original)
    assert run(reload())[0] is True
    assert daemon.proc.poll() is None


# --------------------------------------------------------------------- properties

def test_properties_get_all_types_and_values(daemon: Any) -> None:
    async def go() -> dict[str, Any]:
        async with BusClient() as client:
            reply = await client.call("GetAll", "s", [INTERFACE],
                                      interface="org.freedesktop.DBus.Properties")
            return dict(reply.body[0])

    props = run(go())
    signatures = {k: v.signature for k, v in props.items()}
    assert signatures == {"Version": "s", "NodeName": "s", "BootId": "s", "LastPoll": "s",
                          "PollCount": "t", "PollingInterval": "d", "ConnectorState": "s",
                          "OutboxDepth": "u", "DeadLetters": "u", "Health": "s",
                          "TopologySource": "s", "Topology": "s"}
    values = {k: v.value for k, v in props.items()}
    assert values["Health"] == "healthy"
    assert values["ConnectorState"] == "disabled"
    assert values["BootId"] == (daemon.root / "proc/sys/kernel/random/boot_id").read_text().strip()
    assert values["PollCount"] >= 1 and values["LastPoll"].endswith("Z")
    assert values["PollingInterval"] == 0.2
    assert values["TopologySource"] == "metadata"
    assert values["Topology"].startswith("topology from metadata: 8 GPUs on 2 NUMA nodes; ")


def test_property_get_with_busctl_and_set_is_refused(daemon: Any) -> None:
    out = busctl("get-property", "org.nichealthd.NicHealth1", OBJECT_PATH, INTERFACE, "NodeName")
    assert out.stdout.strip() == 's "dgx-h100-sim"'
    denied = busctl("set-property", "org.nichealthd.NicHealth1", OBJECT_PATH, INTERFACE,
                    "Health", "s", "healthy")
    assert denied.returncode != 0 and "readonly" in denied.stderr.lower()


def test_quiet_polls_signal_no_property_change_and_say_so_in_introspection(
        daemon: Any) -> None:
    """LastPoll and PollCount change every poll: EmitsChangedSignal=false (as systemd's
    counters), so a quiet host sends no PropertiesChanged; the others signal their changes
    (Health: test_port_down_emits_port_health_changed_event_emitted_and_health_change)."""
    async def go() -> list[Any]:
        async with BusClient() as client:
            await client.subscribe(f"type='signal',interface='org.freedesktop.DBus.Properties',"
                                   f"member='PropertiesChanged',path='{OBJECT_PATH}'")
            first = await poll_count(client)

            async def six_polls() -> bool:  # six polls seen while subscribed
                return await poll_count(client) >= first + 6

            await wait_until_async(six_polls, "six polls while subscribed")
            return [m for m in client.signals if m.member == "PropertiesChanged"]

    assert run(go()) == []
    out = busctl("introspect", "org.nichealthd.NicHealth1", OBJECT_PATH, INTERFACE)
    assert out.returncode == 0, out.stderr
    flags = {line.split()[0]: line.split()[-1] for line in out.stdout.splitlines()
             if " property " in line}
    assert "emits-change" not in flags[".LastPoll"] and "emits-change" not in flags[".PollCount"]
    assert flags[".Health"] == "emits-change" and flags[".OutboxDepth"] == "emits-change"


# ------------------------------------------------------------------------ signals

def test_port_down_emits_port_health_changed_event_emitted_and_health_change(
        daemon: Any) -> None:
    async def go() -> tuple[Any, Any, Any]:
        async with BusClient() as client:
            await client.subscribe(f"type='signal',path='{OBJECT_PATH}'")
            mutate.set_port(daemon.root, "mlx5_3", 1, state="DOWN", phys_state="Disabled")
            port = await client.wait_signal(lambda m: m.member == "PortHealthChanged"
                                            and m.body[0] == "mlx5_3")
            event = await client.wait_signal(lambda m: m.member == "EventEmitted"
                                             and "mlx5_3" in m.body[0]["message"].value)
            health = await client.wait_signal(
                lambda m: m.member == "PropertiesChanged" and "Health" in m.body[1])
            return port, event, health

    port, event, health = run(go())
    assert port.signature == "susbs"
    device, number, state, fatal, message = port.body
    assert (device, number, state, fatal) == ("mlx5_3", 1, "fatal", True)
    assert "DOWN" in message
    record = from_variants(event.body[0])
    assert record["isHealthy"] is False and record["seq"] > 0
    assert {"entityType": "NIC", "entityValue": "mlx5_3"} in record["entitiesImpacted"]
    assert health.body[1]["Health"].value == "fatal"
    assert not {"LastPoll", "PollCount"} & set(health.body[1])  # never signalled


def test_port_recovery_emits_healthy_port_health_changed(start_daemon: Any) -> None:
    root = make_sim()
    mutate.set_port(root, "mlx5_4", 1, state="DOWN", phys_state="Disabled")
    daemon = start_daemon(root=root)
    wait_polls(2)

    async def go() -> Any:
        async with BusClient() as client:
            await client.subscribe(f"type='signal',path='{OBJECT_PATH}',"
                                   f"member='PortHealthChanged'")
            mutate.set_port(daemon.root, "mlx5_4", 1, state="ACTIVE", phys_state="LinkUp")
            return await client.wait_signal(lambda m: m.body[0] == "mlx5_4")

    signal = run(go())
    assert signal.body[2] == "healthy" and signal.body[3] is False


def test_a_fatal_counter_breach_signals_the_port_fatal_with_the_reason(daemon: Any) -> None:
    """The port stays ACTIVE/LinkUp; its health is fatal all the same, as in ListPorts."""
    async def go() -> Any:
        async with BusClient() as client:
            await client.subscribe(f"type='signal',path='{OBJECT_PATH}',"
                                   f"member='PortHealthChanged'")
            mutate.counter(daemon.root, "mlx5_5", 1, "link_downed", add=1)
            return await client.wait_signal(lambda m: m.body[0] == "mlx5_5")

    signal = run(go())
    device, number, health, fatal, message = signal.body
    assert (device, number, health, fatal) == ("mlx5_5", 1, "fatal", True)
    assert "link_downed breached" in message and "ACTIVE" in message
