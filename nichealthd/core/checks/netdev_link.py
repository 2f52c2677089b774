"""The netdev-link family: a port ACTIVE / LinkUp whose netdev is down.

The RDMA port can be up while its netdev is not (a carrier the kernel did not see, a bond
that took the slave down, an IPoIB interface left down): RDMA traffic may pass, IP over that
port (RoCE's GIDs, NCCL's bootstrap, storage) does not. An ACTIVE / LinkUp port whose
netdev's ``operstate`` is ``down`` or ``lowerlayerdown`` at 2 consecutive adapter reads is a
non-fatal degradation (the layer's degradation check, errorCode ``netdev_down``), unless the
netdev is administratively down (IFF_UP clear in ``flags``: somebody ran ``ip link set ...
down``; logged, not reported). It recovers with a healthy event when the netdev is up again,
when it is set administratively down, or when the port leaves ACTIVE (its own state is then
the state check's business).
"""

from __future__ import annotations

from datetime import datetime
from typing import Iterable, Mapping, NamedTuple, Optional

from ...sources.adapter import ADAPTER
from ...sources.adapter_facts import NetdevLink
from ..codec import Layout
from ..config import ETH_DEGRADATION_CHECK, IB_DEGRADATION_CHECK
from ..events import HealthEvent, make_event, port_entities
from ..family import READS_PORTS, CheckFamily, Condition, Cycle, Verdict
from ..model import DeviceSnapshot, PortSnapshot
from ..state import DEGRADED
from .adapter_section import LatchSection, held

CODE_NETDEV_DOWN = "netdev_down"
DOWN_READS = 2
DEGRADATION_OF = {"InfiniBand": IB_DEGRADATION_CHECK, "Ethernet": ETH_DEGRADATION_CHECK}


Netdevs = Mapping[str, NetdevLink]  # its picture: the netdevs' links as last read

class NetdevLinkSection(LatchSection):
    LAYOUT = Layout(prefix="netdev_link_")


def key_of(device: str, port: int) -> str:
    return f"{device}:{port}:netdev"


class _Watched(NamedTuple):
    """One port's netdev as judged this poll: whose, the link read, and the layer's
    degradation check its events are under."""

    device: str
    port: PortSnapshot
    link: NetdevLink
    check: str

    @property
    def key(self) -> str:
        return key_of(self.device, self.port.port)


def _active(port: PortSnapshot) -> bool:
    return bool(port.state and port.state.endswith("ACTIVE")
                and port.phys_state and port.phys_state.endswith("LinkUp"))


class NetdevLinkFamily(CheckFamily[NetdevLinkSection, Netdevs, None]):
    """ACTIVE / LinkUp ports whose netdev is down (not administratively)."""

    id = "netdev_link"
    order = 30
    keys = NetdevLinkSection.keys()
    section_type = NetdevLinkSection
    reads = frozenset({READS_PORTS, ADAPTER})

    def evaluate(self, previous: NetdevLinkSection, cycle: Cycle, volatile: None
                 ) -> Verdict[NetdevLinkSection, Netdevs, None]:
        facts = cycle.snapshot.fact(ADAPTER)
        if facts is None:
            return Verdict(previous)
        state = previous.copy()
        events: list[tuple[str, HealthEvent]] = []
        notes: list[str] = []
        hold = held(cycle)
        seen: set[str] = set()
        for device in cycle.monitored:
            for port in device.ports:
                key = key_of(device.name, port.port)
                link = facts.netdevs.get(port.key)
                check = DEGRADATION_OF.get(port.link_layer or "")
                if link is None or check is None or not port.readable:
                    continue  # no netdev, or nothing known this time: hold
                seen.add(key)
                watched = _Watched(device.name, port, link, check)
                if _unexpectedly_down(port, link):
                    event = _down(state, watched, hold, cycle)
                else:
                    event = _not_down(state, previous, watched, cycle, notes)
                if event is not None:
                    events.append((device.name, event))
        for key in [k for k in state.misses if k not in seen]:
            del state.misses[key]
        return Verdict(state, tuple(events), dict(facts.netdevs), notes=tuple(notes))

    def rename(self, section: NetdevLinkSection, renames: Mapping[str, str], now: datetime
               ) -> NetdevLinkSection:
        return section.renamed(renames)

    def judges(self, device: DeviceSnapshot, port: PortSnapshot) -> bool:
        """The InfiniBand and RoCE ports (their netdevs)."""
        return (port.link_layer or "") in DEGRADATION_OF

    def conditions(self, section: NetdevLinkSection,
                   picture: Optional[Netdevs]) -> Iterable[Condition]:
        for key in sorted(section.latched):
            device, number, _ = key.split(":")
            yield Condition(DEGRADED, f"netdev {section.latched[key].detail}",
                            (device, int(number)), alone=f"{device} port {number} netdev down",
                            code=CODE_NETDEV_DOWN)


def _not_down(state: NetdevLinkSection, previous: NetdevLinkSection, watched: _Watched,
              cycle: Cycle, notes: list[str]) -> Optional[HealthEvent]:
    """A netdev not down (or down on purpose, or its port not ACTIVE): its misses start
    again and a latched one recovers; an administratively down one is noted once."""
    device, port, link, check = watched
    key = watched.key
    state.misses.pop(key, None)
    if key in state.latched:
        del state.latched[key]
        if check not in cycle.enabled:
            return None
        return _event(watched, cycle.now, healthy=True, why=_recovered(port, link))
    if (_active(port) and link.down and link.admin_up is False
            and previous.misses.get(key) is None):
        notes.append(f"{device} port {port.port}: netdev {link.netdev} is administratively "
                     f"down (ip link set ... down): not reported")
    return None


def _unexpectedly_down(port: PortSnapshot, link: NetdevLink) -> bool:
    """An ACTIVE port whose netdev is down, and not administratively (``ip link set down``
    is an operator's doing, not a fault)."""
    return _active(port) and link.down and link.admin_up is not False


def _down(state: NetdevLinkSection, watched: _Watched, hold: bool, cycle: Cycle
          ) -> Optional[HealthEvent]:
    """A netdev down under an ACTIVE port: latched with one event after DOWN_READS reads
    (a latched one says nothing more; a held read and a switched-off check count nothing)."""
    key, link = watched.key, watched.link
    if key in state.latched or hold or watched.check not in cycle.enabled:
        return None
    if not state.miss(key, DOWN_READS, cycle.now, f"{link.netdev} {link.operstate}"):
        return None
    return _event(watched, cycle.now, healthy=False, why="")


def _recovered(port: PortSnapshot, link: NetdevLink) -> str:
    if not _active(port):
        return f"the port left ACTIVE ({port.state})"
    if link.admin_up is False:
        return f"netdev {link.netdev} is now administratively down"
    return f"netdev {link.netdev} is {link.operstate} again"


def _event(watched: _Watched, now: datetime, *, healthy: bool, why: str) -> HealthEvent:
    device, port, link = watched.device, watched.port.port, watched.link
    if healthy:
        message = f"{device} port {port}: {why}"
    else:
        message = (f"{device} port {port} is ACTIVE / LinkUp but its netdev {link.netdev} is "
                   f"{link.operstate} (not administratively down): IP traffic over this port "
                   f"fails")
    return make_event(watched.check, fatal=False, healthy=healthy, error_code=CODE_NETDEV_DOWN,
                      entities=port_entities(device, port), at=now, message=message)


FAMILY = NETDEV_LINK = NetdevLinkFamily()
