"""What the adapter families (#16.3-6) add to the device records (show devices, D-Bus, varlink):
fields of a device's record, and a row for each lost NIC."""

from __future__ import annotations

from typing import Any, Mapping, Optional

from .adapter import PciNic
from .checks.chardev import CHAR_DEVICES, parse_key
from .checks.firmware import FIRMWARE, key_of
from .checks.lost_nic import LOST_NICS
from .events import format_timestamp
from .state import MonitorState


def adapter_fields(state: MonitorState, device: str) -> dict[str, Any]:
    """``fw_ver`` as last read (a flash at runtime shows), ``firmware_drift`` (``<its> vs
    <the group's>`` while reported, else "") and ``char_devices_missing`` (the kinds reported
    missing: ``uverbs``, ``umad:1``...)."""
    firmware = state.section(FIRMWARE)
    fields: dict[str, Any] = {}
    if device in firmware.versions:
        fields["fw_ver"] = firmware.versions[device]
    drift = firmware.latched.get(key_of(device))
    fields["firmware_drift"] = drift.detail if drift else ""
    missing = []
    for key in sorted(state.section(CHAR_DEVICES).latched):
        name, port, code = parse_key(key)
        if name == device:
            missing.append(code if port is None else f"{code}:{port}")
    fields["char_devices_missing"] = missing
    return fields


def lost_nic_records(state: MonitorState, pictures: Mapping[str, Any]) -> list[dict[str, Any]]:
    """One row per lost NIC (#16.5) the daemon reported: a Mellanox physical function on the
    bus without an RDMA device. It has no kernel name, so ``device`` is its PCI address; the
    row carries every field of a device record (``present`` False, as a device that never
    registered) and ``lost`` True, ``lost_reason`` (why: no driver bound, or bound without
    registering) and ``lost_since``. Its netdevs, driver and NUMA node are those of the last
    adapter read that saw it."""
    section = state.section(LOST_NICS)
    seen: Mapping[str, PciNic] = {n.address: n for n in pictures.get(LOST_NICS.id) or ()}
    rows = []
    for address, latched in sorted(section.latched.items()):
        nic: Optional[PciNic] = seen.get(address)
        layer = "" if nic is None else ("InfiniBand" if nic.is_infiniband else "Ethernet")
        numa = nic.numa_node if nic is not None and nic.numa_node is not None else -1
        rows.append({
            "device": address, "hca_type": "", "fw_ver": "", "board_id": "", "node_guid": "",
            "pci_address": address, "card": address.rpartition(".")[0] or address,
            "numa_node": numa, "driver": (nic.driver or "") if nic else "",
            "netdevs": list(nic.netdevs) if nic else [], "is_vf": False, "role": "",
            "role_reason": "", "monitored": True, "link_layer": layer, "ports": 0,
            "present": False, "driver_event": False, "adapter": "mlx5",
            "renamed_from": "", "renamed_at": "",
            "lost": True, "lost_reason": latched.detail,
            "lost_since": format_timestamp(latched.since),
        })
    return rows
