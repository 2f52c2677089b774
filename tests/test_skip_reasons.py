"""A skip reason is one clear line saying what is missing and how to get it, never a tool's
output (tests/skipreasons.py)."""

from __future__ import annotations

import ast
from pathlib import Path
from typing import Iterator, List

import pytest

from tests import skipreasons

TESTS = Path(__file__).resolve().parent
OUTPUT = ("stderr", "stdout", "output")

# pip 23's words, as a passing run once showed them inside a skip reason
PIP_NO_WHEEL = """\
ERROR: Could not find a version that satisfies the requirement grpcio-tools==1.51.3 (from \
versions: 1.62.0, 1.62.1, 1.63.0)
ERROR: No matching distribution found for grpcio-tools==1.51.3"""
PIP_OFFLINE = """\
WARNING: Retrying (Retry(total=4, connect=None, read=None, redirect=None, status=None)) after \
connection broken by 'NewConnectionError('<pip._vendor.urllib3.connection.HTTPSConnection \
object at 0x7f>: Failed to establish a new connection: [Errno 101] Network is unreachable')'
ERROR: Could not find a version that satisfies the requirement grpcio (from versions: none)
ERROR: No matching distribution found for grpcio"""


def test_pip_without_a_wheel_for_this_python() -> None:
    reason = skipreasons.pip_reason("grpcio-tools==1.51.3", PIP_NO_WHEEL,
                                    wheels_for="CPython 3.7 to 3.11")
    assert reason == (
        f"needs grpcio-tools==1.51.3, which has no wheel for Python "
        f"{skipreasons.this_python()} on PyPI (its wheels are for CPython 3.7 to 3.11): run it "
        "under a Python it supports (CI does)")


def test_pip_without_the_registry() -> None:
    """Offline, pip also says "No matching distribution": the network is what is missing."""
    assert skipreasons.pip_reason("grpcio", PIP_OFFLINE) == (
        "needs grpcio from PyPI, which is not reachable from here: run it where pip can reach "
        "PyPI (CI does)")


def test_any_other_pip_failure_says_how_to_see_it() -> None:
    reason = skipreasons.pip_reason("protobuf==3.19.6", "ERROR: a resolver bug\nmore\n")
    assert "\n" not in reason and "ERROR" not in reason
    assert reason.endswith("`pip install --only-binary=:all: protobuf==3.19.6` says why")


def test_first_line() -> None:
    assert skipreasons.first_line("\nRTNETLINK answers: Operation not permitted\nmore\n") == \
        "RTNETLINK answers: Operation not permitted"
    assert skipreasons.first_line("ERROR: gone") == "gone"
    assert skipreasons.first_line("") == "no message"


def _skip_calls(tree: ast.AST) -> Iterator[ast.Call]:
    """pytest.skip(...), pytest.importorskip(..., reason=...), skipif(..., reason=...)."""
    for node in ast.walk(tree):
        if isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute) and \
                node.func.attr in ("skip", "importorskip", "skipif"):
            yield node


def _raw_output(node: ast.AST) -> bool:
    """A tool's output put in the text as is: ``x.stderr``, ``x.stderr.strip()[-200:]``; not
    given to a function (such as skipreasons.first_line, which makes it one line)."""
    if isinstance(node, ast.Call):  # a method of the output is still the output
        return isinstance(node.func, ast.Attribute) and _raw_output(node.func.value)
    if isinstance(node, ast.Attribute) and node.attr in OUTPUT:
        return True
    if isinstance(node, ast.Constant) and isinstance(node.value, str) and "\n" in node.value:
        return True  # one line
    return any(_raw_output(child) for child in ast.iter_child_nodes(node))


def offenders() -> List[str]:
    found = []
    for path in sorted(TESTS.rglob("*.py")):
        tree = ast.parse(path.read_text(encoding="utf-8"), str(path))
        for call in _skip_calls(tree):
            texts = [*call.args, *(k.value for k in call.keywords if k.arg in ("reason", "msg"))]
            if any(_raw_output(text) for text in texts):
                found.append(f"{path.relative_to(TESTS)}:{call.lineno}")
    return found


def test_no_skip_reason_carries_a_tools_output() -> None:
    assert offenders() == []


@pytest.mark.parametrize("source,bad", [
    ('pytest.skip(f"no veth: {made.stderr.strip()}")', True),
    ('pytest.skip("x: " + out.stdout)', True),
    ('pytest.skip(reason=f"{e.output[-200:]}")', True),
    ('pytest.skip("two\\nlines")', True),
    ('pytest.skip("x: " + skipreasons.first_line(made.stderr))', False),
    ('pytest.skip(skipreasons.pip_reason("grpcio", install.stderr))', False),
])
def test_the_scan_sees_raw_output(source: str, bad: bool) -> None:
    call = next(_skip_calls(ast.parse(source)))
    texts = [*call.args, *(k.value for k in call.keywords)]
    assert any(_raw_output(t) for t in texts) is bad
