"""Link BER end to end: ``nichealthd --once`` on a simulated RoCE host driven by ``set-ber``."""

from __future__ import annotations

import re
import shutil
from typing import Any, Callable

from nichealthd.sim import cli as sim_cli

from .conftest import Run, SimHost


def ber_events(run: Run) -> list[dict[str, Any]]:
    return [e for e in run.events if e["errorCode"] and e["errorCode"][0].startswith("link_")
            and "LinkBer" in e["message"]]


def drill(host: SimHost, *args: str) -> None:
    assert sim_cli.main([*args[:1], str(host.root), *args[1:]]) == 0


def test_set_ber_past_the_limit_is_one_predicted_failure_and_one_recovery(
        sim_host: Callable[..., SimHost]) -> None:
    host = sim_host("oci-h100")
    netdev = host.manifest["devices"][1]["ports"]["1"]["netdev"]
    assert host.manifest["devices"][1]["name"] == "mlx5_1"
    shutil.rmtree(host.root / "ethtool" / netdev)  # a port without PHY files
    for _ in range(2):  # the first read is each port's first sample; the second a window
        run = host.once()
        assert run.returncode == 0, run.stderr
        assert ber_events(run) == []  # a new host's BER (1e-8) is quiet
    drill(host, "set-ber", "mlx5_0", "1", "1e-4")
    # the window that spans the set-ber may or may not reach the limit; one of the next two
    # does, and says it once
    runs = [host.once(), host.once(), host.once()]
    told = [e for run in runs for e in ber_events(run)]
    assert len(told) == 1, told
    event = told[0]
    assert event["checkName"] == "EthernetDegradationCheck"
    assert event["errorCode"] == ["link_ber"]
    assert event["isFatal"] is False and event["isHealthy"] is False
    assert event["recommendedAction"] == "NONE"
    assert "predicted failure" in event["message"]
    # the BER of the window it was told in: 1e-4, or a little less across the set-ber
    ber = re.search(r"pre-FEC BER ([0-9.e+-]+) ", event["message"])
    assert ber and 2.4e-5 <= float(ber.group(1)) <= 1e-4, event["message"]
    assert "RS(544,514) KP4 FEC's correction limit 2.4e-04" in event["message"]
    assert event["entitiesImpacted"] == [{"entityType": "NIC", "entityValue": "mlx5_0"},
                                         {"entityType": "NICPort", "entityValue": "1"}]
    drill(host, "set-ber", "mlx5_0", "1", "1e-8")
    runs = [host.once(), host.once(), host.once()]
    healed = [e for run in runs for e in ber_events(run)]
    assert len(healed) == 1, healed
    assert healed[0]["isHealthy"] is True and healed[0]["errorCode"] == ["link_ber"]
    assert "back below" in healed[0]["message"]
    assert all(run.returncode == 0 for run in runs)
