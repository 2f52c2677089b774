#!/bin/sh
# Debian packages for the metrics tests and the benchmark (called from .ci/run):
#   prometheus               -> promtool, for `promtool check metrics` in tests/metrics
#   prometheus-node-exporter -> the peer the benchmark compares against (bench/, not run by CI)
#   strace                   -> syscalls per counter value in the benchmark
# policy-rc.d keeps the packages' services from starting where invoke-rc.d is allowed to.
set -eu
export DEBIAN_FRONTEND=noninteractive
SUDO=""
[ "$(id -u)" -eq 0 ] || SUDO="sudo"
$SUDO apt-get update -qq
$SUDO apt-get install -y -qq --no-install-recommends prometheus prometheus-node-exporter strace
