"""Random whole-host traces for the seam-equivalence test, and their recorded outcome.

A trace is a host of dual-port cards (InfiniBand and RoCE, a management NIC on the default
route, a VF) polled a few hundred times while ports change state (ACTIVE, DOWN, Disabled,
INIT, Polling, unreadable, garbage), counters rise, breach, saturate and reset, devices vanish
for a while, enumerations are incomplete, the clock jumps, commits fail and the process
restarts. :func:`replay` drives the pure evaluator through it and returns, per committed poll,
the events and the persisted state: the stream the check-family seam must reproduce exactly.

``python -m tests.core.equivalence`` re-records ``tests/data/equivalence.json.gz``; it was
recorded by main at dd25288, the last commit before the seam, and must never be re-recorded
to make a failing refactor pass. One deliberate change of behaviour was recorded since, in the
``resume`` stream only and with its events checked identical to main's: a card's hold clock
starts only once a peer shows the group's remembered mode (``topology.anomalous_cards``: when
every card has fallen, none is evidence against another), one poll later at polls 232-235.

Two deliberate changes are replayed under main's rules instead. Main monitored
``port_xmit_wait`` by default, today it is off by default (``core/config.py`` says why):
:func:`main_config` switches it on. And (:func:`main_naming`) main filed a
fatal counter under the layer's state check, today every counter files under the degradation
check (``counters.CheckNames.for_counter``; ``tests/core/test_counter_check_names.py`` tests
the new rule, its migration and what NVSentinel sees). Under the new rule these streams differ
from main's exactly there: fatal counter events (breaches, recoveries, baselines) carry the
degradation check's name, and the saturation of a counter whose fatal breach is reported or
latched shares that identity, so it rides on the breach's event instead of being a second one.

A third (:func:`main_waiting`): main left a port out of its card's shortfall when it was
suppressed at first sight, even when it then waited for the subnet manager (INIT/ARMED with
the link up), so its card was reported at once; today such a card is held
``cardVerdictHoldTime`` like any card short of a transient port, at the first poll after a
boot too (``core/checks/cards.py``; ``tests/core/test_reboot_sm.py`` tests the new rule).
Under the new rule seed 2 differs from main's stream exactly there
(:data:`WAITING_DIFFERENCE`): card 0000:13:00, whose mlx5_6 read garbage since the boot and
then ARMED, is reported at poll 311 (the hold over) instead of 309.
"""

from __future__ import annotations

import contextlib
import gzip
import hashlib
import json
import random
from pathlib import Path
from typing import Any, Iterator, Optional
from unittest import mock

from nichealthd.core.checks import cards, link_state
from nichealthd.core.checks.counters import CheckNames
from nichealthd.core.checks.link_section import PortRecord
from nichealthd.core.config import Config, CounterSpec
from nichealthd.core.evaluate import Topology, settled
from nichealthd.core.model import HostSnapshot, PortSnapshot, Unreadable
from nichealthd.core.state import FATAL, SUPPRESSED, MonitorState
from nichealthd.sources.sysfs import PMA_WIDTHS

from .builders import ACTIVE, DISABLED, DOWN, LINKUP, POLLING, Runner, config, device, gpus, host
from .builders import port as make_port

GOLDEN = Path(__file__).resolve().parent.parent / "data" / "equivalence.json.gz"
SEEDS = (1, 2, 3, 20261125)
POLLS = 400

STATES = [(ACTIVE, LINKUP)] * 12 + [
    (DOWN, DISABLED), (DOWN, POLLING), ("2: INIT", LINKUP), ("3: ARMED", LINKUP),
    (ACTIVE, "6: LinkErrorRecovery"), ("1: DOWN", "2: Polling"), ("\x00zz", LINKUP),
]
COUNTERS = ("link_downed", "symbol_error", "port_rcv_errors", "link_error_recovery",
            "excessive_buffer_overrun_errors", "port_xmit_discards", "port_xmit_wait",
            "rnr_nak_retry_err", "local_ack_timeout_err")


class Card:
    """One dual-port card: two PCI functions (devices), one port each."""

    def __init__(self, index: int, layer: str) -> None:
        self.names = (f"mlx5_{2 * index}", f"mlx5_{2 * index + 1}")
        self.pci = (f"0000:{0x10 + index:02x}:00.0", f"0000:{0x10 + index:02x}:00.1")
        self.layer = layer
        self.numa = index % 2
        self.state = {name: (ACTIVE, LINKUP) for name in self.names}
        self.values = {name: dict.fromkeys(COUNTERS, 0) for name in self.names}
        self.gone = dict.fromkeys(self.names, 0)  # polls left while the device is absent


def _port(name: str, card: Card, rng: random.Random) -> PortSnapshot:
    state: Optional[str]
    phys: Optional[str]
    state, phys = card.state[name]
    values: dict[str, Any] = dict(card.values[name])
    values["symbol_error_fatal"] = values["symbol_error"]
    if rng.random() < 0.02:
        values["link_downed"] = Unreadable("EIO")
    if rng.random() < 0.02:
        state, phys = None, None  # unreadable this poll
    return make_port(name, 1, state, phys, card.layer, counters=values,
                     operstate="up" if card.layer == "Ethernet" else None)


def _step(cards: list[Card], rng: random.Random) -> None:
    for card in cards:
        for name in card.names:
            if card.gone[name]:
                card.gone[name] -= 1
                continue
            if rng.random() < 0.015:
                card.gone[name] = rng.choice((1, 2, 3, 5))
            if rng.random() < 0.06:
                card.state[name] = rng.choice(STATES)
            values = card.values[name]
            if rng.random() < 0.25:
                counter = rng.choice(COUNTERS)
                width = PMA_WIDTHS.get(counter, 32)
                draw = rng.random()
                if draw < 0.1:
                    values[counter] = 0
                elif draw < 0.15:
                    values[counter] = 2**width - 1
                else:
                    values[counter] = min(values[counter] + rng.choice((1, 2, 5, 40, 400)),
                                          2**width - 1)


def trace(seed: int, length: int = POLLS) -> tuple[list[HostSnapshot], set[int], set[int]]:
    """The polls of one seed, with the polls whose commit fails and the restarts before."""
    rng = random.Random(seed)
    cards = [Card(i, "InfiniBand") for i in range(4)] + [Card(4, "Ethernet")]
    management = device("mlx5_20", pci="0000:a0:00.0", numa=0,
                        ports=(make_port("mlx5_20", 1, layer="Ethernet"),), netdevs=("eth0",))
    vf = device("mlx5_21", pci="0000:10:00.2", numa=0, is_vf=True,
                ports=(make_port("mlx5_21", 1),))
    polls = []
    now = 0.0
    for index in range(length):
        now += rng.choice((1, 1, 1, 1, 2, 5, 30, 61, 300, -20 if rng.random() < 0.05 else 1))
        if index:
            _step(cards, rng)
        devices = [management, vf]
        for card in cards:
            for name, pci in zip(card.names, card.pci):
                if card.gone[name]:
                    continue
                devices.append(device(name, pci=pci, numa=card.numa,
                                      ports=(_port(name, card, rng),)))
        rng.shuffle(devices)
        polls.append(host(*devices, when=now, complete=rng.random() > 0.03,
                          boot="boot-2" if index > length * 3 // 4 else "boot-1"))
    failed = {i for i in range(length) if rng.random() < 0.05}
    restarts = {i for i in range(length) if rng.random() < 0.03}
    return polls, failed, restarts


# Keys added after main at dd25288 (not part of what main wrote): the seam's schemas, and
# The device identities and driver event (which say nothing main's keys do not), and
# the hold-down keys of the link-state section and the fabric view's (ports, events).
ADDED_KEYS = ("schemas", "device_identities", "driver_event", "port_holds", "port_blips",
              "port_fabrics", "fabric_events")
# Families added since (PCI side ...): their own sections, empty on these traces (no adapter facts),
# are no part of what main wrote either.
MAIN_FAMILIES = ("link_state", "link_counters")


def _added_keys() -> tuple[str, ...]:
    from nichealthd.core.checks import families

    return ADDED_KEYS + tuple(k for f in families() if f.id not in MAIN_FAMILIES
                              for k in f.keys)
# errorCodes of the families added after main (link flap, rate): their events are new behaviour
# on top of main's stream, which must stay identical without them.
NEW_CODES = frozenset({("link_flap",), ("link_rate",)})


def main_state(state: MonitorState) -> dict[str, Any]:
    """The state file's content less the keys added since main (not part of what it wrote)."""
    data = state.to_json()
    for key in _added_keys():
        data.pop(key, None)
    return data


def main_events(events: Any) -> list[dict[str, Any]]:
    """The events of main's families (those of families added since left out), as JSON."""
    return [e.to_json() for e in events if e.error_code not in NEW_CODES]


def digest(data: dict[str, Any]) -> str:
    return hashlib.sha256(json.dumps(data, sort_keys=True).encode()).hexdigest()[:16]


def topology() -> Topology:
    return Topology(gpus().gpus, frozenset({"mlx5_20"}))


def main_config() -> Config:
    """The default configuration as main had it: ``port_xmit_wait`` monitored."""
    return config(counters=[{"name": "port_xmit_wait", "enabled": True}])


def _main_for_counter(names: CheckNames, spec: CounterSpec) -> str:
    return names.state if spec.is_fatal else names.degradation


@contextlib.contextmanager
def main_naming() -> Iterator[None]:
    """Fatal counters under the layer's state check, as main named them (module doc)."""
    with mock.patch.object(CheckNames, "for_counter", _main_for_counter):
        yield


def _main_told_apart(record: Optional[PortRecord], reading: Any) -> bool:
    """Main's rule: a port suppressed at first sight is never part of its card's shortfall."""
    return record is not None and record.health in (SUPPRESSED, FATAL)


@contextlib.contextmanager
def main_waiting() -> Iterator[None]:
    """Main's card rule for a port waiting for the subnet manager (module doc)."""
    with mock.patch.object(cards, "_told_apart", _main_told_apart), \
            mock.patch.object(link_state, "baseline_verdicts", lambda verdicts, *_: verdicts):
        yield


# Seed 2 under today's card rule: (poll, the card verdict's message) that moved.
WAITING_DIFFERENCE = (309, 311, "Card 0000:13:00 (compute) has 0 active ports, expected 1")


def replay(seed: int, length: int = POLLS, start: int = 0,
           state: Optional[MonitorState] = None, today: bool = False
           ) -> list[dict[str, Any]]:
    """Each committed poll's events and persisted state (its digest), as the monitor would
    commit them; from poll ``start`` on, resuming from ``state`` as a restarted process.
    Under main's naming of fatal counters (:func:`main_naming`) and, unless ``today``, main's
    card rule for ports waiting for the subnet manager (:func:`main_waiting`)."""
    with main_naming(), (contextlib.nullcontext() if today else main_waiting()):
        return _replay(seed, length, start, state)


def _replay(seed: int, length: int, start: int, state: Optional[MonitorState]
            ) -> list[dict[str, Any]]:
    polls, failed, restarts = trace(seed, length)
    runner = Runner(cfg=main_config(), topology=topology(), state=state,
                    baseline=state is None)
    out: list[dict[str, Any]] = []
    boot: Optional[str] = polls[start].boot_id
    for index, snapshot in enumerate(polls[start:], start):
        if index in restarts:
            runner.restart()
        if snapshot.boot_id != boot:  # a reboot: a baseline (link-counter-detection §6.5)
            boot = snapshot.boot_id
            runner = Runner(cfg=runner.config, topology=topology(),
                            state=MonitorState(boot_id=boot or ""))
        if index in failed:
            runner.evaluate(snapshot)
            continue
        result = runner.poll(snapshot)
        out.append({"poll": index, "events": main_events(result.events),
                    "state": digest(main_state(settled(result.state, result.memory)))})
    return out


def state_at(seed: int, poll: int) -> MonitorState:
    """The committed state after ``poll`` (the last committed one at or before it)."""
    polls, failed, restarts = trace(seed)
    runner = Runner(cfg=main_config(), topology=topology())
    with main_naming():
        for index, snapshot in enumerate(polls[:poll + 1]):
            if index in restarts:
                runner.restart()
            if index not in failed:
                runner.poll(snapshot)
    return settled(runner.state, runner.memory)


# A state that holds every kind of record main wrote (breaches with last values, saturation
# of both kinds, suppressed and fatal ports, missing devices, card anomalies and holds).
RESUME_SEED, RESUME_AT = 6, 229
OLD_STATE = GOLDEN.parent / "state-main-dd25288.json"


def record() -> None:
    GOLDEN.parent.mkdir(exist_ok=True)
    data: dict[str, Any] = {str(seed): replay(seed) for seed in SEEDS}
    old = state_at(RESUME_SEED, RESUME_AT)
    OLD_STATE.write_text(json.dumps(old.to_json(), indent=1) + "\n")
    data["resume"] = replay(RESUME_SEED, start=RESUME_AT + 1, state=old)
    GOLDEN.write_bytes(gzip.compress(json.dumps(data, sort_keys=True).encode(), mtime=0))


def recorded() -> dict[str, Any]:
    loaded: dict[str, Any] = json.loads(gzip.decompress(GOLDEN.read_bytes()))
    return loaded


if __name__ == "__main__":
    record()
