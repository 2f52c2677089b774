"""What the adapter families (#16.3-6) add to a device record (show devices, D-Bus, varlink)."""

from __future__ import annotations

from typing import Any

from .checks.chardev import CHAR_DEVICES, parse_key
from .checks.firmware import FIRMWARE, key_of
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
