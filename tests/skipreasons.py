"""One-line skip reasons for a tool that failed: what is missing here and how to get it.

A skip is read in the summary of a passing run; pip's own error text there ("ERROR: No matching
distribution found for ...") reads as a failure and says nothing of what to do. So a skip
never carries a tool's output: :func:`pip_reason` sorts pip's failures into the three a test
can meet (no wheel for this Python, no registry, anything else) and says each in one line;
:func:`first_line` keeps one line of another tool's message. tests/test_skip_reasons.py holds
every skip in the suite to it.
"""

from __future__ import annotations

import sys

# pip's words when no release of the requirement fits this interpreter or platform
NO_WHEEL = ("No matching distribution", "Could not find a version")
# and when the registry cannot be reached (no network, a proxy, DNS)
NO_REGISTRY = ("Could not fetch", "Failed to establish", "Network is unreachable",
               "Temporary failure in name resolution", "ProxyError", "Max retries exceeded")


def this_python() -> str:
    return "{}.{}".format(*sys.version_info[:2])


def pip_reason(requirements: str, stderr: str, wheels_for: str = "") -> str:
    """Why pip could not install ``requirements``, in one line with what to do.

    ``wheels_for`` names the Pythons the requirement has wheels for (e.g. "CPython 3.7 to
    3.11"), said when this one has none."""
    if any(text in stderr for text in NO_REGISTRY):
        return (f"needs {requirements} from PyPI, which is not reachable from here: run it "
                "where pip can reach PyPI (CI does)")
    if any(text in stderr for text in NO_WHEEL):
        has = f" (its wheels are for {wheels_for})" if wheels_for else ""
        return (f"needs {requirements}, which has no wheel for Python {this_python()} on "
                f"PyPI{has}: run it under a Python it supports (CI does)")
    return (f"pip could not install {requirements} here: "
            f"`pip install --only-binary=:all: {requirements}` says why")


def first_line(message: str) -> str:
    """The first non-empty line of a tool's message, without pip's or a shell's prefix."""
    for line in message.splitlines():
        line = line.strip()
        if line:
            return line.removeprefix("ERROR: ").removeprefix("error: ")
    return "no message"
