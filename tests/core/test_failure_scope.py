"""A family that cannot judge makes unknown only the ports it judges (core/health.py).

Before, one broken family made every healthy port of the host unknown: one optics read that
raised turned a 12-port host into "12 unknown". Each family says which ports it judges
(:meth:`CheckFamily.judges`); the others keep their health in ``status``, STATUS= and the
port records (what ``port_health`` exports). The fault is a family's ``evaluate`` made to
raise (a bug met on some input); everything else is the real evaluator and real families,
on a mixed host: two InfiniBand ports (one with its IPoIB netdev), a RoCE port, two EFAs.
"""

from __future__ import annotations

from dataclasses import replace
from typing import Any

import pytest

from nichealthd.core.checks import families
from nichealthd.core.checks.efa_counters import EFA_COUNTERS
from nichealthd.core.checks.efa_state import EFA_STATE
from nichealthd.core.checks.link_ber import LINK_BER
from nichealthd.core.checks.link_counters import LINK_COUNTERS
from nichealthd.core.checks.link_rate import LINK_RATE
from nichealthd.core.checks.link_state import LINK_STATE
from nichealthd.core.checks.lost_nic import LOST_NICS
from nichealthd.core.checks.netdev_link import NETDEV_LINK
from nichealthd.core.checks.optics import OPTICS
from nichealthd.core.checks.pcie_aer import PCIE_AER
from nichealthd.core.family import Family
from nichealthd.core.model import HostSnapshot
from nichealthd.core.views import health_status, port_records, status_summary

from .builders import Runner, config, device, gpus, host, port
from .test_efa import efa

EFAS = ("rdmap16s27", "rdmap32s27")
MLX5 = ("mlx5_0", "mlx5_1", "mlx5_2")
TOPOLOGY = gpus((0,), {n: ["PXB"] for n in EFAS})


def mixed(when: float) -> HostSnapshot:
    return host(
        device("mlx5_0", pci="0000:47:00.0"),
        device("mlx5_1", pci="0000:48:00.0", ports=(replace(port("mlx5_1"), netdev="ib0"),)),
        device("mlx5_2", pci="0000:49:00.0", netdevs=("eth2",),
               ports=(replace(port("mlx5_2", layer="Ethernet", operstate="up"),
                              netdev="eth2"),)),
        efa(EFAS[0], pci="0000:10:1b.0", netdev="eth0"),
        efa(EFAS[1], pci="0000:20:1b.0", netdev="eth1"),
        when=when)


# The family made to fail -> the devices whose port it judges.
JUDGED: dict[str, tuple[Family, frozenset[str]]] = {
    "link_state": (LINK_STATE, frozenset(MLX5)),
    "efa_state": (EFA_STATE, frozenset(EFAS)),
    "link_counters": (LINK_COUNTERS, frozenset(MLX5)),
    "efa_counters": (EFA_COUNTERS, frozenset(EFAS)),
    "netdev_link": (NETDEV_LINK, frozenset(MLX5)),
    "link_rate": (LINK_RATE, frozenset(MLX5)),
    "optics": (OPTICS, frozenset({"mlx5_1", "mlx5_2"})),
    "link_ber": (LINK_BER, frozenset({"mlx5_1", "mlx5_2"})),
    "lost_nics": (LOST_NICS, frozenset()),
    "pcie_aer": (PCIE_AER, frozenset({*MLX5, *EFAS})),  # every NIC's PCI function
}


@pytest.mark.parametrize("name", sorted(JUDGED))
def test_a_failing_family_makes_unknown_only_the_ports_it_judges(
        name: str, monkeypatch: pytest.MonkeyPatch) -> None:
    family, judged = JUDGED[name]
    runner = Runner(config(pcieAerInterval="10s"), topology=TOPOLOGY)
    runner.poll(mixed(0))

    def broken(self: Any, previous: Any, cycle: Any, volatile: Any) -> Any:
        raise ZeroDivisionError("division by zero")

    monkeypatch.setattr(type(family), "evaluate", broken)
    snapshot = mixed(3600)  # every family due
    result = runner.poll(snapshot)
    assert set(result.failed) == {family.id}
    records = {r["device"]: r for r in port_records(snapshot, result, runner.state)}
    unknown = {d for d, r in records.items() if r["health"] == "unknown"}
    assert unknown == judged
    assert all(records[d]["health"] == "healthy" for d in set(records) - judged)
    assert all(records[d]["reasons"] == [f"not judged by {family.id}"] for d in judged)
    status = health_status(snapshot, result, runner.state)
    assert (status["ports_unknown"], status["ports_healthy"]) == (len(judged), 5 - len(judged))
    assert status["health"] == "degraded"  # the family's failure is named on the host
    summary = status_summary(status)
    assert summary.startswith(f"5 ports: {5 - len(judged)} healthy, 0 degraded, 0 fatal")
    assert f"check family {family.id} cannot judge: " in summary


def test_every_family_of_the_registry_is_covered() -> None:
    """A family added later says which ports it judges, or is added here."""
    runner = Runner(config(pcieAerInterval="10s"), topology=TOPOLOGY)
    runner.poll(mixed(0))
    snapshot = mixed(1)
    covered = {family.id for family, _ in JUDGED.values()}
    narrower = {f.id for f in families()
                if not all(f.judges(d, p) for d in snapshot.devices for p in d.ports)}
    assert narrower <= covered, narrower - covered


def test_two_failing_families_name_each_port_by_the_ones_that_judge_it(
        monkeypatch: pytest.MonkeyPatch) -> None:
    runner = Runner(topology=TOPOLOGY)
    runner.poll(mixed(0))

    def broken(self: Any, previous: Any, cycle: Any, volatile: Any) -> Any:
        raise ZeroDivisionError("division by zero")

    for family in (LINK_COUNTERS, EFA_COUNTERS):
        monkeypatch.setattr(type(family), "evaluate", broken)
    snapshot = mixed(1)
    result = runner.poll(snapshot)
    records = {r["device"]: r for r in port_records(snapshot, result, runner.state)}
    assert records["mlx5_0"]["reasons"] == ["not judged by link_counters"]
    assert records[EFAS[0]]["reasons"] == ["not judged by efa_counters"]
