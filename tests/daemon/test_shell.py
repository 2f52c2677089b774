"""The command-line entry and the runtime without an import cycle, services
imported statically and given a typed context, the connector's status an immutable value."""

from __future__ import annotations

import dataclasses
import subprocess
import sys
from pathlib import Path
from typing import Callable

import pytest

from nichealthd.runtime import daemon as daemon_cli
from nichealthd.runtime import service
from nichealthd.sources.config_file import load_config
from nichealthd.storage.store import Journal
from nichealthd.surfaces.connector.sender import Sender
from nichealthd.surfaces.connector.service import ConnectorService
from nichealthd.surfaces.connector.status import ConnectorStatus
from nichealthd.surfaces.context import ServiceContext
from nichealthd.surfaces.dbus_api import DbusService
from nichealthd.surfaces.metrics import MetricsService
from nichealthd.surfaces.slurm.service import SlurmService

from .conftest import REPO, SimHost


def test_the_runtime_does_not_import_the_command_line_entry() -> None:
    probe = ("import sys, nichealthd.runtime.service\n"
             "assert 'nichealthd.runtime.daemon' not in sys.modules, 'service imports daemon'\n")
    subprocess.run([sys.executable, "-c", probe], cwd=REPO, check=True, timeout=60)
    source = Path(service.__file__).read_text()
    assert "importlib" not in source and "from .daemon" not in source


def test_services_are_built_statically_from_a_typed_context(
        sim_host: Callable[..., SimHost]) -> None:
    host = sim_host()
    args = daemon_cli.build_parser().parse_args(
        ["--config", str(host.config), "--platform-connector-socket",
         f"unix://{host.root}/connector.sock", "--metrics-listen", "127.0.0.1:2112",
         "--dbus", "session"])
    startup = daemon_cli.start(args)
    try:
        running = service.Daemon(startup, args)
        built = running._make_services()
        # The Slurm consumer is always built (idle while slurmDrain is off): a reload may
        # switch it on.
        assert [type(s) for s in built] == [ConnectorService, DbusService, MetricsService,
                                            SlurmService]
        for part in built:
            held = list(vars(part).values())
            assert not any(isinstance(v, service.Daemon) for v in held), part.name
        context = running.context()
        assert isinstance(context, ServiceContext)
        assert context.config() is running.config and context.journal is startup.monitor.journal
        assert context.view() is None  # no poll yet
        # The connector published its first status through the context's callback.
        assert running.connector.state == "not installed" and running.connector.target.endswith(
            "connector.sock")
        connector = built[0]
        assert isinstance(connector, ConnectorService) and connector.sender is not None
        connector.sender.link.close()
    finally:
        startup.monitor.close()


def test_the_connector_status_is_a_value_replaced_on_each_change(tmp_path: Path) -> None:
    (tmp_path / "nichealthd.toml").write_text(
        f'stateFile = "{tmp_path}/state.json"\n'
        f'platformConnectorSocket = "unix://{tmp_path}/absent.sock"\n')
    config = load_config(str(tmp_path / "nichealthd.toml"))
    journal = Journal(config.state_dir)
    journal.recover(0)
    published: list[ConnectorStatus] = []
    sender = Sender(config, journal, on_status=published.append)
    try:
        first = published[-1]
        assert first is sender.status and first.state == "not installed" and first.last_error == ""
        sender.step()  # the socket does not exist: a new value says why
    finally:
        sender.link.close()
    assert published[-1] is not first and "does not exist" in published[-1].last_error
    assert first.last_error == ""  # the value handed out before did not change
    with pytest.raises(dataclasses.FrozenInstanceError):
        first.state = "connected"  # type: ignore[misc]
