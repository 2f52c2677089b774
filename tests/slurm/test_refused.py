"""Slurm refusing the daemon's user, through the real daemon on a simulated host (no Slurm
needed: the drain command is a stand-in that fails as scontrol does for a user without
AdminLevel): a fatal port, a drain that cannot be done, and every surface saying so —
``nichealthctl status`` (varlink) and ``/metrics`` — until the command works."""

from __future__ import annotations

import json
import shlex

from nichealthd.cli.format import Style, status_lines

from .. import simtrees
from ..metrics.conftest import RunningDaemon, parse, value
from .test_dry_run import sim, status

REFUSED = "slurm_update error: Invalid user id"


def test_a_refused_drain_is_slurm_failing_with_why() -> None:
    sim_root = simtrees.take()
    sock = sim_root.parent / "nh.sock"
    # The stand-in is a script given to the system's sh: a program in a directory others
    # may write (a temp directory) is refused (tests/slurm/test_trusted_commands.py).
    scontrol = "sh"
    drain = shlex.join([scontrol, "-c", f"echo '{REFUSED}' >&2; exit 1", "scontrol", "update"])
    config = sim_root / "nichealthd.toml"
    text = config.read_text().replace('varlinkSocket = ""', f'varlinkSocket = "{sock}"')
    config.write_text(text + 'slurmDrain = true\nslurmRetries = 1\n'
                      'slurmReasonCommand = "echo none"\n'
                      f'slurmDrainCommand = {json.dumps(drain + " NodeName={node} State=DRAIN")}\n')
    running = RunningDaemon(sim_root)
    try:
        running.wait_for(lambda: status(sock)["slurm_mode"] == "on", what="slurm on")
        assert status(sock)["slurm_failing"] == ""
        assert value(parse(running.text()), "nichealthd_slurm_failing") == 0
        sim("uncable", str(sim_root), "mlx5_0", "1")
        running.wait_for(lambda: bool(status(sock)["slurm_failing"]), what="slurm failing")
        now = status(sock)
        assert now["slurm_failing"].startswith(
            f"drain of node dgx-h100-sim: {scontrol} exited with status 1: {REFUSED} (the "
            f"daemon's user is not a Slurm administrator: grant it AdminLevel=Admin"), now
        assert now["health"] == "fatal" and now["slurm_drain_held"] is False
        assert value(parse(running.text()), "nichealthd_slurm_failing") == 1
        # The status channel lists it as every surface is listed: failing, and why.
        slurm = next(s for s in now["surfaces"] if s["name"] == "slurm")
        assert slurm["state"] == "failing" and REFUSED in slurm["last_error"], slurm
        assert value(parse(running.text()), "nichealthd_surface_state", surface="slurm",
                     state="failing") == 1
        text = "\n".join(status_lines(now, {}, Style(False), None, 10_000))
        assert f"slurm      failing (drain of node dgx-h100-sim: {scontrol}" in text
        assert "no fatal condition open" not in text
    finally:
        running.stop()
