"""The seam a source plugs into: one reader of one kind of fact (ARCHITECTURE.md).

A check family names the facts it needs in :attr:`CheckFamily.reads`. The facts read every
poll (devices, ports, counters, adapter facts, kernel log) and the PCI side (PCIe links, AER,
hwmon: :mod:`.pcie`) have their readers in the poll loop; any other fact comes from a
:class:`Source` found here: a module of this package that defines ``SOURCE`` (a subclass) is
one, so a new kind of fact is one new module. The monitor makes one instance per process,
reads it only in a poll in which an enabled family needing its fact is due
(:func:`nichealthd.core.evaluate.due_reads`), inside its own failure boundary
(:mod:`.boundary`), and puts what it returns in ``HostSnapshot.facts`` under its key.

A fact is typed by its source: its key (a :class:`~nichealthd.core.model.Fact`) and its types
live in the source's module, which the families import for those names, never for the
reader (``tests/test_layout.py``): ``reads = frozenset({PHY})`` and
``cycle.snapshot.fact(PHY)``, typed. Nothing this module imports reaches a family, so a
family importing a source's module makes no import circle.
"""

from __future__ import annotations

import abc
import importlib
import pkgutil
from typing import Any, ClassVar, Optional, Sequence

from ..core.config import Config
from ..core.model import Fact, HostSnapshot


class Source(abc.ABC):
    """Reads one kind of fact for the monitored devices of a poll. Like every reader it never
    raises on bad content: a value it cannot read is None or an explicit marker; an exception
    (a bug, an interface that changed) is contained by the monitor and costs only the
    families that need the fact."""

    fact: ClassVar[Fact[Any]]  # the key of the fact it provides (defined in its module)
    description: ClassVar[str]  # what it reads, for the log ("the NIC optics")

    def __init__(self, config: Config) -> None:
        self.config = config

    @abc.abstractmethod
    def read(self, snapshot: HostSnapshot, devices: Sequence[str]) -> Any:
        """The fact for ``devices`` (the monitored ones, and those not classified yet) of the
        poll's ``snapshot`` (its devices, ports and netdevs are read already)."""

    def reconfigure(self, config: Config) -> None:
        """A reloaded config; the default keeps nothing else."""
        self.config = config

    def close(self) -> None:
        """Release what it holds open (files, sockets) at stop; the default holds nothing."""
        return None


_found: Optional[tuple[type[Source], ...]] = None


def source_types() -> tuple[type[Source], ...]:
    """Every source of this package, by fact; two sources of one fact are an error."""
    global _found
    if _found is None:
        found: dict[str, type[Source]] = {}
        for info in sorted(pkgutil.iter_modules(_package_path()),
                           key=lambda m: m.name):
            module = importlib.import_module(f"{__package__}.{info.name}")
            source = getattr(module, "SOURCE", None)
            if isinstance(source, type) and issubclass(source, Source):
                if source.fact in found:
                    raise RuntimeError(f"two sources provide {source.fact}: "
                                       f"{found[source.fact].__name__}, {source.__name__}")
                found[source.fact] = source
        _found = tuple(found[fact] for fact in sorted(found))
    return _found


def _package_path() -> list[str]:
    from .. import sources

    return list(sources.__path__)
