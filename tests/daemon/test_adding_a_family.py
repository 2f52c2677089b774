"""Adding a check family that needs a new kind of fact is one family module, one source module
(which owns the fact's key and type, imported by the family), and its device field's line in
the varlink interface (ARCHITECTURE.md, "Adding a check family").

The package is copied as it is; the modules of tests/data/adding_a_family are added to
the copy, and the family's declared device field to the copy's varlink interface: nothing else
in it changes (checked file by file). Until that line is there the interface check fails,
naming the field and where it is declared. The real daemon runs from the copy on a simulated
host, and the new family's setting, event, device field (in a varlink reply checked against
the copy's interface, and refused by the shipped one) and metric series all arrive.
Shipped into a copy of the repository with its documented key as well, it breaks none of the
tests that hold the docs, the interfaces and the state files to the families.
"""

from __future__ import annotations

import filecmp
import json
import os
import shutil
import subprocess
import sys
from pathlib import Path
from typing import Callable, Iterator

import pytest

from ..harness import NotifySocket, ctl_output, run_tests_in_a_copy, wait_until
from ..metrics.conftest import get, parse
from ..netports import free_port
from .conftest import REPO, SimHost, running_daemon
from .test_service import events, notify  # noqa: F401 (fixture)

EXAMPLE = REPO / "tests/data/adding_a_family"
ADDED = {"core/checks/roce_mtu.py": "roce_mtu.py", "sources/netdev_mtu.py": "netdev_mtu.py"}
INTERFACE = "surfaces/io.nichealthd.Monitor.varlink"
CHECK = REPO / "tests/varlink/interface_check.py"  # run as a script in the copy
# Where the example's entries go: its device field at the end of type Device (its line of
# the comment before the lost NIC's), its key at the end of the man page's GENERAL KEYS and
# before the outbox bounds in the shipped config.
FIELD = "  lost_since: ?string\n"
DOC = "# A lost NIC is a Mellanox physical function"
MAN_END = ".SH KERNEL LOG\n"
CONFIG_BEFORE = "# Bound of the persistent outbox"
# The existing tests a shipped family must keep passing, in a copy of the repository with
# the example shipped: its key documented, its state section, its device field.
HELD_TESTS = ("tests/test_manpages.py", "tests/core/test_config_bounds.py",
              "tests/core/test_settings.py", "tests/core/test_state_golden.py",
              "tests/core/test_codec.py", "tests/core/test_family_seam.py",
              "tests/varlink/test_declared_fields.py", "tests/varlink/test_idl_grammar.py")


def entry(name: str) -> str:
    return (EXAMPLE / f"{name}.entry").read_text()


def insert(path: Path, anchor: str, text: str, after: bool = False) -> None:
    """``text`` before (or after) the one ``anchor`` of the file."""
    content = path.read_text()
    assert content.count(anchor) == 1, (path, anchor)
    path.write_text(content.replace(anchor, anchor + text if after else text + anchor))


def declare_in_interface(package: Path) -> None:
    """The example's device field in type Device, described in the comment above it."""
    lines = entry("io.nichealthd.Monitor.varlink").splitlines(keepends=True)
    path = package / INTERFACE
    insert(path, DOC, "".join(line for line in lines if line.startswith("#")))
    insert(path, FIELD.rstrip("\n"), "," + "".join(
        "\n" + line.rstrip("\n") for line in lines if not line.startswith("#")), after=True)


def ship(top: Path) -> None:
    """The example as a shipped family: its modules, its field in the interface, its key in
    nichealthd.toml(5) and in the shipped config."""
    for target, name in ADDED.items():
        shutil.copy(EXAMPLE / name, top / "nichealthd" / target)
    declare_in_interface(top / "nichealthd")
    insert(top / "man/nichealthd.toml.5", MAN_END, entry("nichealthd.toml.5"))
    insert(top / "etc/nichealthd/config.toml", CONFIG_BEFORE, entry("config.toml"))


def interface_check(top: Path, *args: str) -> subprocess.CompletedProcess[str]:
    """tests/varlink/interface_check.py on the package under ``top``."""
    return subprocess.run([sys.executable, str(CHECK), *args], cwd=top,
                          env=dict(os.environ, PYTHONPATH=f"{top}{os.pathsep}{REPO}"),
                          capture_output=True, text=True, timeout=60)


def differing(left: Path, right: Path) -> list[str]:
    """Files added, removed or changed between two package trees (caches ignored)."""
    out: list[str] = []

    def walk(cmp: filecmp.dircmp, prefix: str) -> None:  # type: ignore[type-arg]
        for name in cmp.left_only + cmp.right_only + cmp.diff_files + cmp.funny_files:
            out.append(prefix + name)
        for name, sub in cmp.subdirs.items():
            walk(sub, f"{prefix}{name}/")
    walk(filecmp.dircmp(left, right, ignore=["__pycache__"]), "")
    return sorted(out)


@pytest.fixture
def extended(tmp_path: Path) -> Iterator[Path]:
    """A copy of the package with the example's modules added; its parent directory."""
    top = tmp_path / "extended"
    shutil.copytree(REPO / "nichealthd", top / "nichealthd",
                    ignore=shutil.ignore_patterns("__pycache__"))
    for target, name in ADDED.items():
        shutil.copy(EXAMPLE / name, top / "nichealthd" / target)
    yield top


def test_a_family_with_a_new_fact_is_two_new_modules(
        extended: Path, sim_host: Callable[..., SimHost], notify: NotifySocket,  # noqa: F811
        tmp_path: Path) -> None:
    undeclared = interface_check(extended)
    assert undeclared.returncode == 1, undeclared.stderr
    assert undeclared.stdout.startswith(
        "Device.roce_mtu: family roce_mtu (nichealthd/core/checks/roce_mtu.py, "
        "device_field_types) declares it ?[]string; type Device of "
        "io.nichealthd.Monitor.varlink lacks it"), undeclared.stdout
    declare_in_interface(extended / "nichealthd")
    declared = interface_check(extended)
    assert declared.returncode == 0, declared.stdout + declared.stderr
    assert differing(REPO / "nichealthd", extended / "nichealthd") == sorted([*ADDED, INTERFACE])
    host = sim_host()
    with host.config.open("a") as config:
        config.write("roceMtuMinimum = 9000\n")  # the new family's setting
    shipped = subprocess.run(  # the package as shipped does not know the key
        [sys.executable, "-m", "nichealthd.cli.ctl", "config", "check", str(host.config)],
        cwd=REPO, capture_output=True, text=True, timeout=60)
    assert shipped.returncode != 0 and "roceMtuMinimum" in shipped.stdout + shipped.stderr
    device = next(d for d in host.manifest["devices"]
                  if d["kind"] == "pf" and d["link_layer"] == "Ethernet")
    roce = {"name": device["name"], "netdev": device["ports"]["1"]["netdev"]}
    (host.root / device["ports"]["1"]["netdev_path"] / "mtu").write_text("1500\n")
    socket_path, metrics = tmp_path / "varlink.sock", f"127.0.0.1:{free_port()}"
    env = dict(os.environ, NOTIFY_SOCKET=str(notify.path), PYTHONPATH=str(extended))
    with running_daemon(host.config, env, "--varlink-socket", str(socket_path),
                        "--metrics-listen", metrics, cwd=extended) as (proc, lines):
        def reported(healthy: bool) -> bool:
            return any(e["errorCode"] == ["roce_mtu"] and e["isHealthy"] is healthy
                       for e in events(host))
        wait_until(lambda: reported(False), "the roce_mtu event", proc=proc, detail=lines.tail)
        event = next(e for e in events(host) if e["errorCode"] == ["roce_mtu"])
        assert (event["checkName"], event["isFatal"]) == ("EthernetDegradationCheck", False)
        assert f"netdev {roce['netdev']} MTU 1500 is below roceMtuMinimum (9000)" in \
            event["message"]
        shown = ctl_output(socket_path, "show", "devices", "--json", env=env, cwd=extended)
        record = next(r for r in json.loads(shown) if r["device"] == roce["name"])
        assert f"{roce['netdev']}=1500" in record["roce_mtu"]
        checked = interface_check(extended, "--call", str(socket_path), "ListDevices")
        assert checked.returncode == 0, checked.stderr  # the copy's interface declares it
        record = next(r for r in json.loads(checked.stdout)["devices"]
                      if r["device"] == roce["name"])
        assert record["roce_mtu"] == [f"{roce['netdev']}=1500"]
        shipped_check = interface_check(REPO, "--call", str(socket_path), "ListDevices")
        assert shipped_check.returncode != 0  # the shipped interface does not
        assert "ListDevices.devices[" in shipped_check.stderr
        assert "].roce_mtu: not declared in io.nichealthd.Monitor" in shipped_check.stderr
        status, text = get(f"http://{metrics}/metrics")
        assert status == 200
        samples = parse(text)
        assert samples[("nichealthd_roce_mtu_bytes", frozenset(
            {("device", roce["name"]), ("port", "1"), ("netdev", roce["netdev"])}))] == 1500
        assert samples[("nichealthd_family_up", frozenset({("family", "roce_mtu")}))] == 1


def test_the_example_shipped_breaks_no_test(tmp_path: Path) -> None:
    """Shipped as ARCHITECTURE.md says (its modules, its interface field, its documented key),
    the family keeps the tests that hold the docs, the state files and the interfaces to the
    families passing: they take a family added since (the golden state files, recorded before
    it, load its section fresh) and ask of it only what the example supplies."""
    run = run_tests_in_a_copy(tmp_path / "repo", ship, HELD_TESTS)
    assert run.returncode == 0, run.stdout[-4000:] + run.stderr[-2000:]
    for shown in ("test_each_key_carries_its_man_page_line[roceMtuMinimum] PASSED",
                  "test_bounds_are_documented[roceMtuMinimum] PASSED"):
        assert shown in run.stdout  # the copy's tests saw the family
