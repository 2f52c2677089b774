"""The adapter facts reader on a sim tree (what it keeps open, what it need not list), and
the per-poll device copy."""

from __future__ import annotations

import os
import shutil
from dataclasses import replace
from datetime import datetime, timezone
from pathlib import Path

import pytest

from nichealthd.core.model import HostSnapshot
from nichealthd.sim import adapter, mutate, tree
from nichealthd.sources import adapter as adapter_source
from nichealthd.sources.adapter import AdapterReader, AdapterSource
from nichealthd.sources.adapter_facts import AdapterFacts, CharDevices
from nichealthd.sources.attribute import AttributeFiles
from nichealthd.sources.config_file import load_config
from nichealthd.sources.sysfs import SysfsReader

from .conftest import listings, open_readers


class Clock:
    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


class CountedOpens:
    """os.open, counting the opens of the files whose name ends with one of ``names``."""

    def __init__(self, *names: str) -> None:
        self.names = names
        self.opened = 0

    def __call__(self, path: str, flags: int) -> int:
        if path.endswith(self.names):
            self.opened += 1
        return os.open(path, flags)


class Reader(SysfsReader):
    """The sysfs reader with the adapter source beside it, as the monitor puts them: the
    source keeps its files in the reader's, and each poll's snapshot carries its fact."""

    def __init__(self, root: Path, clock: Clock, files: AttributeFiles | None) -> None:
        super().__init__(load_config(str(root / "nichealthd.toml")), files=files,
                         monotonic=clock)
        self.source = AdapterSource(self.config, clock)
        self.source.keep_open_in(self.files)
        self.adapter = self.source.reader

    def observe(self, now: datetime) -> HostSnapshot:
        snapshot = super().observe(now)
        return replace(snapshot, adapter=self.source.read(snapshot, ()))


def reader(root: Path, clock: Clock, files: AttributeFiles | None = None) -> Reader:
    made = Reader(root, clock, files)
    open_readers.append(made)
    return made


def adapter_read(made: Reader, clock: Clock) -> AdapterFacts:
    clock.now += 3600  # past any adapterCheckInterval
    facts = made.observe(datetime.now(timezone.utc)).adapter
    assert facts is not None
    return facts


def test_fw_ver_and_operstate_are_opened_once_and_a_flash_is_still_seen(host: Path) -> None:
    clock = Clock()
    opens = CountedOpens("/fw_ver", "/operstate")
    made = reader(host, clock, AttributeFiles(opener=opens))
    first = adapter_read(made, clock)
    opened = opens.opened
    assert made.adapter.kept and all(path in made.files for path in made.adapter.kept)
    name = sorted(first.firmware)[0]
    adapter.set_firmware(host, name, "28.99.9999")
    second = adapter_read(made, clock)
    assert opens.opened == opened  # pread on the kept files, no open
    assert second.firmware[name] == "28.99.9999"
    assert {k: v for k, v in second.firmware.items() if k != name} == \
        {k: v for k, v in first.firmware.items() if k != name}
    assert second.netdevs == first.netdevs


def test_a_removed_device_has_its_kept_files_closed(host: Path) -> None:
    clock = Clock()
    made = reader(host, clock)
    first = adapter_read(made, clock)
    name = sorted(first.firmware)[0]
    its_own = {path for path in made.adapter.kept if f"/{name}/" in path
               or any(path.endswith(f"/{link.netdev}/operstate")
                      for key, link in first.netdevs.items() if key.startswith(f"{name}_"))}
    assert len(its_own) >= 2  # its fw_ver and a netdev's operstate
    mutate.remove_device(host, name)
    second = adapter_read(made, clock)
    assert name not in second.firmware
    assert not its_own & made.adapter.kept
    assert not [path for path in its_own if path in made.files]


def test_a_rediscovery_keeps_the_adapter_files_open(host: Path) -> None:
    """One open-file budget: the kept files are the sysfs reader's, and its re-discovery
    (which closes what its new plan does not poll) leaves the adapter's open."""
    clock = Clock()
    opens = CountedOpens("/fw_ver")
    made = reader(host, clock, AttributeFiles(opener=opens))
    adapter_read(made, clock)
    opened = opens.opened
    assert opened
    discoveries = made.discoveries
    adapter_read(made, clock)  # an hour later: the periodic re-discovery is due too
    assert made.discoveries == discoveries + 1
    assert opens.opened == opened


def test_a_registered_function_needs_no_listing_of_its_infiniband_directory(
        host: Path) -> None:
    """The function of a device in the class directory is registered: its own
    ``infiniband/`` directory is not listed (34 listdirs every read on a 34-NIC host)."""
    clock = Clock()
    made = reader(host, clock)
    before = adapter_read(made, clock)
    assert before.pci_nics is not None
    assert all(nic.registered for nic in before.pci_nics)
    manifest = tree.load(host)
    dev = next(d for d in manifest["devices"] if d["kind"] == "pf")
    shutil.rmtree(host / "sys/bus/pci/devices" / dev["pci"] / "infiniband")
    after = adapter_read(made, clock)
    nic = next(n for n in after.pci_nics or () if n.address == dev["pci"])
    assert nic.registered


def test_a_device_with_this_polls_ports_is_the_device_with_those_ports_and_no_other_change(
        host: Path) -> None:
    clock = Clock()
    made = reader(host, clock)
    snapshot = made.observe(datetime.now(timezone.utc))
    for device in snapshot.devices:
        ports = device.ports
        moved = device.with_ports(ports[:1])
        assert moved == replace(device, ports=ports[:1])
        assert device.ports is ports  # the original is untouched


def test_a_char_device_entry_not_read_yet_is_read_again_with_the_same_listing(
        host: Path) -> None:
    """A listing answers as last time while its directory lists the same entries, unless an
    entry could not be read then (a device being created): that one is read again."""
    clock = Clock()
    verbs = host / "sys/class/infiniband_verbs"
    entry = next(e for e in sorted(os.listdir(verbs)) if e.startswith("uverbs"))
    ibdev = (verbs / entry / "ibdev").read_text().strip()
    held = (verbs / entry / "ibdev").rename(host / "held-ibdev")
    made = reader(host, clock)
    before = adapter_read(made, clock).chardevs.uverbs
    assert before is not None and ibdev not in before
    held.rename(verbs / entry / "ibdev")
    after = adapter_read(made, clock).chardevs.uverbs
    assert after == before | {ibdev}
    assert adapter_read(made, clock).chardevs.uverbs == after


def test_the_facts_of_a_host_with_vfs_are_the_same_from_its_judged_devices(host: Path) -> None:
    """The reader gives the adapter reader the devices that are not VFs and every name: the
    facts are those of every device, on the tree as it is and with a PF's driver unbound (a
    function the reader has no device for) and a VF gone."""
    clock = Clock()
    made = reader(host, clock)
    config = made.config
    for change in (lambda: None, lambda: adapter.unbind(host, "mlx5_3"),
                   lambda: mutate.remove_device(host, "mlx5_13")):
        change()
        snapshot = made.observe(datetime.now(timezone.utc))
        parts = snapshot.parts
        assert parts.vfs and len(parts.judged) < len(snapshot.devices)
        readers = AdapterReader(config), AdapterReader(config)
        try:
            every = readers[0].observe(snapshot.devices)
            judged = readers[1].observe(parts.judged, parts.names)
        finally:
            for made_here in readers:
                made_here.files.close()
        assert every is not None and every == judged


def _of_devices(chardevs: CharDevices, devices: frozenset[str]) -> tuple[object, ...]:
    """The entries of ``devices`` in an answer."""
    assert chardevs.uverbs is not None and chardevs.umad is not None
    assert chardevs.issm is not None
    return (chardevs.uverbs & devices, {e for e in chardevs.umad if e[0] in devices},
            {e for e in chardevs.issm if e[0] in devices})


def test_a_host_with_vfs_lists_its_char_devices_when_a_device_read_may_lack_one(
        host: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """On a host with SR-IOV VFs the char-device answer is kept while every device that is
    not a VF still has all its entries (one lstat each): neither class directory is listed.
    One whose entry goes is seen missing at that read, and back at the read it returns; at
    every step its entries are what a full listing finds."""
    clock = Clock()
    made = reader(host, clock)
    first = adapter_read(made, clock).chardevs
    listed = listings(monkeypatch, adapter_source, "listdir")
    assert adapter_read(made, clock).chardevs is first
    assert not [path for path in listed if "/class/infiniband_" in path]

    mad = host / "sys/class/infiniband_mad"
    entry = next(e for e in sorted(os.listdir(mad)) if e.startswith("umad")
                 and (mad / e / "ibdev").read_text().strip() == "mlx5_0")
    key = ("mlx5_0", int((mad / entry / "port").read_text()))
    for step, change in enumerate((lambda: (mad / entry).rename(host / "held"),
                                   lambda: None,
                                   lambda: (host / "held").rename(mad / entry),
                                   lambda: None)):
        change()
        snapshot = made.observe(datetime.now(timezone.utc))
        clock.now += 3600
        got = adapter_read(made, clock).chardevs
        assert got.umad is not None and (key in got.umad) == (step >= 2)
        full = AdapterReader(made.config)
        try:
            listing = full.observe(snapshot.devices)
        finally:
            full.files.close()
        assert listing is not None
        judged = frozenset(d.name for d in snapshot.parts.judged)
        assert _of_devices(got, judged) == _of_devices(listing.chardevs, judged)
    assert adapter_read(made, clock).chardevs is got  # all there again: kept
