"""The platform connector's keys (nichealthd.toml(5)), declared beside it as Slurm's are.

Plugged into the configuration's declarations when the surface is found (``..seam``): the
keys, defaults, bounds, man-page lines and error messages are those the daemon always had.
Two are also flags of the daemon (nichealthd(8)), declared here with their keys
(:class:`~nichealthd.core.settings.Flag`); ``runtime/daemon.py`` adds a flag for each declared
one. The outbox bounds (``outboxMaxEvents``, ``outboxMaxBytes``) stay the core's: they bound
the journal that every consumer reads, with or without a connector (the outbox is kept
without grpcio too, ``held.py``), and the event stamp ``processingStrategy`` is the core's.
"""

from __future__ import annotations

from dataclasses import dataclass

from ...core.config_errors import show
from ...core.settings import AllSettings, Duration, Flag, Settings, setting, string

DEFAULT_TARGET = "unix:///run/nvsentinel/nvsentinel.sock"


def connector_target(value: object) -> str:
    """A gRPC target (``unix:``, ``dns:`` or ``host:port``), or "" (forwarding off)."""
    text = string(value).strip()
    if text and not (text.startswith("unix:") or text.startswith("dns:") or ":" in text):
        raise ValueError(f"expected a gRPC target such as unix:///run/nvsentinel/nvsentinel.sock, "
                         f"got {show(value)}")
    return text


@dataclass(frozen=True)
class ConnectorSettings(Settings):
    """Where committed events are forwarded (NVSentinel's platform connector) and how."""

    socket: str = setting(
        "platformConnectorSocket", DEFAULT_TARGET, connector_target,
        "gRPC target of the NVSentinel platform connector; empty disables forwarding.",
        Flag("--platform-connector-socket", "URL",
             f"gRPC target of the platform connector; '' disables forwarding "
             f"(default {DEFAULT_TARGET})"))
    token_path: str = setting(
        "platformConnectorTokenPath", "", string,
        "File holding a bearer token, re-read for every call; empty means no token.",
        Flag("--platform-connector-token-path", "PATH",
             "bearer token file, re-read for every call (default none)"))
    batch_interval: float = setting(
        "connectorBatchInterval", 5.0, Duration(0.01, 3600.0),
        "How long events are collected into one batch before they are sent")
    timeout: float = setting("connectorTimeout", 5.0, Duration(0.1, 600.0),
                             "Deadline of one call to the platform connector")


def settings_of(config: AllSettings) -> ConnectorSettings:
    """The connector's settings of a loaded configuration."""
    return config.settings(ConnectorSettings)
