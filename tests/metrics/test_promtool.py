"""Every series the daemon exports passes ``promtool check metrics``, with every check
family active and its faults present, so that each family's series carry samples.

promtool is the Debian package ``prometheus`` (/usr/bin/promtool); .ci/metrics-deps.sh
installs it and .ci/run sets NICHEALTHD_REQUIRE_PROMTOOL=1, so CI fails instead of skipping
when it is missing. Elsewhere the tests are skipped without it.
"""

from __future__ import annotations

import importlib.util
import os
import re
import shutil
import subprocess
from pathlib import Path
from typing import Callable

import pytest

from nichealthd.core.checks import families
from nichealthd.sim import adapter, journal, mutate, optics, pcifiles, tree

from .conftest import RunningDaemon, Samples, series

Start = Callable[[Path], RunningDaemon]
pytestmark = pytest.mark.promtool


def promtool() -> str:
    found = shutil.which("promtool")
    if found is None:
        if os.environ.get("NICHEALTHD_REQUIRE_PROMTOOL"):
            pytest.fail("promtool is not installed but NICHEALTHD_REQUIRE_PROMTOOL is set: "
                        "install the Debian package prometheus (.ci/metrics-deps.sh)")
        pytest.skip("promtool not installed (Debian package prometheus; .ci/metrics-deps.sh)")
    return found


def check(text: str) -> None:
    """``promtool check metrics`` on a scrape: exit 0 and not one lint line."""
    done = subprocess.run([promtool(), "check", "metrics"], input=text, capture_output=True,
                          text=True, timeout=60)
    assert done.returncode == 0 and not (done.stdout + done.stderr).strip(), \
        done.stdout + done.stderr


def family_series() -> set[str]:
    """The exported name of every series a check family supplies."""
    names = set()
    for family in families():
        for each in family.series(family.fresh(), None):
            suffix = "_total" if each.kind == "counter" and \
                not each.name.endswith("_total") else ""
            names.add(f"nichealthd_{each.name}{suffix}")
    return names


def typed(text: str) -> set[str]:
    """Every metric family of a scrape with its ``_total`` for counters (as exposed)."""
    out = set()
    for name, kind in re.findall(r"^# TYPE (\S+) (\S+)$", text, re.M):
        out.add(name + "_total" if kind == "counter" and not name.endswith("_total")
                else name)
    return out


def one(samples: Samples, name: str, **labels: str) -> bool:
    """Some sample of ``name`` with ``labels`` is non-zero."""
    return any(v for (n, key), v in samples.items()
               if n == name and set(labels.items()) <= key)


def compute_device(root: Path, name: str) -> Path:
    return pcifiles.device_function(root, tree.device(tree.load(root), name))


def test_every_series_with_every_family_faulted_passes_promtool(
        sim: Callable[..., Path], daemon: Start) -> None:
    promtool()
    root = sim("dgx-h100")
    journals = journal.remote_binary() is not None and \
        importlib.util.find_spec("systemd") is not None and \
        importlib.util.find_spec("systemd.journal") is not None  # not the checkout's systemd/
    with (root / "nichealthd.toml").open("a") as config:
        config.write('pcieLinkInterval = "200ms"\npcieAerInterval = "200ms"\n'
                     'nicTemperatureInterval = "200ms"\nadapterCheckInterval = "1s"\n'
                     'driverReloadGrace = "0s"\n')  # a lost NIC after its third read
        if journals:
            config.write(f'kernelLogPath = "{root / "journal"}"\n')
    # Faults seen from the first poll on.
    pcifiles.pcie_degrade(compute_device(root, "mlx5_0"), 0, 8, None)  # PCIe degraded
    pcifiles.temperature(compute_device(root, "mlx5_3"), 103)  # near critical
    adapter.unbind(root, "mlx5_4")  # lost NIC
    adapter.set_firmware(root, "mlx5_6", "28.39.1000")  # firmware drift
    adapter.remove_chardev(root, "mlx5_9", "umad", 1)  # character device missing
    mutate.set_port(root, "mlx5_10", 1, operstate="down")  # ACTIVE, netdev down
    mutate.set_rate(root, "mlx5_11", 1, "200")  # below its peers
    eth = next(d for d in tree.load(root)["devices"]
               if d["kind"] == "pf" and d["link_layer"] == "Ethernet")
    optics.set_optics(root, eth, 1, rx_power=-11.0)  # below the module's low warning
    running = daemon(root)
    # Faults that need a baseline first.
    pcifiles.aer(compute_device(root, "mlx5_1"), "fatal")  # NIC and root port total
    pcifiles.rootport_aer(compute_device(root, "mlx5_7"), "nonfatal")  # below a root port
    mutate.counter(root, "mlx5_9", 1, "symbol_error", set_to=65535)  # saturated
    mutate.flap(root, "mlx5_5", 1, cycles=3, down=0, sleep=lambda _: None)  # link flaps
    if journals:
        journal.kernel_log(root, "mlx5_0", "health_poll_failed")

    def faulted() -> bool:
        s = running.scrape()
        return all((
            one(s, "nichealthd_pcie_link_degraded", device="mlx5_0"),
            one(s, "nichealthd_pcie_aer_breached", device="mlx5_1", file="aer_dev_fatal"),
            one(s, "nichealthd_pcie_aer_rootport_breached",
                file="aer_rootport_total_err_nonfatal"),
            one(s, "nichealthd_nic_temperature_alert", device="mlx5_3"),
            one(s, "nichealthd_pci_function_unregistered"),
            one(s, "nichealthd_firmware_drift", device="mlx5_6"),
            one(s, "nichealthd_char_device_missing", device="mlx5_9"),
            one(s, "nichealthd_port_health", device="mlx5_10"),  # netdev down: degraded
            one(s, "nichealthd_port_rate_degraded", device="mlx5_11"),
            one(s, "nichealthd_module_alert", device=eth["name"], monitor="rx_power"),
            one(s, "nichealthd_saturated", device="mlx5_9", counter="symbol_error"),
            one(s, "nichealthd_port_link_flaps", device="mlx5_5"),
            one(s, "nichealthd_threshold_breached", device="mlx5_5", counter="link_downed"),
            not journals or one(s, "nichealthd_kernel_log_matches_total",
                                rule="health_poll_failed"),
        ))

    running.wait_for(faulted, what="every family's fault in the metrics")
    text = running.text()
    missing = family_series() - typed(text)
    assert not missing, f"series of check families not exported: {sorted(missing)}"
    check(text)


def test_an_efa_host_with_its_faults_passes_promtool(sim: Callable[..., Path],
                                                      daemon: Start) -> None:
    """The EFA families add to the port series; their labels must lint as well."""
    promtool()
    root = sim("p4d", metadata=False)  # its EFAs share their bus with their ENA netdev
    running = daemon(root)
    mutate.set_port(root, "rdmap144s27", 1, operstate="down")
    mutate.counter(root, "rdmap160s27", 1, "no_completion_cmds", add=1)

    def faulted() -> bool:
        s = running.scrape()
        return one(s, "nichealthd_port_health", device="rdmap144s27") and \
            one(s, "nichealthd_threshold_breached", device="rdmap160s27")

    running.wait_for(faulted, what="the EFA faults in the metrics")
    text = running.text()
    assert series(running.scrape(), "nichealthd_device_info", adapter="efa")
    check(text)
