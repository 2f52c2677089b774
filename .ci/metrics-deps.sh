#!/bin/sh
# Debian packages for the metrics tests and the benchmark (called from .ci/run):
#   prometheus               -> promtool, for `promtool check metrics` in tests/metrics
#                               (tests/metrics/test_promtool.py: every family's series, faulted;
#                               .ci/run sets NICHEALTHD_REQUIRE_PROMTOOL=1, so they cannot skip),
#                               `promtool check/test rules` and a real prometheus loading the
#                               shipped rules and running the dashboard's queries
#                               (tests/metrics/test_prometheus.py)
#   prometheus-node-exporter -> the peer the benchmark compares against (bench/), and the
#                               series count tests/metrics/test_cardinality.py bounds ours by
#   strace                   -> syscalls per counter value in the benchmark
# On a host running systemd the packages also start their services (:9090, :9100); the tests
# and the benchmark do not use them (the benchmark runs its own node_exporter on a free port).
set -eu
export DEBIAN_FRONTEND=noninteractive
SUDO=""
[ "$(id -u)" -eq 0 ] || SUDO="sudo"
$SUDO apt-get update -qq
$SUDO apt-get install -y -qq --no-install-recommends prometheus prometheus-node-exporter strace
