"""The Source seam (sources/seam.py): every fact a family reads has a reader."""

from __future__ import annotations

from nichealthd.core.checks import families
from nichealthd.core.family import EVERY_POLL, PCI_READS
from nichealthd.sources.seam import source_types


def test_every_fact_a_family_reads_is_provided() -> None:
    provided = EVERY_POLL | PCI_READS | {source.fact for source in source_types()}
    for family in families():
        assert family.reads <= provided, (family.id, sorted(family.reads - provided))


def test_a_source_provides_a_fact_no_built_in_reader_does() -> None:
    for source in source_types():
        assert source.fact not in EVERY_POLL | PCI_READS, source.__name__
        assert source.description, source.__name__
