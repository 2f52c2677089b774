"""The seam a check family plugs into: what it reads, its slice of state, its pure evaluation.

A check family is one unit (ARCHITECTURE.md): it declares which parts of the snapshot it
reads and how often it runs, evaluates as a pure function ``(its previous section, the shared
cycle, its volatile memory) -> Verdict(events, its next section, picture)``, owns its top-level
keys of the state file (with a schema version of its own: a missing section is a fresh start
for that family alone), and supplies its conditions to the health model, its fields to the port
records and its series to the metrics. :func:`nichealthd.core.evaluate.evaluate` is a loop over
the enabled families; the families are found in :mod:`nichealthd.core.checks` (a module there
that defines ``FAMILY`` is one), so adding a family is one new module plus its tests.
"""

from __future__ import annotations

import abc
from dataclasses import dataclass, field
from datetime import datetime
from typing import (
    Any,
    ClassVar,
    Generic,
    Iterable,
    Mapping,
    Optional,
    Protocol,
    Sequence,
    TypeVar,
    cast,
)

from ..sources.optics_facts import PortOptics
from .config import Config
from .events import HealthEvent
from .jsontypes import Json, JsonObject
from .model import DeviceSnapshot, HostSnapshot, PortSnapshot
from .observed import CounterObservation, DeviceIdentity
from .settings import Settings
from .topology import Role, Topology

S = TypeVar("S")
P = TypeVar("P")  # a family's picture: what the views show of its last verdict
V = TypeVar("V")  # a family's volatile memory: what it keeps between polls and may lose

# What a family may read of the snapshot (``CheckFamily.reads``): the reader skips a part that
# no enabled family reads.
READS_DEVICES = "devices"  # the device list and its PCI facts
READS_PORTS = "ports"  # port state, physical state, link layer, rate
READS_COUNTERS = "counters"  # the configured counter files
# Read every poll by their own sources, each inside its own failure boundary: a family that
# needs a part whose source failed is not judged in that poll (HostSnapshot.unread).
EVERY_POLL = frozenset({READS_DEVICES, READS_PORTS, READS_COUNTERS})
# Any other name in ``reads`` is the key of a fact of a source on the Source seam
# (nichealthd.sources.seam; a ``Fact`` of the source's module): read only in a poll in
# which a family needing it is due (HostSnapshot.fact).

# A record's declared keys: name -> its varlink type (the interface file's spelling: ``int``,
# ``?float``, ``?[]string``, ``?[]PcieHop``; ``?`` optional: absent from some records).
FieldTypes = Mapping[str, str]

HOST = ""  # the "device" of an event that belongs to no device of this poll (see Verdict)


class Committed(Protocol):
    """What a family reads of the committed state: any family's section.
    :class:`nichealthd.core.state.MonitorState` is one; declared here because the state holds
    every family's section (it finds them through the registry), so the seam cannot import it."""

    def section(self, family: CheckFamily[S, Any, Any]) -> S:
        """The section of ``family``."""


@dataclass(frozen=True)
class Cycle:
    """What every family shares in one poll; computed once by the evaluator.

    ``previous`` is the whole committed state, read-only: a family may read another family's
    section for facts (the last reported port states, say), never write it.
    """

    snapshot: HostSnapshot
    config: Config
    topology: Topology
    now: datetime
    baseline: bool  # the first poll after a reboot or without state (link-counter-detection §6.5)
    enabled: frozenset[str]  # the enabled check names
    roles: Mapping[str, Role]
    monitored: tuple[DeviceSnapshot, ...]
    previous: Committed
    # Whether anything may have been reported before this process: False only on a host where
    # nichealthd never ran (no state file, an empty event journal), which has no conditions
    # of earlier boots to clear, so no check-wide clear is sent there.
    earlier: bool = True


@dataclass(frozen=True)
class Verdict(Generic[S, P, V]):
    """One family's outcome of one poll.

    ``events`` pairs each event with the device it is about (:data:`HOST` for host-level
    ones: a missing device, a card): the evaluator keeps a device's events together, family
    after family, and puts host-level events after every device's.
    """

    section: S
    events: tuple[tuple[str, HealthEvent], ...] = ()
    # What the views show of this poll (counter observations, cards, the facts read); None
    # keeps the picture of its last verdict (a slow family's between its runs).
    picture: Optional[P] = None
    # Its volatile memory after this poll, kept only if the family succeeds; None keeps the
    # one it was given (a family that forgets returns an empty one).
    volatile: Optional[V] = None
    notes: tuple[str, ...] = ()  # log lines
    # Its volatile memory holds back a change of the section (:meth:`CheckFamily.settled`):
    # the state to persist changed though the section did not.
    held_back: bool = False


PortId = tuple[str, int]


@dataclass(frozen=True)
class PortBase:
    """A port's base health before the families' conditions (:meth:`CheckFamily.port_bases`):
    ``present`` False for a recorded port the poll does not list (or of a device gone)."""

    health: str
    reasons: tuple[str, ...] = ()
    present: bool = True
    code: str = ""  # the errorCode of its unhealthy condition (core/suspect.py reads it)


@dataclass(frozen=True)
class Condition:
    """An open condition a family holds, for the one health model.

    ``port`` None is a condition on the host. A port's condition whose port is not among the
    monitored ports of the poll is shown on the host, as ``alone`` says it.
    """

    health: str  # state.DEGRADED or state.FATAL
    reason: str
    port: Optional[PortId] = None
    alone: str = ""  # the reason on the host (default: ``reason``)
    code: str = ""  # the errorCode of the event that opened it (core/suspect.py reads it)


@dataclass(frozen=True)
class Series:
    """A metrics family a check supplies: plain data the metrics surface turns into Prometheus.

    ``kind`` is ``gauge`` or ``counter``; ``samples`` are (label values, value). A flag (1
    while a condition holds) has a sample only while it holds, so that a healthy host exports
    none of it; a value node_exporter exports is left to it (nichealthd(8), METRICS).
    """

    name: str  # without the nichealthd_ prefix
    help: str
    kind: str
    labels: tuple[str, ...]
    samples: tuple[tuple[tuple[str, ...], float], ...] = field(default=())


class CheckFamily(abc.ABC, Generic[S, P, V]):
    """One family of checks. Subclasses are stateless: everything lives in their section."""

    id: ClassVar[str]  # its name in the state file's ``schemas`` and in logs
    order: ClassVar[int]  # families run (and their events of a device follow) in this order
    schema: ClassVar[int] = 1  # version of its section's layout
    keys: ClassVar[tuple[str, ...]]  # its top-level keys in the state file
    # The parts of the snapshot it needs: READS_* below, and the keys of the facts of the
    # Source seam (a Fact of its source's module, ``PHY`` of sources/phy.py).
    reads: ClassVar[frozenset[str]]
    cadence: ClassVar[float] = 0.0  # seconds between runs; 0 is every poll
    # Its config keys (a frozen Settings dataclass; read as ``config.settings(that class)``).
    settings: ClassVar[Optional[type[Settings]]] = None
    # The keys it adds to the port and device records (:meth:`port_fields`,
    # :meth:`absent_port_fields`, :meth:`device_fields`, :meth:`device_rows`), each with its
    # type as the varlink interface writes it (:data:`FieldTypes`); a key of the daemon's own
    # record that it replaces (``since``, ``fw_ver``) keeps the type the daemon declares
    # (core/views.py). tests/varlink/test_declared_fields.py holds the interface files to them.
    port_field_types: ClassVar[FieldTypes] = {}
    device_field_types: ClassVar[FieldTypes] = {}

    # A section class (a dataclass deriving from :class:`nichealthd.core.codec.Section`, every
    # field with a default) gives fresh/load/dump for free; a family without one overrides them.
    section_type: ClassVar[Any] = None

    def fresh(self) -> S:
        """The section of a first start (no state, or a reboot)."""
        return cast(S, self.section_type())

    def load(self, data: Mapping[str, Any], schema: int) -> S:
        """Its section from the state file's top level (absent keys: fresh), written under
        ``schema`` (never newer than :attr:`schema`). Bad content raises ``StateCorrupt``,
        ``TypeError``, ``ValueError`` or ``KeyError``: the whole state is then unusable."""
        return cast(S, self.section_type.from_json(data))

    def dump(self, section: S) -> dict[str, Any]:
        """Its top-level keys of the state file (exactly :attr:`keys`)."""
        dumped: dict[str, Any] = cast(Any, section).to_json()
        return dumped

    @abc.abstractmethod
    def evaluate(self, previous: S, cycle: Cycle, volatile: Optional[V]) -> Verdict[S, P, V]:
        """One poll, pure: neither ``previous`` nor ``volatile`` (its volatile memory of
        the last poll it ran in; None at the first, after a restart or a rename) is changed:
        the verdict carries the next of each, which the monitor adopts with the commit."""

    def forget(self, volatile: V, names: frozenset[str]) -> Optional[V]:
        """Its volatile memory without the devices ``names`` (renamed, old and new names: a
        permutation gives a name to another device); the default drops it whole, as a
        restart would."""
        return None

    def settled(self, section: S, volatile: V) -> S:
        """The section to persist and rename: ``section`` with what ``volatile`` holds back
        written (the counter engine closes the empty windows of a quiet port in its memo
        only, core/checks/counters.py). The default holds nothing back."""
        return section

    def rename(self, section: S, renames: Mapping[str, str], now: datetime) -> S:
        """The section with every record of a renamed device under its new name.

        ``renames`` maps old kernel names to new ones, all at once (a driver reload shifts
        names: ``mlx5_0 -> mlx5_1`` and ``mlx5_1 -> mlx5_2`` in the same poll). It is called
        before :meth:`evaluate` of the poll in which the device came back at the same PCI
        function under another name. A family that keys anything by device name must carry
        it over, else the device looks gone under its old name and new under the other.
        ``section`` is not changed; the default (nothing keyed by name) returns it.
        """
        return section

    def identities(self, section: S) -> Optional[tuple[Mapping[str, DeviceIdentity],
                                                       Sequence[str]]]:
        """The devices it knows by hardware identity: their recorded identities (PCI function,
        node GUID) and its known names; None when it keeps none. The evaluator finds renamed
        devices by them, and the reader lists the PCI bus when a known function has no device
        (core/checks/driver.py)."""
        return None

    def held_devices(self, section: S) -> Optional[tuple[tuple[str, ...], datetime]]:
        """The devices a driver event it holds keeps from judgement, and since when; None
        when none is in progress (core/checks/driver.py)."""
        return None

    def baseline_checks(self, snapshot: HostSnapshot) -> frozenset[str]:
        """The check names whose conditions a baseline (a reboot, no usable state) clears on
        this host with one healthy event each (NVSentinel's connector); a family that sends its own
        clear with its fresh section names none."""
        return frozenset()

    def observations(self, cycle_picture: Optional[P]) -> Mapping[str, CounterObservation]:
        """What the poll computed of each counter it judges (``device:port:counter``), for
        ``show counters`` and the metrics: the counter engine's families."""
        return {}

    def module_facts(self, cycle_picture: Optional[P]) -> Optional[Mapping[str, PortOptics]]:
        """The local modules' diagnostics by port key (``mlx5_0_1``) as last read, for the
        suspect of a condition (core/suspect.py): the optics family's picture."""
        return None

    def interval(self, config: Config) -> float:
        """Seconds between runs under ``config`` (a configurable cadence); default
        :attr:`cadence`."""
        return self.cadence

    def enabled(self, config: Config) -> bool:
        """Whether it runs under ``config``; a disabled family keeps its section as it is."""
        return True

    def urgent(self, old: S, new: S, config: Config) -> bool:
        """Whether a change must be written at once; the rest is flushed within a minute."""
        return bool(old != new)

    def conditions(self, section: S, cycle_picture: Optional[P]) -> Iterable[Condition]:
        """Its open conditions, for the health of ports and host."""
        return ()

    def port_bases(self, section: S, snapshot: HostSnapshot, roles: Mapping[str, Role]
                   ) -> Mapping[PortId, PortBase]:
        """The base health of the ports it judges the state of: every monitored port of the
        poll and the recorded ports it no longer sees (core/health.py starts from these)."""
        return {}

    def base_conditions(self, section: S, snapshot: HostSnapshot,
                        bases: Mapping[PortId, PortBase]) -> Iterable[Condition]:
        """Conditions judged on the ports' bases, applied after every family's own
        (:meth:`conditions`): a card short of active ports makes its unhealthy ports fatal."""
        return ()

    def uncabled(self, section: S) -> frozenset[PortId]:
        """Ports down since first sight without evidence: "uncabled", whatever the base."""
        return frozenset()

    def judges(self, device: DeviceSnapshot, port: PortSnapshot) -> bool:
        """Whether it judges this monitored port of ``device``: while the family cannot
        judge (:attr:`~nichealthd.core.evaluate.CycleResult.failed`), the ports it judges
        are unknown and only those (core/health.py): one broken family must not take the
        ports it never looks at with it. Default: every port (a family that cannot tell)."""
        return True

    def port_fields(self, section: S, cycle_picture: Optional[P], port: PortId) -> Mapping[str,
                    Json]:
        """Extra keys of a port's record (``show ports --json``, D-Bus, varlink)."""
        return {}

    def absent_port_fields(self, section: S, port: PortId) -> Mapping[str, Json]:
        """Keys of the record of a judged port that the poll no longer lists, from what it
        recorded of it (the link layer, the last state, since when)."""
        return {}

    def counter_rows(self, section: S, cycle_picture: Optional[P], device: DeviceSnapshot,
                     port: int, config: Config) -> Iterable[JsonObject]:
        """The ``show counters`` records of the counters of ``device`` it judges, of every
        port (``port`` 0) or of that one (core/checks/counter_rows.py)."""
        return ()

    def device_fields(self, section: S, cycle_picture: Optional[P], device: str, present: bool
                      ) -> Mapping[str, Json]:
        """Extra keys of a device's record (``show devices --json``, D-Bus, varlink); a key
        it gives replaces the snapshot's (the firmware version as last read). ``present``
        False: a known device missing from the poll (a row of :meth:`device_rows`)."""
        return {}

    def device_rows(self, section: S, cycle_picture: Optional[P], present: frozenset[str]
                    ) -> Iterable[JsonObject]:
        """Device records of its own for what the poll does not list (``present``: the
        names it lists): a known device gone, a NIC without an RDMA device. Every key of a
        device record; ``present`` False."""
        return ()

    def series(self, section: S, cycle_picture: Optional[P]) -> Iterable[Series]:
        """Its metrics series."""
        return ()


# A family of the registry: each has its own section, picture and volatile memory types,
# which the loops over the registry do not know (they pass a family's own back to it).
Family = CheckFamily[Any, Any, Any]


def supplies(family: Family, method: str) -> bool:
    """Whether ``family`` overrides ``method`` of :class:`CheckFamily` (so a loop over the
    families can skip the ones that add nothing, on paths run for every port)."""
    return getattr(type(family), method) is not getattr(CheckFamily, method)
