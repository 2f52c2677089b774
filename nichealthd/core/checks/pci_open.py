"""What the PCI-side families (#16) hold open: one record per degraded hop or hot sensor.

A record keeps the identity its unhealthy event was sent with (check name, error code, the NIC
and PCI address entities), so that its recovery carries exactly the same identity even if the
device was renamed since (the platform clears a condition by identity). Records are keyed by
PCI addresses, which a rename does not change.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from datetime import datetime
from typing import Any, Mapping, Optional

from ..config import (
    ETH_DEGRADATION_CHECK,
    ETH_STATE_CHECK,
    IB_DEGRADATION_CHECK,
    IB_STATE_CHECK,
)
from ..events import ENTITY_NIC, ENTITY_PCI, HealthEvent, format_timestamp, make_event
from ..model import DeviceSnapshot
from ..state import parse_bool, parse_str, parse_table, parse_when
from .counters import CheckNames
from .link_section import LinkStateSection
from .link_state import device_layer

# Fatal facts under the layer's state check, the others under its degradation check (spec
# §11.1: every fatal signal of a NIC type consolidates under one node condition).
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

    check: str
    fatal: bool
    code: str
    device: str
    address: str
    since: datetime
    detail: str = ""  # what it was (shown by the views)

    def event(self, *, healthy: bool, message: str, at: datetime) -> HealthEvent:
        return make_event(self.check, fatal=self.fatal and not healthy, healthy=healthy,
                          error_code=self.code,
                          entities=pci_entities(self.device, self.address),
                          message=message, at=at)

    def to_json(self) -> dict[str, Any]:
        return {"check_name": self.check, "is_fatal": self.fatal, "error_code": self.code,
                "device": self.device, "pci_address": self.address,
                "since": format_timestamp(self.since), "detail": self.detail}

    @classmethod
    def from_json(cls, data: Mapping[str, Any]) -> OpenRecord:
        return cls(parse_str(data["check_name"]), parse_bool(data["is_fatal"]),
                   parse_str(data["error_code"]), parse_str(data["device"]),
                   parse_str(data["pci_address"]), parse_when(data["since"]),
                   parse_str(data.get("detail", "")))


@dataclass
class OpenSection:
    """A family's open records, under one top-level key of the state file (``KEY``)."""

    KEY = ""
    records: dict[str, OpenRecord] = field(default_factory=dict)

    def copy(self) -> OpenSection:
        return type(self)(dict(self.records))

    def to_json(self) -> dict[str, Any]:
        return {self.KEY: {k: r.to_json() for k, r in sorted(self.records.items())}}

    @classmethod
    def from_json(cls, data: Mapping[str, Any]) -> Any:
        return cls({parse_str(k): OpenRecord.from_json(v)
                    for k, v in parse_table(data, cls.KEY).items()})
