"""The shipped Prometheus rules and Grafana dashboard against promtool and a real Prometheus.

``packaging/prometheus/nichealthd-rules.yml`` passes ``promtool check rules`` and its unit
tests (``nichealthd-rules.test.yml``: input series -> expected alerts, ``for`` included). Then
a real ``prometheus`` (Debian's package, the one that ships promtool) on a free port with
a temporary storage directory scrapes a real nichealthd on a simulated host, and
node_exporter's infiniband collector on the same tree where it is installed, once a second,
and evaluates the rules once a second:

- a pulled cable (``nichealthd-sim uncable``) fires ``NicHealthdPortFatal`` with the port's
  ``device`` and ``port`` (``ALERTS`` over the HTTP API), and putting it back
  (``nichealthd-sim port ... --state ACTIVE --phys-state LinkUp``) resolves it;
- every query of every dashboard panel (and of its variables) parses and returns series.

promtool and prometheus are skipped without the package unless NICHEALTHD_REQUIRE_PROMTOOL
is set (.ci/metrics-deps.sh installs it; CI sets it).
"""

from __future__ import annotations

import contextlib
import json
import os
import re
import shutil
import subprocess
import sys
import urllib.parse
from pathlib import Path
from typing import Any, Callable, Iterator

import pytest

from nichealthd.sim import mutate

from ..harness import stop_process, wait_until
from ..netports import free_port
from .conftest import REPO, RunningDaemon, get, node_exporter, node_exporter_binary
from .test_promtool import promtool

pytestmark = pytest.mark.promtool

RULES = REPO / "packaging" / "prometheus" / "nichealthd-rules.yml"
RULES_TEST = REPO / "packaging" / "prometheus" / "nichealthd-rules.test.yml"
DASHBOARD = REPO / "packaging" / "grafana" / "nichealthd-dashboard.json"
Start = Callable[[Path], RunningDaemon]
# A panel's Grafana variables, as a query with every instance and device selected.
VARIABLES = {"${node:regex}": ".+", "$__rate_interval": "1m", "$__range": "5m",
             "$job": "nichealthd", "$instance": ".*", "$device": ".*"}


def prometheus_binary() -> str:
    promtool()  # the same package: skipped or failed the same way
    found = shutil.which("prometheus")
    assert found is not None, "promtool without prometheus: install the Debian package prometheus"
    return found


# --------------------------------------------------------------------------- promtool

def test_the_rules_pass_promtool_check() -> None:
    done = subprocess.run([promtool(), "check", "rules", str(RULES)], capture_output=True,
                          text=True, timeout=60)
    assert done.returncode == 0, done.stdout + done.stderr
    assert "SUCCESS" in done.stdout


def test_the_rules_pass_their_promtool_unit_tests() -> None:
    done = subprocess.run([promtool(), "test", "rules", RULES_TEST.name], capture_output=True,
                          text=True, timeout=120, cwd=RULES_TEST.parent)
    assert done.returncode == 0, done.stdout + done.stderr
    # Each alert is exercised by the unit tests.
    alerts = set(re.findall(r"^\s+- alert: (\w+)$", RULES.read_text(), re.M))
    tested = set(re.findall(r"alertname: (\w+)$", RULES_TEST.read_text(), re.M))
    assert alerts == tested, alerts ^ tested


# ------------------------------------------------------------------ a real Prometheus

class Prometheus:
    """A ``prometheus`` on a free localhost port, scraping and evaluating once a second."""

    def __init__(self, workdir: Path, rules: str, targets: dict[str, str]) -> None:
        workdir.mkdir()
        (workdir / "rules.yml").write_text(rules)
        jobs = "".join(f"  - job_name: {job}\n    static_configs:\n"
                       f"      - targets: ['{target}']\n" for job, target in targets.items())
        (workdir / "prometheus.yml").write_text(
            "global:\n  scrape_interval: 1s\n  evaluation_interval: 1s\n"
            "rule_files:\n  - rules.yml\nscrape_configs:\n" + jobs)
        self.base = f"http://127.0.0.1:{free_port()}"
        self.log_path = workdir / "prometheus.log"
        self.log = self.log_path.open("w")
        self.proc = subprocess.Popen(
            [prometheus_binary(), f"--config.file={workdir / 'prometheus.yml'}",
             f"--storage.tsdb.path={workdir / 'data'}",
             f"--web.listen-address={self.base.removeprefix('http://')}"],
            stdout=self.log, stderr=subprocess.STDOUT, cwd=workdir)
        try:
            self.wait_for(lambda: get(self.base + "/-/ready")[0] == 200, "prometheus ready")
        except BaseException:
            self.stop()
            raise

    def wait_for(self, predicate: Callable[[], bool], what: str, timeout: float = 60) -> None:
        wait_until(predicate, what, timeout, self.proc,
                   lambda: "\n" + self.log_path.read_text()[-4000:])

    def api(self, path: str, **params: str) -> Any:
        status, body = get(f"{self.base}/api/v1/{path}?{urllib.parse.urlencode(params)}")
        answer = json.loads(body)
        assert status == 200 and answer["status"] == "success", (path, params, body)
        return answer["data"]

    def query(self, expr: str) -> list[dict[str, Any]]:
        data = self.api("query", query=expr)
        result = data["result"]
        return [{"metric": {}, "value": result}] if data["resultType"] == "scalar" \
            else list(result)

    def targets_up(self) -> bool:
        active = self.api("targets")["activeTargets"]
        return bool(active) and all(t["health"] == "up" for t in active)

    def stop(self) -> None:
        stop_process(self.proc, 10)
        self.log.close()


def shortened(rules: str) -> str:
    """The shipped rules with every ``for`` at 2 s, so that the live test waits seconds, not
    minutes; the durations themselves are promtool's unit tests' (above)."""
    out, count = re.subn(r"^(\s+for: )\S+$", r"\g<1>2s", rules, flags=re.M)
    assert count >= 1
    return out


def sim_cli(*args: str) -> None:
    """``nichealthd-sim ARGS``, as an operator's drill runs it."""
    subprocess.run([sys.executable, "-m", "nichealthd.sim", *args], check=True,
                   capture_output=True, text=True, timeout=60, cwd=REPO,
                   env=dict(os.environ, PYTHONPATH=str(REPO)))


@pytest.fixture
def stack(sim: Callable[..., Path], daemon: Start, tmp_path: Path
          ) -> Iterator[tuple[Path, Prometheus, bool]]:
    """(the simulated host, Prometheus scraping its nichealthd with the shipped rules (``for``
    shortened), whether node_exporter is scraped too)."""
    root = sim("dgx-h100")
    running = daemon(root)
    binary = node_exporter_binary()
    with contextlib.ExitStack() as stack:
        targets = {"nichealthd": running.base.removeprefix("http://")}
        if binary is not None:
            targets["node"] = stack.enter_context(node_exporter(root, binary))
        prometheus = Prometheus(tmp_path / "prometheus", shortened(RULES.read_text()), targets)
        stack.callback(prometheus.stop)
        prometheus.wait_for(prometheus.targets_up, "every target scraped")
        yield root, prometheus, binary is not None


def firing(prometheus: Prometheus, alert: str) -> list[dict[str, str]]:
    return [r["metric"] for r in prometheus.query(
        f'ALERTS{{alertname="{alert}", alertstate="firing"}}')]


def test_a_pulled_cable_fires_the_fatal_port_alert_and_its_recovery_resolves_it(
        stack: tuple[Path, Prometheus, bool]) -> None:
    root, prometheus, _ = stack
    rules = prometheus.api("rules")["groups"]
    alerts = [r for g in rules for r in g["rules"] if r["type"] == "alerting"]
    assert {r["name"] for r in alerts} >= {"NicHealthdPortFatal", "NicHealthdPortDegraded",
                                           "NicHealthdLinkFlapping", "NicHealthdDown",
                                           "NicHealthdNotPolling", "NicHealthdOutboxGrowing",
                                           "NicHealthdFamilyFailing"}
    assert all(r["annotations"].get("runbook") for r in alerts), "an alert without runbook"
    assert all(r["health"] == "ok" for g in rules for r in g["rules"]), rules
    # Healthy: the records say so and nothing fires.
    prometheus.wait_for(lambda: bool(prometheus.query("instance:nichealthd_ports_healthy:count")),
                        "the recording rules")
    assert prometheus.query("instance:nichealthd_ports_fatal:count")[0]["value"][1] == "0"
    assert not firing(prometheus, "NicHealthdPortFatal")

    sim_cli("uncable", str(root), "mlx5_0", "1")
    prometheus.wait_for(lambda: bool(firing(prometheus, "NicHealthdPortFatal")),
                        "NicHealthdPortFatal firing")
    (alert,) = firing(prometheus, "NicHealthdPortFatal")
    assert (alert["device"], alert["port"], alert["severity"]) == ("mlx5_0", "1", "critical")
    assert alert["job"] == "nichealthd"
    (active,) = [a for a in prometheus.api("alerts")["alerts"]
                 if a["labels"]["alertname"] == "NicHealthdPortFatal"]
    assert "mlx5_0 port 1" in active["annotations"]["summary"]
    assert prometheus.query("instance:nichealthd_ports_fatal:count")[0]["value"][1] == "1"

    sim_cli("port", str(root), "mlx5_0", "1", "--state", "ACTIVE", "--phys-state", "LinkUp",
            "--operstate", "up")
    prometheus.wait_for(lambda: not prometheus.query(
        'ALERTS{alertname="NicHealthdPortFatal"}'), "NicHealthdPortFatal resolved")
    assert not [a for a in prometheus.api("alerts")["alerts"]
                if a["labels"]["alertname"].startswith("NicHealthd")]


def dashboard_queries() -> list[tuple[str, str]]:
    """(panel title, query) of every panel target, rows' panels included."""
    def walk(panels: list[dict[str, Any]]) -> Iterator[tuple[str, str]]:
        for panel in panels:
            yield from walk(panel.get("panels", []))
            for target in panel.get("targets", []):
                yield panel["title"], target["expr"]
    return list(walk(json.loads(DASHBOARD.read_text())["panels"]))


def substitute(expr: str) -> str:
    for name, value in VARIABLES.items():
        expr = expr.replace(name, value)
    assert "$" not in expr, f"a variable the test does not know: {expr}"
    return expr


def test_every_dashboard_query_parses_and_returns_series(
        stack: tuple[Path, Prometheus, bool]) -> None:
    root, prometheus, with_node_exporter = stack
    dashboard = json.loads(DASHBOARD.read_text())
    assert {v["name"] for v in dashboard["templating"]["list"]} >= {"instance", "node"}
    # Data for every panel: a fatal port and a latched counter breach.
    sim_cli("uncable", str(root), "mlx5_0", "1")
    mutate.counter(root, "mlx5_1", 1, "link_downed", add=1)
    prometheus.wait_for(lambda: bool(prometheus.query("nichealthd_threshold_breached")) and
                        bool(prometheus.query("nichealthd_port_health == 2")),
                        "the faults scraped")
    # Rates need two samples in their window, the recording rules two evaluations.
    empty: list[tuple[str, str]] = []

    def every_panel_has_data() -> bool:
        # A query that does not parse fails prometheus.query at once.
        empty[:] = [(title, expr) for title, expr in dashboard_queries()
                    if not prometheus.query(substitute(expr))
                    and ("node_infiniband" not in expr or with_node_exporter)]
        return not empty

    with contextlib.suppress(AssertionError):
        prometheus.wait_for(every_panel_has_data, "every panel with data", timeout=30)
    assert not empty, f"panels without data: {empty}"
    # The variables: label_values(QUERY, LABEL) has values.
    for variable in dashboard["templating"]["list"]:
        if variable["type"] != "query":
            continue
        match = re.fullmatch(r"label_values\((.*), (\w+)\)", variable["query"]["query"])
        assert match, variable
        values = {r["metric"].get(match.group(2)) for r in
                  prometheus.query(substitute(match.group(1)))}
        assert values - {None}, variable["name"]
