"""The open-file plan: the soft RLIMIT_NOFILE shared out so that no client can starve polling.

Every descriptor the daemon may hold is counted against the limit in force, in this order:

1. a reserve for what is not counted one by one — the bus, the connector, the journal, the
   state and outbox files, the listening sockets, discovery's one-at-a-time reads of
   directories and files (the reader's own reserve, :func:`nichealthd.sources.sysfs.fd_budget`:
   128 or an eighth of what it is given, whichever is larger);
2. every surface's connection limit: varlink and the metrics HTTP clients
   (:data:`~nichealthd.surfaces.admission.VARLINK_CONNECTIONS`, ``METRICS_CLIENTS``), which the
   surfaces enforce, so a flood of local clients holds at most these;
3. the rest: sysfs files kept open (the reader's, and the AER tables'), only a saving (one
   ``pread`` instead of open, read and close), so they shrink first.

When the limit cannot hold the connection limits beside the reserve, those shrink too (each in
proportion, at least one); the reserve never does, so discovery and the other surfaces always
have descriptors. Under the shipped unit (``LimitNOFILE=65536``) nothing shrinks. ``--once``
serves no surface: everything but the reserve may stay open.
"""

from __future__ import annotations

import logging
import resource
from dataclasses import dataclass, field
from typing import Mapping, Optional

from ..sources.pcie import AER_KEPT_OPEN
from ..sources.sysfs import fd_budget
from ..surfaces.admission import METRICS_CLIENTS, VARLINK_CONNECTIONS
from ..surfaces.context import CONNECTIONS_METRICS, CONNECTIONS_VARLINK

log = logging.getLogger("nichealthd.fdplan")

# What each surface would hold at most if the limit allowed it.
CONNECTION_LIMITS: Mapping[str, int] = {
    CONNECTIONS_VARLINK: VARLINK_CONNECTIONS,
    CONNECTIONS_METRICS: METRICS_CLIENTS,
}
AER_SHARE = 4  # the AER tables keep at most a quarter of the kept files (and AER_KEPT_OPEN)


@dataclass(frozen=True)
class FdPlan:
    """How the open-file limit is shared out (None: no limit, nothing is budgeted)."""

    limit: Optional[int]
    connections: Mapping[str, int] = field(default_factory=dict)
    kept_sysfs: Optional[int] = None  # kept-open files of the reader and the adapter source
    kept_aer: int = AER_KEPT_OPEN  # the AER tables' kept-open files
    shrunk: bool = False  # the connection limits did not fit beside the reserve

    @property
    def reserve(self) -> Optional[int]:
        """What is left for everything else."""
        if self.limit is None or self.kept_sysfs is None:
            return None
        return self.limit - sum(self.connections.values()) - self.kept_sysfs - self.kept_aer

    def describe(self) -> str:
        """One line for the log."""
        conns = ", ".join(f"{name} {count}" for name, count in sorted(self.connections.items()))
        if self.limit is None:
            return (f"no open-file limit: every polled sysfs file is kept open"
                    f"{f'; connections: {conns}' if conns else ''}")
        return (f"open-file limit {self.limit}: {self.reserve} kept for discovery, the bus, the "
                f"connector, the journal and the state files; "
                f"{f'connections at most {conns}; ' if conns else ''}"
                f"{self.kept_sysfs} sysfs files and {self.kept_aer} AER tables kept open")


def plan_fds(soft_limit: Optional[int] = None, serving: bool = True) -> FdPlan:
    """The plan for ``soft_limit`` (default: the soft RLIMIT_NOFILE in force); ``serving``:
    the connection surfaces run (not ``--once``)."""
    if soft_limit is None:
        soft_limit = resource.getrlimit(resource.RLIMIT_NOFILE)[0]
    wanted = dict(CONNECTION_LIMITS) if serving else {}
    if soft_limit == resource.RLIM_INFINITY or soft_limit < 0:
        return FdPlan(None, wanted)
    room = fd_budget(soft_limit) or 0  # everything but the reserve
    total = sum(wanted.values())
    if total > room:
        connections = {name: max(1, count * room // total) for name, count in wanted.items()}
        return FdPlan(soft_limit, connections, 0, 0, shrunk=True)
    kept = fd_budget(soft_limit - total) or 0
    aer = min(AER_KEPT_OPEN, kept // AER_SHARE)
    return FdPlan(soft_limit, wanted, kept - aer, aer)


def log_plan(plan: FdPlan) -> None:
    """Say how the limit is shared out; a warning when it could not hold the connections."""
    if plan.shrunk:
        log.warning("%s: too few for the connection limits (%s), which are lowered to fit; "
                    "raise the limit (LimitNOFILE= in the systemd unit, ulimit -n)",
                    plan.describe(), ", ".join(f"{name} {count}" for name, count
                                               in sorted(CONNECTION_LIMITS.items())))
    else:
        log.info("%s", plan.describe())


__all__ = ["FdPlan", "plan_fds", "log_plan", "CONNECTION_LIMITS"]
