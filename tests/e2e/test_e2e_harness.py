"""The harness itself: a cached Debian 12 rootfs boots under real systemd and can be driven."""

from __future__ import annotations

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
