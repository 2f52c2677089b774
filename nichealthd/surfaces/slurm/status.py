"""The Slurm consumer's status as a value: its thread replaces it, the surfaces read it.

Frozen, like the connector's (:mod:`..connector.status`): a reader holds one consistent value.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Mapping

from ..status import FAILING, SurfaceStatus

NAME = "slurm"  # its name on the status channel and its journal cursor (consumer.py)

OFF = "off"
ON = "on"
DRY_RUN = "dry-run"


@dataclass(frozen=True)
class SlurmStatus:
    """``mode`` is off, on or dry-run; ``last_action`` says what was run last and how it
    ended, ``last_error`` the last failure ("" once an action succeeds again);
    ``drained_for`` the open fatal conditions the node is drained for; ``failing`` why the
    drain or resume that the events call for cannot be done now ("" while none is
    pending): the event stays pending and is retried, and while it is, the node is not
    drained for it, which every surface must say rather than "no fatal condition open";
    ``actions`` counts each (action, result): action drain or resume, result ok, failed,
    skipped (the node has another reason: an administrator's) or dry_run."""

    mode: str = OFF
    last_action: str = ""
    last_error: str = ""
    drained_for: tuple[str, ...] = ()
    holds_drain: bool = False
    actions: Mapping[tuple[str, str], int] = field(default_factory=dict)
    failing: str = ""

    def surface_status(self) -> SurfaceStatus:
        """What it is on the status channel: its mode, or failing while an action waits."""
        return SurfaceStatus(NAME, FAILING if self.failing else self.mode,
                             self.failing or self.last_error)

    def status_keys(self) -> dict[str, object]:
        """The keys of ``nichealthctl status`` (D-Bus GetStatus, varlink Status)."""
        return {"slurm_mode": self.mode, "slurm_last_action": self.last_action,
                "slurm_last_error": self.last_error,
                "slurm_drained_for": list(self.drained_for),
                "slurm_drain_held": self.holds_drain, "slurm_failing": self.failing}
