"""From outside, with a real slurmctld and slurmd (Debian's slurm-wlm, run by the test as
root): a port pulled on a simulated host drains the node with nichealthd's reason within 5 s
of the event, its recovery resumes it, an administrator's drain is never lifted, and what
nichealthd drained for survives a restart. The host is driven with ``nichealthd-sim``
commands, as an operator's drill would."""

from __future__ import annotations

import json
import re
import shutil
import subprocess
import sys
import time
from datetime import datetime
from pathlib import Path
from typing import Any, Iterator

import pytest

from .. import simtrees
from ..harness import REPO, SimDaemon, wait_until
from .cluster import SlurmCluster, require

pytestmark = pytest.mark.root

NODE = "dgx-h100-sim"  # the sim host's nodeName: the default slurmNodeName
DRAIN_WITHIN = 5.0  # seconds from the fatal event to the drained node (the bound)


@pytest.fixture(scope="module")
def cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[SlurmCluster]:
    require()
    slurm = SlurmCluster(tmp_path_factory.mktemp("slurm"), NODE)
    try:
        began = time.monotonic()
        slurm.start()
        print(f"munged, slurmctld and slurmd up, node idle, in {time.monotonic() - began:.2f} s")
        yield slurm
    finally:
        slurm.stop()


@pytest.fixture
def host(cluster: SlurmCluster) -> Iterator[Path]:
    """A sim host with slurmDrain and slurmResume on; the node resumed and reasonless."""
    root = simtrees.take()
    config = root / "nichealthd.toml"
    config.write_text(config.read_text() + "slurmDrain = true\nslurmResume = true\n")
    yield root
    cluster.scontrol("update", f"NodeName={NODE}", "State=RESUME")


def sim(*args: str) -> None:
    subprocess.run([sys.executable, "-m", "nichealthd.sim", *args], cwd=REPO, check=True,
                   capture_output=True, timeout=60)


def start(root: Path, cluster: SlurmCluster) -> SimDaemon:
    daemon = SimDaemon(root, ["--polling-interval", "200ms"], env={"SLURM_CONF": str(cluster.conf)})
    daemon.wait_log("ready")
    return daemon


def events(root: Path) -> list[dict[str, Any]]:
    path = root / "events.jsonl"
    return [json.loads(line) for line in path.read_text().splitlines()] if path.exists() else []


def fatal_event(daemon: SimDaemon, root: Path, seen: int) -> dict[str, Any]:
    """The first fatal event committed after the first ``seen`` events."""
    def fatal() -> list[dict[str, Any]]:
        return [e for e in events(root)[seen:] if e["isFatal"]]
    daemon.wait_until(lambda: bool(fatal()), "the fatal event")
    return fatal()[0]


def when(event: dict[str, Any]) -> float:
    return datetime.fromisoformat(event["generatedTimestamp"].replace("Z", "+00:00")).timestamp()


def pull_and_drain(daemon: SimDaemon, root: Path, cluster: SlurmCluster) -> float:
    """Pull mlx5_0 port 1's cable; the seconds from its fatal event to the drained node."""
    seen = len(events(root))
    sim("uncable", str(root), "mlx5_0", "1")
    event = fatal_event(daemon, root, seen)
    daemon.wait_until(cluster.drained, "the node drained", timeout=30)
    drained_at = time.time()
    assert cluster.reason() == ("nichealthd: mlx5_0 1: state DOWN, phys_state Polling - "
                                "no connectivity")
    return drained_at - when(event)


def recable(root: Path) -> None:
    sim("recable", str(root), "mlx5_0", "1")


def test_fatal_drains_within_5s_and_recovery_resumes(host: Path, cluster: SlurmCluster) -> None:
    daemon = start(host, cluster)
    try:
        assert not cluster.drained()
        took = pull_and_drain(daemon, host, cluster)
        print(f"drained {took:.3f} s after the fatal event")
        assert took <= DRAIN_WITHIN, f"drained {took:.2f} s after the event"
        recable(host)
        daemon.wait_until(lambda: not cluster.drained(), "the node resumed", timeout=30)
        assert cluster.reason() == "none"
        log = daemon.log()
        assert "Slurm drain: scontrol drain" in log and "Slurm resume: scontrol resume" in log
    finally:
        assert daemon.stop() == 0, daemon.log()


def test_an_administrators_drain_is_never_lifted(host: Path, cluster: SlurmCluster) -> None:
    daemon = start(host, cluster)
    try:
        # 1. The administrator drains over nichealthd's drain: the recovery leaves it.
        pull_and_drain(daemon, host, cluster)
        cluster.scontrol("update", f"NodeName={NODE}", "State=DRAIN", "Reason=admin")
        recable(host)
        daemon.wait_log("not nichealthd's: left as it is")
        assert cluster.drained() and cluster.reason() == "admin"
        # 2. The node already drained by the administrator: a fault neither replaces the
        # reason nor, once recovered, resumes the node.
        seen = len(events(host))
        sim("uncable", str(host), "mlx5_0", "1")
        fatal_event(daemon, host, seen)
        daemon.wait_log("has another reason (admin)")
        recable(host)
        daemon.wait_log("nothing to resume")
        assert cluster.drained() and cluster.reason() == "admin"
    finally:
        assert daemon.stop() == 0, daemon.log()


def test_the_drain_survives_a_restart(host: Path, cluster: SlurmCluster) -> None:
    daemon = start(host, cluster)
    try:
        pull_and_drain(daemon, host, cluster)
    finally:
        assert daemon.stop() == 0, daemon.log()
    record = json.loads((host / "var/lib/nichealthd/slurm.json").read_text())
    assert record["reason"].startswith("nichealthd: mlx5_0 1:") and record["conditions"]
    recable(host)  # while the daemon is down
    daemon = start(host, cluster)
    try:
        daemon.wait_until(lambda: not cluster.drained(), "the node resumed after a restart",
                          timeout=30)
    finally:
        assert daemon.stop() == 0, daemon.log()


def test_a_drain_during_an_outage_of_slurmctld_is_done_after_a_restart(
        host: Path, cluster: SlurmCluster) -> None:
    """At-least-once: the fault comes while slurmctld is down; every attempt fails, the event
    stays pending across a restart of nichealthd, and the node is drained once slurmctld is
    back."""
    config = host / "nichealthd.toml"
    config.write_text(config.read_text() + "slurmRetries = 1\n")
    daemon = start(host, cluster)
    cluster.stop_controller()
    try:
        sim("uncable", str(host), "mlx5_0", "1")
        daemon.wait_log("Unable to contact slurm controller", timeout=60)
        assert "the event stays pending" in daemon.log()
    finally:
        assert daemon.stop() == 0, daemon.log()
        cluster.start_controller()
    wait_until(lambda: "State=" in cluster.show(), "slurmctld back", 60, detail=cluster.show)
    daemon = start(host, cluster)
    try:
        daemon.wait_until(cluster.drained, "the node drained after the outage", timeout=60)
        assert cluster.reason().startswith("nichealthd: mlx5_0 1: state DOWN")
    finally:
        assert daemon.stop() == 0, daemon.log()


def test_a_reboot_with_the_port_still_down_keeps_the_node_drained(
        host: Path, cluster: SlurmCluster) -> None:
    """The first poll of a new boot clears every condition of the earlier boot and reports
    the port still down again, in one commit: the node is not resumed in between."""
    daemon = start(host, cluster)
    try:
        pull_and_drain(daemon, host, cluster)
    finally:
        assert daemon.stop() == 0, daemon.log()
    sim("reboot", str(host))
    sim("uncable", str(host), "mlx5_0", "1")
    daemon = start(host, cluster)
    try:
        daemon.wait_log("skipped: a fatal event follows")
        daemon.wait_log("already drained by nichealthd")
        assert cluster.drained() and cluster.reason().startswith("nichealthd: mlx5_0 1:")
        assert "Slurm resume" not in daemon.log() and "nothing to resume" not in daemon.log()
    finally:
        assert daemon.stop() == 0, daemon.log()


def syscall_group(name: str, seen: set[str]) -> set[str]:
    """The system calls of a systemd syscall group (``@system-service``), nested ones too."""
    lines = subprocess.run(["systemd-analyze", "syscall-filter", name], capture_output=True,
                           text=True, check=True, timeout=60).stdout.splitlines()[1:]
    calls: set[str] = set()
    for word in (line.strip() for line in lines):
        if word.startswith("@") and word not in seen:
            seen.add(word)
            calls |= syscall_group(word, seen)
        elif word and not word.startswith(("@", "#")):
            calls.add(word)
    return calls


def test_the_units_sandbox_lets_scontrol_and_sinfo_run(cluster: SlurmCluster,
                                                       tmp_path: Path) -> None:
    """What the commands do under strace, against the shipped unit: every system call in its
    SystemCallFilter= (allowed groups less the denied ones) and no writable and executable
    memory (MemoryDenyWriteExecute=yes). The rest of the sandbox (TCP to slurmctld, /etc/slurm
    read-only, munge's socket) is argued in systemd/examples/slurm.conf."""
    if not (shutil.which("strace") and shutil.which("systemd-analyze")):
        pytest.skip("needs strace and systemd-analyze (.ci/run installs them)")
    unit = (REPO / "systemd/nichealthd.service").read_text()
    filters = re.findall(r"^SystemCallFilter=(.*)$", unit, re.M)
    allowed: set[str] = set()
    for line in filters:
        deny = line.startswith("~")
        for group in line.lstrip("~").split():
            calls = syscall_group(group, set()) if group.startswith("@") else {group}
            allowed = allowed - calls if deny else allowed | calls
    assert "MemoryDenyWriteExecute=yes" in unit
    used: set[str] = set()
    for argv in (["scontrol", "update", f"NodeName={NODE}", "State=DRAIN", "Reason=nichealthd: x"],
                 ["sinfo", "-h", "-N", "-n", NODE, "-o", "%E"],
                 ["scontrol", "update", f"NodeName={NODE}", "State=RESUME"]):
        trace = tmp_path / "trace"
        done = subprocess.run(["strace", "-f", "-qq", "-o", str(trace), *argv], env=cluster.env,
                              capture_output=True, text=True, timeout=60)
        assert done.returncode == 0, done.stderr
        text = trace.read_text()
        assert "PROT_WRITE|PROT_EXEC" not in text, argv
        used |= set(re.findall(r"^(?:\d+\s+)?(\w+)\(", text, re.M))
    assert used and not used - allowed, sorted(used - allowed)
