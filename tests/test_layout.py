"""The package layout is the architecture (ARCHITECTURE.md): the pure core depends on nothing else.

``nichealthd.core`` imports only itself, the standard library and the facts of the sources
(a fact's key and types, from the module of the source that reads it; never the reader); the
layers above it import downwards only (sources and storage never import runtime, surfaces or
the client); every module says its one job in its first docstring line.
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
# A module of plain fact types below the sources (``sources/<name>_facts.py``: the PCI side's,
# which the core's model holds, and the optics values, which the page parser builds too).
# Pure like the core: it imports only the core's model and numbers and other fact modules.
FACT_MODULES = frozenset(f"sources.{p.stem}" for p in (PACKAGE / "sources").glob("*_facts.py"))
FACT_MODULE_IMPORTS = FACT_MODULES | {"core.model", "core.numbers"}


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
    if layer == "core":  # a source's fact: what it imports of it is held below
        allowed |= {"sources"}
    if module_name(path) in FACT_MODULES:
        allowed = set(FACT_MODULE_IMPORTS)
    for name in imported(path):
        if name == "__version__":
            continue
        assert any(name == a or name.startswith(a + ".") for a in allowed), (
            f"{path.relative_to(PACKAGE)} imports nichealthd.{name}, outside "
            f"{sorted(allowed)}")


def import_graph(package: Path) -> dict[str, set[str]]:
    """Every module of ``package`` (a directory) with the modules of it that it imports, by
    dotted name. An import counts wherever it is: at the top, inside a function, under ``if
    TYPE_CHECKING:`` (each is a dependency, whenever it runs); ``from a import b`` imports the
    submodule ``a.b`` when there is one; importing a module runs the ``__init__`` of each
    package above it first, so it imports those too."""
    paths = {".".join(p.relative_to(package.parent).with_suffix("").parts).removesuffix(
        ".__init__"): p for p in package.rglob("*.py")}
    graph: dict[str, set[str]] = {}
    for name, path in paths.items():
        here = name if path.name == "__init__.py" else name.rpartition(".")[0]
        targets: set[str] = set()
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.Import):
                targets.update(a.name for a in node.names)
            elif isinstance(node, ast.ImportFrom):
                parts = here.split(".")
                base = ".".join(parts[:len(parts) - node.level + 1]) if node.level else ""
                source = ".".join(p for p in (base, node.module or "") if p)
                targets.add(source)
                targets.update(f"{source}.{a.name}" for a in node.names)
        graph[name] = {".".join(t.split(".")[:n]) for t in targets
                       for n in range(1, t.count(".") + 2)} & paths.keys() - {name}
    return graph


def import_circles(graph: dict[str, set[str]]) -> list[list[str]]:
    """The modules that import each other, directly or through others (the strongly
    connected components of more than one module), each sorted."""
    reach = {name: _reachable(graph, name) for name in graph}
    found: list[list[str]] = []
    for name in sorted(graph):
        if name in reach[name] and not any(name in circle for circle in found):
            found.append(sorted(other for other in reach[name] if name in reach[other]))
    return found


def _reachable(graph: dict[str, set[str]], start: str) -> set[str]:
    found: set[str] = set()
    todo = list(graph[start])
    while todo:
        name = todo.pop()
        if name not in found:
            found.add(name)
            todo.extend(graph[name])
    return found


def test_no_module_imports_itself_through_others() -> None:
    """ARCHITECTURE.md: no import circle in the package, at the top, inside a function or
    for type checking only: a module that needs a thing of another that needs it back is
    split, the shared thing moved below both (a protocol, a record, a value passed)."""
    circles = import_circles(import_graph(PACKAGE))
    assert circles == [], "modules that import each other: " + "; ".join(
        ", ".join(circle) for circle in circles)


CIRCLES = {
    "top level": ({"a.py": "from . import b\n", "b.py": "from .a import thing\n"},
                  [["pkg.a", "pkg.b"]]),
    "inside a function": ({"a.py": "import pkg.b\n",
                           "b.py": "def f():\n    from pkg.a import thing\n"},
                          [["pkg.a", "pkg.b"]]),
    "for type checking": ({"a.py": "from .b import B\n",
                           "b.py": "from typing import TYPE_CHECKING\n"
                                   "if TYPE_CHECKING:\n    from .a import A\n"},
                          [["pkg.a", "pkg.b"]]),
    "a submodule by from-import": ({"a.py": "from pkg import b\n",
                                    "b.py": "from pkg.a import thing\n"},
                                   [["pkg.a", "pkg.b"]]),
    "through a package's __init__": ({"low.py": "from .sub.leaf import thing\n",
                                      "sub/__init__.py": "from ..low import other\n",
                                      "sub/leaf.py": ""},
                                     [["pkg.low", "pkg.sub"]]),
    "three modules": ({"a.py": "from . import b\n", "b.py": "from . import c\n",
                       "c.py": "from .a import thing\n"},
                      [["pkg.a", "pkg.b", "pkg.c"]]),
    "none": ({"a.py": "from . import b\nimport json\n",
              "b.py": "from typing import TYPE_CHECKING\nfrom .c import thing\n",
              "c.py": "def f():\n    from pkg import d\n", "d.py": ""}, []),
}


@pytest.mark.parametrize("files, expected", CIRCLES.values(), ids=CIRCLES.keys())
def test_the_circle_finder_sees_every_kind_of_import(
        tmp_path: Path, files: dict[str, str], expected: list[list[str]]) -> None:
    package = tmp_path / "pkg"
    for name, text in {"__init__.py": "", **files}.items():
        (package / name).parent.mkdir(parents=True, exist_ok=True)
        (package / name).write_text(text)
    assert import_circles(import_graph(package)) == expected


CONFIG_MODULES = ("config.py", "config_build.py")  # the node name's default: the host name


def module_name(path: Path) -> str:
    """``sources/pci_facts.py`` -> ``sources.pci_facts``."""
    return ".".join(path.relative_to(PACKAGE).with_suffix("").parts)


def test_the_fact_modules_import_nothing_that_imports_the_config() -> None:
    """What a fact module imports, all the way down, is pure: never the config, the family
    seam or a family (which import the fact modules: that would be an import circle)."""
    assert FACT_MODULES, "no fact module found"
    graph = import_graph(PACKAGE)
    reached = {name.partition(".")[2] for fact in FACT_MODULES
               for name in _reachable(graph, f"nichealthd.{fact}")}
    assert not {n for n in reached if n in ("core.config", "core.family")
                or n.startswith("core.checks")}, sorted(reached)


def readers(path: Path) -> set[str]:
    """The readers a module of sources defines: its ``SOURCE`` and the classes of the seam."""
    tree = ast.parse(path.read_text())
    found = {"SOURCE", "Source"}
    found.update(node.name for node in tree.body if isinstance(node, ast.ClassDef)
                 and any(ast.unparse(base).endswith("Source") for base in node.bases))
    return found


@pytest.mark.parametrize("path", sorted((PACKAGE / "core").rglob("*.py")),
                         ids=lambda p: str(p.relative_to(PACKAGE)))
def test_the_core_imports_a_sources_facts_never_its_reader(path: Path) -> None:
    """A family imports the key and the types of the fact it needs from the module of the
    source that reads it (ARCHITECTURE.md, the source seam), or from a fact module: names,
    never the module itself nor its reader, never the seam nor another reader's module; what
    that module imports never reaches a family
    (:func:`test_no_module_imports_itself_through_others`)."""
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.Import):
            assert not any(".sources" in a.name for a in node.names), ast.unparse(node)
        if not isinstance(node, ast.ImportFrom) or "sources" not in (node.module or ""):
            continue
        module = (node.module or "").rpartition("sources")[2].lstrip(".")
        assert module and module != "seam", f"{path.name}: {ast.unparse(node)}"
        source = PACKAGE / "sources" / (module.replace(".", "/") + ".py")
        assert f"sources.{module}" in FACT_MODULES or "\nSOURCE = " in source.read_text(), (
            f"{path.name} imports {module}, neither a source (``SOURCE``) nor a fact module")
        named = {a.name for a in node.names} & readers(source)
        assert not named, f"{path.name} imports the reader {sorted(named)} of {module}"


def test_the_core_does_no_io_per_poll() -> None:
    """Only the config modules of the core may touch files; the checks and evaluation never
    (nor the fact modules the core imports)."""
    facts = [PACKAGE / (name.replace(".", "/") + ".py") for name in sorted(FACT_MODULES)]
    for path in [*(PACKAGE / "core").rglob("*.py"), *facts]:
        tree = ast.parse(path.read_text())
        for node in ast.walk(tree):
            if isinstance(node, ast.Call) and isinstance(node.func, ast.Name):
                assert node.func.id != "open", f"{path.name} opens a file"
            if isinstance(node, (ast.Import, ast.ImportFrom)):
                names = [a.name for a in node.names] + [getattr(node, "module", "") or ""]
                assert not {"subprocess", "socket"} & set(names) or path.name in CONFIG_MODULES, (
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


def repository_files() -> list[str]:
    """The path of every file of the repository, from its top."""
    repo = PACKAGE.parent
    listing = subprocess.run(["git", "ls-files", "-co", "--exclude-standard"], cwd=repo,
                             capture_output=True, text=True)
    if listing.returncode == 0:
        return listing.stdout.split()
    # a copy of the tracked files, not a clone (CI's unprivileged run): every file
    skip = {".git", ".venv", "__pycache__", ".mypy_cache", ".ruff_cache", "out"}
    return [str(p.relative_to(repo)) for p in repo.rglob("*")
            if p.is_file() and not skip.intersection(p.relative_to(repo).parts)]


def repository_texts() -> list[tuple[str, list[str]]]:
    """``(name, lines)`` of every file of the repository but the captures of tests/data/
    (other projects' files say what they say)."""
    repo = PACKAGE.parent
    texts = []
    for name in repository_files():
        path = repo / name
        if path.is_file() and not name.startswith("tests/data/"):
            texts.append((name, path.read_bytes().decode("utf-8", "replace").splitlines()))
    return texts


def test_every_citation_names_a_file_of_the_repository() -> None:
    """Docstrings, comments, man pages and docs cite the repository's own files (README,
    ARCHITECTURE.md, a man page, the module) or an external spec, never the brief."""
    citing = [f"{name}:{n}" for name, lines in repository_texts()
              for n, line in enumerate(lines, 1) if BRIEF.search(line)]
    assert citing == []


# A path into the repository (its top folders, or the package's), with the kind of file a
# citation names, and a Markdown file by its name alone: each must be a file of it.
CITED_PATH = re.compile(
    r"(?<![\w./-])((?:(?:nichealthd|tests|bench|man|packaging|systemd|completions|docs|spec|"
    r"core|checks|sources|storage|surfaces|runtime|cli|sim)/(?:[\w.-]+/)*[\w.-]+\."
    r"(?:py|md|txt|toml|proto|sh|varlink|yml|json|[158]))|[\w.-]+\.md)(?![\w/-]|\.\w)")
# A section (``§``, or ``\(sc`` in a man page) names its document right before it: one of
# the external specifications nichealthd follows (the two NVSentinel design documents the
# README names, the standards), with a list of sections after it ("§4.1, §4.2 and §8.6").
SECTION = re.compile(r"§|\\\(sc")
NAMED_SECTIONS = re.compile(
    r"(?:link-state-detection|link-counter-detection|IBTA|CMIS|SFF-\d+|PCIe|RFC|IEEE)"
    r"[^§\\]{0,24}?(?:§|\\\(sc) ?\d[\d.]*"
    r"(?:(?:,| and| or| /|/|–) ?(?:§|\\\(sc)? ?\d[\d.]*)*")


def uncited(files: list[str], line: str) -> list[str]:
    """What ``line`` cites that is no file of the repository (``files``) and no named
    external specification."""
    known = set(files)
    stems = {name.rpartition("/")[2] for name in files}
    found = []
    for match in CITED_PATH.finditer(line):
        path = match.group(1)
        if "/" not in path:
            exists = path in stems
        else:  # from the top, from the package, under a folder, or a file a worked example
            # of tests/data adds (``sources/netdev_mtu.py``)
            exists = (path in known or f"nichealthd/{path}" in known
                      or any(name.endswith("/" + path) for name in files)
                      or any(name.startswith("tests/data/adding_a_") and
                             name.endswith("/" + path.rpartition("/")[2]) for name in files))
        if not exists:
            found.append(path)
    if SECTION.search(NAMED_SECTIONS.sub("", line)):
        found.append("a section of an unnamed document")
    return found


def test_every_cited_file_is_one_of_the_repository() -> None:
    """A path or a Markdown file cited by a docstring, a comment, a man page or a doc is a
    file of the repository, and a section (§) is one of a named external specification: a
    citation of a file outside it (the brief's REFERENCE and spec folder, a module moved
    away) fails here with its file and line."""
    files = repository_files()
    citing = [f"{name}:{n}: {', '.join(found)}" for name, lines in repository_texts()
              if name != "tests/test_layout.py"
              for n, line in enumerate(lines, 1) for found in [uncited(files, line)] if found]
    assert citing == [], "citations of no file of the repository:\n" + "\n".join(citing)


@pytest.mark.parametrize("line, found", [
    ("see core/numbers.py and ARCHITECTURE.md", []),
    ("see core/nothing.py", ["core/nothing.py"]),
    ("the sources' fact modules (sources/phy_facts.py)", ["sources/phy_facts.py"]),
    ("as REFERENCE.md says", ["REFERENCE.md"]),
    ("spec/link-state-detection.txt", ["spec/link-state-detection.txt"]),
    ("REFERENCE §3", ["a section of an unnamed document"]),
    ("(spec §4.3)", ["a section of an unnamed document"]),
    (r"(spec \(sc4.3)", ["a section of an unnamed document"]),
    ("(link-state-detection §4.1.3, §4.2.4 and §8.6; CMIS 5 §8.9.4)", []),
    (r"link-counter-detection \(sc6.6", []),
])
def test_the_citation_finder(line: str, found: list[str]) -> None:
    assert uncited(repository_files(), line) == found


# A citation of one of the project's issues, which are not in the repository either: the word
# issue (or issues) before a number, with or without its number sign, or a bare number sign
# and number, in brackets or not, with an item after a dot or not.
# Not "CPU#12" or "link_downed #7" in a quoted message (a word before it, a quote after it).
ISSUE = re.compile(r"(?i)\bissues? #?\d|(?<![\w/&#])#\d+(?:\.\d+)?(?![\w\"'])")
# An upstream project's issue or pull request is a public source: cited with the project
# named right before the number ("NVSentinel #1492"), it is not one of ours.
UPSTREAM_ISSUE = re.compile(r"\b(?:NVSentinel|dbus-next|aws-ofi-nccl) #\d+(?:, #\d+)*")

def test_no_citation_of_an_issue_number() -> None:
    """Docstrings, comments, man pages and docs say the fact, or cite the module, README,
    ARCHITECTURE.md, a man page or the spec by name: an issue number points outside the
    repository, at a tracker its readers may not have."""
    citing: list[str] = []
    for name, lines in repository_texts():
        citing.extend(f"{name}:{n}" for n, line in enumerate(lines, 1)
                      if ISSUE.search(UPSTREAM_ISSUE.sub("", line)))
    assert citing == [], "issue numbers cited at:\n" + "\n".join(citing)


# Functions (and methods) of the package with six or more parameters (self and cls not
# counted; keyword-only ones, *args and **kwargs are). Parameters that travel together are a
# concept: a small frozen dataclass or NamedTuple names it (CONTRIBUTING.md). A ratchet: the
# number may go down, never up.
MAX_WIDE_FUNCTIONS = 35
WIDE = 6


def wide_functions() -> list[str]:
    """``module:line name (count)`` of each function with :data:`WIDE` or more parameters."""
    found = []
    for path in modules():
        for node in ast.walk(ast.parse(path.read_text())):
            if not isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
                continue
            args = node.args
            names = [a.arg for a in args.posonlyargs + args.args + args.kwonlyargs
                     if a.arg not in ("self", "cls")]
            count = len(names) + bool(args.vararg) + bool(args.kwarg)
            if count >= WIDE:
                found.append(f"{path.relative_to(PACKAGE)}:{node.lineno} {node.name} ({count})")
    return found


def test_few_functions_take_six_or_more_parameters() -> None:
    wide = wide_functions()
    assert len(wide) <= MAX_WIDE_FUNCTIONS, (
        f"{len(wide)} functions take {WIDE} or more parameters (at most "
        f"{MAX_WIDE_FUNCTIONS}):\n" + "\n".join(wide))
