"""The kernel plumbing on a real netdev: a veth pair (root: it creates one).

The statistics calls (SIOCETHTOOL GSSET_INFO/GSTRINGS/GSTATS) answer with veth's own
statistics; ethtool netlink FEC_GET answers EOPNOTSUPP (veth has no get_fecparam), which the
phy source takes as "not available", told once, never an error.
"""

from __future__ import annotations

import errno
import logging
import os
import shutil
import subprocess
from dataclasses import replace
from pathlib import Path
from typing import Iterator

import pytest

from nichealthd.sources import genetlink as nl
from nichealthd.sources.ethtool_kernel import (
    ETHTOOL_GENL_NAME,
    ETHTOOL_GENL_VERSION,
    ETHTOOL_MSG_FEC_GET,
    EthtoolKernel,
    fec_request,
)
from nichealthd.sources.phy import Phy
from tests import skipreasons

from .builders import config, device, host, port

pytestmark = [pytest.mark.root,
              pytest.mark.skipif(os.geteuid() != 0, reason="creates a veth pair: needs root"),
              pytest.mark.skipif(shutil.which("ip") is None, reason="needs ip(8)")]


@pytest.fixture
def veth() -> Iterator[tuple[str, str]]:
    a, b = f"nhb{os.getpid() % 100000}a", f"nhb{os.getpid() % 100000}b"
    made = subprocess.run(["ip", "link", "add", a, "type", "veth", "peer", "name", b],
                          capture_output=True, text=True)
    if made.returncode:
        pytest.skip("cannot make a veth pair here (root and the veth module): "
                    + skipreasons.first_line(made.stderr))
    try:
        yield a, b
    finally:
        subprocess.run(["ip", "link", "del", a], capture_output=True)


def test_statistics_are_veths_own(veth: tuple[str, str]) -> None:
    a, b = veth
    kernel = EthtoolKernel()
    try:
        stats = kernel.statistics(a)
        peer = int(Path(f"/sys/class/net/{b}/ifindex").read_text())
        assert stats["peer_ifindex"] == peer  # drivers/net/veth.c: the first of its set
        assert kernel.statistics(a) == stats  # the names are kept; the values asked again
        with pytest.raises(OSError) as refused:
            kernel.fec(a)
        assert refused.value.errno == errno.EOPNOTSUPP
        with pytest.raises(OSError) as gone:
            kernel.statistics("nhbnosuchdev")
        assert gone.value.errno == errno.ENODEV
    finally:
        kernel.close()


def test_genetlink_family_and_a_multipart_dump(veth: tuple[str, str]) -> None:
    with nl.GenlSocket() as sock:
        family = sock.family_id(ETHTOOL_GENL_NAME)
        assert family >= nl.GENL_ID_CTRL
        names = {nl.get_str(nl.attr_map(reply.payload).get(nl.CTRL_ATTR_FAMILY_NAME))
                 for reply in sock.request(nl.GENL_ID_CTRL, nl.CTRL_CMD_GETFAMILY,
                                           nl.CTRL_VERSION, b"", dump=True)}
        assert {"nlctrl", "ethtool"} <= names
        with pytest.raises(nl.NetlinkError) as refused:
            sock.request(family, ETHTOOL_MSG_FEC_GET, ETHTOOL_GENL_VERSION,
                         fec_request(veth[0]))
        assert refused.value.errno == errno.EOPNOTSUPP
        with pytest.raises(nl.NetlinkError) as unknown:
            sock.family_id("nhbnofam")
        assert unknown.value.errno == errno.ENOENT


def test_phy_source_says_not_available_once(veth: tuple[str, str],
                                            caplog: pytest.LogCaptureFixture) -> None:
    roce = replace(port("mlx5_0", 1, layer="Ethernet"), netdev=veth[0])
    gone = replace(port("mlx5_1", 1, layer="Ethernet"), netdev="nhbnosuchdev")
    snap = host(device("mlx5_0", ports=(roce,)), device("mlx5_1", "0000:48:00.0",
                                                         ports=(gone,)))
    source = Phy(config())
    try:
        with caplog.at_level(logging.INFO, logger="nichealthd.sources.phy"):
            for _ in range(3):
                # veth has none of the physical-layer counters and no FEC: nothing to judge
                assert source.read(snap, ["mlx5_0", "mlx5_1"]) == {}
        told = [r.getMessage() for r in caplog.records]
        assert sum(f"{veth[0]}: FEC mode and statistics not available" in m
                   for m in told) == 1
        assert sum("nhbnosuchdev: driver statistics not available" in m for m in told) == 1
        assert all(r.levelno == logging.INFO for r in caplog.records)
    finally:
        source.close()
