"""What the D-Bus API signals after a poll: the properties that changed and the ports whose
health changed (nichealthd(8): "a signal when a port's health or a counter's breach state
changes").

Pure bookkeeping between two polls, no bus: :class:`Signals` keeps the last values sent and
says what to send now. A port's health in ``PortHealthChanged`` is the health model's, read
from the poll's :class:`~nichealthd.core.picture.PollPicture` exactly as ``ListPorts`` reads
it, never inferred from an event's message.
"""

from __future__ import annotations

from typing import Dict, Iterable, List, Mapping, NamedTuple, Optional, Tuple

from ..core.events import CODE_PORT_MISSING, CODE_PORT_STATE, ENTITY_NIC, ENTITY_PORT
from ..core.family import PortId
from ..core.health import PortHealth
from ..core.jsontypes import JsonRecord
from ..core.picture import PollPicture
from ..storage.store import JournalEntry
from .dbus_interface import PROPERTIES, UNSIGNALLED_PROPERTIES, PropValue, prop_value

_PORT_EVENT_CODES = {CODE_PORT_STATE, CODE_PORT_MISSING}


class PortHealthChanged(NamedTuple):
    """The body of one ``PortHealthChanged`` signal (``susbs``)."""

    device: str
    port: int
    health: str
    fatal: bool
    message: str


def property_values(status: JsonRecord) -> Dict[str, PropValue]:
    """Every property's value from the daemon status (:data:`~.dbus_interface.PROPERTIES`)."""
    return {name: prop_value(sig, status.get(key)) for name, sig, key in PROPERTIES}


def port_event_messages(committed: Iterable[JournalEntry]) -> Dict[PortId, str]:
    """The message of the last port-state or port-presence event of each port."""
    messages: Dict[PortId, str] = {}
    for entry in committed:
        event = entry.event
        if not _PORT_EVENT_CODES.intersection(event.error_code):
            continue
        entities = dict(event.entities)
        if ENTITY_NIC in entities and ENTITY_PORT in entities:
            try:
                messages[(entities[ENTITY_NIC], int(entities[ENTITY_PORT]))] = event.message
            except ValueError:
                continue
    return messages


class Signals:
    """The property values and port health last signalled, and what changed since."""

    def __init__(self, status: JsonRecord) -> None:
        self.props = property_values(status)
        self._ports: Mapping[PortId, PortHealth] = {}

    def properties_changed(self, status: JsonRecord) -> Dict[str, PropValue]:
        """The signalled properties whose value changed (one PropertiesChanged with only
        those; LastPoll and PollCount are read with Get)."""
        values = property_values(status)
        changed = {k: v for k, v in values.items()
                   if k not in UNSIGNALLED_PROPERTIES and self.props.get(k) != v}
        self.props = values
        return changed

    def ports_changed(self, picture: PollPicture, committed: Iterable[JournalEntry]
                      ) -> List[PortHealthChanged]:
        """A signal for each port that had a port-state or presence event, and for each
        whose health or fatality changed (not the wording of its reasons, such as a "not
        seen (N polls)" count); nothing but the events on the first poll."""
        current = picture.health.ports
        messages = port_event_messages(committed)
        previous, self._ports = self._ports, current
        changed = set(messages)
        if previous and previous is not current:  # the same: the health of the last poll
            changed.update(k for k, p in current.items() if _verdict(previous.get(k)) != (
                p.health, p.fatal))
        return [_signal(picture, key, messages.get(key)) for key in sorted(changed)]


def _verdict(judged: Optional[PortHealth]) -> Tuple[str, bool]:
    return (judged.health, judged.fatal) if judged is not None else ("", False)


def _signal(picture: PollPicture, key: PortId, message: Optional[str]) -> PortHealthChanged:
    judged = picture.health_of(key)  # the one health model, as ListPorts says it
    if message is None:
        record = picture.port_record(key) or {}
        message = (f"{key[0]} port {key[1]}: {judged.health} "
                   f"({record.get('state', '?')}, {record.get('phys_state', '?')})")
        if judged.reasons:
            message += f": {', '.join(judged.reasons)}"
    return PortHealthChanged(key[0], key[1], judged.health, judged.fatal, message)
