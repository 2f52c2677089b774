"""What a family tells the seam besides events: a counter's observation, a device's identity.

The types of the seam's hooks ``observations`` and ``identities`` (core/family.py), kept below
both the seam and the families that fill them (core/checks/counters.py,
core/checks/link_section.py), so that the seam needs no family module.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from datetime import datetime
from typing import NamedTuple, Optional

from .codec import stored


class CounterObservation(NamedTuple):
    """What the last poll computed for one counter entry (for D-Bus and metrics).

    A NamedTuple: one is made for every counter of every port on every poll.
    """

    value: Optional[int]
    delta: Optional[int]
    rate: Optional[float]


def _not_renamed(identity: DeviceIdentity) -> bool:
    return not (identity.renamed_from and identity.renamed_at)


@dataclass(frozen=True)
class DeviceIdentity:
    """What a device is, whatever the kernel calls it (nichealthd(8)): its PCI function,
    with the node GUID as a cross-check where it was readable ("" when not). The name it had
    before its last rename and when, written only together."""

    pci_address: str
    node_guid: str = field(default="", metadata=stored(legacy=""))
    renamed_from: str = field(default="", metadata=stored(legacy="", omit=_not_renamed))
    renamed_at: Optional[datetime] = field(default=None, metadata=stored(
        legacy=None, null=False, omit=_not_renamed))
