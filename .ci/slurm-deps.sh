#!/bin/sh
# Debian 12's Slurm (22.05) and munge for tests/slurm/test_real_slurm.py (called from .ci/run):
#   slurm-wlm -> slurmctld, slurmd and the client commands (scontrol, sinfo)
#   munge     -> munged, Slurm's authentication
# The tests run their own munged, slurmctld and slurmd as root on free localhost ports with a
# configuration in a temporary directory, and stop them; on a host running systemd the
# packages also start their own services, which the tests do not use (.ci/run sets
# NICHEALTHD_REQUIRE_SLURM=1, so the tests cannot skip).
set -eu
export DEBIAN_FRONTEND=noninteractive
apt-get install -y -qq --no-install-recommends slurm-wlm munge >/dev/null
