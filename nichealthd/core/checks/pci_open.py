"""What the PCI-side families hold open: one record per degraded hop or hot sensor.

A record keeps the identity its unhealthy event was sent with (check name, error code, the NIC
and PCI address entities), so that its recovery carries exactly the same identity even if the
device was renamed since (the platform clears a condition by identity). Records are keyed by
PCI addresses, which a rename does not change.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from datetime import datetime
from typing import Optional

from ..codec import Section, stored
from ..config import (
    ETH_DEGRADATION_CHECK,
    ETH_STATE_CHECK,
    IB_DEGRADATION_CHECK,
    IB_STATE_CHECK,
)
from ..events import ENTITY_NIC, ENTITY_PCI, HealthEvent, make_event
from ..model import DeviceSnapshot
from .counters import CheckNames
from .link_section import LinkStateSection
from .link_state import device_layer

# Fatal facts under the layer's state check, the others under its degradation check
# (link-counter-detection §11.1: every fatal signal of a NIC type consolidates under one node
# condition).
LAYER_CHECKS = {
    "InfiniBand": CheckNames(IB_STATE_CHECK, IB_DEGRADATION_CHECK),
    "Ethernet": CheckNames(ETH_STATE_CHECK, ETH_DEGRADATION_CHECK),
}


def layer_checks(device: DeviceSnapshot, links: LinkStateSection) -> Optional[CheckNames]:
    """The check names of the device's link layer (None: unknown, the link-state family
    says so)."""
    return LAYER_CHECKS.get(device_layer(device, links) or "")


def pci_entities(device: str, address: str) -> tuple[tuple[str, str], ...]:
    """``NIC`` and the ``PCI`` address of the function (a hop: the function below it)."""
    return ((ENTITY_NIC, device), (ENTITY_PCI, address))


@dataclass(frozen=True)
class OpenRecord:
    """An open unhealthy report and the identity it was sent with."""

    check: str = field(metadata=stored(key="check_name"))
    fatal: bool = field(metadata=stored(key="is_fatal"))
    code: str = field(metadata=stored(key="error_code"))
    device: str
    address: str = field(metadata=stored(key="pci_address"))
    since: datetime
    detail: str = field(default="", metadata=stored(legacy=""))  # what it was (shown)

    def event(self, *, healthy: bool, message: str, at: datetime) -> HealthEvent:
        return make_event(self.check, fatal=self.fatal and not healthy, healthy=healthy,
                          error_code=self.code,
                          entities=pci_entities(self.device, self.address),
                          message=message, at=at)


@dataclass
class OpenSection(Section):
    """A family's open records, under one top-level key of the state file: a subclass
    declares ``records`` again with its key."""

    records: dict[str, OpenRecord] = field(default_factory=dict)
