"""Who may hold a connection to a local socket: caps per uid that always leave root room.

A unix socket tells the server each peer's uid (``SO_PEERCRED``), so the bound is per local
user, not per connection: with one cap for everyone, a few users' idle connections filled
every slot and refused the next one, root's included. Here the slots are shared out so that
no local user can deny another, nor all of them together deny root:

* at most :attr:`Caps.total` connections in all (what the open-file plan gives the surface);
* every non-root user together at most ``total - total/8``: an eighth is root's alone;
* one non-root user at most ``total/8``, so it takes seven users to fill the non-root part.

Root (uid 0) is limited only by the total. A peer whose uid cannot be read (``-1``) is a
non-root user of its own. Pure bookkeeping, no I/O: the service calls :meth:`Admission.admit`
when a connection arrives and :meth:`Admission.release` when it goes.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Dict

ROOT_UID = 0
SHARE = 8  # root's reserve and one user's cap: an eighth of the slots each
# The most connections each surface holds if the open-file limit allows it (runtime/fdplan.py
# counts them). Here, beside the caps, rather than in the surfaces' modules: the plan is made
# at start whether or not the metrics library is installed (runtime/libraries.py).
VARLINK_CONNECTIONS = 256
METRICS_CLIENTS = 64  # scrapers and probes: a handful


@dataclass(frozen=True)
class Caps:
    """The connection limits of one surface."""

    total: int  # every connection
    unprivileged: int  # all non-root users together
    per_uid: int  # one non-root user

    @classmethod
    def of(cls, total: int) -> Caps:
        """The caps for ``total`` slots (at least one for root, one per user)."""
        total = max(1, total)
        share = max(1, total // SHARE)
        return cls(total, max(0, total - share), share)


class Admission:
    """The connections held now, per uid, against :class:`Caps`."""

    def __init__(self, caps: Caps) -> None:
        self.caps = caps
        self._by_uid: Dict[int, int] = {}
        self.total = 0
        self.unprivileged = 0

    def admit(self, uid: int) -> str:
        """Count a new connection of ``uid``; "" when admitted, else why it is not."""
        caps = self.caps
        if self.total >= caps.total:
            return f"all {caps.total} connections are taken"
        if uid != ROOT_UID:
            if self.unprivileged >= caps.unprivileged:
                return (f"non-root users hold {self.unprivileged} connections, the most they "
                        f"may together ({caps.total - caps.unprivileged} are kept for root)")
            if self._by_uid.get(uid, 0) >= caps.per_uid:
                return f"uid {uid} holds {caps.per_uid} connections, the most one user may"
            self.unprivileged += 1
        self._by_uid[uid] = self._by_uid.get(uid, 0) + 1
        self.total += 1
        return ""

    def release(self, uid: int) -> None:
        """A connection of ``uid`` that :meth:`admit` counted is gone."""
        held = self._by_uid.get(uid, 0)
        if held <= 0:
            return
        if held == 1:
            del self._by_uid[uid]
        else:
            self._by_uid[uid] = held - 1
        self.total -= 1
        if uid != ROOT_UID:
            self.unprivileged -= 1

    def held(self, uid: int) -> int:
        return self._by_uid.get(uid, 0)


__all__ = ["Admission", "Caps", "ROOT_UID"]
