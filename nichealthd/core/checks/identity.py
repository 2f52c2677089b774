"""Device identity by hardware (nichealthd(8)): renames found by PCI function and GUID.

The kernel name of an RDMA device (``mlx5_3``) is an attribute, not an identity: a driver
reload (``rmmod``/``modprobe``, ``devlink dev reload``, a firmware reset) registers the devices
again, and the names may come back shifted (``mlx5_3`` -> ``mlx5_20``). What stays is the PCI
function the device sits on (``0000:47:00.0``) and, where readable, its node GUID. The link-state
section remembers both for each known device; at each poll, before any family runs, a present
device found at the PCI function of a known device under another name is that device renamed,
and every family carries its records over (:meth:`CheckFamily.rename`).

A rename is believed only when it is unambiguous: exactly one known name at that PCI address and
exactly one present device there, and the node GUIDs equal where both are known (another card in
the same slot is another device). State keys stay the *current* name (link-counter-detection §6.6:
counter keys are ``<device>:<port>:<counter>``; events name the device as the kernel calls it now).

A known device that is gone while its name is taken by another device (the reload that shifted
the names left one card behind) is moved to an alias, ``<name>@<PCI address>`` (colons as
dashes, since state keys split on colons), so that it keeps its own records and is judged
gone under a name that is not the other device's.
"""

from __future__ import annotations

from dataclasses import replace
from datetime import datetime
from typing import Iterable, Mapping, Optional, TypeVar

from ..model import DeviceSnapshot, HostSnapshot
from ..observed import DeviceIdentity

V = TypeVar("V")


def identity_of(device: DeviceSnapshot, previous: Optional[DeviceIdentity] = None
                ) -> Optional[DeviceIdentity]:
    """The identity of a present device (None without a readable PCI address). The rename
    record of ``previous`` carries over while the device stays at the same function."""
    if not device.pci_address:
        return None
    guid = device.node_guid or ""
    if (previous is not None and previous.pci_address == device.pci_address
            and (not guid or previous.node_guid in ("", guid))):
        guid = guid or previous.node_guid
        if previous.node_guid == guid:
            return previous  # the common case: nothing changed, no new object
        return DeviceIdentity(device.pci_address, guid, previous.renamed_from,
                              previous.renamed_at)
    return DeviceIdentity(device.pci_address, guid)


def alias(name: str, pci_address: str) -> str:
    """The name a gone device keeps when another device took its name: ``mlx5_3@0000-47-00.0``."""
    return f"{name}@{pci_address.replace(':', '-')}"


def detect_renames(identities: Mapping[str, DeviceIdentity],
                   devices: Iterable[DeviceSnapshot],
                   known: Iterable[str] = ()) -> dict[str, str]:
    """Old name -> new name of every known device present under another name, plus the
    alias of every gone device whose name another device now has (module doc).

    ``known`` are the names the state holds records of; a rename onto a known name whose
    identity is not recorded (a state file written before identities were) is not made: its
    records would be mixed with the renamed device's.
    """
    present = {d.name: d for d in devices}
    before: dict[str, list[str]] = {}
    for name, identity in identities.items():
        if identity.pci_address:
            before.setdefault(identity.pci_address, []).append(name)
    now: dict[str, list[DeviceSnapshot]] = {}
    for device in present.values():
        if device.pci_address:
            now.setdefault(device.pci_address, []).append(device)
    unidentified = set(known) - set(identities)
    renames: dict[str, str] = {}
    for pci, names in before.items():
        here = now.get(pci, ())
        if len(here) != 1:
            continue
        old = _renamed_from(names, here[0], identities, present, unidentified)
        if old is not None:
            renames[old] = here[0].name
    renames.update(_aliases(identities, renames, present))
    return renames


def renames_of(identities: Mapping[str, DeviceIdentity], snapshot: HostSnapshot,
               known: Iterable[str] = ()) -> dict[str, str]:
    """:func:`detect_renames` of the snapshot's devices, asked every poll.

    Its answer depends on the devices' names, PCI addresses and GUIDs alone, which a VF
    keeps while the reader gives it as the same snapshot: so while the VFs are last poll's
    (:class:`~nichealthd.core.model.DeviceIndex`; none, on most hosts) and the other devices,
    the identities and the known names read as last poll's, the answer is last poll's (a
    comparison of tuples: a tenth of working it out again on 34 devices)."""
    parts = snapshot.parts
    key = (tuple(identities.items()), tuple(known),
           tuple((d.name, d.pci_address, d.node_guid) for d in parts.judged))
    last = _LAST_RENAMES[0] if _LAST_RENAMES else None
    if last is not None and last[0] is parts.vfs and last[1] == key:
        return dict(last[2])
    renames = detect_renames(identities, snapshot.devices, known)
    _LAST_RENAMES[:] = [(parts.vfs, key, dict(renames))]
    return renames


# The last renames_of: the VFs, the rest of what it depends on, the answer.
_LAST_RENAMES: list[tuple[tuple[DeviceSnapshot, ...], object, dict[str, str]]] = []


def _renamed_from(names: list[str], device: DeviceSnapshot,
                  identities: Mapping[str, DeviceIdentity], present: Mapping[str, DeviceSnapshot],
                  unidentified: set[str]) -> Optional[str]:
    """The recorded name that ``device``, now alone at the address that ``names`` were
    recorded at, was renamed from; None when it was not renamed (or cannot be told)."""
    guid = device.node_guid or ""
    if len(names) == 2 and device.name in names and guid:
        # The new name was recorded beside the old one (one poll saw both listed, the
        # old one half gone): the absent one is the same device if the GUIDs say so.
        old = names[0] if names[1] == device.name else names[1]
        return old if old not in present and identities[old].node_guid == guid else None
    if len(names) != 1:
        return None
    old = names[0]
    if device.name == old or device.name in unidentified:
        return None
    then = identities[old].node_guid
    if then and guid and then != guid:
        return None  # another card at that address: not the same device
    return old


def _aliases(identities: Mapping[str, DeviceIdentity], renames: Mapping[str, str],
             present: Mapping[str, DeviceSnapshot]) -> dict[str, str]:
    """``<name>@<address>`` for every gone device (not renamed) whose name is taken: by a
    renamed device, or by another device with a PCI address."""
    targets = set(renames.values())
    aliases: dict[str, str] = {}
    for name, identity in identities.items():
        if name in renames:
            continue
        holder = present.get(name)
        if holder is not None and holder.pci_address == identity.pci_address:
            continue  # still there, under its name
        taken = name in targets or bool(holder is not None and holder.pci_address)
        if taken and identity.pci_address:
            aliases[name] = alias(name, identity.pci_address)
    return aliases


def renamed(name: str, renames: Mapping[str, str]) -> str:
    """``name`` after the renames."""
    return renames.get(name, name)


def renamed_keys(table: Mapping[str, V], renames: Mapping[str, str]) -> dict[str, V]:
    """A table keyed by device name, under the new names. A renamed device's record wins
    over one already under its new name (see :func:`detect_renames`: its history is the
    device's, the other was made when the new name was first seen)."""
    out = {k: v for k, v in table.items() if k not in renames}
    out.update((renames[k], v) for k, v in table.items() if k in renames)
    return out


def renamed_identities(identities: Mapping[str, DeviceIdentity], renames: Mapping[str, str],
                       now: datetime) -> dict[str, DeviceIdentity]:
    """The identities under the new names, each renamed one recording its old name and when
    (an ``<old>@<address>`` alias is not a rename of the device itself)."""
    out = renamed_keys(identities, renames)
    for old, new in renames.items():
        identity = identities.get(old)
        if identity is not None and not new.startswith(f"{old}@"):
            out[new] = replace(identity, renamed_from=old, renamed_at=now)
    return out


def renamed_names(names: Iterable[str], renames: Mapping[str, str]) -> tuple[str, ...]:
    """Device names under the new names, sorted (a driver event's ``devices``)."""
    return tuple(sorted(renamed(n, renames) for n in names))


def recorded_identities(devices: Iterable[DeviceSnapshot],
                        previous: Mapping[str, DeviceIdentity], known: Iterable[str]
                        ) -> dict[str, DeviceIdentity]:
    """The hardware identity of each known device: present ones as read now, gone
    ones as last recorded (so that their return under another name is recognised)."""
    identities = {name: previous[name] for name in known if name in previous}
    for device in devices:
        identity = identity_of(device, previous.get(device.name))
        if identity is not None:
            identities[device.name] = identity
    return identities


def renamed_port_key(key: str, renames: Mapping[str, str]) -> str:
    """A port key ``<device>_<port>`` under the new device name."""
    device, sep, number = key.rpartition("_")
    return f"{renames[device]}_{number}" if sep and device in renames else key


def renamed_counter_key(key: str, renames: Mapping[str, str]) -> str:
    """``mlx5_3:1:symbol_error`` -> ``mlx5_20:1:symbol_error`` (link-counter-detection §6.6)."""
    device, sep, rest = key.partition(":")
    new = renames.get(device)
    return f"{new}{sep}{rest}" if new is not None and sep else key


def renamed_counter_table(table: Mapping[str, V], renames: Mapping[str, str]) -> dict[str, V]:
    """A table keyed by ``<device>:<port>:<name>``, under the new names (a renamed
    device's record wins, as in :func:`renamed_keys`)."""
    out = {k: v for k, v in table.items() if k.partition(":")[0] not in renames}
    out.update((renamed_counter_key(k, renames), v) for k, v in table.items()
               if k.partition(":")[0] in renames)
    return out


def rename_notes(renames: Mapping[str, str], identities: Mapping[str, DeviceIdentity],
                 now: datetime) -> list[str]:
    """One log line per rename."""
    notes = []
    for old, new in sorted(renames.items()):
        identity = identities.get(old)
        where = f"PCI function {identity.pci_address}" if identity else "its PCI function"
        if identity and identity.node_guid:
            where += f", node GUID {identity.node_guid}"
        if new.startswith(f"{old}@"):
            notes.append(f"{old} is gone and another device now has its name: its records "
                         f"are kept as {new} ({where})")
        else:
            notes.append(f"{old} is now {new} (same {where}): the same device, its state "
                         f"carries over")
    return notes
