"""The keys of the PCI source's facts (:mod:`nichealthd.sources.pcie`): links, AER, sensors.

The fact module of ``sources/pcie.py`` (ARCHITECTURE.md, the source seam): the source declares
these keys as its facts, the PCI families put them in ``reads`` and read their values typed
with :meth:`~nichealthd.core.model.HostSnapshot.fact`. The value types live in
:mod:`.pci_facts`, beside the parsers of the kernel's formats, because the snapshot's own
``pcie`` / ``aer`` / ``hwmon`` fields use them too (what a table test builds; ``fact`` falls
back to them): that module is below the model, so it cannot hold a key, which is a
:class:`~nichealthd.core.model.Fact` of the model.
"""

from __future__ import annotations

from typing import Mapping

from ..core.model import Fact
from .pci_facts import AerTable, PcieHop, Sensor

# Each by the device name of a monitored physical function.
PCIE: Fact[Mapping[str, tuple[PcieHop, ...]]] = Fact("pcie")  # every hop up to its root port
AER: Fact[Mapping[str, tuple[AerTable, ...]]] = Fact("aer")  # its, its port's, its root's
HWMON: Fact[Mapping[str, tuple[Sensor, ...]]] = Fact("hwmon")  # its temperature sensors
