"""The package layout is the architecture (ARCHITECTURE.md): the pure core depends on nothing else.

``nichealthd.core`` imports only itself and the standard library; the layers above it import
downwards only (sources and storage never import runtime, surfaces or the client); every
module says its one job in its first docstring line.
"""

from __future__ import annotations

import ast
import re
import subprocess
from pathlib import Path

import pytest

PACKAGE = Path(__file__).resolve().parent.parent / "nichealthd"
# What each layer may import besides itself and the standard library.
ALLOWED = {
    "core": set(),
    "sources": {"core"},
    "storage": {"core"},
    "surfaces": {"core", "storage", "sources"},
    "runtime": {"core", "sources", "storage", "surfaces"},
    # the client shares the wire code of both APIs with the daemon, and the registry of the
    # surfaces whose settings are keys of the file it checks, nothing else of it
    "cli": {"core", "sources", "surfaces.dbus_common", "surfaces.varlink_protocol",
            "surfaces.seam"},
    "sim": set(),
}


def modules() -> list[Path]:
    return sorted(p for p in PACKAGE.rglob("*.py") if "_pb2" not in p.name)


def layer_of(path: Path) -> str:
    parts = path.relative_to(PACKAGE).parts
    return parts[0] if len(parts) > 1 else ""


def imported(path: Path) -> set[str]:
    """The nichealthd modules ``path`` imports, as dotted names below ``nichealthd``."""
    package = path.relative_to(PACKAGE).parent.parts
    found: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.ImportFrom):
            if node.level:
                base = list(package[:len(package) - node.level + 1])
                target = base + (node.module.split(".") if node.module else [])
                names = [a.name for a in node.names]
                found.update(".".join(target + [n]) if not node.module else ".".join(target)
                             for n in names)
            elif node.module and node.module.startswith("nichealthd"):
                found.add(node.module.partition(".")[2])
        elif isinstance(node, ast.Import):
            found.update(a.name.partition(".")[2] for a in node.names
                         if a.name.startswith("nichealthd."))
    return {name for name in found if name}


@pytest.mark.parametrize("path", modules(), ids=lambda p: str(p.relative_to(PACKAGE)))
def test_each_layer_imports_only_downwards(path: Path) -> None:
    layer = layer_of(path)
    if layer not in ALLOWED:
        return  # the package root: __init__ only
    allowed = ALLOWED[layer] | {layer}
    for name in imported(path):
        if name == "__version__":
            continue
        assert any(name == a or name.startswith(a + ".") for a in allowed), (
            f"{path.relative_to(PACKAGE)} imports nichealthd.{name}, outside "
            f"{sorted(allowed)}")


def test_the_core_does_no_io_per_poll() -> None:
    """Only the config modules of the core may touch files; the checks and evaluation never."""
    for path in (PACKAGE / "core").rglob("*.py"):
        tree = ast.parse(path.read_text())
        for node in ast.walk(tree):
            if isinstance(node, ast.Call) and isinstance(node.func, ast.Name):
                assert node.func.id != "open", f"{path.name} opens a file"
            if isinstance(node, (ast.Import, ast.ImportFrom)):
                names = [a.name for a in node.names] + [getattr(node, "module", "") or ""]
                assert not {"subprocess", "socket"} & set(names) or path.name == "config.py", (
                    f"{path.name} imports {names}")


@pytest.mark.parametrize("path", modules(), ids=lambda p: str(p.relative_to(PACKAGE)))
def test_each_module_says_its_job_first(path: Path) -> None:
    doc = ast.get_docstring(ast.parse(path.read_text()))
    assert doc and doc.splitlines()[0].strip(), f"{path} has no docstring"


FAMILY_MODULES = {f"core.checks.{p.stem}" for p in (PACKAGE / "core/checks").glob("*.py")
                  if "\nFAMILY = " in p.read_text()}


@pytest.mark.parametrize("name", ["core/evaluate.py", "core/health.py", "core/views.py"])
def test_the_evaluator_names_no_family_but_through_the_registry(name: str) -> None:
    """ARCHITECTURE.md: no module outside core/checks/ names a family except through the registry
    (``families()``); the seams of core/family.py carry what it needs of them."""
    named = imported(PACKAGE / name) & FAMILY_MODULES
    assert not named, f"{name} imports the family modules {sorted(named)}"


# A citation of the project's brief, which is not in the repository (spelt so that this file
# does not match itself).
BRIEF = re.compile("DESI" + r"GN(\.md| ?§| \\\(sc| \d| section)")


def test_every_citation_names_a_file_of_the_repository() -> None:
    """Docstrings, comments, man pages and docs cite the repository's own files (README,
    ARCHITECTURE.md, a man page, the module) or an external spec, never the brief."""
    repo = PACKAGE.parent
    listing = subprocess.run(["git", "ls-files", "-co", "--exclude-standard"], cwd=repo,
                             capture_output=True, text=True)
    if listing.returncode == 0:
        listed = listing.stdout.split()
    else:  # a copy of the tracked files, not a clone (CI's unprivileged run): every file
        skip = {".git", ".venv", "__pycache__", ".mypy_cache", ".ruff_cache", "out"}
        listed = [str(p.relative_to(repo)) for p in repo.rglob("*")
                  if not skip.intersection(p.relative_to(repo).parts)]
    citing: list[str] = []
    for name in listed:
        path = repo / name
        if not path.is_file() or name.startswith("tests/data/"):
            continue  # captures of other projects say what they say
        text = path.read_bytes().decode("utf-8", "replace")
        citing.extend(f"{name}:{n}" for n, line in enumerate(text.splitlines(), 1)
                      if BRIEF.search(line))
    assert citing == []
