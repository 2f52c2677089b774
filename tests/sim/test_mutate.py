"""Each mutation does what it says, in place: same inode, and an fd opened before sees it."""

from __future__ import annotations

import os
from pathlib import Path
from typing import Callable

import pytest

from nichealthd.sim import SimError, mutate, tree

IB0 = "sys/class/infiniband/mlx5_0"
PORT = IB0 + "/ports/1"


def pread(fd: int) -> str:
    return os.pread(fd, 64, 0).decode()


class Watch:
    """An fd held open across a mutation, like the daemon holds sysfs files."""

    def __init__(self, path: Path) -> None:
        self.path = path
        self.inode = path.stat().st_ino
        self.fd = os.open(path, os.O_RDONLY)

    def after(self) -> str:
        assert self.path.stat().st_ino == self.inode
        text = pread(self.fd)
        os.close(self.fd)
        return text


@pytest.fixture
def root(build: Callable[..., Path]) -> Path:
    return build("dgx-h100")


def test_set_port_writes_kernel_format_in_place(root: Path) -> None:
    state, phys = Watch(root / PORT / "state"), Watch(root / PORT / "phys_state")
    oper = Watch(root / "sys/class/net/ibp24s0/operstate")
    mutate.set_port(root, "mlx5_0", 1, state="down", phys_state="Disabled", operstate="down")
    assert state.after() == "1: DOWN\n"
    assert phys.after() == "3: Disabled\n"
    assert oper.after() == "down\n"
    mutate.set_port(root, "mlx5_0", "1", state="INIT")
    assert (root / PORT / "state").read_text() == "2: INIT\n"
    assert (root / PORT / "phys_state").read_text() == "3: Disabled\n"  # untouched
    mutate.set_port(root, "mlx5_0", 1, phys_state="PhyTest")
    assert (root / PORT / "phys_state").read_text() == "7: Phy Test\n"


@pytest.mark.parametrize(
    "kw",
    [{"state": "UP"}, {"phys_state": "Broken"}, {"operstate": "sideways"}, {"state": "9"}],
)
def test_set_port_rejects_bad_names_without_writing(root: Path, kw: dict) -> None:
    before = (root / PORT / "state").read_text()
    with pytest.raises(SimError):
        mutate.set_port(root, "mlx5_0", 1, **{"state": "DOWN", "phys_state": "Polling", **kw})
    assert (root / PORT / "state").read_text() == before


def test_bad_device_port_and_vf_operstate(root: Path) -> None:
    with pytest.raises(SimError, match="unknown device"):
        mutate.set_port(root, "mlx5_99", 1, state="DOWN")
    with pytest.raises(SimError, match="no port 2"):
        mutate.set_port(root, "mlx5_0", 2, state="DOWN")
    with pytest.raises(SimError, match="no netdev"):
        mutate.set_port(root, "mlx5_13", 1, operstate="up")


def test_uncable(root: Path) -> None:
    mutate.uncable(root, "mlx5_0", 1)
    assert (root / PORT / "state").read_text() == "1: DOWN\n"
    assert (root / PORT / "phys_state").read_text() == "2: Polling\n"
    assert (root / "sys/class/net/ibp24s0/operstate").read_text() == "down\n"
    mutate.uncable(root, "mlx5_13", 1)  # a VF has no netdev: still works


def test_recable_plugs_the_cable_back(root: Path) -> None:
    before = {name: (root / PORT / "counters" / name).read_text()
              for name in ("link_downed", "symbol_error")}
    mutate.uncable(root, "mlx5_0", 1)
    state = Watch(root / PORT / "state")
    mutate.recable(root, "mlx5_0", 1)
    assert state.after() == "4: ACTIVE\n"
    assert (root / PORT / "phys_state").read_text() == "5: LinkUp\n"
    assert (root / "sys/class/net/ibp24s0/operstate").read_text() == "up\n"
    assert before == {name: (root / PORT / "counters" / name).read_text() for name in before}
    mutate.uncable(root, "mlx5_13", 1)
    mutate.recable(root, "mlx5_13", 1)  # a VF has no netdev: still works
    assert (root / IB0.replace("mlx5_0", "mlx5_13") / "ports/1/state").read_text() \
        == "4: ACTIVE\n"


def test_counter_add_set_in_place_and_lookup_order(root: Path) -> None:
    w = Watch(root / PORT / "counters/link_downed")
    assert mutate.counter(root, "mlx5_0", 1, "link_downed", add=3) == 3
    assert w.after() == "3\n"
    w = Watch(root / PORT / "hw_counters/out_of_sequence")
    mutate.counter(root, "mlx5_0", 1, "out_of_sequence", set_to=1000)
    assert w.after() == "1000\n"
    w = Watch(root / "sys/class/net/ibp24s0/carrier_changes")
    mutate.counter(root, "mlx5_0", 1, "carrier_changes", add=5)
    assert w.after() == "5\n"
    mutate.counter(root, "mlx5_0", 1, "rx_errors", add=2)
    assert (root / "sys/class/net/ibp24s0/statistics/rx_errors").read_text() == "2\n"
    assert mutate.counter_path(root, "mlx5_0", 1, "symbol_error").parent.name == "counters"


def test_counter_plain_vs_hardware_semantics(root: Path) -> None:
    assert mutate.counter(root, "mlx5_0", 1, "link_downed", add=300) == 300
    mutate.counter(root, "mlx5_0", 1, "link_downed", set_to=250)
    assert mutate.counter(root, "mlx5_0", 1, "link_downed", add=10, hardware_semantics=True) == 255
    assert mutate.counter(root, "mlx5_0", 1, "link_downed", add=1, hardware_semantics=True) == 255
    mutate.counter(root, "mlx5_0", 1, "symbol_error", set_to=65530)
    assert (
        mutate.counter(root, "mlx5_0", 1, "symbol_error", add=9, hardware_semantics=True) == 65535
    )
    assert (
        mutate.counter(
            root, "mlx5_0", 1, "local_link_integrity_errors", add=99, hardware_semantics=True
        )
        == 15
    )
    mutate.counter(root, "mlx5_0", 1, "out_of_buffer", set_to=2**32 - 2)
    assert mutate.counter(root, "mlx5_0", 1, "out_of_buffer", add=5, hardware_semantics=True) == 3
    assert (
        mutate.counter(root, "mlx5_0", 1, "carrier_changes", add=2**40, hardware_semantics=True)
        == 2**40
    )


def test_counter_errors(root: Path) -> None:
    with pytest.raises(SimError, match="unknown counter"):
        mutate.counter(root, "mlx5_0", 1, "nope", add=1)
    with pytest.raises(SimError, match="unknown counter"):
        mutate.counter(root, "mlx5_0", 1, "operstate", add=1)
    with pytest.raises(SimError):
        mutate.counter(root, "mlx5_0", 1, "../state", add=1)
    with pytest.raises(SimError, match="exactly one"):
        mutate.counter(root, "mlx5_0", 1, "link_downed", add=1, set_to=2)
    with pytest.raises(SimError, match="unsigned"):
        mutate.counter(root, "mlx5_0", 1, "link_downed", add=-1)
    with pytest.raises(SimError, match="unknown counter"):  # VFs have no netdev
        mutate.counter(root, "mlx5_13", 1, "carrier_changes", add=1)
    mutate.garbage(root, PORT + "/counters/symbol_error", "N/A")
    with pytest.raises(SimError, match="not a number"):
        mutate.counter(root, "mlx5_0", 1, "symbol_error", add=1)
    assert mutate.counter(root, "mlx5_0", 1, "symbol_error", set_to=7) == 7


def _all_counters_zero(root: Path, dev: str) -> bool:
    d = tree.device(tree.load(root), dev)
    paths = list(mutate._counter_files(root, d))
    assert paths
    return all(p.read_text() == "0\n" for p in paths)


def test_reset_counters_scopes(root: Path) -> None:
    for dev in ("mlx5_0", "mlx5_3"):
        mutate.counter(root, dev, 1, "symbol_error", add=4)
        mutate.counter(root, dev, 1, "carrier_changes", add=4)
    w = Watch(root / PORT / "counters/symbol_error")
    mutate.reset_counters(root, "mlx5_0", 1)
    assert w.after() == "0\n"
    assert _all_counters_zero(root, "mlx5_0")
    assert not _all_counters_zero(root, "mlx5_3")
    mutate.reset_counters(root)
    assert _all_counters_zero(root, "mlx5_3")
    with pytest.raises(SimError):
        mutate.reset_counters(root, "mlx5_0", 2)


def test_reboot(build: Callable[..., Path]) -> None:
    root = build("l40-dualport")
    boot = Watch(root / "proc/sys/kernel/random/boot_id")
    old = (root / "proc/sys/kernel/random/boot_id").read_text()
    mutate.counter(root, "mlx5_0", 1, "link_downed", add=2)
    mutate.counter(root, "mlx5_0", 1, "carrier_changes", add=2)
    mutate.counter(root, "mlx5_0", 1, "rx_bytes", add=2)
    mutate.uncable(root, "mlx5_0", 1)
    mutate.set_port(root, "mlx5_1", 1, state="ACTIVE", phys_state="LinkUp", operstate="up")
    new = mutate.reboot(root)
    assert boot.after() == new + "\n" != old
    for dev in ("mlx5_0", "mlx5_1", "mlx5_2", "mlx5_3"):
        assert _all_counters_zero(root, dev)
    port0 = root / "sys/class/infiniband/mlx5_0/ports/1"
    assert (port0 / "state").read_text() == "4: ACTIVE\n"
    assert (port0 / "phys_state").read_text() == "5: LinkUp\n"
    assert (root / "sys/class/net/ibp26s0f0/operstate").read_text() == "up\n"
    # The profile's uncabled function .1 comes back uncabled.
    port1 = root / "sys/class/infiniband/mlx5_1/ports/1"
    assert (port1 / "state").read_text() == "1: DOWN\n"
    assert (port1 / "phys_state").read_text() == "2: Polling\n"
    assert (root / "sys/class/net/ibp26s0f1/operstate").read_text() == "down\n"


def test_reboot_returns_vfs_to_down(root: Path) -> None:
    mutate.set_port(root, "mlx5_13", 1, state="ACTIVE", phys_state="LinkUp")
    mutate.reboot(root)
    assert (root / "sys/class/infiniband/mlx5_13/ports/1/state").read_text() == "1: DOWN\n"


def test_remove_and_restore_device(root: Path) -> None:
    ib_dir = root / tree.device(tree.load(root), "mlx5_0")["ib_path"]
    before = sorted(str(p.relative_to(ib_dir)) for p in ib_dir.rglob("*"))
    mutate.remove_device(root, "mlx5_0")
    assert not os.path.lexists(root / IB0)
    assert not ib_dir.exists()
    assert "mlx5_0" not in os.listdir(root / "sys/class/infiniband")
    # Everything else stays: PCI function, netdev, the other devices.
    assert (root / "sys/bus/pci/devices/0000:18:00.0/vendor").exists()
    assert (root / "sys/class/net/ibp24s0/operstate").exists()
    assert not (root / "sys/class/net/ibp24s0/device/infiniband/mlx5_0").exists()
    assert (root / "sys/class/infiniband/mlx5_3/ports/1/state").exists()
    with pytest.raises(SimError):
        mutate.set_port(root, "mlx5_0", 1, state="DOWN")
    with pytest.raises(SimError):
        mutate.remove_device(root, "mlx5_0")
    mutate.restore_device(root, "mlx5_0")
    assert (root / PORT / "state").read_text() == "4: ACTIVE\n"
    assert sorted(str(p.relative_to(ib_dir)) for p in ib_dir.rglob("*")) == before
    assert (root / IB0).resolve() == ib_dir.resolve()
    with pytest.raises(SimError):
        mutate.restore_device(root, "mlx5_0")


def test_remove_and_restore_port(root: Path) -> None:
    mutate.counter(root, "mlx5_0", 1, "symbol_error", set_to=9)
    mutate.remove_port(root, "mlx5_0", 1)
    assert os.listdir(root / IB0 / "ports") == []
    with pytest.raises(SimError, match="removed"):
        mutate.counter(root, "mlx5_0", 1, "symbol_error", add=1)
    mutate.restore_port(root, "mlx5_0", 1)
    assert (root / PORT / "counters/symbol_error").read_text() == "9\n"


def test_remove_and_restore_file_any_spelling(root: Path) -> None:
    rel = PORT + "/counters/link_downed"
    mutate.remove_file(root, rel)
    assert not (root / rel).exists()
    with pytest.raises(SimError):
        mutate.remove_file(root, rel)
    # Restore through the devices/ spelling of the same file.
    real = (root / PORT).resolve().relative_to(root.resolve()) / "counters/link_downed"
    mutate.restore_file(root, real)
    assert (root / rel).read_text() == "0\n"
    with pytest.raises(SimError):
        mutate.restore_file(root, rel)
    for bad in ("/etc/passwd", "../x", "sys/../../x"):
        with pytest.raises(SimError):
            mutate.remove_file(root, bad)


def test_garbage_in_place(root: Path) -> None:
    w = Watch(root / PORT / "counters/symbol_error")
    mutate.garbage(root, PORT + "/counters/symbol_error", "abc")
    assert w.after() == "abc\n"
    mutate.garbage(root, PORT + "/rate", "")
    assert (root / PORT / "rate").read_text() == ""
    with pytest.raises(SimError):
        mutate.garbage(root, PORT + "/counters/nope")


def test_unreadable_and_readable(root: Path) -> None:
    rel = PORT + "/link_layer"
    mutate.unreadable(root, rel)
    with pytest.raises(IsADirectoryError):
        (root / rel).read_text()
    with pytest.raises(SimError):
        mutate.unreadable(root, rel)
    with pytest.raises(SimError):
        mutate.garbage(root, rel)
    mutate.readable(root, rel)
    assert (root / rel).read_text() == "InfiniBand\n"
    with pytest.raises(SimError):
        mutate.readable(root, rel)
    with pytest.raises(SimError):  # a real directory is not an unreadable file
        mutate.readable(root, PORT + "/counters")


def test_hide_and_unhide_class(root: Path) -> None:
    mutate.hide_class(root)
    assert not (root / "sys/class/infiniband").exists()
    assert "HIDDEN" in tree.show(root)
    with pytest.raises(SimError):
        mutate.hide_class(root)
    with pytest.raises(SimError, match="hidden"):
        mutate.remove_device(root, "mlx5_0")
    mutate.counter(root, "mlx5_0", 1, "symbol_error", add=1)  # devices/ tree unaffected
    mutate.unhide_class(root)
    assert (root / PORT / "counters/symbol_error").read_text() == "1\n"
    assert len(os.listdir(root / "sys/class/infiniband")) == 17
    with pytest.raises(SimError):
        mutate.unhide_class(root)


def test_show_reflects_mutations(root: Path) -> None:
    mutate.uncable(root, "mlx5_0", 1)
    mutate.remove_device(root, "mlx5_3")
    rows = {ln.split()[0]: ln.split() for ln in tree.show(root).splitlines()[1:-1]}
    assert rows["mlx5_0"][5:9] == ["DOWN", "Polling", "ibp24s0", "down"]
    assert rows["mlx5_3"][5] == "(removed)"


def test_flap_takes_the_port_down_and_up_with_its_counters(root: Path) -> None:
    seen: list[tuple[str, str, str, str]] = []
    netdev = root / "sys/class/net/ibp24s0"

    def sleep(seconds: float) -> None:  # what a running daemon would read meanwhile
        seen.append(((root / PORT / "state").read_text().strip(),
                     (root / PORT / "counters/link_downed").read_text().strip(),
                     (netdev / "carrier_changes").read_text().strip(), f"{seconds:g}"))

    mutate.flap(root, "mlx5_0", 1, cycles=2, down=3, up=7, sleep=sleep)
    assert seen == [("1: DOWN", "1", "1", "3"), ("4: ACTIVE", "1", "2", "7"),
                    ("1: DOWN", "2", "3", "3")]
    assert (root / PORT / "state").read_text() == "4: ACTIVE\n"
    assert (root / PORT / "phys_state").read_text() == "5: LinkUp\n"
    assert (netdev / "carrier_changes").read_text() == "4\n"
    assert (netdev / "operstate").read_text() == "up\n"


def test_an_interrupted_flap_leaves_the_port_up(root: Path) -> None:
    def interrupt(seconds: float) -> None:
        raise KeyboardInterrupt

    with pytest.raises(KeyboardInterrupt):
        mutate.flap(root, "mlx5_0", 1, cycles=3, down=1, sleep=interrupt)
    assert (root / PORT / "state").read_text() == "4: ACTIVE\n"
    with pytest.raises(SimError, match="cycles"):
        mutate.flap(root, "mlx5_0", 1, cycles=0, down=1)
    with pytest.raises(SimError):
        mutate.flap(root, "mlx5_0", 9, cycles=1, down=1)


def test_set_rate_takes_the_kernel_text_or_gbps_at_the_current_lanes(root: Path) -> None:
    rate = root / PORT / "rate"
    full = rate.read_text()
    assert mutate.set_rate(root, "mlx5_0", 1, "200") == "200 Gb/sec (4X HDR)"
    assert rate.read_text() == "200 Gb/sec (4X HDR)\n"
    assert mutate.set_rate(root, "mlx5_0", 1, "100G") == "100 Gb/sec (4X EDR)"
    assert mutate.set_rate(root, "mlx5_0", 1, "200 Gb/sec (2X NDR)") == "200 Gb/sec (2X NDR)"
    # no generation runs 7.5 Gb/s a lane
    assert mutate.set_rate(root, "mlx5_0", 1, "30") == "30 Gb/sec"
    for bad in ("fast", "0", "-5", "200 Gb/s"):
        with pytest.raises(SimError):
            mutate.set_rate(root, "mlx5_0", 1, bad)
    mutate.reboot(root)
    assert rate.read_text() == full


# ------------------------------------------------------------ driver events

def test_rename_moves_the_device_at_the_same_pci_function(root: Path) -> None:
    before = os.path.realpath(root / IB0 / "device")
    guid = (root / IB0 / "node_guid").read_text()
    mutate.rename_device(root, "mlx5_0", "mlx5_20")
    assert not os.path.lexists(root / IB0)
    new = root / "sys/class/infiniband/mlx5_20"
    assert os.path.realpath(new / "device") == before
    assert (new / "node_guid").read_text() == guid
    assert tree.device(tree.load(root), "mlx5_20")["pci"] == "0000:18:00.0"
    assert "mlx5_20" in tree.load(root)["roles"] and "mlx5_0" not in tree.load(root)["roles"]
    mutate.set_port(root, "mlx5_20", 1, state="DOWN")  # later mutations use the new name
    assert (new / "ports/1/state").read_text() == "1: DOWN\n"
    with pytest.raises(SimError, match="exists already"):
        mutate.rename_device(root, "mlx5_20", "mlx5_1")
    with pytest.raises(SimError, match="plain file name"):
        mutate.rename_device(root, "mlx5_20", "a/b")


def test_driver_unload_and_load_keep_the_pci_functions_and_zero_the_counters(
        root: Path) -> None:
    mutate.counter(root, "mlx5_0", 1, "symbol_error", add=7)
    names = mutate.unload_driver(root)
    assert len(names) == len(tree.load(root)["devices"])
    assert os.listdir(root / "sys/class/infiniband") == []
    assert (root / "sys/bus/pci/devices/0000:18:00.0/vendor").read_text() == "0x15b3\n"
    with pytest.raises(SimError, match="unloaded already"):
        mutate.unload_driver(root)
    assert mutate.load_driver(root) == {n: n for n in names}
    assert (root / PORT / "counters/symbol_error").read_text() == "0\n"
    with pytest.raises(SimError, match="not unloaded"):
        mutate.load_driver(root)


def test_driver_reload_with_swap_trades_two_names_at_their_pci_functions(root: Path) -> None:
    """A reload with another probe order: mlx5_0 (IB compute, 0000:18:00.0) and mlx5_1
    (Ethernet storage, 0000:29:00.0) come back under each other's names."""
    ib1 = root / "sys/class/infiniband/mlx5_1"
    functions = {n: os.path.realpath(root / f"sys/class/infiniband/{n}/device")
                 for n in ("mlx5_0", "mlx5_1")}
    layer = (root / IB0 / "ports/1/link_layer").read_text()
    roles = tree.load(root)["roles"]
    vfs = {d["name"] for d in tree.load(root)["devices"] if d.get("physfn") == "mlx5_0"}
    for bad in (("mlx5_0", "mlx5_0"), ("mlx5_0", "mlx5_99")):
        with pytest.raises(SimError):
            mutate.driver_reload(root, swap=bad)
        assert os.path.realpath(root / IB0 / "device") == functions["mlx5_0"]  # untouched
    names = mutate.driver_reload(root, swap=("mlx5_0", "mlx5_1"))
    assert (names["mlx5_0"], names["mlx5_1"], names["mlx5_2"]) == ("mlx5_1", "mlx5_0", "mlx5_2")
    assert os.path.realpath(root / IB0 / "device") == functions["mlx5_1"]
    assert os.path.realpath(ib1 / "device") == functions["mlx5_0"]
    assert (ib1 / "ports/1/link_layer").read_text() == layer
    assert (root / IB0 / "node_desc").read_text() == "mlx5_0\n"
    manifest = tree.load(root)
    assert tree.device(manifest, "mlx5_0")["pci"] == "0000:29:00.0"
    assert tree.device(manifest, "mlx5_1")["pci"] == "0000:18:00.0"
    assert (manifest["roles"]["mlx5_0"], manifest["roles"]["mlx5_1"]) == \
        (roles["mlx5_1"], roles["mlx5_0"])
    assert {d["name"] for d in manifest["devices"] if d.get("physfn") == "mlx5_1"} == vfs
    assert not list((root / ".removed").rglob("*"))  # no old class link left behind
    count = len(manifest["devices"])
    shifted = mutate.driver_reload(root, rename=True, swap=("mlx5_0", "mlx5_1"))
    assert (shifted["mlx5_0"], shifted["mlx5_1"]) == (f"mlx5_{count + 1}", f"mlx5_{count}")


def test_driver_reload_with_rename_shifts_every_name(root: Path) -> None:
    count = len(tree.load(root)["devices"])
    slept: list[float] = []
    names = mutate.driver_reload(root, down=3, rename=True, sleep=slept.append)
    assert slept == [3]
    assert names["mlx5_0"] == f"mlx5_{count}"
    listed = sorted(os.listdir(root / "sys/class/infiniband"))
    assert listed == sorted(names.values())
    moved = root / "sys/class/infiniband" / names["mlx5_0"]
    assert os.path.realpath(moved / "device").endswith("0000:18:00.0")
    vf = next(d for d in tree.load(root)["devices"] if d["kind"] == "vf")
    assert vf["physfn"] in names.values()
    assert mutate.shifted("mlx5_3", 12) == "mlx5_15"
    with pytest.raises(SimError, match="ends in a number|does not end"):
        mutate.shifted("ib", 1)
