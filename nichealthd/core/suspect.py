"""The suspect part of an unhealthy condition: which part a technician should swap first.

One rule table, pure: (the condition's ``errorCode``, the facts of its port) -> a
:class:`Suspect`, the part (``nic``, ``module``, ``cable-or-far-end``, ``link``, ``fabric``
or ``unknown``), the evidence that decided it and the document the rule rests on. The
verdict (REPLACE_VM, CONTACT_SUPPORT, NONE) is never changed: the suspect is added
information, set on each unhealthy event (metadata ``nichealthd.suspect``, the message's
``suspect:`` suffix) and on each unhealthy port's record.

What the facts can tell apart (the optics family's module readings, the port's state):

- the local module's own monitors speak for the local module only: its temperature and
  supply voltage, and its Tx bias and Tx power (the laser it drives) against the limits it
  publishes, and its own alarm flags (SFF-8636 bytes 6-14, CMIS page 11h);
- its Rx power and Rx loss of signal measure what the far end sent through the cable: low
  light with a healthy local Tx is the far end's transmitter or the cable between, never the
  local module's fault;
- a port in INIT or ARMED with the physical link up is trained and waits for the subnet
  manager to configure it (IBTA, PortState): the fabric's part;
- errors counted on a link whose local diagnostics are all healthy are the link's (either
  end or the cable); with no diagnostics to rule the local module out, they are ``unknown``:
  the table never guesses.
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from typing import Any, Callable, Mapping, Optional, Sequence

from ..sources.optics_facts import (
    COPPER,
    HIGH_ALARM,
    LOW_ALARM,
    LOW_WARNING,
    MODULE_MONITORS,
    OK,
    RANK,
    RX_POWER,
    TX_BIAS,
    TX_POWER,
    ModuleDiagnostics,
    PortOptics,
)
from .checks import supplying
from .checks.optics import TITLES, level, measured, shown
from .events import ENTITY_NIC, ENTITY_PORT, SUSPECT_EVIDENCE_KEY, SUSPECT_KEY, HealthEvent
from .model import HostSnapshot

NIC, MODULE, CABLE_OR_FAR_END, LINK, FABRIC, UNKNOWN = (
    "nic", "module", "cable-or-far-end", "link", "fabric", "unknown")
PARTS = (NIC, MODULE, CABLE_OR_FAR_END, LINK, FABRIC, UNKNOWN)

# The documents the rules rest on, named in each verdict.
IBTA = "InfiniBand Architecture Specification Vol. 1, PortInfo and PortCounters"
SFF8636 = "SFF-8636 (QSFP) and CMIS (QSFP-DD/OSFP) module monitors and flags"
IEEE8023 = "IEEE 802.3 clause 91 (RS-FEC) and PCS error counting"
NVIDIA = "NVIDIA ConnectX adapter documentation (mlx5 health, PCIe, firmware)"


@dataclass(frozen=True)
class Suspect:
    """The part to look at first, what decided it, and the rule's source."""

    part: str
    evidence: str
    source: str = ""


@dataclass(frozen=True)
class PortFacts:
    """What the table reads of the port a condition is about (None: not known)."""

    state: Optional[str] = None
    phys_state: Optional[str] = None
    optics: Optional[PortOptics] = None


@dataclass(frozen=True)
class ModuleView:
    """The local module as the table sees it: a fault of its own (what), whether its
    transmitter is healthy (None: not known), whether its receiver sees the far end's
    light (what is wrong with it, "" when nothing), and why nothing is known."""

    fault: str = ""
    tx_healthy: Optional[bool] = None
    rx_trouble: str = ""
    unknown: str = ""


def _where(lanes: Sequence[int]) -> str:
    return f" on lane {', '.join(str(i + 1) for i in lanes)}" if lanes else ""


def _beyond(monitor: str, value: float, found: str, lanes: Sequence[int] = ()) -> str:
    side = "above" if found.startswith("high") else "below"
    return f"{TITLES[monitor]} {shown(monitor, value)}{_where(lanes)} {side} its {found}"


def _lane_levels(diag: ModuleDiagnostics, monitor: str, served: set[int]
                 ) -> list[tuple[int, float, str]]:
    """Each judged lane of a lane monitor with its level against the module's limits, or
    the module's own flag where it publishes no limits."""
    limits = diag.thresholds.get(monitor)
    flags = diag.flags.get(monitor, ())
    out = []
    for lane, value in enumerate(measured(diag, monitor, served)):
        if value is None:
            continue
        found = level(value, limits) if limits is not None else OK
        if found == OK and lane < len(flags) and flags[lane] in (LOW_ALARM, HIGH_ALARM):
            found = flags[lane]
        out.append((lane, value, found))
    return out


def module_view(optics: Optional[PortOptics]) -> ModuleView:
    """The local module's faults, transmitter and receiver (SFF-8636 / CMIS), from the
    lanes this port is served by; the alarms decide a fault, a warning is no fault."""
    if optics is None:
        return ModuleView(unknown="no module diagnostics read")
    diag = optics.diagnostics
    if diag is None:
        return ModuleView(unknown=f"no module diagnostics: {optics.reason or 'not read'}")
    served = set(optics.lanes_served())
    faults = []
    for monitor in MODULE_MONITORS:
        value = diag.module_value(monitor)
        limits = diag.thresholds.get(monitor)
        flagged = diag.flags.get(monitor, ())
        if value is None:
            continue
        found = level(value, limits) if limits is not None else OK
        if found == OK and flagged and flagged[0] in (LOW_ALARM, HIGH_ALARM):
            found = flagged[0]
        if found in (LOW_ALARM, HIGH_ALARM):
            faults.append(_beyond(monitor, value, found))
    tx_seen = False
    tx_bad = False
    for monitor in (TX_BIAS, TX_POWER):
        levels = _lane_levels(diag, monitor, served)
        tx_seen = tx_seen or bool(levels)
        alarms = [(lane, value, found) for lane, value, found in levels
                  if found in (LOW_ALARM, HIGH_ALARM)]
        if alarms:
            found = alarms[0][2]
            faults.append(_beyond(monitor, alarms[0][1], found,
                                  [lane for lane, _, f in alarms if f == found]))
        tx_bad = tx_bad or any(found != OK for _, _, found in levels)
    rx_trouble = ""
    los = [lane for lane in sorted(served) if lane < len(diag.rx_los) and diag.rx_los[lane]]
    dark = [(lane, value, found) for lane, value, found in _lane_levels(diag, RX_POWER, served)
            if found in (LOW_ALARM, LOW_WARNING)]
    if los:
        rx_trouble = f"Rx loss of signal{_where(los)}"
    elif dark:
        rx_trouble = _beyond(RX_POWER, dark[0][1], dark[0][2],
                             [lane for lane, _, f in dark if f == dark[0][2]])
    if diag.media in COPPER:  # no laser to judge: the cable is the module
        tx: Optional[bool] = not faults
    else:
        tx = (not tx_bad) if tx_seen else None
    return ModuleView(" and ".join(faults), tx, rx_trouble)


# --------------------------------------------------------------------------- the rules
Rule = Callable[[str, PortFacts], Suspect]


def _nic(code: str, facts: PortFacts) -> Suspect:
    """The adapter or its PCIe link: AER, the PCIe link's width and speed, a lost NIC, its
    character devices, firmware, its temperature sensor, the driver's fault messages."""
    return Suspect(NIC, f"{code} is the adapter's own condition", NVIDIA)


def _module_monitor(code: str, facts: PortFacts) -> Suspect:
    """The local module beyond its own limits (its temperature, voltage, Tx bias, Tx
    power, at a warning or an alarm), or the driver saying the module overheated or left
    its cage: the local module's own condition."""
    return Suspect(MODULE, _monitor_detail(code, facts.optics) or f"{code} on the local "
                   "module", SFF8636)


def _monitor_detail(code: str, optics: Optional[PortOptics]) -> str:
    """What the module says of the monitor an ``optics_<monitor>`` condition is about."""
    if optics is None or optics.diagnostics is None:
        return ""
    diag = optics.diagnostics
    monitor = code[len("optics_"):] if code.startswith("optics_") else ""
    if monitor not in TITLES:
        return ""
    if monitor in MODULE_MONITORS:
        value, limits = diag.module_value(monitor), diag.thresholds.get(monitor)
        if value is None or limits is None or level(value, limits) == OK:
            return ""
        return _beyond(monitor, value, level(value, limits))
    levels = [x for x in _lane_levels(diag, monitor, set(optics.lanes_served()))
              if x[2] != OK]
    if not levels:
        return ""
    worst = max(levels, key=lambda x: RANK[x[2]])
    return _beyond(monitor, worst[1], worst[2], [x[0] for x in levels if x[2] == worst[2]])


def _rx_light(code: str, facts: PortFacts) -> Suspect:
    """Low Rx power or a fall from its baseline: the far end's laser or the cable, when the
    local transmitter is healthy; the local module when it has a fault of its own."""
    view = module_view(facts.optics)
    if view.fault:
        return Suspect(MODULE, view.fault, SFF8636)
    if view.tx_healthy:
        what = view.rx_trouble or "Rx power fell below its baseline"
        return Suspect(CABLE_OR_FAR_END, f"{what}, local Tx healthy", SFF8636)
    return Suspect(UNKNOWN, view.unknown or "local Tx not known healthy", SFF8636)


def _physical(code: str, facts: PortFacts) -> Suspect:
    """Errors of the physical link (symbol errors, recoveries, BER, flaps, link down): the
    local module if it has a fault, the far end or cable if the light it receives is low
    while its own Tx is healthy, the link (either end or the cable) when every local
    diagnostic is healthy; unknown without diagnostics."""
    view = module_view(facts.optics)
    if view.fault:
        return Suspect(MODULE, view.fault, SFF8636)
    if view.rx_trouble and view.tx_healthy:
        return Suspect(CABLE_OR_FAR_END, f"{view.rx_trouble}, local Tx healthy", SFF8636)
    if view.tx_healthy and not view.rx_trouble:
        return Suspect(LINK, f"{code} with every local module diagnostic healthy",
                       IEEE8023)
    return Suspect(UNKNOWN, view.unknown or f"{code}: local Tx not known healthy", IEEE8023)


def _remote(code: str, facts: PortFacts) -> Suspect:
    """PortRcvRemotePhysicalErrors counts packets the far side already marked bad (EBP):
    the fault is beyond this port's receiver."""
    return Suspect(CABLE_OR_FAR_END, "packets marked bad by the far end", IBTA)


def _fabric(code: str, facts: PortFacts) -> Suspect:
    """The subnet manager's side: a fabric event (SM change, LID or port reconfiguration)."""
    return Suspect(FABRIC, f"{code} reported by the fabric", IBTA)


def _state_name(text: Optional[str]) -> str:
    return (text or "").partition(":")[2].strip() or (text or "").strip()


def _port_state(code: str, facts: PortFacts) -> Suspect:
    """A port not ACTIVE. INIT or ARMED with the physical link up: trained, waiting for the
    subnet manager. Disabled: switched off, no part at fault. Down or training (Polling,
    LinkErrorRecovery...): the local module if it has a fault, else the cable or far end
    when the local module is healthy (nothing local keeps the link down)."""
    state, phys = _state_name(facts.state).upper(), _state_name(facts.phys_state)
    if state in ("INIT", "ARMED") and phys == "LinkUp":
        return Suspect(FABRIC, f"port {state} with LinkUp: waiting for the subnet manager",
                       IBTA)
    if phys == "Disabled":
        return Suspect(UNKNOWN, "port disabled", IBTA)
    view = module_view(facts.optics)
    if view.fault:
        return Suspect(MODULE, view.fault, SFF8636)
    if view.tx_healthy:
        what = view.rx_trouble or f"port {state or 'down'} with a healthy local module"
        return Suspect(CABLE_OR_FAR_END, f"{what}, local Tx healthy", SFF8636)
    return Suspect(UNKNOWN, view.unknown or "local Tx not known healthy", SFF8636)


def _unknown(code: str, facts: PortFacts) -> Suspect:
    return Suspect(UNKNOWN, f"{code}: the facts do not decide", "")


# errorCode -> rule. A code not here (a card short of ports, a driver event, congestion and
# transport counters, EFA counters) is ``unknown``.
RULES: dict[str, Rule] = {
    **dict.fromkeys((
        "device_missing", "port_missing", "nic_unregistered", "pcie_link", "temperature",
        "firmware_drift", "uverbs", "umad", "issm", "cmd_exec_timeout", "health_poll_failed",
        "unrecoverable_err", "netdev_watchdog", "mlx5_tx_timeout_detected",
        "mlx5_rx_timeout_detected", "mlx5_napi_soft_lockup", "pci_power_insufficient",
        "access_reg_failed"), _nic),
    **dict.fromkeys(("optics_temperature", "optics_voltage", "optics_tx_bias",
                     "optics_tx_power", "port_module_high_temp", "module_unplugged"),
                    _module_monitor),
    **dict.fromkeys(("optics_rx_power", "optics_rx_power_drop"), _rx_light),
    **dict.fromkeys((
        "symbol_error", "symbol_error_fatal", "link_error_recovery",
        "local_link_integrity_errors", "link_downed", "port_rcv_errors", "link_ber",
        "link_fec_uncorrectable", "link_flap", "link_rate", "carrier_changes"), _physical),
    "port_rcv_remote_physical_errors": _remote,
    "fabric_event": _fabric,
    **dict.fromkeys(("port_state", "netdev_down"), _port_state),
}
PREFIXES: tuple[tuple[str, Rule], ...] = (("aer_", _nic),)
REPEATED = "_repeated"  # a kernel log rule repeated (core/checks/kernel_log.py)


def decide(code: str, facts: PortFacts) -> Suspect:
    """The suspect of one condition (its ``errorCode``) on a port with these facts."""
    base = code[:-len(REPEATED)] if code.endswith(REPEATED) else code
    rule = RULES.get(base)  # a kernel log rule repeated is that rule's part
    if rule is None:
        rule = next((r for prefix, r in PREFIXES if code.startswith(prefix)), _unknown)
    return rule(code, facts)


# A local fault explains what it causes downstream (a failing module raises symbol errors,
# a lost adapter takes its ports down): of several conditions on one port, the most local
# decided part is the suspect.
_PRECEDENCE = {NIC: 0, MODULE: 1, CABLE_OR_FAR_END: 2, LINK: 3, FABRIC: 4, UNKNOWN: 5}


def decide_all(codes: Sequence[str], facts: PortFacts) -> Optional[Suspect]:
    """The suspect of a port with these open conditions (None: none open)."""
    found = [decide(code, facts) for code in codes]
    return min(found, key=lambda s: _PRECEDENCE[s.part]) if found else None


def modules_of(pictures: Mapping[str, Any]) -> dict[str, PortOptics]:
    """The local modules as last read, by port key, of the families that read them
    (:meth:`CheckFamily.module_facts`), from the pictures of a poll."""
    return {key: fact for family in supplying("module_facts")
            for key, fact in (family.module_facts(pictures.get(family.id)) or {}).items()}


def port_facts(snapshot: HostSnapshot, modules: Mapping[str, PortOptics], device: str,
               port: int) -> PortFacts:
    """The facts the table reads of one port: its state in the poll, its module as last
    read."""
    found = next((p for d in snapshot.devices if d.name == device for p in d.ports
                  if p.port == port), None)
    return PortFacts(found.state if found else None, found.phys_state if found else None,
                     modules.get(f"{device}_{port}"))


def annotate(events: Sequence[HealthEvent], snapshot: HostSnapshot,
             modules: Mapping[str, PortOptics]) -> tuple[HealthEvent, ...]:
    """Each unhealthy event with its suspect: the metadata keys ``nichealthd.suspect`` (the
    part) and ``nichealthd.suspect_evidence`` (what decided it), which the committed
    message ends with (:meth:`HealthEvent.stamped`); a healthy event, its verdict and
    everything else unchanged."""
    out = []
    for event in events:
        if event.is_healthy:
            out.append(event)
            continue
        entities = dict(event.entities)
        number = entities.get(ENTITY_PORT, "")
        facts = port_facts(snapshot, modules, entities.get(ENTITY_NIC, ""), int(number)) \
            if number.isdigit() else PortFacts()
        suspect = decide(event.error_code[0] if event.error_code else "", facts)
        metadata = dict(event.metadata)
        metadata[SUSPECT_KEY] = suspect.part
        metadata[SUSPECT_EVIDENCE_KEY] = suspect.evidence
        out.append(replace(event, metadata=metadata))
    return tuple(out)
