"""What a poll read of the devices and their ports, but the counters: compared with the last poll's.

A family whose verdict is a function of these readings, of its own section and of the config
may skip a poll whose readings equal those of a poll that changed nothing (only what changed
is judged: ARCHITECTURE.md). On a busy host every device and port is a new object each poll,
because its counters moved (they live in :class:`PortSnapshot`), so the readings are compared
field by field, not by identity. Every field is compared (a field added later is too), but the
counters' own: the values, and their paths and kinds, fixed with the reader's plan.
"""

from __future__ import annotations

from dataclasses import fields
from operator import attrgetter
from typing import Callable, cast

from ..model import DeviceSnapshot, HostSnapshot, PortSnapshot

_COUNTER_FIELDS = frozenset({"counters", "counter_paths", "counter_kinds"})
# One C-level call per object: a tuple of its fields (a tuple compares items by identity
# first, and the reader keeps the same text objects while a file reads the same bytes).
_device_fields: Callable[[DeviceSnapshot], tuple[object, ...]] = attrgetter(
    *(f.name for f in fields(DeviceSnapshot) if f.name != "ports"))
_port_fields: Callable[[PortSnapshot], tuple[object, ...]] = attrgetter(
    *(f.name for f in fields(PortSnapshot) if f.name not in _COUNTER_FIELDS))


def device_readings(snapshot: HostSnapshot) -> tuple[object, ...]:
    """Every device of the poll with its ports, and what the poll read of the PCI bus (the
    driver-event rules read it): equal for two polls that read the same, counters aside.

    The VFs of the reader's index (:class:`DeviceIndex`) are the same tuple of the same
    snapshots while discovery has not changed them, so they are compared whole (by
    identity first, by value when discovery made them anew): on a host of 8 PFs with 127 VFs
    each, 8 devices are compared field by field, not 1,024. Asked several times per poll
    (the link-state family, the port bases of the health model): worked out once."""
    readings = snapshot.memo.get(_MEMO_KEY)
    if readings is None:
        parts = snapshot.parts
        readings = snapshot.memo[_MEMO_KEY] = (
            snapshot.complete, snapshot.pci_functions, snapshot.pci_bus, parts.vfs,
            tuple([(_device_fields(device), tuple([_port_fields(p) for p in device.ports]))
                   for device in parts.judged]))
    return cast("tuple[object, ...]", readings)


_MEMO_KEY = "device_readings"
