"""The PCI-side files of a simulated NIC: AER tables, hwmon sensors, PCIe link changes.

Formats as the kernel writes them: ``aer_dev_*`` are ``<ErrorName> <count>`` lines ending with
``TOTAL_ERR_COR`` / ``TOTAL_ERR_NONFATAL`` / ``TOTAL_ERR_FATAL``
(``Documentation/ABI/testing/sysfs-bus-pci-devices-aer``); a root port's
``aer_rootport_total_err_cor`` / ``_fatal`` / ``_nonfatal`` are one decimal count each, the
ERR_* messages it received from the hierarchy below it (so an error of the NIC counts in the
NIC's table and in its root port's total, as the kernel's AER driver counts it); mlx5 hwmon
``temp*_input``, ``_crit``, ``_highest`` are millidegrees Celsius, ``_label`` the sensor's
name. The mutations (``pcie-degrade``, ``aer``, ``temp``) write in place, like every sim
mutation.
"""

from __future__ import annotations

from pathlib import Path
from typing import Dict, List, Optional, Tuple

from .fsio import PathLike, SimError, write_in_place, write_new

COR_ERRORS = ("RxErr", "BadTLP", "BadDLLP", "Rollover", "Timeout", "NonFatalErr",
              "CorrIntErr", "HeaderOF")
UNCOR_ERRORS = ("Undefined", "DLP", "SDES", "TLP", "FCP", "CmpltTO", "CmpltAbrt", "UnxCmplt",
                "RxOF", "MalfTLP", "ECRC", "UnsupReq", "ACSViol", "UncorrIntErr",
                "BlockedTLP", "AtomicOpBlocked", "TLPBlockedErr", "PoisonTLPBlocked")
AER = {"correctable": ("aer_dev_correctable", COR_ERRORS, "TOTAL_ERR_COR"),
       "nonfatal": ("aer_dev_nonfatal", UNCOR_ERRORS, "TOTAL_ERR_NONFATAL"),
       "fatal": ("aer_dev_fatal", UNCOR_ERRORS, "TOTAL_ERR_FATAL")}
ROOTPORT = {"correctable": "aer_rootport_total_err_cor",
            "nonfatal": "aer_rootport_total_err_nonfatal",
            "fatal": "aer_rootport_total_err_fatal"}
CRIT_MDEG = 105000  # a ConnectX ASIC's critical threshold as mlx5 hwmon shows it
IDLE_MDEG = 55000


def _table(errors: Tuple[str, ...], total: str, counts: Dict[str, int]) -> str:
    lines = [f"{name} {counts.get(name, 0)}" for name in errors]
    lines.append(f"{total} {sum(counts.values())}")
    return "\n".join(lines) + "\n"


def aer_files(pdir: Path) -> None:
    """Zeroed AER tables of one PCIe function."""
    for file, errors, total in AER.values():
        write_new(pdir / file, _table(errors, total, {}))


def rootport_files(pdir: Path) -> None:
    """Zeroed ``aer_rootport_total_err_*`` of a root port."""
    for file in ROOTPORT.values():
        write_new(pdir / file, "0\n")


def hwmon(pdir: Path, index: int) -> None:
    """``hwmon/hwmon<index>`` with the ASIC sensor (temp1) at an idle temperature."""
    base = pdir / "hwmon" / f"hwmon{index}"
    write_new(base / "name", "mlx5\n")
    write_new(base / "temp1_label", "asic\n")
    write_new(base / "temp1_input", f"{IDLE_MDEG}\n")
    write_new(base / "temp1_highest", f"{IDLE_MDEG}\n")
    write_new(base / "temp1_crit", f"{CRIT_MDEG}\n")


def _is_bdf(name: str) -> bool:
    parts = name.split(":")
    return len(parts) == 3 and len(parts[0]) == 4 and "." in parts[2]


def _function_dir(root: Path, manifest_device: Dict[str, object]) -> Path:
    return root / str(manifest_device["pci_path"])


def chain(function: Path) -> List[Path]:
    """The functions from the root port down to ``function``."""
    out = [function]
    here = function.parent
    while _is_bdf(here.name):
        out.insert(0, here)
        here = here.parent
    return out


def hop_ends(function: Path, hop: int) -> Tuple[Path, Path]:
    """(upstream, downstream) of link ``hop`` (0: the NIC's own link, 1: the next one up)."""
    functions = chain(function)
    index = len(functions) - 1 - 2 * hop
    if index < 1:
        raise SimError(f"no PCIe hop {hop} above {function.name} "
                       f"({(len(functions)) // 2} hop(s))")
    return functions[index - 1], functions[index]


def _read(path: Path) -> str:
    return path.read_text().strip()


def pcie_degrade(function: Path, hop: int, width: Optional[int], speed: Optional[str],
                 upstream_max_speed: Optional[str] = None, restore: bool = False) -> str:
    """Train hop ``hop`` of a NIC to ``width``/``speed`` (both ends' current_link_* change);
    ``upstream_max_speed`` makes the port above slower (a Gen4 root port); ``restore``
    retrains it to the best both ends support. Returns the link as it now runs."""
    up, down = hop_ends(function, hop)
    if upstream_max_speed:
        write_in_place(up / "max_link_speed", upstream_max_speed + "\n")
    if restore or upstream_max_speed:
        speeds = [_read(up / "max_link_speed"), _read(down / "max_link_speed")]
        speed = min(speeds, key=lambda s: float(s.split()[0]))
        width = min(int(_read(up / "max_link_width")), int(_read(down / "max_link_width")))
    for end in (up, down):
        if width is not None:
            write_in_place(end / "current_link_width", f"{width}\n")
        if speed is not None:
            write_in_place(end / "current_link_speed", speed + "\n")
    return (f"{up.name} -> {down.name}: x{_read(down / 'current_link_width')} at "
            f"{_read(down / 'current_link_speed')}")


def aer(function: Path, kind: str, count: int = 1, error: Optional[str] = None,
        upstream: bool = False, root: bool = True) -> int:
    """Add ``count`` errors of ``kind`` (fatal|nonfatal|correctable) to the NIC function (or
    the port above it) and, with ``root``, to the total of the root port above (where it has
    one: the messages reached it); returns the function's new total."""
    if kind not in AER:
        raise SimError(f"aer: kind must be one of {', '.join(AER)}, got {kind!r}")
    if count < 1:
        raise SimError(f"aer: --count must be at least 1, got {count}")
    file, errors, total = AER[kind]
    target = function.parent if upstream else function
    path = target / file
    if not path.exists():
        raise SimError(f"{path} does not exist (no AER capability here)")
    counts = {}
    for line in path.read_text().splitlines():
        parts = line.split()
        if len(parts) == 2 and parts[0] in errors:
            counts[parts[0]] = int(parts[1])
    name = error or errors[1]
    if name not in errors:
        raise SimError(f"aer: {kind} error names are {', '.join(errors)}")
    counts[name] = counts.get(name, 0) + count
    write_in_place(path, _table(errors, total, counts))
    if root and _root_port(function) is not None:
        rootport_aer(function, kind, count)
    return sum(counts.values())


def _root_port(function: Path) -> Optional[Path]:
    """The root port at the top of the function's path, if it has the root port totals."""
    functions = chain(function)
    if len(functions) < 2 or not (functions[0] / ROOTPORT["fatal"]).is_file():
        return None
    return functions[0]


def rootport_aer(function: Path, kind: str, count: int = 1) -> tuple[str, int]:
    """Add ``count`` ERR_* messages of ``kind`` to the total of the root port above the NIC
    only (an error another device below it reported: a GPU, a switch port); returns the root
    port's address and its new total."""
    if kind not in ROOTPORT:
        raise SimError(f"aer: kind must be one of {', '.join(ROOTPORT)}, got {kind!r}")
    if count < 1:
        raise SimError(f"aer: --count must be at least 1, got {count}")
    port = _root_port(function)
    if port is None:
        raise SimError(f"no root port with aer_rootport_total_* above {function.name}")
    path = port / ROOTPORT[kind]
    value = int(_read(path) or 0) + count
    write_in_place(path, f"{value}\n")
    return port.name, value


def temperature(function: Path, celsius: float, crit: Optional[float] = None) -> str:
    """Set the ASIC sensor (temp1) of the NIC; ``crit`` changes its critical threshold."""
    found = sorted((function / "hwmon").glob("hwmon*/temp1_input"))
    if not found:
        raise SimError(f"{function} has no hwmon sensor")
    base = found[0].parent
    mdeg = int(celsius * 1000)
    write_in_place(base / "temp1_input", f"{mdeg}\n")
    if mdeg > int(_read(base / "temp1_highest")):
        write_in_place(base / "temp1_highest", f"{mdeg}\n")
    if crit is not None:
        write_in_place(base / "temp1_crit", f"{int(crit * 1000)}\n")
    return f"{base.name}/temp1 = {mdeg} (crit {_read(base / 'temp1_crit')})"


def device_function(root: PathLike, manifest_device: Dict[str, object]) -> Path:
    return _function_dir(Path(root), manifest_device)
