"""The seam a source plugs into: one reader of one kind of fact, or a few (ARCHITECTURE.md).

A check family names the facts it needs in :attr:`CheckFamily.reads`. The parts read every
poll (devices, ports, counters) have their reader in the poll loop (:mod:`.sysfs`); any other
fact comes from a :class:`Source` found here: a module of this package that defines
``SOURCE`` (a subclass) is one, so a new kind of fact is one new module.
The PCI side is one (:mod:`.pcie`: PCIe links, AER tables and sensors, three facts of one
source), so are the adapter facts (:mod:`.adapter`, its files kept open in the sysfs reader's)
and the kernel log (:mod:`.kernel_log`, its cursor committed with the poll).
The monitor makes one instance per process, reads each of its facts only in a poll in which
an enabled family needing it is due (:func:`nichealthd.core.evaluate.due_reads`), inside its
own failure boundary (:mod:`.boundary`), and puts what it returns in ``HostSnapshot.facts``
under its key.

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
from typing import Any, ClassVar, Mapping, Optional, Sequence

from ..core.config import Config
from ..core.model import Fact, HostSnapshot
from ..core.state import MonitorState
from .attribute import AttributeFiles


class Source(abc.ABC):
    """Reads one kind of fact for the monitored devices of a poll. Like every reader it never
    raises on bad content: a value it cannot read is None or an explicit marker; an exception
    (a bug, an interface that changed) is contained by the monitor and costs only the
    families that need the fact."""

    fact: ClassVar[Fact[Any]]  # the key of the fact it provides (defined in its module)
    description: ClassVar[str]  # what it reads, for the log ("the NIC optics")
    # Every fact it provides, with what it reads for the log: ``{fact: description}``, unless
    # it reads several facts that share what it keeps open (the PCI source's links, AER
    # tables and sensors, found by one path per function) and lists them here; each is read
    # with :meth:`read_fact` when due, inside its own boundary.
    facts: ClassVar[Mapping[Fact[Any], str]]

    def __init_subclass__(cls, **kwargs: Any) -> None:
        super().__init_subclass__(**kwargs)
        if "facts" not in cls.__dict__ and "fact" in cls.__dict__:
            cls.facts = {cls.fact: cls.description}

    def __init__(self, config: Config) -> None:
        self.config = config

    @abc.abstractmethod
    def read(self, snapshot: HostSnapshot, devices: Sequence[str]) -> Any:
        """The fact for ``devices`` (the monitored ones, and those not classified yet) of the
        poll's ``snapshot`` (its devices, ports and netdevs are read already)."""

    def read_fact(self, key: str, snapshot: HostSnapshot, devices: Sequence[str]) -> Any:
        """Fact ``key`` (one of :attr:`facts`); the default reads its one fact."""
        return self.read(snapshot, devices)

    def keep_open_in(self, files: AttributeFiles) -> None:
        """The sysfs reader's kept-open files, given once by the monitor: a source that keeps
        files open and re-reads them (the adapter's ``fw_ver`` and ``operstate``) keeps them
        there, so one open-file budget covers them all (runtime/fdplan.py). The default keeps
        none open."""
        return None

    def resume(self, state: MonitorState) -> None:
        """The state as the monitor holds it, before each poll's reads: a source whose
        position is committed with the poll (the kernel log's cursor, in its family's
        section) reads on from where it says. The default keeps nothing."""
        return None

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
                for fact in source.facts:
                    if fact in found:
                        raise RuntimeError(f"two sources provide {fact}: "
                                           f"{found[fact].__name__}, {source.__name__}")
                    found[fact] = source
        _found = tuple(dict.fromkeys(found[fact] for fact in sorted(found)))
    return _found


def _package_path() -> list[str]:
    from .. import sources

    return list(sources.__path__)
