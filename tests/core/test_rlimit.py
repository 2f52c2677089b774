"""The soft open-file limit is raised toward the hard one at start, or left alone quietly."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]

SCRIPT = """
import logging, resource, sys
logging.basicConfig(level=logging.DEBUG, stream=sys.stdout, format="%(message)s")
from nichealthd.runtime.rlimit import raise_nofile_limit
resource.setrlimit(resource.RLIMIT_NOFILE, (SOFT, 512))
print("result", raise_nofile_limit(TARGET))
print("now", resource.getrlimit(resource.RLIMIT_NOFILE)[0])
"""


def run(soft: int, target: int) -> list[str]:
    code = SCRIPT.replace("SOFT", str(soft)).replace("TARGET", str(target))
    proc = subprocess.run([sys.executable, "-c", code], cwd=REPO, capture_output=True,
                          text=True, timeout=30, check=True)
    return proc.stdout.splitlines()


def test_raised_to_the_hard_limit() -> None:
    out = run(128, 65536)
    assert out[-2:] == ["result 512", "now 512"]


def test_raised_to_the_target_when_the_hard_limit_is_higher() -> None:
    out = run(128, 300)
    assert out[-2:] == ["result 300", "now 300"]


def test_already_high_enough_is_left_alone() -> None:
    assert run(512, 300)[-2:] == ["result 512", "now 512"]
