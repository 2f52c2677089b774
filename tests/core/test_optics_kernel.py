"""The module read against the real kernel: ETHTOOL_MSG_MODULE_EEPROM_GET on a veth pair.

veth has no pluggable module (its ethtool_ops have no module EEPROM reads): as root the
kernel answers EOPNOTSUPP; as an unprivileged user it refuses the call before the driver is
asked (``GENL_UNS_ADMIN_PERM``: CAP_NET_ADMIN). Both are "not available" for the port, with
the reason, never an exception. Creating the pair needs root: the root test set.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import uuid
from collections.abc import Iterator
from dataclasses import replace

import pytest

from nichealthd.sources.optics import OPTICS_DROPIN, KernelPages, Optics, read_port
from tests.harness import NOBODY, nobody_can_run

from .builders import config, device, host, port

pytestmark = [pytest.mark.root,
              pytest.mark.skipif(os.geteuid() != 0 or shutil.which("ip") is None,
                                 reason="creates a veth pair (ip link): needs root")]


@pytest.fixture
def veth() -> Iterator[str]:
    name = f"nhdo{uuid.uuid4().hex[:8]}"
    subprocess.run(["ip", "link", "add", name, "type", "veth", "peer", "name", name + "p"],
                   check=True, capture_output=True)
    try:
        yield name
    finally:
        subprocess.run(["ip", "link", "del", name], capture_output=True)


def test_a_veth_answers_eopnotsupp_and_the_port_has_no_diagnostics(veth: str) -> None:
    pages = KernelPages()
    try:
        fact = read_port(pages, veth)
        assert fact.diagnostics is None
        assert fact.reason == "the driver does not read pluggable modules (EOPNOTSUPP)"
        gone = read_port(pages, veth + "x")
        assert gone.diagnostics is None and gone.reason.startswith("no such netdev")
    finally:
        pages.close()


def test_the_source_reads_a_veth_port_as_not_available_once(
        veth: str, caplog: pytest.LogCaptureFixture) -> None:
    source = Optics(config(sysfsRoot="/sys"))
    snapshot = host(device("mlx5_0", ports=(replace(port("mlx5_0", layer="Ethernet"),
                                                    netdev=veth),)))
    try:
        with caplog.at_level("INFO", logger="nichealthd.optics"):
            first = source.read(snapshot, ["mlx5_0"])
            again = source.read(snapshot, ["mlx5_0"])
    finally:
        source.close()
    assert first == again
    assert first["mlx5_0_1"].netdev == veth and first["mlx5_0_1"].diagnostics is None
    said = [r.getMessage() for r in caplog.records if "not available" in r.getMessage()]
    assert said == [f"mlx5_0_1 ({veth}): module diagnostics not available: the driver does "
                    f"not read pluggable modules (EOPNOTSUPP)"]


def test_without_cap_net_admin_the_kernel_refuses_and_the_reason_names_the_dropin(
        veth: str) -> None:
    """As nobody: every port refused, one warning for the host naming the drop-in."""
    if not nobody_can_run():
        pytest.skip(f"{sys.executable} cannot run as nobody")
    # Only the installed package: nobody may not read the checkout (a clone in a mktemp -d).
    code = f"""
import logging, sys
from datetime import datetime, timezone
from nichealthd.core.config_build import build_config
from nichealthd.core.model import DeviceSnapshot, HostSnapshot, PortSnapshot
from nichealthd.sources.optics import Optics
logging.basicConfig(stream=sys.stderr, level=logging.INFO, format="%(levelname)s %(message)s")
ports = tuple(PortSnapshot(device="mlx5_0", port=n, link_layer="Ethernet", state="4: ACTIVE",
                           phys_state="5: LinkUp", netdev=name)
              for n, name in ((1, {veth!r}), (2, {veth + "p"!r})))
device = DeviceSnapshot(name="mlx5_0", pci_address="0000:47:00.0", numa_node=0,
                        driver="mlx5_core", vendor="0x15b3", hca_type="MT4129", ports=ports)
snapshot = HostSnapshot(datetime.now(timezone.utc), "boot-1", (device,))
source = Optics(build_config({{"sysfsRoot": "/sys"}}, "test.toml", {{}}))
for _ in range(3):
    facts = source.read(snapshot, ["mlx5_0"])
source.close()
for key, fact in sorted(facts.items()):
    print(key, fact.diagnostics, fact.reason)
"""
    proc = subprocess.run([*NOBODY, sys.executable, "-c", code], cwd="/",
                          capture_output=True, text=True, timeout=60)
    assert proc.returncode == 0, proc.stderr
    lines = proc.stdout.splitlines()
    assert [line.split(" None ")[0] for line in lines] == ["mlx5_0_1", "mlx5_0_2"]
    assert all("the kernel refuses module reads without CAP_NET_ADMIN" in line
               and OPTICS_DROPIN in line for line in lines)
    said = [line for line in proc.stderr.splitlines() if "not available" in line]
    assert len(said) == 1 and said[0].startswith("WARNING module diagnostics not available "
                                                 "on any port: the kernel refuses"), said
