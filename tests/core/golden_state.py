"""State files in which every check family's section holds every kind of record it writes.

``python -m tests.core.golden_state`` writes ``tests/data/state-main-a406b84.json`` and
``state-main-a406b84-driver.json``; they were recorded by main at a406b84, the last commit
whose sections had hand-written codecs, so that the declared sections (core/codec.py) are held
to read them and write them back byte for byte (tests/core/test_state_golden.py). Never
re-record them to make a failing codec pass.

Each family's section comes from a drill of the pure core (tests/core/builders.Runner) that
leaves it full: ports DOWN, held and suppressed, a missing device, a card short of its group
and one held, a renamed device, an InfiniBand fabric event; counter breaches latched with
their last values, saturated counters of both kinds, link flaps with absorbed cycles and an
outage open, a slow port; PCIe hops, AER latches and a hot sensor; character devices, a netdev
down, firmware drift and a lost NIC, missed and latched; kernel-log faults, a pending header,
repetitions told and not; an EFA host with a port down, a missing device, a rename, a card
held short of its group and EFA counter breaches. The second file's drills go on into driver
events (every ConnectX device gone, half a poll after the other half; every EFA device gone),
held and reported, with the EFA card latched by then. The state file holds one section per
family, so the sections of several drills make one file, written as the daemon writes it
(``storage.store.save_state``).
"""

from __future__ import annotations

import json
from dataclasses import replace
from pathlib import Path
from typing import Any, Callable

from nichealthd.core.checks import families
from nichealthd.core.model import HostSnapshot, KernelLine
from nichealthd.core.state import MonitorState
from nichealthd.sources.adapter_facts import AdapterFacts, CharDevices, NetdevLink, PciNic
from nichealthd.sources.pci_facts import AerTable
from nichealthd.storage.store import save_state

from .builders import (
    ACTIVE,
    DISABLED,
    DOWN,
    LINKUP,
    POLLING,
    Runner,
    at,
    config,
    device,
    gpus,
    host,
    port,
    with_counters,
)
from .test_efa import NAMES as EFA_NAMES
from .test_efa import efa as efa_device
from .test_fabric import FABRIC, OTHER, card
from .test_identity import nic
from .test_kernel_log import LINES, LOCKUP
from .test_pci_families import GEN5, aer, sensor, tree

GOLDEN = Path(__file__).resolve().parent.parent / "data" / "state-main-a406b84.json"
GOLDEN_DRIVER = GOLDEN.with_name("state-main-a406b84-driver.json")
# The families of main at a406b84: the ones whose schema versions the files record.
RECORDED = frozenset(json.loads(GOLDEN.read_text())["schemas"])
# Families added after a406b84 (link_ber, optics, any added since: the worked example of
# ARCHITECTURE.md): their sections are no part of what main wrote (the files hold none; they
# load fresh and are written back empty). Their own round trips are their tests'.
FAMILIES_SINCE = frozenset(family.id for family in families()) - RECORDED


def as_recorded(data: dict[str, Any]) -> dict[str, Any]:
    """A state file's content less the keys of :data:`FAMILIES_SINCE` (and their schemas)."""
    from nichealthd.core.checks import families

    added = {key for family in families() if family.id in FAMILIES_SINCE
             for key in family.keys}
    out = {key: value for key, value in data.items() if key not in added}
    if isinstance(out.get("schemas"), dict):
        out["schemas"] = {k: v for k, v in out["schemas"].items() if k not in FAMILIES_SINCE}
    return out
INIT = "2: INIT"


def connectx(driver: bool) -> Runner:
    """Ten single-port InfiniBand cards on two fabrics, polled a second apart: a port DOWN
    past the hold-down, one held now, a blip absorbed, a card ARMED past the card hold and one
    INIT within it, a device missing, another gone a poll ago, a rename, the second fabric's
    ports all INIT (a fabric event), counters breached, latched and saturated, a flapping
    port, a slow one; with ``driver``, then every device gone, half a poll after the other
    half (a driver event, reported for the first half)."""
    runner = Runner(cfg=config(stateHoldDown="10s", driverReloadGrace="5s",
                               cardVerdictHoldTime="20s", linkFlapCount=2,
                               counters=[{"name": "port_xmit_wait", "enabled": True}]))
    names = {3: "mlx5_20"}
    fabric = {8: OTHER, 9: OTHER}
    downed = {"n": 0}

    def snapshot(when: float, states: dict[int, tuple[str, str]],
                 gone: tuple[int, ...] = (), renamed: bool = False) -> HostSnapshot:
        devices = []
        for i in range(10):
            if i in gone:
                continue
            state, phys = states.get(i, (ACTIVE, LINKUP))
            made = card(i, state, phys, fabric.get(i, FABRIC))
            if renamed and i in names:
                made = nic(i, names[i], state=state, phys=phys)
                made = made.with_ports((replace(made.ports[0], fabric=FABRIC),))
            p = made.ports[0]
            values: dict[str, Any] = {"symbol_error": 10 + int(when),
                                      "link_downed": downed["n"] if i == 4 else 0,
                                      "port_rcv_errors": 0, "port_xmit_wait": 100}
            if i == 0:
                values.update(symbol_error=65535, port_xmit_wait=2**32 - 1)
            if i == 1 and when >= 20:
                values["port_rcv_errors"] = 500 + int(when)
            made = made.with_ports((with_counters(p, **values),))
            if i == 6:  # the slow port of the rate family
                made = made.with_ports((replace(made.ports[0], rate="200 Gb/sec (4X HDR)"),))
            elif made.ports[0].state == ACTIVE:
                made = made.with_ports((replace(made.ports[0], rate="400 Gb/sec (4X NDR)"),))
            devices.append(made)
        return host(*devices, when=when)

    when = 0.0
    runner.poll(snapshot(when, {}))
    for second in range(1, 25):  # port 7 blips (absorbed); port 4 flaps four times
        when = float(second)
        states: dict[int, tuple[str, str]] = {}
        if second == 2:
            states[7] = (DOWN, DISABLED)
        if second % 5 == 1:
            downed["n"] += 1
            states[4] = (DOWN, DISABLED)
        runner.poll(snapshot(when, states))
    for second in range(25, 40):  # port 5 DOWN for good, card 2 ARMED, mlx5_3 renamed
        when = float(second)
        runner.poll(snapshot(when, {5: (DOWN, POLLING), 2: ("3: ARMED", LINKUP)},
                             renamed=second >= 30))
    for second in range(40, 60):  # card 1 INIT past the hold-down; port 6 held down now
        when = float(second)
        states = {5: (DOWN, POLLING), 2: ("3: ARMED", LINKUP), 1: (INIT, LINKUP)}
        if second >= 45:
            states.update({8: (INIT, LINKUP), 9: (INIT, LINKUP)})
        if second >= 57:
            states[6] = (DOWN, DISABLED)
        if second == 58:  # port 4 down again: an outage open
            downed["n"] += 1
        if second >= 58:
            states[4] = (DOWN, DISABLED)
        runner.poll(snapshot(when, states, gone=(7, 0) if second >= 58 else (7,),
                             renamed=True))
    if driver:
        bus = frozenset(f"0000:{0x10 + i:02x}:00.0" for i in range(10))
        half = (0, 1, 2, 3, 4, 7)
        runner.poll(replace(snapshot(60, {5: (DOWN, POLLING)}, gone=half, renamed=True),
                            pci_bus=bus))
        for second in range(61, 66):
            runner.poll(replace(host(when=float(second)), pci_bus=bus))
    return runner


def adapter(driver: bool) -> Runner:
    """Eight InfiniBand cards read by the adapter families: one umad missing (latched),
    one uverbs missing once, one netdev down (latched) and one down once, one card on other
    firmware, an unbound function latched lost and one probe failing on its clock."""
    lost, probing = (PciNic("0000:48:00.0", "0x020700", False, None, (), 0),
                     PciNic("0000:49:00.0", "0x020000", False, "mlx5_core", ("eth3",), 1))
    devices = [device(f"mlx5_{i}", f"0000:{0x40 + i:02x}:00.0", board_id="MT_0000000838",
                      fw_ver="28.40.1000" if i == 7 else "28.39.1002") for i in range(8)]
    names = [d.name for d in devices]
    registered = tuple(PciNic(d.pci_address or "", "0x020700", True, "mlx5_core")
                       for d in devices)
    runner = Runner()

    def read(when: float, late: bool) -> HostSnapshot:
        chardevs = CharDevices(frozenset(n for n in names if not (late and n == "mlx5_2")),
                               frozenset((n, 1) for n in names if n != "mlx5_1"), None)
        netdevs = {f"{n}_1": NetdevLink(f"ib{i}", "down" if i == 0 or (late and i == 4)
                                        else "up", True) for i, n in enumerate(names)}
        nics = (*registered, lost, *((probing,) if late else ()))
        facts = AdapterFacts(chardevs=chardevs, pci_nics=nics,
                             firmware={d.name: d.fw_ver or "" for d in devices},
                             netdevs=netdevs)
        return replace(host(*devices, when=when), adapter=facts)

    for when in range(0, 200, 10):
        runner.poll(read(float(when), False))
    runner.poll(read(200.0, True))
    return runner


def pci(driver: bool) -> Runner:
    """One NIC behind a switch: a hop trained to x8, a fatal AER latched, correctable
    errors counted, a sensor past its critical threshold."""
    runner = Runner(cfg=config(pcieAerInterval="10s"), baseline=False)
    nic0 = device("mlx5_0", pci="0000:19:00.0")
    for step in range(0, 8):
        runner.poll(replace(host(nic0, when=60.0 * step),
                            pcie={"mlx5_0": tree(nic_link=(GEN5, 8))},
                            aer=aer(fatal=1 if step >= 6 else 0, cor=step, up_cor=30 * step),
                            hwmon=sensor(106 if step >= 3 else 101)))
    runner.poll(replace(host(nic0, when=481.0), aer={"mlx5_0": (
        AerTable("0000:19:00.0", {"aer_dev_fatal": 2, "aer_dev_nonfatal": 0,
                                  "aer_dev_correctable": 8}),)}))
    return runner


def kernel_log(driver: bool) -> Runner:
    """A fatal fault, faults deduplicated, a repetition told and one not, a soft lockup
    header waiting for its frame, an unattributable line on the host; lines timed to the
    microsecond."""
    nic0 = replace(device("mlx5_0", pci="0000:19:00.0", netdevs=("ib0",)),
                   ports=(replace(port("mlx5_0"), netdev="ib0"),))
    runner = Runner()
    runner.poll(host(nic0))

    def lines(when: float, *texts: str, cursor: str) -> HostSnapshot:
        read = tuple(KernelLine(t, at(when + i * 1.000125)) for i, t in enumerate(texts))
        return replace(host(nic0, when=when), kernel_lines=read, kernel_cursor=cursor)

    watchdog = LINES["netdev_watchdog"]
    runner.poll(lines(10, watchdog, LINES["access_reg_failed"], cursor="s=1;i=a"))
    runner.poll(lines(70, watchdog, cursor="s=1;i=b"))
    runner.poll(lines(130, watchdog, LINES["unrecoverable_err"], cursor="s=1;i=c"))
    runner.poll(lines(190.25, "mlx5_core 0000:99:00.0: poll_health:825:(pid 0): device's "
                      "health compromised - reached miss count", LINES["mlx5_tx_timeout_detected"],
                      LOCKUP[0], cursor="s=1;i=d"))
    return runner


def efa(driver: bool) -> Runner:
    """Four EFA devices down at first sight, three then up: the fourth's card is held short
    (latched after the card hold, with ``driver``); one renamed, one gone (missing), one down
    later with its counters breached. With ``driver``, then every EFA device gone (held,
    reported)."""
    late, gone, broken = EFA_NAMES[3], EFA_NAMES[2], EFA_NAMES[1]
    runner = Runner(cfg=config(driverReloadGrace="5s", cardVerdictHoldTime="30s"),
                    topology=gpus((0,), {n: ["PXB"] for n in (*EFA_NAMES, "efa_0")}))

    def snapshot(when: float) -> HostSnapshot:
        devices = []
        for i, name in enumerate(EFA_NAMES, 1):
            if name == gone and when >= 15:
                continue
            down = when == 0 or name == late or (name == broken and when >= 20)
            counters = {"rx_drops": 10_000 * int(when) if name == broken else 0,
                        "no_completion_cmds": int(name == broken and when >= 18)}
            devices.append(efa_device(
                "efa_0" if i == 1 and when >= 10 else name, pci=f"0000:{16 * i:02x}:1b.0",
                node_guid=f"14b0:33ff:fef8:00{i:02x}", netdev=f"eth{i}",
                operstate="down" if down else "up", carrier=0 if down else 1,
                counters=counters))
        return host(*devices, when=when)

    for second in range(0, 41 if driver else 26):
        runner.poll(snapshot(float(second)))
    if driver:
        for second in range(41, 48):
            runner.poll(host(when=float(second)))
    return runner


DRILLS: dict[str, Callable[[bool], Runner]] = {
    "link_state": connectx, "link_counters": connectx, "link_flaps": connectx,
    "link_rate": connectx, "efa_state": efa, "efa_counters": efa, "char_devices": adapter,
    "netdev_link": adapter, "firmware": adapter, "lost_nics": adapter, "pcie_link": pci,
    "pcie_aer": pci, "nic_temperature": pci, "kernel_log": kernel_log}


def golden(driver: bool) -> MonitorState:
    """One state whose sections come from the drills (one run of each); ``driver``: the
    drills end in driver events (the link-state and EFA families hold their verdicts)."""
    runs: dict[Callable[[bool], Runner], Runner] = {}
    sections: dict[str, Any] = {}
    for family_id, drill in DRILLS.items():
        if drill not in runs:
            runs[drill] = drill(driver)
        sections[family_id] = runs[drill].state.sections[family_id]
    missing = {f.id for f in families()} - set(sections)
    if missing:
        raise SystemExit(f"no drill fills {sorted(missing)}")
    return MonitorState(boot_id="boot-1", event_seq=4242 + driver, sections=sections)


if __name__ == "__main__":
    for driver, path in ((False, GOLDEN), (True, GOLDEN_DRIVER)):
        save_state(str(path), golden(driver))
