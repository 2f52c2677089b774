"""The bash and zsh completions of nichealthctl list exactly what its parser takes.

bash: the completion function itself runs in a real bash, word by word as the shell calls it,
and what it offers is compared with nichealthctl's argparse parser (commands, what to show,
every option of each command). zsh: zsh checks the file and its compinit registers it for
nichealthctl; its commands and options are read from the file and compared the same way
(running zsh's completion widgets needs a terminal).
"""

from __future__ import annotations

import argparse
import re
import shutil
import subprocess
from pathlib import Path

import pytest

from nichealthd.cli.ctl import build_parser

REPO = Path(__file__).resolve().parents[1]
BASH = REPO / "completions" / "nichealthctl"
ZSH = REPO / "completions" / "_nichealthctl"


def _subparsers(parser: argparse.ArgumentParser) -> dict[str, argparse.ArgumentParser]:
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            return dict(action.choices)
    return {}


def _options(parser: argparse.ArgumentParser) -> set[str]:
    return {o for a in parser._actions if a.help != argparse.SUPPRESS for o in a.option_strings}


PARSER = build_parser()
COMMANDS = _subparsers(PARSER)
TOP = _options(PARSER)  # the global options and --version
GLOBAL = _options(COMMANDS["status"])  # what every command takes


def offered(*words: str) -> set[str]:
    """What bash completes for the last word of ``nichealthctl WORDS``."""
    line = ["nichealthctl", *words]
    script = (f"source {BASH}; COMP_WORDS=({' '.join(repr(w) for w in line)}); "
              f"COMP_CWORD={len(line) - 1}; _nichealthctl; printf '%s\\n' \"${{COMPREPLY[@]}}\"")
    out = subprocess.run(["bash", "--norc", "--noprofile", "-c", script], capture_output=True,
                         text=True, timeout=30, check=True)
    return {w for w in out.stdout.splitlines() if w}


bash_only = pytest.mark.skipif(shutil.which("bash") is None, reason="needs bash")


@bash_only
def test_bash_completes_the_commands_and_the_global_options() -> None:
    assert offered("") == set(COMMANDS) | TOP
    assert offered("--json", "") == offered("--bus", "system", "") == set(COMMANDS) | TOP
    assert offered("--bus", "") == {"system", "session"}
    assert offered("sh") == {"show"}


@bash_only
@pytest.mark.parametrize("command", sorted(COMMANDS))
def test_bash_completes_each_commands_own_words(command: str) -> None:
    parser = COMMANDS[command]
    subs = _subparsers(parser)
    if subs:  # show, config: what to show or check first, then that command's options
        assert offered(command, "") == set(subs) | _options(parser)
        for name, sub in subs.items():
            assert offered(command, name, "-") == _options(sub), name
    else:
        assert offered(command, "-") == _options(parser)


@bash_only
def test_bash_skips_the_values_of_options() -> None:
    assert offered("events", "--since", "2h", "-n", "5", "--a") == {"--all"}
    assert offered("events", "--since", "") == set()
    assert offered("config", "check", "/nonexistent-dir/x") == set()


def zsh_words() -> tuple[set[str], dict[str, set[str]]]:
    """The options the zsh file names, and the names of each ``_describe`` array."""
    text = ZSH.read_text(encoding="utf-8")
    options = set()
    for spec in re.findall(r"'([^']*)'", text):
        spec = re.sub(r"^\([^)]*\)", "", spec)  # an exclusion list: (- *)--version[...]
        options.update(re.findall(r"^(--?[a-z][a-z-]*)[=+-]*(?:\[|$)", spec))
    for braces in re.findall(r"\{(-[a-z][+=]?,--[a-z-]+[+=]?)\}", text):
        options.update(o.rstrip("+=") for o in braces.split(","))
    arrays = {}
    for name, body in re.findall(r"\n\s*(\w+)=\(\n(.*?)\n\s*\)", text, re.S):
        arrays[name] = {m for m in re.findall(r"^\s*'([a-z]+):", body, re.M)}
    return options, arrays


def test_zsh_names_every_option_command_and_what_of_the_parser() -> None:
    options, arrays = zsh_words()
    everything = set(TOP)
    for parser in COMMANDS.values():
        everything |= _options(parser)
        for sub in _subparsers(parser).values():
            everything |= _options(sub)
    assert options == everything
    assert arrays["commands"] == set(COMMANDS)
    assert arrays["whats"] == set(_subparsers(COMMANDS["show"]))
    assert "'1:what:(check)'" in ZSH.read_text() and set(_subparsers(COMMANDS["config"])) == \
        {"check"}


@pytest.mark.skipif(shutil.which("zsh") is None, reason="needs zsh (Debian: apt-get install zsh)")
def test_zsh_loads_it_for_nichealthctl(tmp_path: Path) -> None:
    subprocess.run(["zsh", "-n", str(ZSH)], check=True, timeout=30)
    script = (f"fpath=({ZSH.parent} $fpath); autoload -Uz compinit; "
              f"compinit -u -d {tmp_path}/zcompdump; print -r -- $_comps[nichealthctl]")
    out = subprocess.run(["zsh", "-f", "-c", script], capture_output=True, text=True,
                         timeout=60, check=True)
    assert out.stdout.strip() == "_nichealthctl"
