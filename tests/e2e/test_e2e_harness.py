"""The harness itself: cached Debian 12 and 13 rootfs trees boot under real systemd, can be
driven, and have a network of their own."""

from __future__ import annotations

import errno
import socket
from pathlib import Path

import pytest

pytestmark = pytest.mark.e2e


def test_container_boots_and_runs_a_unit(boot):
    c = boot("base")
    assert c.run(["systemctl", "is-system-running"]).stdout.strip() == "running"
    assert c.run(["cat", "/etc/debian_version"]).stdout.startswith("12.")
    res = c.run(["systemd-run", "--wait", "--pipe", "-q", "-p", "User=nobody", "id", "-un"])
    assert res.stdout.strip() == "nobody"
    # The test process was not captured by the container's systemd: our cgroup is ours.
    assert c.name not in Path("/proc/self/cgroup").read_text()


def test_debian13_container_boots(boot):
    c = boot("trixie")
    assert c.run(["cat", "/etc/debian_version"]).stdout.startswith("13.")
    assert c.run(["systemctl", "is-system-running"]).stdout.strip() in ("running", "degraded")


def test_container_network_is_private_so_2112_is_free_inside(boot):
    """The e2e daemons bind [::]:2112 in their own network namespace, whatever
    listens on the host's :2112 (here: this test)."""
    host = socket.socket(socket.AF_INET6, socket.SOCK_STREAM)
    try:
        host.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            host.bind(("::", 2112))
        except OSError as exc:  # someone else holds it: as good for this test
            assert exc.errno == errno.EADDRINUSE
        else:
            host.listen(1)
        c = boot("base")
        res = c.run(["python3", "-c",
                     "import socket; s = socket.socket(socket.AF_INET6); "
                     "s.bind(('::', 2112)); s.listen(1); print('bound')"])  # fmt: skip
        assert res.stdout.strip() == "bound"
        links = c.run(["ls", "/sys/class/net"]).stdout.split()
        assert links == ["lo"], links  # --private-network: loopback only
    finally:
        host.close()
