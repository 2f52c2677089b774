"""The suspect rule table (core/suspect.py): each rule, its evidence, and ``unknown`` where
the facts do not decide.

The modules are the simulator's (sim/optics.py: Tx bias 15 / 2 / 13 / 3 mA, Rx power
+5 / -13 / +2 / -10 dBm) with readings changed, their flags set as a module latches them,
parsed by the real parser: the bytes the daemon reads on a simulated host.
"""

from __future__ import annotations

from dataclasses import replace
from typing import Any, Optional

import pytest

from nichealthd.core.events import (
    SUSPECT_EVIDENCE_KEY,
    SUSPECT_KEY,
    make_event,
    port_entities,
)
from nichealthd.core.suspect import (
    CABLE_OR_FAR_END,
    FABRIC,
    LINK,
    MODULE,
    NIC,
    PARTS,
    RULES,
    UNKNOWN,
    PortFacts,
    annotate,
    decide,
    decide_all,
)
from nichealthd.sim import optics as sim_optics
from nichealthd.sources import module_pages
from nichealthd.sources.optics_facts import PortOptics

from .builders import device, host, port

ACTIVE, DOWN, INIT = "4: ACTIVE", "1: DOWN", "2: INIT"
LINKUP, POLLING, DISABLED = "5: LinkUp", "2: Polling", "3: Disabled"


def module(kind: str = "optical", **readings: float) -> PortOptics:
    """A 4-lane SFF-8636 module with these readings on every lane."""
    values = dict(sim_optics.HEALTHY, **readings)
    pages = sim_optics.sff8636_pages(values, copper=kind == "passive-dac")
    upper = {p: (data[128:] if p == 0 else data) for p, data in pages.items()}
    parsed = module_pages.parse(pages[0][:128], upper)
    assert parsed is not None
    return PortOptics("eth0", parsed)


def facts(state: str = ACTIVE, phys: str = LINKUP, optics: Optional[PortOptics] = None
          ) -> PortFacts:
    return PortFacts(state, phys, optics)


HEALTHY = module()
BIAS_DEAD = module(tx_bias=0.0)
RX_DARK = module(rx_power=-40.0)
RX_LOW = module(rx_power=-11.0)
HOT = module(temperature=80.0)
NO_DIAG = PortOptics("eth0", None, "the kernel does not support the module call")

CASES: list[tuple[str, str, PortFacts, str, str]] = [
    # (case, errorCode, facts, part, a phrase of the evidence)
    ("Tx bias collapse", "optics_tx_bias", facts(optics=BIAS_DEAD), MODULE,
     "Tx bias 0.00 mA on lane 1, 2, 3, 4 below its low alarm"),
    ("hot module", "optics_temperature", facts(optics=HOT), MODULE,
     "temperature 80.0 °C above its high alarm"),
    ("driver: module too hot", "port_module_high_temp", facts(), MODULE, "local module"),
    ("far end dark, local Tx fine", "optics_rx_power", facts(optics=RX_DARK),
     CABLE_OR_FAR_END, "local Tx healthy"),
    ("Rx low, local Tx fine", "optics_rx_power", facts(optics=RX_LOW), CABLE_OR_FAR_END,
     "Rx power -11.00 dBm on lane 1, 2, 3, 4 below its low warning"),
    ("Rx low and a dead laser", "optics_rx_power", facts(optics=module(
        rx_power=-40.0, tx_bias=0.0)), MODULE, "Tx bias"),
    ("Rx low, no diagnostics", "optics_rx_power", facts(optics=NO_DIAG), UNKNOWN,
     "does not support"),
    ("remote physical errors", "port_rcv_remote_physical_errors", facts(),
     CABLE_OR_FAR_END, "marked bad by the far end"),
    ("symbol errors, healthy module", "symbol_error", facts(optics=HEALTHY), LINK,
     "every local module diagnostic healthy"),
    ("BER, healthy module", "link_ber", facts(optics=HEALTHY), LINK, "link_ber"),
    ("symbol errors, dark Rx", "symbol_error", facts(optics=RX_LOW), CABLE_OR_FAR_END,
     "Rx power"),
    ("symbol errors, dead laser", "symbol_error_fatal", facts(optics=BIAS_DEAD), MODULE,
     "Tx bias"),
    ("symbol errors, no module facts (an IB port)", "symbol_error", facts(), UNKNOWN,
     "no module diagnostics"),
    ("link down, healthy module", "link_downed", facts(optics=HEALTHY), LINK, "link_downed"),
    ("DOWN, far end dark", "port_state", facts(DOWN, POLLING, RX_DARK), CABLE_OR_FAR_END,
     "Rx loss of signal on lane 1, 2, 3, 4, local Tx healthy"),
    ("DOWN, healthy local module", "port_state", facts(DOWN, POLLING, HEALTHY),
     CABLE_OR_FAR_END, "healthy local module"),
    ("DOWN, dead laser", "port_state", facts(DOWN, POLLING, BIAS_DEAD), MODULE, "Tx bias"),
    ("DOWN, no module facts", "port_state", facts(DOWN, POLLING), UNKNOWN, "no module"),
    ("DOWN, copper cable", "port_state", facts(DOWN, POLLING, module("passive-dac")),
     CABLE_OR_FAR_END, "healthy local module"),
    ("Disabled", "port_state", facts(DOWN, DISABLED, HEALTHY), UNKNOWN, "disabled"),
    ("INIT, LinkUp: waiting for the SM", "port_state", facts(INIT, LINKUP), FABRIC,
     "subnet manager"),
    ("fabric event", "fabric_event", facts(), FABRIC, "fabric"),
    ("PCIe AER", "aer_fatal", facts(), NIC, "adapter"),
    ("PCIe link", "pcie_link", facts(), NIC, "adapter"),
    ("lost NIC", "nic_unregistered", facts(), NIC, "adapter"),
    ("device missing", "device_missing", facts(), NIC, "adapter"),
    ("kernel: unrecoverable", "unrecoverable_err", facts(), NIC, "adapter"),
    ("kernel: a fault repeated", "netdev_watchdog_repeated", facts(), NIC, "adapter"),
    ("card short of ports", "card_active_ports", facts(optics=HEALTHY), UNKNOWN,
     "do not decide"),
    ("congestion", "port_xmit_discards", facts(optics=HEALTHY), UNKNOWN, "do not decide"),
]


@pytest.mark.parametrize("case,code,port,part,evidence", CASES, ids=[c[0] for c in CASES])
def test_each_rule_names_its_part_with_the_evidence(case: str, code: str, port: PortFacts,
                                                    part: str, evidence: str) -> None:
    suspect = decide(code, port)
    assert suspect.part == part, suspect
    assert evidence in suspect.evidence, suspect
    assert suspect.part == UNKNOWN and not suspect.source or suspect.source


def test_an_unhealthy_event_carries_its_suspect_and_its_committed_message_ends_with_it(
        ) -> None:
    """The evaluation sets the metadata; the commit (``stamped``) ends the message with it;
    a healthy event gets neither, and the verdict is untouched."""
    dev = device("mlx5_0", ports=(port("mlx5_0", layer="Ethernet"),))
    snapshot = host(dev)
    bad = make_event("EthernetDegradationCheck", fatal=False, healthy=False,
                     message="RoCE port mlx5_0 port 1: module Tx bias low",
                     error_code="optics_tx_bias", entities=port_entities("mlx5_0", 1),
                     at=snapshot.taken_at)
    good = replace(bad, is_healthy=True)
    marked, kept = annotate([bad, good], snapshot, {"mlx5_0_1": BIAS_DEAD})
    assert kept == good
    assert marked.metadata == {SUSPECT_KEY: "module", SUSPECT_EVIDENCE_KEY:
                               "Tx bias 0.00 mA on lane 1, 2, 3, 4 below its low alarm"}
    assert (marked.message, marked.recommended_action) == (bad.message, "NONE")
    committed = marked.stamped("node", "EXECUTE_REMEDIATION", "id1")
    assert committed.message == (
        "RoCE port mlx5_0 port 1: module Tx bias low - suspect: module (Tx bias 0.00 mA on "
        "lane 1, 2, 3, 4 below its low alarm)")
    assert good.stamped("node", "EXECUTE_REMEDIATION", "id2").message == good.message


def test_every_rule_gives_a_known_part_on_any_facts() -> None:
    """No rule raises or invents a part, whatever the facts (none, no diagnostics, a
    copper cable, every fault)."""
    every: list[Any] = [None, NO_DIAG, HEALTHY, BIAS_DEAD, RX_DARK, HOT, module("passive-dac")]
    for code in [*RULES, "aer_nonfatal", "anything_else", ""]:
        for optics in every:
            for state, phys in ((ACTIVE, LINKUP), (DOWN, POLLING), (None, None), ("zz", "")):
                assert decide(code, PortFacts(state, phys, optics)).part in PARTS


def test_of_several_conditions_on_a_port_the_most_local_part_is_the_suspect() -> None:
    port = facts(DOWN, POLLING, BIAS_DEAD)
    got = decide_all(["symbol_error", "optics_tx_bias", "port_state"], port)
    assert got is not None and got.part == MODULE
    assert decide_all(["card_active_ports", "aer_fatal"], facts()).part == NIC  # type: ignore[union-attr]
    assert decide_all([], port) is None
