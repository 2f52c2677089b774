"""A real single-node Slurm cluster for the tests: munged, slurmctld and slurmd from Debian's
packages (``.ci/slurm-deps.sh``), as root, every file in one temporary directory.

The configuration is the smallest that runs: one node of one CPU in one partition, the
controller and the node on free localhost ports, state and spool directories of the test's
own, munge on its own socket with a fresh key. ``SLURM_CONF`` points the client commands
(scontrol, sinfo) at it, the daemon's included. :meth:`SlurmCluster.stop` ends the three
processes it started, and nothing else.
"""

from __future__ import annotations

import os
import shutil
import subprocess
from pathlib import Path
from typing import Any, Optional

import pytest

from ..harness import stop_process, wait_until
from ..netports import free_port

PROGRAMS = ("munged", "slurmctld", "slurmd", "scontrol", "sinfo")
START_DEADLINE = 60.0  # slurmctld and slurmd take about 1 s here; only reached when broken


def missing() -> Optional[str]:
    """Why a real cluster cannot run here, or None."""
    if os.geteuid() != 0:
        return "needs root (slurmd and munged run as root)"
    absent = [p for p in PROGRAMS if shutil.which(p) is None]
    if absent:
        return f"needs {', '.join(absent)} (.ci/slurm-deps.sh installs slurm-wlm and munge)"
    return None


def require() -> None:
    """Skip without root or the programs; fail instead where CI asks for them."""
    why = missing()
    if why is None:
        return
    if os.environ.get("NICHEALTHD_REQUIRE_SLURM"):
        pytest.fail(f"{why}, and NICHEALTHD_REQUIRE_SLURM is set")
    pytest.skip(why)



class SlurmCluster:
    """munged + slurmctld + slurmd for the node ``node``, under ``base``."""

    def __init__(self, base: Path, node: str) -> None:
        self.base = base
        self.node = node
        self.conf = base / "slurm.conf"
        self.env = dict(os.environ, SLURM_CONF=str(self.conf))
        self.procs: list[subprocess.Popen[Any]] = []

    def start(self) -> None:
        base = self.base
        munge = base / "munge"
        for sub in ("state", "spool", "log"):
            (base / sub).mkdir(mode=0o700)
        munge.mkdir(mode=0o755)  # its socket is every local user's, as /run/munge is
        key = munge / "munge.key"
        key.write_bytes(os.urandom(128))
        key.chmod(0o600)
        sock = munge / "munge.sock"
        self._spawn("munged", ["munged", "-F", "-f", f"--key-file={key}", f"--socket={sock}",
                               f"--pid-file={munge}/munged.pid", f"--log-file={munge}/log",
                               f"--seed-file={munge}/seed"])
        wait_until(sock.exists, "munged's socket", START_DEADLINE, self.procs[-1])
        self.conf.write_text("\n".join([
            "ClusterName=nichealthdtest", "SlurmctldHost=localhost",
            f"SlurmctldPort={free_port()}", f"SlurmdPort={free_port()}",
            "AuthType=auth/munge", f"AuthInfo=socket={sock}", "CredType=cred/munge",
            "SlurmUser=root", "SlurmdUser=root",
            f"StateSaveLocation={base}/state", f"SlurmdSpoolDir={base}/spool",
            f"SlurmctldPidFile={base}/slurmctld.pid", f"SlurmdPidFile={base}/slurmd.pid",
            f"SlurmctldLogFile={base}/log/slurmctld.log",
            f"SlurmdLogFile={base}/log/slurmd.log",
            "ProctrackType=proctrack/linuxproc", "TaskPlugin=task/none",
            "SelectType=select/cons_tres", "SchedulerType=sched/builtin", "MpiDefault=none",
            "ReturnToService=2", "JobCompType=jobcomp/none",
            "JobAcctGatherType=jobacct_gather/none",
            "AccountingStorageType=accounting_storage/none",
            f"NodeName={self.node} NodeHostname=localhost NodeAddr=127.0.0.1 CPUs=1 "
            f"State=UNKNOWN",
            f"PartitionName=test Nodes={self.node} Default=YES MaxTime=INFINITE State=UP",
            ""]))
        self.start_controller()
        self._spawn("slurmd", ["slurmd", "-D", "-N", self.node, "-f", str(self.conf)])
        wait_until(lambda: "IDLE" in self.show(), f"node {self.node} idle", START_DEADLINE,
                   detail=self.show)

    def start_controller(self) -> None:
        """slurmctld (again after :meth:`stop_controller`: a fresh state, ``-i``)."""
        self.controller = self._spawn("slurmctld", ["slurmctld", "-D", "-i", "-f",
                                                    str(self.conf)])

    def stop_controller(self) -> None:
        """An outage of slurmctld: the client commands then fail (after about 9 s)."""
        stop_process(self.controller)
        self.procs.remove(self.controller)

    def _spawn(self, name: str, argv: list[str]) -> subprocess.Popen[Any]:
        # The child holds its own copy of the log's descriptor: ours is closed at once.
        with open(self.base / "log" / f"{name}.out", "ab") as log:
            proc = subprocess.Popen(argv, env=self.env, stdin=subprocess.DEVNULL, stdout=log,
                                    stderr=subprocess.STDOUT)
        self.procs.append(proc)
        return proc

    def scontrol(self, *args: str) -> subprocess.CompletedProcess[str]:
        return subprocess.run(["scontrol", *args], env=self.env, capture_output=True,
                              text=True, timeout=30, check=False)

    def show(self) -> str:
        """``scontrol show node``'s output (its error text when that fails)."""
        res = self.scontrol("show", "node", self.node)
        return res.stdout + res.stderr

    def reason(self) -> str:
        """The node's reason as sinfo prints it (``none`` without one)."""
        return subprocess.run(["sinfo", "-h", "-N", "-n", self.node, "-o", "%E"],
                              env=self.env, capture_output=True, text=True, timeout=30,
                              check=True).stdout.strip()

    def drained(self) -> bool:
        state = next((w for w in self.show().split() if w.startswith("State=")), "")
        return "DRAIN" in state

    def stop(self) -> None:
        """End slurmd, slurmctld and munged (in that order), each by its own Popen."""
        for proc in reversed(self.procs):
            stop_process(proc)
        self.procs = []
