"""What the command-line entry hands to the runtime: a validated start, and the checks both
share (the GPU topology, read again on reload; the journal consumers of a configuration).

Shared by :mod:`nichealthd.runtime.daemon` (command line, start-up checks, ``--once``) and
:mod:`nichealthd.runtime.service` (the long-running loop) so that neither imports the other.
"""

from __future__ import annotations

import dataclasses
import logging
import os
from dataclasses import dataclass
from typing import Any, Callable, Optional

from ..core.config import Config
from ..core.evaluate import Topology
from ..core.topology import GpuTopology, MetadataError
from ..sources.gpu_metadata import read_gpu_metadata, resolve_names
from ..sources.pci import current_functions, read_pci_topology
from ..sources.routes import rdma_devices_of, read_default_route_netdevs
from ..sources.sandbox import hidden_paths, sandbox_hint
from ..storage.metadata_names import load_names, names_path, save_names
from ..surfaces.eventlog import EventLog
from ..surfaces.seam import cursors
from .fdplan import FdPlan
from .monitor import Monitor

log = logging.getLogger("nichealthd")

EXIT_OK, EXIT_STARTUP, EXIT_USAGE = 0, 1, 2


def warn_hidden_paths(config: Config) -> None:
    """At start and reload: each configured path the service's sandbox hides (PrivateTmp=,
    ProtectHome=), with what to do. The sysfs root is the reader's to report (it is also a
    condition of the health: a blind daemon is not a healthy host)."""
    paths = {"procRoot": config.proc_root, "bootIdPath": config.boot_id_path_setting,
             "metadataPath": config.metadata_path}
    for warning in hidden_paths(paths):
        log.warning("%s", warning)


class StartupError(Exception):
    """A start-up failure that is not a config error (exit 1); the text says what to do."""


@dataclass(frozen=True)
class TopologyChoice:
    """The topology classification runs on, why it came from where it did, and what reading
    it found worth a line (logged with the choice, once the start is valid)."""

    topology: Topology
    reason: str
    notes: tuple[str, ...] = ()

    @property
    def gpus(self) -> GpuTopology:
        return self.topology.gpus


def choose_gpu_topology(config: Config) -> tuple[GpuTopology, str]:
    """The GPU topology by ``topologySource`` (nichealthd.toml(5)): ``metadata`` is the spec's hard
    dependency (StartupError when the file is unusable), ``sysfs`` always derives it from the
    PCI tree, ``auto`` takes the metadata file when it exists and is valid, else sysfs."""
    gpus, reason, _ = _choose_gpu_topology(config)
    return gpus, reason


def _choose_gpu_topology(config: Config) -> tuple[GpuTopology, str, tuple[str, ...]]:
    """:func:`choose_gpu_topology` and its notes."""
    if config.nic_inclusion_regex_override:
        return GpuTopology.empty(), "nicInclusionRegexOverride pins the devices to monitor", ()
    mode = config.topology_source
    if mode == "sysfs":
        return _from_sysfs(config), "topologySource = sysfs", ()
    if mode == "metadata" or os.path.exists(config.metadata_path):
        try:
            gpus, notes = _from_metadata(config)
        except MetadataError as exc:
            if mode == "metadata":
                hint = sandbox_hint(config.metadata_path, "metadataPath")
                raise StartupError(f"{exc}{hint} (or set topologySource = \"auto\" to derive "
                                   f"the topology from sysfs)") from None
            return _from_sysfs(config), f"topologySource = auto, and {exc}", ()
        return gpus, (f"topologySource = {mode}, NVSentinel's GPU metadata file (metadataPath)"
                      f" is present and valid"), notes
    return _from_sysfs(config), (f"topologySource = auto, no GPU metadata file at "
                                 f"{config.metadata_path}"
                                 f"{sandbox_hint(config.metadata_path, 'metadataPath')}"), ()


def _from_sysfs(config: Config) -> GpuTopology:
    return read_pci_topology(config.sysfs_root, config.sys_class_infiniband)


def _from_metadata(config: Config) -> tuple[GpuTopology, tuple[str, ...]]:
    """The metadata file's topology with its device names resolved to PCI functions: as
    resolved when this content was first read (kept beside the state file), names not
    resolved then as they are now. A rename since then (a reload that permuted the names)
    leaves each row with the function it was written for."""
    gpus, digest = read_gpu_metadata(config.metadata_path)
    names = gpus.nic_topology.keys()
    record = names_path(config.state_dir)
    kept = load_names(record, digest)
    current = current_functions(config.sys_class_infiniband)
    resolved = resolve_names(names, current, kept)
    notes = []
    if kept is None:
        notes.append(f"GPU metadata file {config.metadata_path}: {len(resolved)} of its "
                     f"{len(names)} device names resolved to PCI functions (kept while its "
                     f"content is unchanged: roles follow the function across renames)")
    now = {address: name for name, address in current.items()}
    renamed = [f"{name} is {address}, now {now[address]}"
               for name, address in sorted(resolved.items()) if now.get(address, name) != name]
    if renamed:
        notes.append(f"GPU metadata file {config.metadata_path} predates a rename: "
                     f"{'; '.join(renamed)}")
    if resolved != kept:
        save_names(record, digest, resolved)
    return dataclasses.replace(gpus, nic_addresses=resolved), tuple(notes)


def choose_topology(config: Config) -> TopologyChoice:
    """The GPU topology (see :func:`choose_gpu_topology`) and the default route: its netdevs
    and their RDMA devices."""
    gpus, reason, notes = _choose_gpu_topology(config)
    netdevs = read_default_route_netdevs(config.proc_root, config.sys_class_net)
    routes = rdma_devices_of(config.sys_class_net, netdevs)
    return TopologyChoice(Topology(gpus, routes, default_route_netdevs=netdevs), reason,
                          notes)


def load_topology(config: Config) -> Topology:
    """:func:`choose_topology` without the reason."""
    return choose_topology(config).topology


def topology_loader(config: Config) -> Callable[[], tuple[Topology, str]]:
    """What the monitor calls to read the topology again when a new RDMA device appears."""
    def load() -> tuple[Topology, str]:
        choice = choose_topology(config)
        for note in choice.notes:
            log.info("%s", note)
        return choice.topology, choice.reason
    return load


def log_topology(choice: TopologyChoice) -> None:
    """The choice and its reason, once (start, reload); the NUMA gate when it is skipped."""
    gpus = choice.gpus
    log.info("topology from %s: %s", gpus.source, choice.reason)
    for note in choice.notes:
        log.info("%s", note)
    if gpus.source != "none" and not gpus.numa_gate:
        if gpus.gpu_pci_addresses:
            log.info("no GPU has a known NUMA node (numa_node -1, as on VMs): the NUMA gate "
                     "is skipped; management NICs are those with the default route and "
                     "BlueField DPUs")
        else:
            log.info("no GPU found: roles come from the link layer and the default route "
                     "(InfiniBand compute, Ethernet storage, BlueField and the default route "
                     "management)")


def prepare_state_dir(config: Config) -> None:
    try:
        os.makedirs(config.state_dir, exist_ok=True)
    except OSError as exc:
        raise StartupError(f"cannot create the state directory {config.state_dir}: "
                           f"{exc.strerror} (run as root, or set --state-file to a writable "
                           f"path)") from None
    if not os.access(config.state_dir, os.W_OK):
        raise StartupError(f"the state directory {config.state_dir} is not writable by this "
                           f"user (set --state-file to a writable path)")


@dataclass
class Startup:
    """Everything a validated start produced."""

    config: Config
    overrides: dict[str, Any]
    monitor: Monitor
    event_log: Optional[EventLog]
    fd_plan: FdPlan = dataclasses.field(default_factory=lambda: FdPlan(None))


def consumers(config: Config, event_log: Optional[EventLog]) -> list[str]:
    """Journal consumers of this configuration (each keeps its own delivery cursor)."""
    names = []
    if event_log is not None and event_log.durable:
        names.append(event_log.name)
    return names + cursors(config)  # the surfaces' (surfaces/seam.py)


