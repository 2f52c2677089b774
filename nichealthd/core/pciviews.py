"""What the views show of a NIC's PCI side (#16): its PCIe hops, AER totals and temperature.

Pure: it reads the pictures the PCI-side families left in a :class:`CycleResult` (the facts of
their last run, kept between runs). Every field is left out when it is not known (a VM has no
AER files, a NIC without hwmon has no temperature): ``show devices --json``, D-Bus and varlink
carry them as optional fields.
"""

from __future__ import annotations

from typing import Any, Mapping

from .checks.nic_temperature import NIC_TEMPERATURE
from .checks.pcie_aer import PCIE_AER
from .checks.pcie_link import PCIE_LINK
from .pcifacts import AerTable, PcieHop, Sensor


def _link(width: Any, speed: Any) -> str:
    if not width or not speed:
        return ""
    return f"x{width} at {speed:.1f} GT/s"


def hop_record(hop: PcieHop) -> dict[str, str]:
    """One hop as strings (D-Bus ``a{ss}``)."""
    return {"upstream": hop.upstream.address, "downstream": hop.downstream.address,
            "link": _link(hop.downstream.current_width, hop.downstream.current_speed),
            "capable": _link(hop.capable_width, hop.capable_speed),
            "degraded": {True: "true", False: "false", None: "unknown"}[hop.degraded]}


def pci_fields(pictures: Mapping[str, Any], device: str) -> dict[str, Any]:
    """The PCI-side fields of one device's record (only those known)."""
    out: dict[str, Any] = {}
    hops: Mapping[str, tuple[PcieHop, ...]] = pictures.get(PCIE_LINK.id) or {}
    if hops.get(device):
        own = hops[device][0]
        link = _link(own.downstream.current_width, own.downstream.current_speed)
        if link:
            out["pcie_link"] = link
        out["pcie_hops"] = [hop_record(h) for h in hops[device]]
    aer = pictures.get(PCIE_AER.id)
    tables: tuple[AerTable, ...] = (aer[0] if aer else {}).get(device, ())
    for table in tables:
        if table.rootport:  # the root port above it: its address and totals of all below
            out["aer_root_port"] = table.address
            for name, value in table.totals.items():
                out[name] = value  # aer_rootport_total_err_fatal, _nonfatal, _cor
        elif not table.upstream:
            for name, value in table.totals.items():
                out[name] = value  # aer_dev_fatal, aer_dev_nonfatal, aer_dev_correctable
    sensors: tuple[Sensor, ...] = (pictures.get(NIC_TEMPERATURE.id) or {}).get(device, ())
    known = [s for s in sensors if s.input is not None]
    if known:
        hottest = max(known, key=lambda s: s.input or 0)
        out["temperature_c"] = (hottest.input or 0) / 1000
        if hottest.crit is not None:
            out["temperature_crit_c"] = hottest.crit / 1000
    return out
