"""What a plug-in service receives: a typed context, not the daemon and its internals.

Services (D-Bus API, varlink, metrics, platform connector, Slurm) read the running configuration,
the picture of the last completed poll (:class:`~nichealthd.core.picture.PollPicture`: one
object per poll, the same for every service, with its answers built once) and the poll
loop's counters through these accessors, use the journal, and publish their status (the
status channel, :mod:`.status`: every surface under its own name) or request through
callbacks. Every value they get is immutable or owned by them, so nothing they do can change
the monitor's state between two polls.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from datetime import datetime
from typing import Callable, Mapping, Optional

from ..core.config import Config
from ..core.evaluate import CycleResult
from ..core.jsontypes import JsonRecord
from ..core.model import HostSnapshot
from ..core.picture import PollPicture
from ..storage.store import Journal, JournalEntry
from .connector.status import ConnectorStatus
from .slurm.status import SlurmStatus
from .status import Reported, SurfaceStatus

# Keys of ServiceContext.connection_limits.
CONNECTIONS_VARLINK = "varlink"
CONNECTIONS_METRICS = "metrics"


@dataclass
class PollOutcome:
    """What one cycle did (its events, time and commit); what it shows is the daemon's
    :class:`PollPicture` of it."""

    result: CycleResult
    snapshot: HostSnapshot
    committed: list[JournalEntry] = field(default_factory=list)
    duration: float = 0.0
    commit_error: Optional[str] = None


@dataclass(frozen=True)
class PollStats:
    """The poll loop's counters and times, one consistent value (``/metrics``, ``/healthz``)."""

    polls: int
    started_at: float  # wall clock (time.time) of the start
    last_poll_monotonic: Optional[float]  # when the last poll completed (time.monotonic)
    last_poll_wall: Optional[datetime]  # when the last poll read sysfs
    failing: str  # what fails now (reading, evaluating, committing), "" while all works
    failures: Mapping[str, int]  # failed polls per cause since start
    unreadable_reads: int
    einval_files: int
    # The check families' failure boundary (runtime/family_watch.py): those that cannot
    # judge now -> why, and each enabled family's last poll that judged.
    families_failing: Mapping[str, str] = field(default_factory=dict)
    families_judged: Mapping[str, datetime] = field(default_factory=dict)


@dataclass(frozen=True)
class ServiceContext:
    """Accessors and callbacks a service may use (see :class:`~nichealthd.runtime.service.Service`).
    """

    journal: Journal
    config_path: str
    config: Callable[[], Config]  # the running config (a reload replaces it)
    view: Callable[[], Optional[PollPicture]]  # None before the first completed poll
    stats: Callable[[], PollStats]
    status: Callable[[], JsonRecord]  # the status dict of D-Bus and nichealthctl
    reload_error: Callable[[], str]  # why the last reload was rejected, "" if it was not
    request_reload: Callable[[], None]
    connector: Callable[[], ConnectorStatus]  # the connector's status as it published it
    # The most connections each surface may hold (CONNECTIONS_*), from the daemon's open-file
    # plan (nichealthd.runtime.fdplan); a surface not named keeps its own limit.
    connection_limits: Mapping[str, int] = field(default_factory=dict)
    slurm: Callable[[], SlurmStatus] = SlurmStatus  # the Slurm consumer's (surfaces/slurm/)
    # The status channel: a surface publishes its status under its name (any thread); every
    # surface's, by name, as each says what it is (.status.Board).
    publish: Callable[[str, Reported], None] = lambda name, status: None
    surfaces: Callable[[], tuple[SurfaceStatus, ...]] = tuple

    def publisher(self, name: str) -> Callable[[Reported], None]:
        """The status callback of the surface called ``name``."""
        publish = self.publish
        return lambda status: publish(name, status)
