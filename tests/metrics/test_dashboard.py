"""The shipped Grafana dashboard, read as JSON (tests/metrics/test_prometheus.py runs every
query against a real Prometheus): each series it reads is of the selected hosts, and no
panel draws a line for every counter of every port."""

from __future__ import annotations

import json
import re
from typing import Any, Iterator

from .conftest import REPO

DASHBOARD = REPO / "packaging" / "grafana" / "nichealthd-dashboard.json"
SELECTOR = re.compile(r"([A-Za-z_:][A-Za-z0-9_:]*)?\{([^{}]*(?:\{[^{}]*\}[^{}]*)*)\}")
PER_COUNTER = ("nichealthd_port_value", "device_port:nichealthd_port_value:rate5m")


def targets() -> Iterator[tuple[dict[str, Any], str]]:
    for panel in json.loads(DASHBOARD.read_text())["panels"]:
        for target in panel.get("targets", []):
            yield panel, target["expr"]


def test_every_query_reads_the_selected_hosts_only() -> None:
    """The host selection applies to every panel, the firing alerts included (ALERTS keep
    the instance of the series that fired them); node_exporter's series by ``$node``."""
    unselected = []
    for panel, expr in targets():
        for name, labels in SELECTOR.findall(expr.replace("${node:regex}", "NODE")):
            if not re.search(r'instance=~"(\$instance|\(NODE\):\[0-9\]\+)"', labels):
                unselected.append((panel["title"], name or labels))
    assert unselected == []
    (alerts,) = [e for p, e in targets() if "ALERTS" in e]
    assert 'instance=~"$instance"' in alerts and 'job=~"$job"' in alerts


def test_no_panel_plots_every_raw_counter() -> None:
    """A line per counter of every port of every host is no picture: time series of the
    per-counter families are the top 10; every raw value is a table."""
    for panel, expr in targets():
        if not any(name in expr for name in PER_COUNTER):
            continue
        if panel["type"] == "timeseries":
            assert expr.startswith("topk(10, "), (panel["title"], expr)
        else:
            assert panel["type"] == "table" and panel["targets"][0].get("instant"), panel
