"""RoCE ports whose netdev MTU is below ``roceMtuMinimum``: a check family in one module.

The worked example of ARCHITECTURE.md, "Adding a check family": copied into
``nichealthd/core/checks/`` it is found by the registry (it defines ``FAMILY``) with its
setting (the config file accepts ``roceMtuMinimum``), its state section, its events, its
device field (``roce_mtu``, declared with its type; its line in the varlink interface is the
one edit outside the new modules) and its metric series (``nichealthd_roce_mtu_bytes``); its
fact, its key and its type come from the ``netdev_mtu`` source (``netdev_mtu.py``). A RoCE
port below the minimum is a non-fatal event under the Ethernet degradation check (a mis-set
MTU halves RDMA throughput, it breaks no hardware), recovered when the MTU is raised; 0
switches the family off.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Iterable, Mapping, Optional

from nichealthd.sources.netdev_mtu import NETDEV_MTU, Mtus

from nichealthd.core.codec import Section, stored
from nichealthd.core.config import ETH_DEGRADATION_CHECK, Config
from nichealthd.core.events import HealthEvent, make_event, port_entities
from nichealthd.core.family import READS_PORTS, CheckFamily, Condition, Cycle, Series, Verdict
from nichealthd.core.jsontypes import Json
from nichealthd.core.model import DeviceSnapshot, PortSnapshot
from nichealthd.core.settings import Integer, Settings, setting
from nichealthd.core.state import DEGRADED

CODE = "roce_mtu"


@dataclass(frozen=True)
class RoceMtuSettings(Settings):
    """nichealthd.toml(5): roceMtuMinimum."""

    roce_mtu_minimum: int = setting(
        "roceMtuMinimum", 0, Integer(0, 65535),
        "The smallest netdev MTU a RoCE port may have; 0 switches the check off")


@dataclass
class RoceMtuSection(Section):
    """The RoCE ports reported below the minimum: port key -> the MTU reported. Declared:
    the one codec (core/codec.py) writes it as ``roce_mtu_low`` and reads it strictly."""

    low: dict[str, int] = field(default_factory=dict, metadata=stored(key="roce_mtu_low",
                                                                      high=65536))


# Its picture (Mtus): each port's netdev and MTU as last read (what ``show devices`` shows).
class RoceMtu(CheckFamily[RoceMtuSection, Mtus, None]):
    """Each monitored RoCE port's netdev MTU against the minimum."""

    id = "roce_mtu"
    order = 60
    keys = RoceMtuSection.keys()
    section_type = RoceMtuSection
    reads = frozenset({READS_PORTS, NETDEV_MTU})
    cadence = 60.0
    settings = RoceMtuSettings
    # Its key of the device records, with its varlink type: the same line goes in type
    # Device of io.nichealthd.Monitor.varlink (tests/varlink/interface_check.py holds the two
    # together; a key given and not declared fails the tests that read it).
    device_field_types = {"roce_mtu": "?[]string"}

    def enabled(self, config: Config) -> bool:
        return config.settings(RoceMtuSettings).roce_mtu_minimum > 0

    def judges(self, device: DeviceSnapshot, port: PortSnapshot) -> bool:
        """The RoCE ports: while it cannot judge, only they are unknown."""
        return port.link_layer == "Ethernet"

    def evaluate(self, previous: RoceMtuSection, cycle: Cycle, volatile: None
                 ) -> Verdict[RoceMtuSection, Mtus, None]:
        mtus = cycle.snapshot.fact(NETDEV_MTU) or {}
        minimum = cycle.config.settings(RoceMtuSettings).roce_mtu_minimum
        low = dict(previous.low)
        events: list[tuple[str, HealthEvent]] = []
        for device in cycle.monitored:
            for port in device.ports:
                netdev, mtu = mtus.get(port.key, ("", None))
                if port.link_layer != "Ethernet" or mtu is None:
                    continue  # not RoCE, or not read: not judged, what was said is held
                if mtu < minimum and port.key not in low:
                    low[port.key] = mtu
                    events.append((device.name, self._event(
                        device.name, port.port, cycle, healthy=False,
                        message=f"RoCE port {device.name} port {port.port}: netdev {netdev} "
                                f"MTU {mtu} is below roceMtuMinimum ({minimum})")))
                elif mtu >= minimum and port.key in low:
                    del low[port.key]
                    events.append((device.name, self._event(
                        device.name, port.port, cycle, healthy=True,
                        message=f"RoCE port {device.name} port {port.port}: netdev {netdev} "
                                f"MTU {mtu} is back at roceMtuMinimum ({minimum}) or above")))
        return Verdict(RoceMtuSection(low), tuple(events), mtus)

    @staticmethod
    def _event(device: str, port: int, cycle: Cycle, *, healthy: bool, message: str
               ) -> HealthEvent:
        return make_event(ETH_DEGRADATION_CHECK, fatal=False, healthy=healthy,
                          error_code=CODE, entities=port_entities(device, port),
                          message=message, at=cycle.now)

    def conditions(self, section: RoceMtuSection, picture: Optional[Mtus]) -> Iterable[Condition]:
        for key, mtu in sorted(section.low.items()):
            device, _, port = key.rpartition("_")
            yield Condition(DEGRADED, f"netdev MTU {mtu}", (device, int(port)))

    def device_fields(self, section: RoceMtuSection, picture: Optional[Mtus], device: str,
                      present: bool) -> Mapping[str, Json]:
        mtus: Mtus = picture or {}
        shown: list[Json] = [f"{netdev}={mtu}" for key, (netdev, mtu) in sorted(mtus.items())
                 if key.rpartition("_")[0] == device and mtu is not None]
        return {"roce_mtu": shown} if shown else {}

    def series(self, section: RoceMtuSection, picture: Optional[Mtus]) -> Iterable[Series]:
        mtus: Mtus = picture or {}
        yield Series("roce_mtu_bytes", "MTU of each monitored port's netdev", "gauge",
                     ("device", "port", "netdev"),
                     tuple(((key.rpartition("_")[0], key.rpartition("_")[2], netdev),
                            float(mtu)) for key, (netdev, mtu) in sorted(mtus.items())
                           if mtu is not None))


FAMILY = ROCE_MTU = RoceMtu()
