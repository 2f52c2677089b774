"""The README's shell recipes, read from README.md itself, so that the tests run them as
written (a recipe that drifts from what works fails its test, not a reader)."""

from __future__ import annotations

from pathlib import Path

README = Path(__file__).resolve().parents[1] / "README.md"
SIM_HOST = "### Trying the installed service on a simulated host"


def recipe(heading: str) -> list[str]:
    """The commands of the first indented code block under ``heading``, one per command
    (a line ending in a backslash continues on the next)."""
    text = README.read_text()
    start = text.index(heading + "\n")
    lines = text[start:].splitlines()[1:]
    block: list[str] = []
    for line in lines:
        if line.startswith("#"):
            break
        if line.startswith("    "):
            block.append(line[4:])
        elif block and line.strip():
            break
    commands: list[str] = []
    pending = ""
    for line in block:
        if line.endswith("\\"):
            pending += line[:-1].strip() + " "
            continue
        commands.append(pending + line.strip())
        pending = ""
    assert commands, f"README.md has no commands under {heading!r}"
    return commands
