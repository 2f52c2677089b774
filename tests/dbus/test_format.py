"""Pure parts: record <-> variant mapping, tables, colour rules, check lines (no bus)."""

from __future__ import annotations

import io
import json
from pathlib import Path
from typing import Any

import pytest

from nichealthd.cli.ctl import (
    check_line,
    counter_json,
    parse_target,
    unmonitored_devices,
)
from nichealthd.cli.format import (
    BaselineFilter,
    Columns,
    Style,
    baseline_filter,
    devices_table,
    event_line,
    no_events_line,
    ports_table,
    render_table,
    status_lines,
)
from nichealthd.cli.transport import CtlError
from nichealthd.surfaces.dbus_common import from_variants, harden_writer, signature_of, to_variants


def test_variant_mapping_round_trips_and_omits_none() -> None:
    record = {"s": "x", "b": True, "i": 3, "f": 0.5, "none": None, "l": ["a"], "empty": [],
              "metadata": {}, "entitiesImpacted": [{"entityType": "NIC", "entityValue": "m"}]}
    variants = to_variants(record)
    assert {k: v.signature for k, v in variants.items()} == {
        "s": "s", "b": "b", "i": "x", "f": "d", "l": "as", "empty": "as", "metadata": "a{ss}",
        "entitiesImpacted": "aa{ss}"}
    back = from_variants(variants)
    assert back == {k: v for k, v in record.items() if v is not None}
    with pytest.raises(TypeError):
        signature_of("x", object())


def test_surfaces_go_as_typed_records_and_come_back_plain() -> None:
    """``surfaces`` (GetStatus) is ``aa{sv}``: each surface's record keeps its types."""
    surfaces = [{"name": "webhook", "state": "failing", "last_error": "HTTP Error 503",
                 "last_success": "", "pending": 2}]
    variants = to_variants({"surfaces": surfaces, "none": []})
    assert variants["surfaces"].signature == "aa{sv}"
    assert from_variants(variants) == {"surfaces": surfaces, "none": []}
    assert to_variants({"surfaces": []})["surfaces"].signature == "aa{sv}"


def test_status_shows_every_surface_without_rows_of_its_own() -> None:
    """A row per published surface (its state, pending, last success; its last error below),
    red while failing; the connector and Slurm keep their own rows, not repeated."""
    status = {"health": "healthy", "connector_state": "down", "slurm_mode": "off",
              "surfaces": [
                  {"name": "connector", "state": "down", "last_error": "", "pending": 3,
                   "last_success": ""},
                  {"name": "slurm", "state": "off", "last_error": "", "last_success": ""},
                  {"name": "webhook", "state": "failing", "last_error": "HTTP Error 503",
                   "pending": 2, "last_success": "2026-12-02T08:00:00Z"}]}
    lines = status_lines(status, {}, Style(False), None, 10_000)
    text = "\n".join(lines)
    webhook = next(line for line in lines if line.startswith("  webhook    "))
    assert webhook.startswith("  webhook    failing; 2 pending; last success "), webhook
    assert "    last error: HTTP Error 503" in text
    assert sum(line.startswith("  connector") for line in lines) == 1  # its own row only
    assert not any(line.startswith("  slurm") for line in lines)  # off: no row, as before
    coloured = "\n".join(status_lines(status, {}, Style(True), None, 10_000))
    assert "\x1b[1;31mfailing; 2 pending" in coloured
    quiet = {**status, "surfaces": [{"name": "webhook", "state": "ok", "pending": 0,
                                     "last_error": "", "last_success": ""}]}
    assert "  webhook    ok; 0 pending" in status_lines(quiet, {}, Style(False), None, 10_000)


def test_render_table_fits_the_width_by_shrinking_the_named_columns() -> None:
    rows = [("a", "x" * 70, "end")]
    lines = render_table(("A", "LONG", "Z"), rows, width=40, columns=Columns(shrink=(1,)))
    assert all(len(line) <= 40 for line in lines)
    assert lines[1].endswith("end") and "…" in lines[1]


def port(device: str, health: str = "healthy", monitored: bool = True) -> dict[str, Any]:
    return {"device": device, "port": 1, "link_layer": "InfiniBand", "role": "compute",
            "state": "ACTIVE", "phys_state": "LinkErrorRecovery", "rate": "400 Gb/sec (4X NDR)",
            "netdev": "enp170s0f1np1-very-long-name", "monitored": monitored, "health": health,
            "excluded": "" if monitored else "carries the host's default route"}


def test_ports_table_natural_order_80_columns_and_colour_only_when_enabled() -> None:
    records = [port("mlx5_10"), port("mlx5_2", "fatal"), port("mlx5_12", monitored=False)]
    plain = ports_table(records, Style(False))
    assert [line.split()[0] for line in plain[1:4]] == ["mlx5_2/1", "mlx5_10/1", "mlx5_12/1"]
    assert all(len(line) <= 80 for line in plain)
    assert "\033[" not in "\n".join(plain)
    coloured = ports_table(records, Style(True))
    assert "\033[1;31m" in "\n".join(coloured)


def test_ports_table_shows_flaps_blips_and_a_degraded_rate() -> None:
    """FLAPS and BLIPS columns (left out on a narrow terminal, NETDEV first), and a
    rate below the peers' marked ``!`` with its reason."""
    flapping = dict(port("mlx5_0", "degraded"), flaps=3, blips=2, state="ACTIVE",
                    phys_state="LinkUp", netdev="ibp24s0", reasons=["3 link flaps"])
    slow = dict(port("mlx5_1", "degraded"), rate="200 Gb/sec (4X HDR)", rate_degraded=True,
                state="ACTIVE", phys_state="LinkUp", netdev="ibp64s0",
                reasons=["rate 200 Gb/sec (4X HDR) below peers' 400 Gb/sec (4X NDR)"])
    quiet = dict(port("mlx5_2"), state="ACTIVE", phys_state="LinkUp", netdev="ibp79s0")
    wide = ports_table([flapping, slow, quiet], Style(False), 10_000)
    assert wide[0].split() == ["PORT", "LINK", "ROLE", "STATE", "PHYS", "RATE", "FLAPS",
                               "BLIPS", "NETDEV", "HEALTH", "SUSPECT", "REASON"]
    assert wide[1].split()[5:9] == ["400G", "3", "2", "ibp24s0"]
    assert wide[2].split()[5:9] == ["200G!", "-", "-", "ibp64s0"]
    assert wide[3].split()[5:8] == ["400G", "-", "-"]
    narrow = ports_table([flapping, slow, quiet], Style(False))
    assert all(len(line) <= 80 for line in narrow)
    assert "NETDEV" not in narrow[0] and "200G!" in narrow[2]
    coloured = ports_table([slow], Style(True), 10_000)
    assert "\033[33m200G!" in "\n".join(coloured)


def test_ports_table_keeps_its_columns_when_a_fault_gives_a_port_a_reason() -> None:
    """The demo's two tables: the same host before and after a cable is pulled has the same
    columns at 80 characters (BLIPS used to vanish from the second)."""
    def host(fault: bool) -> list[dict[str, Any]]:
        ports = [dict(port(f"mlx5_{n}"), state="ACTIVE", phys_state="LinkUp",
                      netdev=f"enp{n}s0f0np0", rate="400 Gb/sec (4X NDR)") for n in range(12)]
        if fault:
            ports[3] = dict(ports[3], health="fatal", state="DOWN", phys_state="Polling",
                            reasons=["DOWN/Polling"])
        return ports
    before, after = (ports_table(host(fault), Style(False)) for fault in (False, True))
    assert before[0].split() == after[0].split(), (before[0], after[0])
    assert all(len(line) <= 80 for line in before + after)


def test_style_for_stream_respects_tty_and_no_color(monkeypatch: pytest.MonkeyPatch) -> None:
    class Tty(io.StringIO):
        def isatty(self) -> bool:
            return True

    monkeypatch.delenv("NO_COLOR", raising=False)
    monkeypatch.setenv("TERM", "xterm")
    assert Style.for_stream(Tty()).enabled
    assert not Style.for_stream(io.StringIO()).enabled
    monkeypatch.setenv("NO_COLOR", "")
    assert not Style.for_stream(Tty()).enabled


def test_parse_target() -> None:
    assert parse_target(None) == ("", 0)
    assert parse_target("mlx5_0") == ("mlx5_0", 0)
    assert parse_target("mlx5_0/2") == ("mlx5_0", 2)
    for bad in ("/1", "mlx5_0/0", "mlx5_0/x"):
        with pytest.raises(CtlError) as info:
            parse_target(bad)
        assert info.value.code == 3  # a usage error is UNKNOWN, never CRITICAL


def test_check_line_and_problems() -> None:
    status = {"ports_total": 8, "ports_healthy": 8, "ports_degraded": 0, "ports_fatal": 0}
    assert check_line(0, status, []).startswith("NICHEALTH OK - 8 ports healthy | healthy=8")
    problems = ["mlx5_3/1 DOWN/Disabled", "mlx5_9/1 mlx5_9 missing",
                "mlx5_1/1 symbol_error breached"]
    line = check_line(2, dict(status, ports_healthy=7, ports_fatal=1), problems)
    assert line.startswith("NICHEALTH CRITICAL - 1 fatal, 0 degraded of 8 ports: mlx5_3/1")
    assert counter_json({"counter": "x"})["value"] is None


def test_harden_writer_turns_eagain_into_a_short_write() -> None:
    class Sock:
        def send(self, data: bytes) -> int:
            raise BlockingIOError(11, "Resource temporarily unavailable")

    class Writer:
        sock = Sock()

    class Bus:
        _writer = Writer()

    bus = Bus()
    assert harden_writer(bus)
    assert bus._writer.sock.send(b"abc") == 0
    assert harden_writer(object()) is False


def test_usage_errors_exit_3_never_2_and_json_says_so(capsys: pytest.CaptureFixture[str]
                                                      ) -> None:
    from nichealthd.cli.ctl import main
    assert main(["chek"]) == 3
    captured = capsys.readouterr()
    assert "invalid choice: 'chek'" in captured.err and captured.out == ""
    assert main(["--json", "chek"]) == 3
    data = json.loads(capsys.readouterr().out)
    assert data["exit"] == 3 and "chek" in data["error"]
    assert main(["show", "counters", "mlx5_0/x", "--json"]) == 3
    data = json.loads(capsys.readouterr().out)
    assert data["exit"] == 3 and "PORT must be a number" in data["error"]
    assert main(["events", "--no-such-option"]) == 3
    assert main(["show"]) == 3  # a command without what to show


def test_json_on_every_path_when_the_daemon_is_unreachable(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
        capsys: pytest.CaptureFixture[str]) -> None:
    from nichealthd.cli.ctl import main
    monkeypatch.setenv("DBUS_SYSTEM_BUS_ADDRESS", f"unix:path={tmp_path}/no-such-socket")
    assert main(["--json", "check"]) == 3
    data = json.loads(capsys.readouterr().out)
    assert data["status"] == "UNKNOWN" and data["exit"] == 3
    assert "no-such-socket" in data["error"] and data["summary"].startswith("NICHEALTH UNKNOWN")
    for args in (["status"], ["show", "ports"], ["events", "-n", "3"], ["reload"]):
        code = main([*args, "--json"])
        out = capsys.readouterr().out
        data = json.loads(out)
        assert code == data["exit"] and data["error"], (args, out)


def test_check_warns_when_devices_are_present_but_none_monitored() -> None:
    assert unmonitored_devices([]) == []  # no RDMA device at all: nothing to watch, OK
    devices = [{"device": "mlx5_0", "present": True, "monitored": False, "role": "management",
                "role_reason": "carries the host's default route"},
               {"device": "mlx5_1", "present": True, "monitored": False, "role": "excluded",
                "role_reason": ""}]
    assert unmonitored_devices(devices) == [
        "mlx5_0 (management: carries the host's default route)", "mlx5_1 (excluded)"]
    devices.append({"device": "mlx5_2", "present": True, "monitored": True})
    assert unmonitored_devices(devices) == []


def event(message: str, when: str, healthy: bool = True, entities: bool = True,
          seq: int = 0) -> dict[str, Any]:
    return {"seq": seq, "message": message, "generatedTimestamp": when, "isHealthy": healthy,
            "severity": "healthy" if healthy else "fatal",
            "entitiesImpacted": [{"entityType": "NIC", "entityValue": "mlx5_0"}]
            if entities else []}


def test_baseline_filter_hides_the_first_poll_of_a_boot_and_keeps_recoveries() -> None:
    clear = event("InfiniBandStateCheck: no state from this boot - clearing conditions of "
                  "earlier boots", "2026-01-01T00:00:00.000Z", entities=False)
    first = event("Port mlx5_0 port 1: healthy (ACTIVE, LinkUp)", "2026-01-01T00:00:00.001Z")
    counter = event("Counter link_downed healthy after reboot on mlx5_0 port 1",
                    "2026-01-01T00:00:00.001Z")
    down = event("Port mlx5_0 port 1: state DOWN", "2026-01-01T00:00:00.001Z", healthy=False)
    later = event("Port mlx5_0 port 1: healthy (ACTIVE, LinkUp)", "2026-01-01T00:05:00Z")
    assert baseline_filter([clear, first, counter, down, later]) == [down, later]
    following = BaselineFilter()  # events --follow: one event at a time, across a restart
    assert [following.is_baseline(e) for e in (down, clear, first, later)] == \
        [False, True, True, False]



def test_baseline_filter_hides_the_first_poll_of_a_new_host_which_sends_no_clear() -> None:
    """A host where nichealthd never ran: its first poll has no check-scoped clear; the first
    event it ever committed (seq 1) opens that poll."""
    first = event("Port mlx5_0 port 1: healthy (ACTIVE, LinkUp)", "2026-01-01T00:00:00.000Z",
                  seq=1)
    second = event("Port mlx5_1 port 1: healthy (ACTIVE, LinkUp)", "2026-01-01T00:00:00.000Z",
                   seq=2)
    down = event("Port mlx5_0 port 1: state DOWN", "2026-01-01T00:01:00Z", healthy=False, seq=3)
    back = event("Port mlx5_0 port 1: healthy (ACTIVE, LinkUp)", "2026-01-01T00:02:00Z", seq=4)
    assert baseline_filter([first, second, down, back]) == [down, back]
    assert baseline_filter([second, down, back]) == [second, down, back]  # seq 1 not listed


def test_events_status_and_devices_fit_80_columns_unless_wide() -> None:
    long = event("Port mlx5_0 port 1: " + "x" * 200, "2026-01-01T00:00:00Z", healthy=False)
    lines = event_line(long, Style(False)).splitlines()
    assert all(len(line) <= 80 for line in lines) and len(lines) > 1
    assert "".join(line.strip() for line in lines[1:]).endswith("x" * 100)  # wrapped, not cut
    assert event_line(long, Style(False), 10_000).endswith("x" * 200)
    # The reason is at the end: at 80 columns it is on a continuation line, whole.
    down = event("Port mlx5_0 port 1: state DOWN, phys_state Disabled - no connectivity",
                 "2026-11-26T15:45:32.166373Z", healthy=False)
    assert event_line(down, Style(False)).splitlines() == [
        "2026-11-26T15:45:32.166373Z  fatal     Port mlx5_0 port 1: state DOWN,",
        " " * 39 + "phys_state Disabled - no connectivity"]
    narrow = event_line(down, Style(False), 50).splitlines()  # the message under the head
    assert narrow[0].split() == ["2026-11-26T15:45:32.166373Z", "fatal"]
    assert all(len(line) <= 50 and line.startswith("  ") for line in narrow[1:])
    assert no_events_line(0) == "no events"
    assert "184 hidden" in no_events_line(184) and "--all" in no_events_line(184)
    status = {"health": "fatal", "ports_total": 12, "ports_healthy": 11, "ports_fatal": 1,
              "fatal_ports": ["mlx5_5/1"], "problems": ["mlx5_5/1 link_downed breached"],
              "connector_state": "down",
              "connector_last_error": "StatusCode.UNAVAILABLE: " + "y" * 100,
              "config_path": "/etc/nichealthd/" + "z" * 100}
    lines = status_lines(status, {"summary": "systemd is not running on this host"},
                         Style(False), None)
    assert all(len(line) <= 80 for line in lines), lines
    text = "\n".join(lines)
    assert "mlx5_5/1 link_downed breached" in text and "last error: StatusCode" in text
    wide = "\n".join(status_lines(status, {}, Style(False), None, 10_000))
    assert "y" * 100 in wide
    devices = [{"device": f"mlx5_{i}", "pci_address": "0000:18:00.0", "hca_type": "MT4129",
                "fw_ver": "28.41.1000-long-firmware-name", "role": "management",
                "ports": 1, "present": True, "netdevs": ["enp170s0f0np0", "enp170s0f1np1"]}
               for i in range(12)]
    assert all(len(line) <= 80 for line in devices_table(devices, Style(False)))


def test_a_table_of_absurdly_long_cells_still_fits() -> None:
    record = {"device": "d" * 40, "pci_address": "p" * 40, "hca_type": "h" * 40,
              "fw_ver": "f" * 40, "role": "r" * 40, "ports": 1, "present": True,
              "netdevs": ["n" * 40]}
    assert all(len(line) <= 80 for line in devices_table([record], Style(False)))
    port_record = {"device": "d" * 30, "port": 1, "link_layer": "l" * 30, "role": "r" * 30,
                   "state": "s" * 30, "phys_state": "p" * 30, "rate": "x" * 30,
                   "netdev": "n" * 30, "monitored": True, "health": "fatal",
                   "reasons": ["why" * 30]}
    assert all(len(line) <= 80 for line in ports_table([port_record], Style(False)))


def test_devices_held_in_a_driver_event_and_renamed_devices_are_shown() -> None:
    """RELOADING instead of MISSING while every device is gone at once, and one line per
    device renamed at its PCI function."""
    records = [
        {"device": "mlx5_20", "pci_address": "0000:18:00.0", "present": True, "ports": 1,
         "renamed_from": "mlx5_0", "renamed_at": "2026-01-01T12:00:01Z"},
        {"device": "mlx5_1", "pci_address": "0000:29:00.0", "present": False, "ports": 0,
         "driver_event": True, "renamed_from": ""},
        {"device": "mlx5_2", "pci_address": "", "present": False, "ports": 0,
         "driver_event": False},
    ]
    lines = devices_table(records, Style(False))
    text = "\n".join(lines)
    assert "RELOADING" in text and "MISSING" in text
    assert [line for line in lines if "was" in line] == [
        "mlx5_20 was mlx5_0 until 2026-01-01T12:00:01Z (same PCI function)"]


def test_status_names_a_driver_reload_and_a_blind_sysfs_root() -> None:
    """The ports line says "no devices found" only when there is nothing to watch and nothing
    wrong; the devices a driver reload holds get a line of their own."""
    base = {"health": "fatal", "ports_total": 12, "ports_healthy": 11, "ports_fatal": 1,
            "fatal_ports": ["mlx5_0/1"], "problems": ["mlx5_0/1 DOWN/Polling"],
            "devices_found": True, "devices_reloading": [f"mlx5_{i}" for i in range(12)],
            "reloading_since": "2026-11-26T15:45:32Z"}
    lines = status_lines(base, {}, Style(False), None)
    assert all(len(line) <= 80 for line in lines), lines
    (reloading,) = [line for line in lines if line.split()[:1] == ["reloading"]]
    assert "12 devices held by a driver event since " in reloading
    assert "no InfiniBand/RoCE devices found" not in "\n".join(lines)
    blind = {"health": "degraded", "ports_total": 0, "devices_found": False,
             "problems": ["sysfs root /tmp/x/sys has no class directory: nothing is watched"]}
    text = "\n".join(status_lines(blind, {}, Style(False), None, 10_000))
    assert "no ports monitored" in text and "has no class directory" in text
    assert "no InfiniBand/RoCE devices found" not in text
    quiet = {"health": "healthy", "ports_total": 0, "devices_found": False, "problems": []}
    assert "no InfiniBand/RoCE devices found" in "\n".join(
        status_lines(quiet, {}, Style(False), None))


def test_status_says_slurm_is_failing_while_a_drain_cannot_be_done() -> None:
    """A port fatal and the drain refused: "slurm failing (why)", in red, never "no fatal
    condition open"; what nichealthd holds follows on its own line."""
    base = {"health": "fatal", "ports_total": 12, "ports_healthy": 11, "ports_fatal": 1,
            "fatal_ports": ["mlx5_0/1"], "problems": ["mlx5_0/1 DOWN/Polling"],
            "devices_found": True, "slurm_mode": "on", "slurm_drained_for": [],
            "slurm_drain_held": False,
            "slurm_last_error": "2026-12-02T00:00:00Z: scontrol exited with status 1",
            "slurm_failing": "drain of node n1: scontrol exited with status 1: Invalid user "
                             "id"}
    lines = status_lines(base, {}, Style(False), None, 10_000)
    text = "\n".join(lines)
    assert "  slurm      failing (drain of node n1: scontrol exited with status 1: Invalid " \
           "user id)" in lines, lines
    assert "no fatal condition open" not in text and "on; no drain held" in text
    assert "last error" not in text  # the failing line says it
    assert "\x1b[1;31mfailing (" in "\n".join(status_lines(base, {}, Style(True), None, 10_000))
    drained = {**base, "slurm_failing": "", "slurm_drain_held": True,
               "slurm_drained_for": ["InfiniBandStateCheck mlx5_0/1 port_state"]}
    text = "\n".join(status_lines(drained, {}, Style(False), None, 10_000))
    assert "slurm      on; drained for 1: InfiniBandStateCheck mlx5_0/1 port_state" in text
    assert "failing" not in text
    skipped = {**drained, "slurm_drain_held": False}  # an administrator's reason holds it
    assert "on; not drained by nichealthd, 1 fatal open: InfiniBandStateCheck" in "\n".join(
        status_lines(skipped, {}, Style(False), None, 10_000))
