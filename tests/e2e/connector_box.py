"""A real platform connector for a container's service: the connector tests' FakeConnector
(a gRPC server on a unix socket, tests/connector/connector_fixtures.py) runs on the host, in
a directory that the container sees as /run/nvsentinel (``nspawn_args``), its socket mode
0666 as the real connector makes it: the service's default platformConnectorSocket reaches it.
"""

from __future__ import annotations

import contextlib
import shutil
import tempfile
from pathlib import Path
from typing import Any, Optional

from tests.connector.connector_fixtures import FakeConnector

INSIDE = "/run/nvsentinel"


class ContainerConnector:
    """Create before the container (its directory is bound at boot), start when wanted."""

    def __init__(self) -> None:
        self.directory = Path(tempfile.mkdtemp(prefix="nhc-"))  # short: sun_path
        self.directory.chmod(0o755)
        self.fake: Optional[FakeConnector] = None

    @property
    def nspawn_args(self) -> tuple[str, ...]:
        return (f"--bind={self.directory}:{INSIDE}",)

    def start(self) -> FakeConnector:
        path = self.directory / "nvsentinel.sock"
        self.fake = FakeConnector(str(path)).start()
        path.chmod(0o666)
        return self.fake

    def stop(self) -> None:
        """The connector disappears (its socket removed), as at NVSentinel's exit."""
        if self.fake is not None:
            self.fake.stop()
            self.fake = None

    def close(self) -> None:
        self.stop()
        with contextlib.suppress(OSError):
            shutil.rmtree(self.directory)


def fatal_port_events(fake: FakeConnector, device: str) -> list[Any]:
    """The fatal, unhealthy port-state events naming ``device`` the connector received."""
    return [e for e in fake.events() if e.checkName.endswith("StateCheck") and e.isFatal
            and not e.isHealthy and any(x.entityValue == device for x in e.entitiesImpacted)]
