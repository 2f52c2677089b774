"""Kernel log under real systemd: the INSTALLED .deb reading kernel messages, in Debian 12 and 13.

1. ``kernelLog = "kmsg"`` and the drop-in the package ships as an example
   (/usr/share/doc/nichealthd/examples/kmsg.conf). systemd-nspawn makes /dev/kmsg unavailable
   to a container (a writer would block on its FIFO) and leaves CAP_SYSLOG out of its
   bounding set, so the container is booted with the host's /dev/kmsg bound in read-only and
   CAP_SYSLOG allowed (``--bind-ro=/dev/kmsg --capability=CAP_SYSLOG``): what a real host
   has. The container only reads the host's kernel log, never writes to it. Without the
   drop-in the daemon logs once that /dev/kmsg cannot be opened, naming the drop-in, and runs
   on; with it the service reads /dev/kmsg (its committed cursor is a /dev/kmsg sequence
   number); without each of its lines but one the open fails again, for the reason the
   kernel and systemd give (kernel.dmesg_restrict = 1 here: CAP_SYSLOG is needed, in the
   host's user namespace). The one line this cannot show is ``DeviceAllow=/dev/kmsg r``: the
   container's systemd gets no devices controller from nspawn on this host (cgroup v1
   hybrid; the container's /sys/fs/cgroup/devices has no group of the service), so the unit's
   DevicePolicy=closed is not enforced inside the container and the node opens without it;
   on a host whose systemd manages the device cgroup, closed refuses char 1:11 without it.

2. A kernel-transport line naming a simulated NIC's PCI address reaches the installed daemon
   through the container's live system journal directory. Which journal this covers: the
   daemon reads /var/log/journal (``kernelLogPath``: a simulated host's devices need it, the
   host's own journal is only read with sysfsRoot = /sys) with python3-systemd's reader, as
   its sandboxed user through the systemd-journal group, beside the container journald's
   own system.journal. The entries are written by systemd-journal-remote (the build host's,
   the container has no network to install it) as a kernel.journal file in journald's
   machine directory, with _TRANSPORT=kernel and the simulated host's boot ID: fields
   logger(1) cannot forge. Not covered: journald receiving the line from the kernel itself
   (inside nspawn there is no /dev/kmsg for it, and writing to the host's would put a fake
   fault into the host's own kernel log), and the reader's default open of the local
   journal (kernelLogPath = "") with a simulated NIC.
"""

from __future__ import annotations

import json
import re
import shutil
from typing import Any, Iterator

import nspawn
import pytest
from install import built_deb

from nichealthd.sim.journal import kernel_log, remote_binary

pytestmark = pytest.mark.e2e

UNIT = "nichealthd.service"
SIM = "/srv/simhost"
EVENTS = "/var/log/nichealthd/events.jsonl"
STATE = "/var/lib/nichealthd/state.json"
EXAMPLE = "/usr/share/doc/nichealthd/examples/kmsg.conf"
DROPIN = "/etc/systemd/system/nichealthd.service.d/kmsg.conf"
CANNOT = "cannot read the kernel log (/dev/kmsg)"
RELEASES = pytest.mark.parametrize("flavour", ["base", "trixie"], ids=["debian12", "debian13"])


@pytest.fixture
def installed(request, e2e_ready) -> Iterator[Any]:
    """Factory: a booted container with the built .deb installed with its Recommends
    (python3-systemd among them), the dependencies from Debian only."""
    deb = built_deb()
    started: list = []

    def make(flavour: str, nspawn_args: tuple = ()) -> nspawn.Container:
        c = nspawn.Container(flavour, nspawn_args=nspawn_args)
        started.append(c)
        c.start()
        shutil.copy(deb, c.path("/root/" + deb.name))
        # The package's Recommends by name (apt's default installs them; these containers
        # switch that off, and the recommends of the recommends are not pre-fetched).
        c.run(["apt-get", "-y", "-q", "-o", "Dpkg::Options::=--force-confold", "install",
               f"/root/{deb.name}", "python3-systemd", "python3-pystemd"], timeout=300)
        assert c.path(EXAMPLE).is_file(), "the package ships the kmsg drop-in as an example"
        return c

    yield make
    for c in reversed(started):
        c.stop()


def diagnose(c: nspawn.Container) -> str:
    return (c.run(["systemctl", "status", "--no-pager", "-l", UNIT], check=False).stdout
            + "\n--- journal ---\n" + c.journal(UNIT)[-6000:])


def poll_count(c: nspawn.Container) -> int:
    out = c.run(["nichealthctl", "--json", "status"], check=False, timeout=30)
    if out.returncode != 0:
        return 0
    return int(json.loads(out.stdout).get("poll_count") or 0)


def wait_polls(c: nspawn.Container, more: int, what: str) -> None:
    """Until ``more`` polls completed after this call (the daemon's own count)."""
    target = c.wait_for(lambda: poll_count(c), 60, what="the daemon answering") + more
    c.wait_for(lambda: poll_count(c) >= target, 60, what=what)


def restart(c: nspawn.Container) -> str:
    """Restart the unit; the journal of the new run (its lines after the restart)."""
    before = c.journal(UNIT).count("Starting nichealthd.service")
    # More restarts than StartLimitBurst= allows in 10 minutes: not what is tested here.
    c.run(["systemctl", "reset-failed", UNIT], check=False)
    res = c.run(["systemctl", "restart", UNIT], check=False, timeout=90)
    assert res.returncode == 0, res.stderr + diagnose(c)
    wait_polls(c, 3, "three polls after the restart")
    assert c.show(UNIT, "SubState") == "running", diagnose(c)
    text = c.journal(UNIT)
    assert text.count("Starting nichealthd.service") == before + 1, text[-3000:]
    return text.rsplit("Starting nichealthd.service", 1)[1]


def config(c: nspawn.Container, **keys: str) -> None:
    body = "".join(f'{k} = "{v}"\n' for k, v in {
        "nodeName": "e2e-node", "eventLog": EVENTS, "pollingInterval": "1s", **keys}.items())
    c.path("/etc/nichealthd/config.toml").write_text(body)


@RELEASES
def test_kmsg_needs_the_shipped_drop_in_and_says_so(installed, flavour: str) -> None:
    c = installed(flavour, ("--bind-ro=/dev/kmsg", "--capability=CAP_SYSLOG"))
    assert c.run(["test", "-c", "/dev/kmsg"], check=False).returncode == 0
    config(c, kernelLog="kmsg")

    # Without the drop-in: one log line naming it, and the daemon runs on.
    restart(c)
    wait_polls(c, 3, "more polls without /dev/kmsg")
    run = c.journal(UNIT).rsplit("Starting nichealthd.service", 1)[1]
    assert run.count(CANNOT) == 1, run
    line = next(ln for ln in run.splitlines() if CANNOT in ln)
    assert "there is no /dev/kmsg in the service's /dev (PrivateDevices=yes)" in line, line
    assert f"install the drop-in {EXAMPLE} as {DROPIN}" in line, line
    assert c.show(UNIT, "ActiveState") == "active"

    # The documented commands (nichealthd(8), KERNEL LOG).
    c.sh(f"install -D -m 0644 {EXAMPLE} {DROPIN} && systemctl daemon-reload")
    run = restart(c)
    assert CANNOT not in run, run
    assert "kernel log: /dev/kmsg (sequence numbers as the cursor)" in run
    c.run(["systemctl", "stop", UNIT], timeout=60)  # flushes the cursor of the lines read
    cursor = json.loads(c.path(STATE).read_text())["kernel_log"]["cursor"]
    assert re.fullmatch(r"kmsg:[0-9a-f-]{36}:\d+", cursor), cursor  # records were read
    security = c.run(["systemd-analyze", "security", UNIT], check=False).stdout
    score = re.search(r"Overall exposure level for nichealthd.service: ([\d.]+)", security)
    assert score and float(score[1]) <= 2.0, security
    print(f"{flavour}: kmsg read through the drop-in, cursor {cursor}, exposure {score[1]}")

    # Each of its lines is needed (kernel.dmesg_restrict = 1 here; see the module's doc for
    # DeviceAllow=, which the container cannot show).
    if c.run(["cat", "/proc/sys/kernel/dmesg_restrict"]).stdout.strip() != "1":
        pytest.skip("kernel.dmesg_restrict is 0 on this host: CAP_SYSLOG is not needed")
    full = c.path(EXAMPLE).read_text()
    for dropped, reason in (
        (("ProtectKernelLogs",), "there is no /dev/kmsg in the service's /dev"),
        (("PrivateUsers",), "not permitted"),
        (("PrivateUsers", "CapabilityBoundingSet", "AmbientCapabilities"), "not permitted"),
    ):
        c.path(DROPIN).write_text("".join(
            f"{ln}\n" for ln in full.splitlines()
            if not any(ln.startswith(f"{key}=") for key in dropped)))
        c.run(["systemctl", "daemon-reload"])
        run = restart(c)
        assert run.count(CANNOT) == 1 and reason in run, (dropped, run)


def events(c: nspawn.Container) -> list:
    path = c.path(EVENTS)
    if not path.exists():
        return []
    return [json.loads(line) for line in path.read_text().splitlines() if line.strip()]


def kernel_events(c: nspawn.Container) -> list:
    return [e for e in events(c) if e["checkName"] == "SysLogsNICDriverError"
            or e["errorCode"][:1] and e["errorCode"][0].endswith("_repeated")]


@RELEASES
def test_installed_daemon_reads_a_kernel_line_from_the_system_journal(installed,
                                                                      flavour: str) -> None:
    if remote_binary() is None:
        pytest.skip("systemd-journal-remote is not installed on the build host "
                    "(.ci/system-deps.sh installs it)")
    c = installed(flavour)
    c.run(["nichealthd-sim", "create", SIM, "--profile", "dgx-h100"], timeout=120)
    sim = json.loads(c.path(f"{SIM}/sim.json").read_text())
    machine = c.run(["cat", "/etc/machine-id"]).stdout.strip()
    journal_dir = f"/var/log/journal/{machine}"
    assert c.path(f"{journal_dir}/system.journal").exists(), "journald's own journal"
    config(c, sysfsRoot=f"{SIM}/sys", procRoot=f"{SIM}/proc",
           metadataPath=f"{SIM}/gpu_metadata.json", kernelLogPath="/var/log/journal")
    run = restart(c)
    assert "kernel log: journal /var/log/journal (kernel transport" in run, run

    # A fatal fault of mlx5_0 and three TX timeouts of mlx5_1 within a minute, appended by
    # systemd-journal-remote to a file in journald's machine directory.
    host_root = c.path(SIM)
    kernel_log(host_root, "mlx5_0", "health_poll_failed", journal=c.path(journal_dir))
    kernel_log(host_root, "mlx5_1", "mlx5_tx_timeout_detected", count=3, interval=20,
               journal=c.path(journal_dir))
    written = c.run(["ls", "-l", f"{journal_dir}/kernel.journal"]).stdout
    assert " systemd-journal " in written, written  # the setgid directory's group

    def arrived() -> list:
        got = kernel_events(c)
        return got if len(got) >= 3 else []

    got = c.wait_for(arrived, 30, interval=0.5, what="the kernel-log events in " + EVENTS)
    pci = {d["name"]: d["pci"] for d in sim["devices"]}
    layer = {d["name"]: d["link_layer"] for d in sim["devices"]}
    fatal = [e for e in got if e["errorCode"] == ["health_poll_failed"]]
    assert len(fatal) == 1, got
    assert fatal[0]["isFatal"] and fatal[0]["recommendedAction"] == "REPLACE_VM"
    assert {"entityType": "NIC", "entityValue": "mlx5_0"} in fatal[0]["entitiesImpacted"]
    line = fatal[0]["metadata"]["kernel_log_line"]
    assert "device's health compromised" in line and f"mlx5_core {pci['mlx5_0']}: " in line
    tx = [e for e in got if e["errorCode"] == ["mlx5_tx_timeout_detected"]]
    repeated = [e for e in got if e["errorCode"] == ["mlx5_tx_timeout_detected_repeated"]]
    assert len(tx) == 1 and len(repeated) == 1, got  # one per dedup window, one repetition
    assert repeated[0]["checkName"] == f"{layer['mlx5_1']}DegradationCheck"
    assert repeated[0]["recommendedAction"] == "CONTACT_SUPPORT"
    assert not repeated[0]["isFatal"] and not repeated[0]["isHealthy"]

    # What an operator sees.
    listed = json.loads(c.run(["nichealthctl", "--json", "events", "-n", "50"]).stdout)
    assert any(e["errorCode"] == ["health_poll_failed"] for e in listed), listed
    devices = c.run(["nichealthctl", "show", "devices"]).stdout
    assert "mlx5_0 driver fault: health_poll_failed" in devices, devices
    check = c.run(["nichealthctl", "check"], check=False)
    assert check.returncode == 2, check.stdout  # a fatal driver fault

    # A restart neither misses nor repeats a line.
    restart(c)
    wait_polls(c, 2, "two more polls after the restart")
    assert kernel_events(c) == got, kernel_events(c)[len(got):]
    print(f"{flavour}: {len(got)} kernel-log events from the system journal directory")
