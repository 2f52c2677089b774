"""Every target's package, unpacked, runs with its target's CPython and the distribution's
versions of what it does not carry, and serves the whole API (packaging/README.md).

For each target of packaging/targets.toml: the package is built (tests/packaging/builds.py),
its payload unpacked, and its own /usr/bin/nichealthd started under the target's CPython
minor with a directory of the archive's versions (packaging/targets.toml ``pypi`` pins:
Ubuntu 22.04's protobuf 3.12.4, RHEL 9's 3.14.0 ...) and nothing else on its path, on a
simulated DGX-H100 host (the payload's own nichealthd-sim). It must answer `nichealthctl
show ports` over D-Bus (a private system bus with the payload's policy) and over varlink,
serve /metrics, send an event to a real gRPC platform connector (FakeConnector: grpcio of
the test environment on a unix socket), and read a kernel-log line from a real journal file
(its journal reader: python3-systemd of the archive, or carried); and it must log no missing
library. Libraries the package carries must load from /usr/lib/nichealthd/vendor, the
others from the archive's directory.

Where the archive's version of a library has no build for the target's CPython on PyPI
(Debian 13's grpcio 1.51.1 for 3.13), that library is absent here and the daemon must say so
and keep its events; Debian 13's own package is exercised in the trixie container
(tests/e2e/test_e2e_deb.py, a real gRPC call included).
"""

from __future__ import annotations

import json
import subprocess
import tempfile
import urllib.request
from pathlib import Path
from typing import Any, Iterator

import pytest

from nichealthd.sim.journal import remote_binary
from tests.connector.connector_fixtures import FakeConnector
from tests.dbus.testbus import start_bus
from tests.harness import stop_process, wait_until

from ..netports import free_port
from .builds import TARGETS, built, table
from .payload import MODULES, Payload, distro_site, interpreter_or_skip, unpack

pytestmark = pytest.mark.packaging

RULE = "mlx5_tx_timeout_detected"
MISSING = "is off: the Python module"  # nichealthd.runtime.libraries


@pytest.fixture(scope="module", params=TARGETS)
def payload(request: pytest.FixtureRequest) -> Iterator[Payload]:
    target = request.param
    python = interpreter_or_skip(target)
    package = built(target)
    with tempfile.TemporaryDirectory(prefix=f"nichealthd-{target}-") as tmp:
        root = Path(tmp) / "root"
        unpack(package, root)
        site = distro_site(target, Path(tmp) / "distro")
        yield Payload(target, root, python, site)



def events(root: Path) -> list[dict[str, Any]]:
    path = root / "events.jsonl"
    return [json.loads(line) for line in path.read_text().splitlines()] if path.exists() else []


def test_the_payload_serves_the_whole_api(payload: Payload) -> None:
    if remote_binary() is None:
        pytest.skip("needs systemd-journal-remote (.ci/system-deps.sh)")
    spec = table()["targets"][payload.target]
    with tempfile.TemporaryDirectory(prefix="nhp") as short:  # sun_path: 108 bytes
        work = Path(short)
        work.chmod(0o755)
        sim = work / "host"
        payload.run("nichealthd-sim", "create", str(sim), "--profile", "dgx-h100")
        with (sim / "nichealthd.toml").open("a") as config:
            config.write(f'kernelLogPath = "{sim / "journal"}"\n')
        (work / "bus").mkdir()
        bus = start_bus(policy_dir=payload.root / "usr/share/dbus-1/system.d",
                        directory=str(work / "bus"))
        connector = FakeConnector(str(work / "connector.sock"))
        has_grpc = "grpcio" in spec["carry"] or "grpcio" in payload.site.installed
        if has_grpc:
            connector.start()
        port = free_port()
        varlink = work / "varlink.sock"
        env = {"DBUS_SYSTEM_BUS_ADDRESS": bus.address}
        log = work / "daemon.log"
        with open(log, "wb") as out:
            daemon = subprocess.Popen(
                payload.argv("nichealthd", "--config", str(sim / "nichealthd.toml"),
                             "--dbus", "system", "--varlink-socket", str(varlink),
                             "--metrics-listen", f"127.0.0.1:{port}",
                             "--platform-connector-socket", connector.target),
                env=payload.env(**env), stdout=out, stderr=subprocess.STDOUT)
        try:
            check_daemon(payload, daemon, log, sim, varlink, port, connector, has_grpc, env)
        finally:
            stop_process(daemon)
            connector.stop()
            bus.stop()
            print(f"{payload.target}: daemon log\n{log.read_text(errors='replace')[-3000:]}")


def check_daemon(payload: Payload, daemon: subprocess.Popen[bytes], log: Path, sim: Path,
                 varlink: Path, port: int, connector: FakeConnector, has_grpc: bool,
                 env: dict[str, str]) -> None:
    def text() -> str:
        return log.read_text(errors="replace")

    wait_until(lambda: "ready:" in text() and "D-Bus API serving" in text(),
               "the daemon ready on D-Bus", 60, daemon, text)
    # nichealthctl show ports, over D-Bus (its default) and over varlink: the same ports.
    over_dbus = payload.run("nichealthctl", "show", "ports", env=env).stdout
    over_varlink = payload.run("nichealthctl", f"--varlink={varlink}", "show", "ports").stdout
    assert "mlx5_0" in over_dbus and over_dbus == over_varlink, (over_dbus, over_varlink)
    as_json = json.loads(payload.run("nichealthctl", "--json", "show", "ports", env=env).stdout)
    assert {p["device"] for p in as_json} >= {f"mlx5_{i}" for i in range(8)}
    # Metrics.
    with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=30) as answer:
        metrics = answer.read().decode()
    assert 'nichealthd_port_health{' in metrics and "nichealthd_polls_total" in metrics, \
        metrics[:500]
    # An event (a port down) and a kernel-log line (the journal reader), as an operator's drill.
    payload.run("nichealthd-sim", "uncable", str(sim), "mlx5_0", "1")
    payload.run("nichealthd-sim", "kernel-log", str(sim), "mlx5_0", RULE)
    wait_until(lambda: any(e["errorCode"] == [RULE] for e in events(sim)),
               "the kernel-log event in the event log", 60, daemon, text)
    if has_grpc:
        wait_until(lambda: RULE in [c for e in connector.events() for c in e.errorCode],
                   "the kernel-log event at the platform connector", 60, daemon, text)
        assert any(e.checkName == "InfiniBandStateCheck" and not e.isHealthy
                   for e in connector.events())
    else:
        assert f"{MISSING} grpc is not installed" in text(), text()
    log_text = text()
    missing = [line for line in log_text.splitlines() if MISSING in line]
    assert missing == ([] if has_grpc else missing[:1]), missing
    assert "kernel log: journal" in log_text, log_text


def test_carried_libraries_load_from_the_package_the_others_from_the_archive(
        payload: Payload) -> None:
    spec = table()["targets"][payload.target]
    origins = payload.origins()
    # (typing-extensions, six: requirements of those libraries, not probed themselves)
    carried = {lib for lib in spec["carry"] if lib in MODULES}
    archived = {lib for lib in payload.site.installed if lib in MODULES}
    for library in carried:
        assert origins[library].startswith(str(payload.vendor) + "/"), (library, origins)
    for library in archived:
        assert origins[library].startswith(str(payload.site.path) + "/"), (library, origins)
    print(f"{payload.target} (CPython {spec['python']}): carried "
          f"{dict(sorted(spec['carry'].items()))}, from the archive "
          f"{dict(sorted(payload.site.installed.items()))}, not installable here "
          f"{payload.site.unavailable}")
    assert set(origins) == carried | archived, origins  # nothing from anywhere else
