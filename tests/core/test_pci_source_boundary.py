"""The PCI source on the Source seam (sources/pcie.py): a planted bug in one of its facts
fails only the family that fact feeds, through the real monitor on a sim tree.

The fault is a bug planted where no input can put one (the AER tables' reads raise
ZeroDivisionError, which no reader catches); everything else is the real monitor, the real
PCI source reading the sim tree, and the real families.
"""

from __future__ import annotations

from datetime import datetime, timedelta, timezone
from pathlib import Path
from typing import Callable

from nichealthd.core.checks.link_state import LINK_STATE
from nichealthd.core.checks.nic_temperature import NIC_TEMPERATURE
from nichealthd.core.checks.pcie_aer import PCIE_AER
from nichealthd.core.checks.pcie_link import PCIE_LINK
from nichealthd.runtime.monitor import Monitor
from nichealthd.runtime.startup import load_topology
from nichealthd.sources.config_file import load_config
from nichealthd.sources.pcie import AER, HWMON, PCIE
from tests import simtrees


class PlantedBug:
    """Stands in for the AER tables' kept-open files while ``on``: every read raises."""

    def __init__(self, real: object) -> None:
        self.real = real
        self.on = True

    def __getattr__(self, name: str) -> object:
        return getattr(self.real, name)

    def read(self, path: str) -> bytes:
        if self.on:
            raise ZeroDivisionError("division by zero")
        return self.real.read(path)  # type: ignore[attr-defined, no-any-return]


def test_a_bug_in_one_pci_fact_fails_only_the_family_it_feeds(tmp_path: Path) -> None:
    root = simtrees.take("dgx-h100")
    config = load_config(str(root / "nichealthd.toml"),
                         {"stateFile": str(tmp_path / "state" / "state.json")})
    now = [datetime(2026, 11, 26, tzinfo=timezone.utc)]
    clock: Callable[[], datetime] = lambda: now[0]  # noqa: E731
    monitor = Monitor(config, load_topology(config), clock=clock)
    bug = PlantedBug(monitor.pci_facts.aer_files)
    monitor.pci_facts.aer_files = bug  # type: ignore[assignment]
    monitor.start()
    try:
        outcome = monitor.poll()  # the first poll: every PCI family is due
        assert outcome.commit_error is None
        snapshot, failed = outcome.snapshot, outcome.result.failed
        assert set(failed) == {PCIE_AER.id}, failed
        assert failed[PCIE_AER.id].startswith("aer not read: ZeroDivisionError: division by "
                                               "zero (at "), failed
        assert set(snapshot.unread) == {AER}
        assert snapshot.fact(AER) is None
        # The source's other facts, read by the same reader, arrived and were judged.
        links, sensors = snapshot.fact(PCIE), snapshot.fact(HWMON)
        assert links and sensors and set(links) == set(sensors)
        assert all(links.values()), links
        for family in (PCIE_LINK, NIC_TEMPERATURE, LINK_STATE):
            assert family.id in outcome.result.state.sections, family.id
        assert not [e for e in outcome.result.events if not e.is_healthy]
        # The bug no longer met: the AER tables are read and judged at their next run.
        bug.on = False
        now[0] += timedelta(seconds=61)
        outcome = monitor.poll()
        assert outcome.result.failed == {} and outcome.snapshot.unread == {}
        tables = outcome.snapshot.fact(AER)
        assert tables and set(tables) <= set(links)  # the monitored ones, classified now
    finally:
        monitor.close()
