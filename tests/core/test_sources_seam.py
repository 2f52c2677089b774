"""The Source seam (sources/seam.py): every fact a family reads has a reader."""

from __future__ import annotations

from dataclasses import fields

from nichealthd.core.checks import families
from nichealthd.core.family import EVERY_POLL
from nichealthd.core.model import FIELD_FACTS, HostSnapshot
from nichealthd.sources.adapter import ADAPTER, AdapterSource
from nichealthd.sources.pcie import AER, HWMON, PCIE, PciSource
from nichealthd.sources.seam import source_types


def test_every_fact_a_family_reads_is_provided() -> None:
    provided = EVERY_POLL | {fact for source in source_types() for fact in source.facts}
    for family in families():
        assert family.reads <= provided, (family.id, sorted(family.reads - provided))


def test_a_source_provides_a_fact_no_built_in_reader_does() -> None:
    for source in source_types():
        assert not source.facts.keys() & EVERY_POLL, source.__name__
        assert source.description and all(source.facts.values()), source.__name__
        assert source.fact in source.facts, source.__name__


def test_the_pci_side_is_one_source_of_three_facts() -> None:
    assert PciSource in source_types()
    assert list(PciSource.facts) == [PCIE, AER, HWMON]


def test_the_adapter_facts_are_a_source() -> None:
    assert AdapterSource in source_types()
    assert list(AdapterSource.facts) == [ADAPTER]


def test_the_snapshot_fields_a_fact_falls_back_to_are_the_pci_and_adapter_sources() -> None:
    """``HostSnapshot.fact`` reads a field of the fact's name where a table test built it."""
    assert set(PciSource.facts) | set(AdapterSource.facts) == FIELD_FACTS
    assert {f.name for f in fields(HostSnapshot)} >= FIELD_FACTS
