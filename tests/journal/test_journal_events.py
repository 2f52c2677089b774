"""Events in the journal with fields and a MESSAGE_ID per kind, and the catalog that explains
each kind (nichealthd/surfaces/journal_events.py, systemd/nichealthd.catalog).

The bytes go through a real AF_UNIX datagram socket (as to journald's), into a real journal
file written by systemd-journal-remote, read back by the real journalctl: ``journalctl
NICHEALTHD_DEVICE=mlx5_3`` lists that card's events, and ``journalctl -x`` prints the catalog
entry under a port that went down, the catalog compiled by ``journalctl --update-catalog``.
tests/e2e/test_e2e_journal.py does the same under real systemd with the daemon.
"""

from __future__ import annotations

import importlib
import json
import os
import pkgutil
import re
import shutil
import socket
import subprocess
import time
from datetime import datetime, timezone
from pathlib import Path

import pytest

import nichealthd.core
from nichealthd.core.checks.kernel_log import CHECK_NAME as DRIVER_FAULT_CHECK
from nichealthd.core.checks.optics import code_of
from nichealthd.core.checks.pcie_aer import aer_specs
from nichealthd.core.config import CHAR_DEVICE_CHECK, DEFAULT_COUNTERS, IB_DEGRADATION_CHECK
from nichealthd.core.events import HealthEvent, device_entities, make_event, port_entities
from nichealthd.runtime.event_journal import HEALTHY_EVENTS_LOGGED, EventJournal
from nichealthd.sim.journal import MACHINE_ID, remote_binary, write_entries
from nichealthd.storage.store import JournalEntry
from nichealthd.surfaces.journal_events import (
    ALL_KINDS,
    COUNTER,
    OTHER,
    JournalSender,
    decode,
    encode,
    entry_fields,
    kind_of,
)

REPO = Path(__file__).resolve().parents[2]
CATALOG = REPO / "systemd" / "nichealthd.catalog"
NOW = datetime(2026, 5, 1, 12, 0, tzinfo=timezone.utc)
JOURNALCTL = shutil.which("journalctl")


def event(code: str, entities: tuple[tuple[str, str], ...] = port_entities("mlx5_3", 1), *,
          check: str = "InfiniBandStateCheck", fatal: bool = True,
          healthy: bool = False, message: str = "m") -> HealthEvent:
    return make_event(check, fatal=fatal and not healthy, healthy=healthy, message=message,
                      error_code=code, entities=entities, at=NOW)


def catalog_entries() -> dict[str, str]:
    """MESSAGE_ID -> the entry's text, as journalctl's catalog parser splits the file."""
    text = CATALOG.read_text(encoding="utf-8")
    parts = re.split(r"^-- ([0-9a-f]{32})\n", text, flags=re.M)
    return dict(zip(parts[1::2], parts[2::2]))


def test_every_kind_has_one_catalog_entry_saying_what_it_means_and_what_to_do() -> None:
    entries = catalog_entries()
    ids = [k.message_id for k in ALL_KINDS]
    assert len(set(ids)) == len(ids) and all(re.fullmatch(r"[0-9a-f]{32}", i) for i in ids)
    assert sorted(entries) == sorted(ids)
    for message_id, text in entries.items():
        head, _, body = text.partition("\n\n")
        assert re.search(r"^Subject: \S", head, re.M), message_id
        assert "Defined-By: nichealthd" in head and "Support: man:nichealthd(8)" in head
        assert "What to do:" in body, message_id
        for field in re.findall(r"@(\w+)@", text):  # only fields every event carries
            assert field in ("NICHEALTHD_SEVERITY", "NICHEALTHD_ACTION"), (message_id, field)


def core_codes() -> set[str]:
    """Every errorCode constant of the check families (``CODE`` and ``CODE_*``)."""
    codes = set()
    for info in pkgutil.walk_packages(nichealthd.core.__path__, "nichealthd.core."):
        module = importlib.import_module(info.name)
        for name, value in vars(module).items():
            if (name == "CODE" or name.startswith("CODE_")) and isinstance(value, str):
                codes.add(value)
    return codes


def test_every_condition_has_its_own_kind() -> None:
    codes = core_codes()
    assert {"port_state", "device_missing", "link_flap", "pcie_link", "temperature"} <= codes
    for code in codes:
        assert kind_of(event(code)) not in (OTHER, COUNTER), code
    for spec in aer_specs(10):
        assert kind_of(event(spec.name, check=IB_DEGRADATION_CHECK)).name == "pcie"
    assert kind_of(event(code_of("rx_power"), check=IB_DEGRADATION_CHECK)).name == "optics"
    assert kind_of(event("uverbs", check=CHAR_DEVICE_CHECK)).name == "char_device"
    assert kind_of(event("cmd_exec_timeout", check=DRIVER_FAULT_CHECK)).name == "driver_fault"
    for spec in DEFAULT_COUNTERS:  # counters: under the degradation check, or an old state one
        assert kind_of(event(spec.name, check=IB_DEGRADATION_CHECK)) is COUNTER
        assert kind_of(event(spec.name)) is COUNTER
    assert kind_of(event("something_new", check="SomeOtherCheck")) is OTHER


def test_the_fields_of_a_port_a_lost_nic_and_a_host_event() -> None:
    fields = dict(entry_fields(event("port_state", message="Port mlx5_3 port 1 is DOWN")
                               .stamped("node1", "EXECUTE_REMEDIATION", "e-1"), 42))
    assert fields == {
        "MESSAGE": "event fatal: Port mlx5_3 port 1 is DOWN", "PRIORITY": "4",
        "SYSLOG_IDENTIFIER": "nichealthd", "MESSAGE_ID": "e4d1236323b445e7b615159f07bf4f98",
        "NICHEALTHD_KIND": "port_state", "NICHEALTHD_CHECK": "InfiniBandStateCheck",
        "NICHEALTHD_SEVERITY": "fatal", "NICHEALTHD_ACTION": "REPLACE_VM",
        "NICHEALTHD_DEVICE": "mlx5_3", "NICHEALTHD_PORT": "1",
        "NICHEALTHD_ERROR_CODE": "port_state", "NICHEALTHD_EVENT_ID": "e-1",
        "NICHEALTHD_SEQ": "42"}
    lost = dict(entry_fields(event("nic_unregistered", (("PCI", "0000:17:00.0"),)), 1))
    assert lost["NICHEALTHD_DEVICE"] == lost["NICHEALTHD_PCI"] == "0000:17:00.0"
    assert "NICHEALTHD_PORT" not in lost
    clear = dict(entry_fields(event("reboot_clear", (), healthy=True), 2))
    assert "NICHEALTHD_DEVICE" not in clear and clear["PRIORITY"] == "6"
    assert clear["NICHEALTHD_SEVERITY"] == "healthy" and clear["NICHEALTHD_KIND"] == "baseline"
    card = dict(entry_fields(event("device_missing", device_entities("mlx5_3")), 3))
    assert card["NICHEALTHD_DEVICE"] == "mlx5_3" and "NICHEALTHD_PORT" not in card


def test_the_native_protocol_carries_newlines_and_utf8() -> None:
    fields = [("MESSAGE", "two\nlines"), ("NICHEALTHD_DEVICE", "mlx5_3"), ("X", "°C = ok")]
    data = encode(fields)
    assert data.startswith(b"MESSAGE\n" + (9).to_bytes(8, "little") + b"two\nlines\n")
    assert decode(data) == fields


@pytest.fixture
def journald_socket(tmp_path: Path):
    """A datagram socket bound where the sender is pointed: journald's stand-in, receiving."""
    path = str(tmp_path / "socket")
    sock = socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM)
    sock.bind(path)
    sock.settimeout(10)
    yield path, sock
    sock.close()


def committed(*events: HealthEvent) -> list[JournalEntry]:
    return [JournalEntry(seq=i + 1, event=e.stamped("n", "EXECUTE_REMEDIATION", f"id{i}"))
            for i, e in enumerate(events)]


def test_event_journal_sends_each_event_and_sums_up_many_baselines(
        journald_socket, caplog: pytest.LogCaptureFixture) -> None:
    path, sock = journald_socket
    journal = EventJournal(JournalSender(path))
    down = event("port_state", message="Port mlx5_3 port 1 is DOWN")
    baselines = [event("reboot_clear", (), healthy=True)] * (HEALTHY_EVENTS_LOGGED + 1)
    caplog.set_level("INFO", "nichealthd")
    journal.log(committed(down, *baselines))
    got = dict(decode(sock.recv(65536)))
    assert got["NICHEALTHD_DEVICE"] == "mlx5_3" and got["NICHEALTHD_SEQ"] == "1"
    sock.setblocking(False)
    with pytest.raises(BlockingIOError):  # the baselines are one line, not 11 entries
        sock.recv(65536)
    assert [r.getMessage() for r in caplog.records] == [
        f"{HEALTHY_EVENTS_LOGGED + 1} healthy events committed (baselines and recoveries)"]
    journal.close()


def test_without_journald_each_event_is_a_line_and_the_refusal_is_said_once(
        tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    journal = EventJournal(JournalSender(str(tmp_path / "no-socket")))
    caplog.set_level("INFO", "nichealthd")
    journal.log(committed(event("port_state", message="a"), event("port_state", message="b")))
    assert [r.getMessage() for r in caplog.records] == [
        f"cannot send events to journald with their fields ({tmp_path}/no-socket: No such "
        "file or directory): logging them as plain lines",
        "event fatal: a", "event fatal: b"]


def test_fields_under_systemd_only(monkeypatch: pytest.MonkeyPatch) -> None:
    """JOURNAL_STREAM, set by systemd for a unit whose output goes to the journal, as the
    log's own set-up reads it (runtime/logsetup.py)."""
    monkeypatch.delenv("JOURNAL_STREAM", raising=False)
    assert EventJournal().sender is None
    monkeypatch.setenv("JOURNAL_STREAM", "8:12345")
    sender = EventJournal().sender
    assert sender is not None and sender.path == "/run/systemd/journal/socket"


def journal_file(tmp_path: Path, datagrams: list[bytes]) -> Path:
    """What journald would store of these datagrams: its trusted fields and theirs."""
    if remote_binary() is None:
        pytest.skip("needs systemd-journal-remote to write journal files (Debian: apt-get "
                    "install systemd-journal-remote)")
    start = int(time.time() * 1e6)
    entries = [encode([("__REALTIME_TIMESTAMP", str(start + i)),
                       ("__MONOTONIC_TIMESTAMP", str(1000 + i)),
                       ("_BOOT_ID", "0123456789abcdef0123456789abcdef"),
                       ("_MACHINE_ID", MACHINE_ID), ("_HOSTNAME", "simhost"),
                       ("_TRANSPORT", "journal"), ("_SYSTEMD_UNIT", "nichealthd.service")])
               + data + b"\n" for i, data in enumerate(datagrams)]
    return write_entries(tmp_path / "events.journal", entries)


def sent(journald_socket, *events: HealthEvent) -> list[bytes]:
    path, sock = journald_socket
    journal = EventJournal(JournalSender(path))
    journal.log(committed(*events))
    journal.close()
    return [sock.recv(65536) for _ in events]


PULLED = event("port_state", message="Port mlx5_3 port 1 is DOWN/Polling, no connectivity")
OTHER_CARD = event("port_state", port_entities("mlx5_5", 1),
                   message="Port mlx5_5 port 1 is DOWN/Polling, no connectivity")
BACK = event("port_state", healthy=True, message="Port mlx5_3 port 1 is ACTIVE/LinkUp")


@pytest.mark.skipif(JOURNALCTL is None, reason="needs journalctl (systemd)")
def test_journalctl_lists_one_cards_events(tmp_path: Path, journald_socket) -> None:
    path = journal_file(tmp_path, sent(journald_socket, PULLED, OTHER_CARD, BACK))
    assert JOURNALCTL is not None
    out = subprocess.run([JOURNALCTL, "--file", str(path), "-o", "json",
                          "NICHEALTHD_DEVICE=mlx5_3"], capture_output=True, text=True,
                         check=True).stdout
    rows = [json.loads(line) for line in out.splitlines()]
    assert [(r["MESSAGE"], r["NICHEALTHD_SEVERITY"], r["PRIORITY"]) for r in rows] == [
        (f"event fatal: {PULLED.message}", "fatal", "4"),
        (f"event healthy: {BACK.message}", "healthy", "6")]
    fatal = subprocess.run([JOURNALCTL, "--file", str(path), "-o", "cat", "-p", "warning",
                            "MESSAGE_ID=e4d1236323b445e7b615159f07bf4f98"],
                           capture_output=True, text=True, check=True).stdout.splitlines()
    assert fatal == [f"event fatal: {PULLED.message}", f"event fatal: {OTHER_CARD.message}"]


@pytest.mark.root
@pytest.mark.skipif(JOURNALCTL is None or shutil.which("unshare") is None,
                    reason="needs journalctl and unshare (util-linux)")
def test_journalctl_x_explains_a_pulled_cable(tmp_path: Path, journald_socket) -> None:
    """The catalog compiled by journalctl --update-catalog, in a mount namespace of its own
    where /usr/lib/systemd/catalog holds only ours (the host's database is left alone)."""
    if os.geteuid() != 0:
        pytest.skip("needs root for a private mount namespace (unshare -m)")
    path = journal_file(tmp_path, sent(journald_socket, PULLED))
    (tmp_path / "usr").mkdir()
    (tmp_path / "var").mkdir()
    shutil.copy(CATALOG, tmp_path / "usr" / "nichealthd.catalog")
    script = (f"mount --make-rprivate / && "
              f"mount --bind {tmp_path}/usr /usr/lib/systemd/catalog && "
              f"mount --bind {tmp_path}/var /var/lib/systemd/catalog && "
              f"journalctl --update-catalog && journalctl --list-catalog && "
              f"journalctl -x --no-pager --file {path} NICHEALTHD_DEVICE=mlx5_3")
    out = subprocess.run(["unshare", "-m", "sh", "-c", script], capture_output=True,
                         text=True, timeout=60)
    assert out.returncode == 0, out.stderr
    listed = [line for line in out.stdout.splitlines() if line.startswith(
        tuple(k.message_id for k in ALL_KINDS))]
    assert len(listed) == len(ALL_KINDS)
    shown = out.stdout[out.stdout.index(f"event fatal: {PULLED.message}"):]
    assert "Subject: A NIC port's link state: fatal" in shown  # @NICHEALTHD_SEVERITY@ filled
    assert "the recommended action is REPLACE_VM" in shown and "What to do:" in shown


def test_the_man_page_names_every_field() -> None:
    """nichealthd(8), THE JOURNAL, names the fields an event can carry, no more."""
    text = (REPO / "man" / "nichealthd.8").read_text(encoding="utf-8")
    section = text[text.index(".SH THE JOURNAL"):text.index(".SH SIGNALS")]
    lost = event("nic_unregistered", (("PCI", "0000:17:00.0"),))
    carried = {name for e in (PULLED.stamped("n", "EXECUTE_REMEDIATION", "id"), lost)
               for name, _ in entry_fields(e, 1) if name.startswith("NICHEALTHD_")}
    assert set(re.findall(r"NICHEALTHD_[A-Z_]+", section)) == carried
    assert "MESSAGE_ID" in section and "/usr/lib/systemd/catalog/nichealthd.catalog" in section


def test_after_a_refusal_the_socket_is_tried_again_later_not_at_every_event(
        tmp_path: Path) -> None:
    """The daemon's loop sends: a missing or stuck journald costs one try, not one per event."""
    now = [100.0]
    path = str(tmp_path / "socket")
    sender = JournalSender(path, clock=lambda: now[0])
    assert not sender.send([("MESSAGE", "a")]) and "No such file" in sender.failure
    sock = socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM)
    sock.bind(path)  # journald is back, but the refusal is recent
    try:
        now[0] += 29
        assert not sender.send([("MESSAGE", "b")])
        now[0] += 2
        assert sender.send([("MESSAGE", "c")]) and sender.failure == ""
        assert decode(sock.recv(1024)) == [("MESSAGE", "c")]
    finally:
        sock.close()
        sender.close()
