"""varlinkSocket / --varlink-socket: an absolute unix socket path, or "" to disable."""

from __future__ import annotations

from pathlib import Path

import pytest

from nichealthd.core.config import UNIX_PATH_MAX, ConfigError
from nichealthd.sources.config_file import load_config


def load(tmp_path: Path, line: str):
    path = tmp_path / "c.toml"
    path.write_text(line + "\n")
    return load_config(str(path))


def test_default_and_disabled(tmp_path: Path) -> None:
    assert load_config(None).varlink_socket == "/run/nichealthd/io.nichealthd.Monitor"
    assert load(tmp_path, 'varlinkSocket = ""').varlink_socket == ""
    assert load(tmp_path, 'varlinkSocket = "/srv/x.sock"').varlink_socket == "/srv/x.sock"
    assert load_config(None, {"varlinkSocket": ""}).varlink_socket == ""


@pytest.mark.parametrize("value, problem", [
    ('"relative.sock"', "expected an absolute path"),
    ('"/' + "a" * UNIX_PATH_MAX + '"', f"at most {UNIX_PATH_MAX} bytes"),
    ("5", "expected a string"),
])
def test_bad_values_name_the_key_and_line(tmp_path: Path, value: str, problem: str) -> None:
    with pytest.raises(ConfigError) as caught:
        load(tmp_path, f"varlinkSocket = {value}")
    message = str(caught.value)
    assert ":1: varlinkSocket: " in message and problem in message, message
