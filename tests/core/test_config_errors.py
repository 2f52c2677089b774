"""Hostile config files give ConfigError naming file, line and key, never a traceback,
and one run reports every problem with its line and a did-you-mean hint."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Callable

import pytest

from nichealthd.core.config import ConfigError
from nichealthd.core.config_errors import Problem
from nichealthd.sources.config_file import load_config

REPO = Path(__file__).resolve().parents[2]


def write(tmp_path: Path, data: bytes, name: str = "config.toml") -> str:
    path = tmp_path / name
    path.write_bytes(data)
    return str(path)


# content -> (line, key or "" for the file itself, words of the problem)
HOSTILE: dict[str, tuple[bytes, int, str, str]] = {
    "table for a duration": (b"pollingInterval = {a = 1}\n", 1, "pollingInterval", "a table"),
    "table for a string": (b'nodeName = "n"\nstateFile = {a = 1}\n', 2, "stateFile",
                           "expected a string, got a table"),
    "array for a duration": (b"connectorTimeout = [1, 2]\n", 1, "connectorTimeout",
                             "an array"),
    "bool for a duration": (b"cardVerdictHoldTime = true\n", 1, "cardVerdictHoldTime",
                            "got true"),
    "date for a string": (b"nodeName = 1979-05-27\n", 1, "nodeName", "expected a string"),
    "invalid UTF-8 in a value": (b'nodeName = "\xff\xfe"\n', 1, "", "not valid UTF-8"),
    "invalid UTF-8 in a comment": (b"# ok\n# \xc3\x28\n", 2, "", "not valid UTF-8"),
    "5000-deep arrays": (b"x = " + b"[" * 5000 + b"]" * 5000 + b"\n", 1, "",
                         "nested too deeply"),
    "5000-deep inline tables": (b"\n\nx = " + b"{a=" * 5000 + b"1" + b"}" * 5000 + b"\n", 3,
                                "", "nested too deeply"),
    "5000-digit number": (b"outboxMaxEvents = " + b"1" * 5000 + b"\n", 1, "",
                          "too many digits"),
    "huge integer duration": (b"pollingInterval = " + b"9" * 400 + b"\n", 1,
                              "pollingInterval", "finite"),
    "huge integer threshold": (b'[[counterDetection.counters]]\nname = "link_downed"\n'
                               b"threshold = " + b"9" * 400 + b"\n", 3,
                               "counterDetection.counters[link_downed].threshold", "2^64"),
    "NUL escape in a path": (b'stateFile = "/var/lib/a\\u0000b"\n', 1, "stateFile",
                             "NUL byte"),
    "NUL escape in a counter path": (b'[[counterDetection.counters]]\nname = "x"\n'
                                     b'path = "counters/a\\u0000"\n', 3,
                                     "counterDetection.counters[x].path", "NUL byte"),
    "raw NUL byte": (b'nodeName = "a\x00b"\n', 1, "", "not valid TOML"),
    "NUL escape in a kernel-log rule's regex": (b'[[kernelLogRules]]\nname = "x"\n'
                                                b'regex = "mlx5\\u0000"\n', 3,
                                                "kernelLogRules.x.regex", "NUL byte"),
    "NUL escape in a kernel-log rule's header": (b'[[kernelLogRules]]\nname = "x"\n'
                                                 b'regex = "a"\nheader = "\\u0000"\n', 4,
                                                 "kernelLogRules.x.header", "NUL byte"),
    "deep regex": (b'nicExclusionRegex = "' + b"(" * 3000 + b")" * 3000 + b'"\n', 1,
                   "nicExclusionRegex", "invalid regular expression"),
    "counterDetection not a table": (b"counterDetection = 3\n", 1, "counterDetection",
                                     "expected a table"),
    "counters not an array": (b"[counterDetection]\ncounters = 1\n", 2,
                              "counterDetection.counters", "array of tables"),
    "port with a superscript digit": (b'metricsListen = ":\xc2\xb2"\n', 1, "metricsListen",
                                      "[HOST]:PORT"),
}


@pytest.mark.parametrize("name", HOSTILE)
def test_hostile_content_is_a_config_error_with_line_and_key(tmp_path: Path,
                                                             name: str) -> None:
    data, line, key, words = HOSTILE[name]
    path = write(tmp_path, data)
    with pytest.raises(ConfigError) as raised:
        load_config(path)
    error = raised.value
    assert (error.source, error.line, error.key) == (path, line, key), error.messages
    assert words in error.problem
    assert error.messages[0].startswith(f"{path}:{line}")
    assert len(str(error)) < 400  # never a repr of a huge or deep value


def test_toml_syntax_errors_give_line_and_column(tmp_path: Path) -> None:
    path = write(tmp_path, b'nodeName = "a"\n\npollingInterval = = 3\n')
    with pytest.raises(ConfigError) as raised:
        load_config(path)
    assert raised.value.messages == [f"{path}:3:19: not valid TOML: Invalid value"]


def make_fifo(tmp_path: Path) -> str:
    os.mkfifo(tmp_path / "fifo")
    return str(tmp_path / "fifo")


SPECIAL: dict[str, Callable[[Path], str]] = {
    "a character device": lambda _: "/dev/zero",
    "a directory": str,
    "a FIFO": make_fifo,
}


@pytest.mark.parametrize("what", SPECIAL)
def test_a_config_path_that_is_not_a_regular_file_is_refused(tmp_path: Path,
                                                              what: str) -> None:
    path = SPECIAL[what](tmp_path)
    with pytest.raises(ConfigError) as raised:  # returns at once: no read of /dev/zero
        load_config(path, must_exist=True)
    assert str(raised.value) == f"{path}: is {what}, not a regular file"


def test_dev_null_means_defaults_and_oversized_files_are_refused(tmp_path: Path) -> None:
    assert load_config("/dev/null", must_exist=True).polling_interval == 1.0
    path = write(tmp_path, b"# padding\n" * 200_000)
    with pytest.raises(ConfigError, match="larger than 1024 KiB"):
        load_config(path)


def test_a_nul_byte_in_the_config_path_itself(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match="the path contains a NUL byte"):
        load_config(str(tmp_path / "a\0b"))


def test_unreadable_file_names_the_reason(tmp_path: Path) -> None:
    path = write(tmp_path, b'nodeName = "x"\n')
    os.chmod(path, 0)
    if os.access(path, os.R_OK):
        pytest.skip("running as root: permissions are not enforced")
    with pytest.raises(ConfigError, match="cannot open: Permission denied"):
        load_config(path)


MANY_ERRORS = b'''# a file with one problem per line it names
pollingIntervall = "2s"
dbus = "user"
connectorTimeout = nan

[counterDetection]
enabeld = true

[[counterDetection.counters]]
name = "link_downed"
threshold = inf
isFatl = true

[[counterDetection.counters]]
name = "new_counter"
thresholdType = "velocity"
velocityUnit = "day"
'''
EXPECTED = [
    (2, "pollingIntervall", "unknown key (did you mean 'pollingInterval'?)"),
    (3, "dbus", "expected one of system, session, none"),
    (4, "connectorTimeout", "finite"),
    (7, "counterDetection.enabeld", "unknown key (did you mean 'enabled'?)"),
    (11, "counterDetection.counters[link_downed].threshold", "enabled = false"),
    (12, "counterDetection.counters[link_downed].isFatl",
     "unknown counter field (did you mean 'isFatal'?)"),
    (14, "counterDetection.counters[new_counter].path", "needs a path"),
    (17, "counterDetection.counters[new_counter].velocityUnit", "'second'"),
]


def test_every_problem_in_one_run_with_its_line(tmp_path: Path) -> None:
    path = write(tmp_path, MANY_ERRORS)
    with pytest.raises(ConfigError) as raised:
        load_config(path)
    got = [(p.line, p.key, p.problem) for p in raised.value.problems]
    assert len(got) == len(EXPECTED), raised.value.messages
    for (line, key, problem), (want_line, want_key, words) in zip(got, EXPECTED):
        assert (line, key) == (want_line, want_key) and words in problem, (line, key, problem)
    assert "\n" not in str(raised.value)  # one line for STATUS= and D-Bus replies


def test_counter_entries_as_inline_tables_point_at_the_array(tmp_path: Path) -> None:
    path = write(tmp_path, b'[counterDetection]\n\ncounters = [{name = "link_downed", '
                           b'threshold = nan}]\n')
    with pytest.raises(ConfigError) as raised:
        load_config(path)
    assert raised.value.line == 3
    assert raised.value.key == "counterDetection.counters[link_downed].threshold"


def test_dotted_keys_are_found_too(tmp_path: Path) -> None:
    path = write(tmp_path, b'nodeName = "a"\ncounterDetection.enabled = "yes"\n')
    with pytest.raises(ConfigError) as raised:
        load_config(path)
    assert (raised.value.line, raised.value.key) == (2, "counterDetection.enabled")


def test_unknown_tables_point_at_their_header(tmp_path: Path) -> None:
    path = write(tmp_path, b'nodeName = "a"\n[counterDetection]\nenabled = true\n'
                           b"[counterDetection.countres]\nx = 1\n[pollingInterval]\n")
    with pytest.raises(ConfigError) as raised:
        load_config(path)
    assert [(p.line, p.key) for p in raised.value.problems] == [
        (6, "pollingInterval"), (4, "counterDetection.countres")]
    assert "did you mean 'counters'?" in raised.value.problems[1].problem


def test_the_daemon_prints_every_problem_and_exits_2(tmp_path: Path) -> None:
    path = write(tmp_path, MANY_ERRORS)
    done = subprocess.run([sys.executable, "-m", "nichealthd.runtime.daemon",
                           "--config", path, "--once"],
                          capture_output=True, text=True, timeout=60, cwd=REPO)
    assert done.returncode == 2, done.stderr
    lines = done.stderr.splitlines()
    assert len(lines) == len(EXPECTED), done.stderr
    for text, (line, key, _) in zip(lines, EXPECTED):
        # logged at ERROR priority: "<time> ERROR   nichealthd: invalid ..."
        assert " ERROR " in text and "Traceback" not in text
        assert f"nichealthd: invalid configuration: {path}:{line}: {key}: " in text


def ctl(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "nichealthd.cli.ctl", *args], cwd=REPO,
                          capture_output=True, text=True, timeout=60)


def test_config_check_reports_every_problem(tmp_path: Path) -> None:
    path = write(tmp_path, MANY_ERRORS)
    text = ctl("config", "check", path)
    assert text.returncode == 2 and text.stdout == ""
    lines = text.stderr.splitlines()
    assert [ln.split(": ", 2)[:2] for ln in lines[:-1]] == [
        [f"{path}:{line}", key] for line, key, _ in EXPECTED]
    assert lines[-1] == f"{path}: invalid ({len(EXPECTED)} errors)"
    as_json = ctl("--json", "config", "check", path)
    assert as_json.returncode == 2
    body = json.loads(as_json.stdout)
    assert body["ok"] is False and body["key"] == "pollingIntervall"
    assert [(e["line"], e["key"]) for e in body["errors"]] == [(ln, k) for ln, k, _ in EXPECTED]


def test_config_check_gives_the_parsers_line_and_column(tmp_path: Path) -> None:
    path = write(tmp_path, b"[counterDetection\n")
    result = ctl("config", "check", path)
    assert result.returncode == 2
    assert result.stderr.splitlines()[0].startswith(f"{path}:1:18: not valid TOML: ")
    assert ": -: " not in result.stderr


@pytest.mark.parametrize("listen", [":2112", "127.0.0.1:2112", "[::1]:2112", "[::]:2112",
                                    "[fe80::1%eth0]:2112", "localhost:2112", ""])
def test_valid_listen_addresses(tmp_path: Path, listen: str) -> None:
    path = write(tmp_path, f'metricsListen = "{listen}"\n'.encode())
    assert load_config(path).metrics_listen == listen


def test_the_one_line_form_is_short_and_the_short_constructor_still_works(
        tmp_path: Path) -> None:
    path = write(tmp_path, "".join(f"unknown{i} = 1\n" for i in range(40)).encode())
    with pytest.raises(ConfigError) as raised:
        load_config(path)
    assert len(raised.value.messages) == 40
    assert str(raised.value).count("unknown key") == 5
    assert str(raised.value).endswith("; and 35 more (nichealthctl config check lists them all)")
    short = ConfigError("f.toml", "pollingInterval", "bad")
    assert short.problems == [Problem("f.toml", "pollingInterval", "bad")]
    assert str(short) == "f.toml: pollingInterval: bad"
