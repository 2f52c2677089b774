"""What an operator meets in the first hour with the installed service, under real systemd.

The unit's start limit: an operator's restarts never leave the service stopped, a crash loop
still does.

systemd counts every start against ``StartLimitBurst=`` within ``StartLimitIntervalSec=``,
``systemctl restart`` included, not only the restarts of ``Restart=`` (systemd.unit(5)). With
the old 5 starts in 10 minutes, the sixth ``systemctl restart`` of an operator iterating on the
configuration was refused (``start-limit-hit``) and the host went unmonitored.

1. ten ``systemctl restart`` in a row on a running service: each succeeds, and the service is
   running at the end (not ``start-limit-hit``);
2. a crash loop (every start exits 70, as an unexpected error does) is still stopped by the
   same limit: after ``StartLimitBurst`` starts the unit is failed ("Start request repeated
   too quickly").
   Only ``RestartSec=`` is shortened (100 ms by a drop-in, instead of 5 s) so that the loop
   takes seconds; the limit is the unit's.
3. a start failure the operator must fix (exit 2, an invalid configuration) is not restarted
   at all (``RestartPreventExitStatus=``).

A simulated host under /tmp, which the service's PrivateTmp= hides: the service says so and
is not healthy (it used to watch nothing and report OK / HEALTHY).
"""

from __future__ import annotations

import pytest
from install import install_from_source, point_config_at, sim_host

pytestmark = pytest.mark.e2e

UNIT = "nichealthd.service"
RESTARTS = 10
DROPIN = f"/etc/systemd/system/{UNIT}.d/10-e2e-crash.conf"


def diagnose(c) -> str:
    return (c.run(["systemctl", "status", "--no-pager", "-l", UNIT], check=False).stdout
            + "\n--- journal ---\n" + c.journal(UNIT)[-4000:])


def test_ten_restarts_leave_it_running_and_a_crash_loop_is_still_stopped(boot):
    c = boot("deps")
    install_from_source(c)
    point_config_at(c, sim_host(c))
    c.run(["systemctl", "start", UNIT], timeout=90)

    # 1. An operator's restarts, in a row: each one is a start that systemd counts.
    for n in range(1, RESTARTS + 1):
        res = c.run(["systemctl", "restart", UNIT], check=False, timeout=90)
        assert res.returncode == 0, (f"restart {n} of {RESTARTS} refused: {res.stderr}"
                                     f"{c.show(UNIT, 'Result')}\n{diagnose(c)}")
    assert c.show(UNIT, "ActiveState") == "active", diagnose(c)
    assert c.show(UNIT, "SubState") == "running"
    assert c.show(UNIT, "Result") == "success"
    assert c.show(UNIT, "NRestarts") == "0"  # none of them was systemd's own
    burst = int(c.show(UNIT, "StartLimitBurst"))
    print(f"{RESTARTS} restarts: running; StartLimitBurst={burst} in "
          f"{c.show(UNIT, 'StartLimitIntervalUSec')}")

    # 2. A crash loop: every start exits 70 (EX_SOFTWARE, what an unexpected error exits with).
    dropin = c.path(DROPIN)
    dropin.parent.mkdir(parents=True, exist_ok=True)
    dropin.write_text("[Service]\nType=simple\nExecStart=\nExecStart=/bin/sh -c 'exit 70'\n"
                      "RestartSec=100ms\n")
    c.run(["systemctl", "daemon-reload"])
    c.run(["systemctl", "reset-failed", UNIT])  # the operator's restarts above: a fresh count
    c.run(["systemctl", "restart", UNIT], check=False, timeout=90)
    # systemd 252 keeps Result=exit-code when Restart= is refused, and says why in the log.
    c.wait_for(lambda: "Start request repeated too quickly" in c.journal(UNIT), 60,
               interval=0.2, what="the crash loop to hit the start limit")
    c.wait_for(lambda: c.show(UNIT, "ActiveState") == "failed", 10, what="the unit failed")
    starts = c.journal(UNIT).count("status=70/SOFTWARE")
    print(f"crash loop stopped after {starts} starts (NRestarts={c.show(UNIT, 'NRestarts')})")
    assert starts == burst, c.journal(UNIT)[-3000:]

    # 3. Exit 2 (an invalid configuration) is not restarted: the operator fixes it first.
    dropin.write_text("[Service]\nType=simple\nExecStart=\nExecStart=/bin/sh -c 'exit 2'\n"
                      "RestartSec=100ms\n")
    c.run(["systemctl", "daemon-reload"])
    c.run(["systemctl", "reset-failed", UNIT])
    c.run(["systemctl", "restart", UNIT], check=False, timeout=90)
    c.wait_for(lambda: c.show(UNIT, "ActiveState") == "failed", 30, what="exit 2 to fail")
    assert c.show(UNIT, "Result") == "exit-code"
    assert c.show(UNIT, "NRestarts") == "0"


def test_a_sim_tree_under_tmp_is_named_as_hidden_and_not_healthy(boot):
    c = boot("deps")
    install_from_source(c)
    root = "/tmp/simhost"
    c.run(["nichealthd-sim", "create", root, "--profile", "dgx-h100"], timeout=120)
    c.path("/etc/nichealthd/config.toml").write_text(
        f'sysfsRoot = "{root}/sys"\nprocRoot = "{root}/proc"\n'
        f'metadataPath = "{root}/gpu_metadata.json"\n')
    res = c.run(["systemctl", "restart", UNIT], check=False, timeout=90)
    assert res.returncode == 0, res.stderr + diagnose(c)
    status = c.show(UNIT, "StatusText")
    print(f"STATUS={status}")
    assert status.startswith(f"no ports monitored (sysfs root {root}/sys has no class"), status
    assert "PrivateTmp=yes" in status and "/srv/nichealthd-sim" in status
    check = c.run(["nichealthctl", "check"], check=False)
    print(check.stdout)
    assert check.returncode == 1 and "PrivateTmp=yes" in check.stdout, check.stdout
    journal = c.journal(UNIT)
    for key in ("procRoot", "metadataPath"):
        assert f"{key} {root}/" in journal and f"point {key} there" in journal, journal[-3000:]
