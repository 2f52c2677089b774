"""The nichealthd-sim command line: every subcommand works, bad arguments exit 2 in one line."""

from __future__ import annotations

import contextlib
import io
import os
import subprocess
import sys
from pathlib import Path

import pytest

from nichealthd.sim import tree
from nichealthd.sim.cli import main
from nichealthd.sim.profiles import PROFILES
from tests import simtrees

REPO = Path(__file__).resolve().parents[2]


def run(capsys: pytest.CaptureFixture[str], *argv: str) -> tuple:
    """(exit status, stdout, stderr) of main(argv), argparse exits included."""
    try:
        code = main(list(argv))
    except SystemExit as exc:
        code = exc.code if isinstance(exc.code, int) else 1
    out, err = capsys.readouterr()
    return code, out, err


@pytest.fixture
def root() -> str:
    """A host the test may change (tests/simtrees.py; ``create`` is shared_root's)."""
    return str(simtrees.take("dgx-h100"))


@pytest.fixture(scope="module")
def shared_root(tmp_path_factory: pytest.TempPathFactory) -> str:
    """A host made by ``create``, for commands that must fail before changing anything."""
    path = str(tmp_path_factory.mktemp("cli") / "host")
    out = io.StringIO()
    with contextlib.redirect_stdout(out):
        code = main(["create", path, "--profile", "dgx-h100"])
    assert code == 0 and "17 devices" in out.getvalue()
    return path


def test_profiles_lists_every_profile(capsys: pytest.CaptureFixture[str]) -> None:
    code, out, _ = run(capsys, "profiles")
    assert code == 0
    assert [ln.split()[0] for ln in out.splitlines()] == list(PROFILES)


def test_create_options(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    path = str(tmp_path / "s")
    assert run(capsys, "create", path, "--profile", "synthetic", "--devices", "5")[0] == 0
    assert len(tree.load(path)["devices"]) == 5  # not the profile's default 8
    assert run(capsys, "create", path, "--profile", "synthetic")[0] == 2
    code, _, _ = run(
        capsys, "create", path, "--profile", "l40s-oci", "--force", "--no-new-hw-counters"
    )
    assert code == 0
    hw = Path(path) / "sys/class/infiniband/mlx5_0/ports/1/hw_counters"
    assert (hw / "lifespan").exists() and not (hw / "req_rnr_retries_exceeded").exists()


@pytest.mark.parametrize("profile,via", [("l40s-onprem-bond", "bond0"),
                                         ("l40s-onprem-vlan", "vlan100"),
                                         ("l40s-onprem-ipv6", "enp13s0np0")])
def test_create_routing_profiles(tmp_path: Path, capsys: pytest.CaptureFixture[str],
                                 profile: str, via: str) -> None:
    path = str(tmp_path / profile)
    code, out, _ = run(capsys, "create", path, "--profile", profile)
    assert code == 0 and "management" in out
    code, out, _ = run(capsys, "show", path)
    assert code == 0 and out.rstrip().endswith(f"default route via {via}")


def test_every_mutation_subcommand(root: str, capsys: pytest.CaptureFixture[str]) -> None:
    port = Path(root) / "sys/class/infiniband/mlx5_0/ports/1"
    ok = [
        (
            "port",
            root,
            "mlx5_0",
            "1",
            "--state",
            "DOWN",
            "--phys-state",
            "Disabled",
            "--operstate",
            "down",
        ),
        ("uncable", root, "mlx5_3", "1"),
        ("recable", root, "mlx5_3", "1"),
        ("counter", root, "mlx5_0", "1", "link_downed", "--add", "300", "--hardware-semantics"),
        ("counter", root, "mlx5_0", "1", "carrier_changes", "--set", "4"),
        ("reset-counters", root, "mlx5_0", "1"),
        ("reset-counters", root, "mlx5_0"),
        ("reset-counters", root),
        ("remove-device", root, "mlx5_4"),
        ("restore-device", root, "mlx5_4"),
        ("remove-port", root, "mlx5_4", "1"),
        ("restore-port", root, "mlx5_4", "1"),
        ("remove-file", root, "sys/class/infiniband/mlx5_0/ports/1/counters/symbol_error"),
        ("restore-file", root, "sys/class/infiniband/mlx5_0/ports/1/counters/symbol_error"),
        ("garbage", root, "sys/class/infiniband/mlx5_0/ports/1/rate", "--text", "abc"),
        ("unreadable", root, "sys/class/infiniband/mlx5_0/ports/1/link_layer"),
        ("readable", root, "sys/class/infiniband/mlx5_0/ports/1/link_layer"),
        ("hide-class", root),
        ("unhide-class", root),
        ("rename", root, "mlx5_4", "mlx5_40"),
        ("rename", root, "mlx5_40", "mlx5_4"),
        ("driver-unload", root),
        ("driver-load", root),
        ("driver-reload", root, "--down", "0.01"),
        ("reboot", root),
        ("show", root),
        ("driver-reload", root, "--rename"),
        ("driver-reload", root, "--swap", "mlx5_17", "mlx5_18"),
        ("driver-unload", root),
        ("driver-load", root, "--swap", "mlx5_17", "mlx5_18"),
    ]
    for argv in ok:
        code, out, err = run(capsys, *argv)
        assert (code, err) == (0, ""), argv
        if argv[0] == "counter" and argv[4] == "link_downed":
            assert out.strip().endswith("= 255")
        if argv[0] == "port":
            assert (port / "state").read_text() == "1: DOWN\n"
        if argv[0] == "garbage":
            assert (port / "rate").read_text() == "abc\n"
        if argv[0] == "reboot":
            assert out.startswith("boot_id ")
            assert (port / "state").read_text() == "4: ACTIVE\n"
        if argv[0] == "show":
            assert "mlx5_12" in out and "management" in out
        if argv[0] == "driver-reload" and "--rename" in argv:
            assert "mlx5_0 -> mlx5_17" in out
        if "--swap" in argv:
            moved = set(out.split(": ", 1)[1].strip().split(", "))
            assert moved == {"mlx5_17 -> mlx5_18", "mlx5_18 -> mlx5_17"}


@pytest.mark.parametrize(
    "argv",
    [
        ("port", "{root}", "mlx5_99", "1", "--state", "DOWN"),
        ("port", "{root}", "mlx5_0", "1", "--state", "BOGUS"),
        ("port", "{root}", "mlx5_0", "1", "--phys-state", "Up"),
        ("port", "{root}", "mlx5_0", "1"),
        ("port", "{root}", "mlx5_0", "x", "--state", "DOWN"),
        ("port", "{root}", "mlx5_0", "0", "--state", "DOWN"),
        ("port", "{root}", "mlx5_0", "5", "--state", "DOWN"),
        ("counter", "{root}", "mlx5_0", "1", "nope", "--add", "1"),
        ("counter", "{root}", "mlx5_0", "1", "link_downed"),
        ("counter", "{root}", "mlx5_0", "1", "link_downed", "--add", "x"),
        ("counter", "{root}", "mlx5_0", "1", "link_downed", "--add", "1", "--set", "1"),
        ("reset-counters", "{root}", "nope"),
        ("flap", "{root}", "mlx5_0", "1", "--cycles", "0", "--down", "0"),
        ("flap", "{root}", "mlx5_0", "1", "--down", "-1"),
        ("flap", "{root}", "mlx5_99", "1", "--down", "0"),
        ("set-rate", "{root}", "mlx5_0", "1", "fast"),
        ("set-rate", "{root}", "mlx5_0", "9", "200"),
        ("restore-device", "{root}", "mlx5_0"),
        ("remove-file", "{root}", "/etc/passwd"),
        ("readable", "{root}", "sys/class/infiniband/mlx5_0/ports/1/state"),
        ("unhide-class", "{root}"),
        ("rename", "{root}", "mlx5_0", "mlx5_1"),
        ("rename", "{root}", "mlx5_99", "mlx5_100"),
        ("driver-load", "{root}"),
        ("driver-reload", "{root}", "--down", "-1"),
        ("driver-reload", "{root}", "--down", "x"),
        ("driver-reload", "{root}", "--swap", "mlx5_0", "mlx5_0"),
        ("driver-reload", "{root}", "--swap", "mlx5_0", "mlx5_99"),
        ("driver-reload", "{root}", "--swap", "mlx5_0"),
        ("show", "{root}/sys"),
        ("create", "{root}", "--profile", "nope"),
        ("frobnicate",),
        (),
    ],
)
def test_bad_arguments_exit_2_in_one_line(
    shared_root: str, capsys: pytest.CaptureFixture[str], argv: tuple
) -> None:
    before = tree.show(shared_root)
    code, out, err = run(capsys, *(a.format(root=shared_root) for a in argv))
    assert code == 2
    assert len(err.splitlines()) == 1 and "error" in err and "Traceback" not in err
    assert out == ""
    assert tree.show(shared_root) == before


def test_console_entry_point_in_subprocess(root: str) -> None:
    env = dict(os.environ, PYTHONPATH=str(REPO))
    bad = subprocess.run(
        [
            sys.executable,
            "-m",
            "nichealthd.sim",
            "counter",
            root,
            "mlx5_0",
            "1",
            "nope",
            "--add",
            "1",
        ],
        capture_output=True,
        text=True,
        env=env,
        cwd=REPO,
        check=False,
    )
    assert bad.returncode == 2
    assert bad.stderr == "nichealthd-sim: error: unknown counter 'nope' on mlx5_0 port 1\n"
    good = subprocess.run(
        [sys.executable, "-m", "nichealthd.sim", "show", root],
        capture_output=True,
        text=True,
        env=env,
        cwd=REPO,
        check=False,
    )
    assert good.returncode == 0 and good.stdout.startswith("DEVICE")


def test_a_counter_beyond_its_hardware_width_gets_a_note(
        root: str, capsys: pytest.CaptureFixture[str]) -> None:
    """The daemon takes such a value as unreadable (core/numbers.py): a drill that adds
    100000 to a 16-bit counter is told so, not left wondering why nothing is reported."""
    code, out, err = run(capsys, "counter", root, "mlx5_0", "1", "symbol_error", "--add", "100000")
    assert code == 0 and out.strip() == "mlx5_0 port 1 symbol_error = 100000"
    assert err.startswith("note: symbol_error has 16 bits on the hardware: nichealthd takes "
                          "100000 as unreadable")
    for argv in (("symbol_error", "--set", "5"), ("port_xmit_data", "--add", "100000"),
                 ("link_downed", "--add", "300", "--hardware-semantics")):
        code, _, err = run(capsys, "counter", root, "mlx5_0", "1", *argv)
        assert code == 0 and err == "", argv
