"""Import direction, from the AST: each module is placed by its folder and imports only its own
folder, earlier folders and the common layer; no cycles; a small top level; only the LiteLLM
backend imports the model stack and only the cli/ package imports typer and rich.

The layout, in flow order::

    common layer   vault_pipeline/errors.py, config.py, text.py
                   (errors and text import nothing of ours, config only errors)
    note grammar   vault_pipeline/vault/format.py: the notes' text formats as pure string rules,
                   importing only the common layer, so every stage (models/ too) reads a note
                   through it (docs/decisions/0083-note-grammar-and-typed-stages.md)
    stages         models/ -> vault/ -> ingest/ -> index/ -> retrieve/ -> clean/
    top            pipeline.py (public API) -> serve/ (MCP server, live index) -> cli/ (composition root)

``vault_pipeline/__init__.py`` runs before every module of the package, so it imports nothing
of ours when it runs: its public names load on first use (``tests/test_public_api.py``). An edge is every ``import`` / ``from ... import`` anywhere in a module (inside
functions and under ``if TYPE_CHECKING:`` too, relative ones resolved), every
``import_module("...")`` / ``__import__("...")`` with a string constant, and every string
constant of the form ``"vault_pipeline.x.y:attr"`` (a lazy registry entry). The checker is a
set of plain functions over a package directory, so ``test_checker_catches_violations`` can run
it on a small fake package and prove it fails when it should.
"""

from __future__ import annotations

import ast
import itertools
import re
import textwrap
from dataclasses import dataclass, field
from pathlib import Path

PACKAGE = Path(__file__).resolve().parent.parent / "vault_pipeline"

# The common layer: module -> the common modules it may import.
COMMON = {"errors": frozenset(), "config": frozenset({"errors"}), "text": frozenset()}
# Stage folders in flow order, then the top-level modules that come after every stage.
STAGES = ("models", "vault", "ingest", "index", "retrieve", "clean")
TOP = ("pipeline", "serve", "cli")
TOP_FOLDERS = frozenset({"serve", "cli"})  # top layers that are folders: they may import every stage and pipeline
MAX_TOP_LEVEL = 10
# The note grammar: placed below every stage although it lives in vault/ (where the vault's
# formats belong); it may import only the common layer.
GRAMMAR = ("vault", "format")
OFFLINE = ("models", "offline")  # the offline backend: models/offline/ imports only models/ and common
# Earlier layers a stage may still not import: retrieval reads the vault's formats from
# vault/format.py, never from the ingest stage (which would load every export parser with it).
SKIPPED = {"retrieve": frozenset({"ingest"})}

IMPORT_CALLS = {"import_module", "__import__"}


# --------------------------------------------------------------------------- placement


@dataclass(frozen=True)
class Place:
    """Where a module sits: its layer name (common, a stage folder, pipeline, cli, root) and rank."""

    layer: str
    rank: int


def placement(parts: tuple[str, ...]) -> Place | None:
    """The place of a module given its path parts inside the package (no suffix); None if unplaced.

    ``()`` is the package's own ``__init__``; ``("index", "search")`` is ``index/search.py``;
    a stage folder's ``__init__`` is ``("index",)`` when it is a package.
    """
    if not parts:
        return Place("root", -1)
    if len(parts) == 1 and parts[0] in COMMON:
        return Place("common", 0)
    if parts == GRAMMAR:
        return Place("grammar", 0)
    if parts[0] in TOP and (len(parts) == 1 or parts[0] in TOP_FOLDERS):
        return Place(parts[0], 1 + len(STAGES) + TOP.index(parts[0]))
    if parts[0] in STAGES:
        return Place(parts[0], 1 + STAGES.index(parts[0]))
    return None


# --------------------------------------------------------------------------- scanning


@dataclass(frozen=True)
class Edge:
    src: str  # dotted module name
    dst: str  # dotted module name (an existing module of the package)
    where: str  # "path:line"
    how: str  # "import", "import_module", "registry string"


@dataclass
class Scan:
    """Everything the checks need from one package directory."""

    pkg: str
    root: Path
    modules: dict[str, Path]  # dotted name -> file
    edges: list[Edge] = field(default_factory=list)
    unresolved: list[str] = field(default_factory=list)  # imports of our package naming no module
    dynamic: list[str] = field(default_factory=list)  # import_module/__import__ with a non-constant name
    external: dict[str, dict[str, str]] = field(default_factory=dict)  # module -> {top-level name: where}

    def parts(self, module: str) -> tuple[str, ...]:
        return tuple(module.split(".")[1:])

    def place(self, module: str) -> Place | None:
        return placement(self.parts(module))

    def rel(self, module: str) -> str:
        return self.modules[module].relative_to(self.root.parent).as_posix()

    def out(self) -> dict[str, set[str]]:
        graph: dict[str, set[str]] = {m: set() for m in self.modules}
        for edge in self.edges:
            graph[edge.src].add(edge.dst)
        return graph


def discover(package_dir: Path) -> dict[str, Path]:
    """Dotted module name -> file, for every .py file under ``package_dir`` (``__init__`` = the package)."""
    pkg = package_dir.name
    found = {}
    for path in sorted(package_dir.rglob("*.py")):
        parts = path.relative_to(package_dir).with_suffix("").parts
        if parts[-1] == "__init__":
            parts = parts[:-1]
        found[".".join((pkg, *parts))] = path
    return found


def _call_name(node: ast.Call) -> str | None:
    func = node.func
    if isinstance(func, ast.Name) and func.id in IMPORT_CALLS:
        return func.id
    if isinstance(func, ast.Attribute) and func.attr in IMPORT_CALLS:
        return func.attr
    return None


def _resolve_relative(module: str, is_pkg: bool, level: int, name: str | None) -> str:
    base = module.split(".")
    if not is_pkg:
        base = base[:-1]  # the containing package
    if level > 1:
        base = base[: len(base) - (level - 1)]
    return ".".join(base + ([name] if name else []))


def scan(package_dir: Path) -> Scan:
    """Parse every module of the package and collect its edges and outside imports."""
    package_dir = package_dir.resolve()
    result = Scan(package_dir.name, package_dir, discover(package_dir))
    for module in result.modules:
        _scan_module(result, module)
    return result


def _scan_module(result: Scan, module: str) -> None:
    path = result.modules[module]
    pkg = result.pkg
    is_pkg = path.name == "__init__.py"
    registry = re.compile(rf"^{re.escape(pkg)}(?:\.\w+)+:\w+(?:\.\w+)*$")
    seen: set[tuple[str, int]] = set()
    outside = result.external.setdefault(module, {})

    def add(target: str, line: int, how: str, *, must_exist: bool) -> None:
        where = f"{result.rel(module)}:{line}"
        if target != pkg and not target.startswith(pkg + "."):
            outside.setdefault(target.split(".")[0], where)
            return
        if must_exist and target not in result.modules:
            result.unresolved.append(f"{where} imports {target}, which is no module of {pkg}")
        dst = target
        while dst and dst not in result.modules:  # a name imported from a module: the module
            dst = dst.rpartition(".")[0]
        # Importing oneself or one's own enclosing package is no dependency between modules.
        if not dst or dst == module or module.startswith(dst + "."):
            return
        if (dst, line) not in seen:
            seen.add((dst, line))
            result.edges.append(Edge(module, dst, where, how))

    tree = ast.parse(path.read_text(encoding="utf-8"), filename=str(path))
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            for alias in node.names:
                add(alias.name, node.lineno, "import", must_exist=True)
        elif isinstance(node, ast.ImportFrom):
            base = _resolve_relative(module, is_pkg, node.level, node.module) if node.level else node.module or ""
            add(base, node.lineno, "import", must_exist=True)
            for alias in node.names:
                if alias.name != "*":  # a name or a submodule; falls back to ``base`` if not a module
                    add(f"{base}.{alias.name}", node.lineno, "import", must_exist=False)
        elif isinstance(node, ast.Call) and (how := _call_name(node)):
            arg = node.args[0] if node.args else next((k.value for k in node.keywords if k.arg == "name"), None)
            if isinstance(arg, ast.Constant) and isinstance(arg.value, str):
                name = arg.value.split(":")[0]
                if name.startswith("."):
                    level = len(name) - len(name.lstrip("."))
                    name = _resolve_relative(module, is_pkg, level, name.lstrip(".") or None)
                add(name, node.lineno, how, must_exist=True)
            else:
                result.dynamic.append(
                    f"{result.rel(module)}:{node.lineno} calls {how}() with a non-constant "
                    f"name ({ast.unparse(arg) if arg else 'no argument'})"
                )
        elif isinstance(node, ast.Constant) and isinstance(node.value, str) and registry.match(node.value):
            add(node.value.split(":")[0], node.lineno, "registry string", must_exist=True)


# --------------------------------------------------------------------------- checks


def _describe(s: Scan, edge: Edge, why: str) -> str:
    return f"{edge.where}: {edge.src} imports {edge.dst} ({edge.how}): {why}"


def unplaced_modules(s: Scan) -> list[str]:
    """Modules whose folder (or top-level name) puts them in no layer."""
    return [
        f"{s.rel(m)}: {m} is in no layer (common: {', '.join(COMMON)}; stage folders: {', '.join(STAGES)}; "
        f"top: {', '.join(TOP)})"
        for m in s.modules
        if s.place(m) is None
    ]


def layer_violations(s: Scan) -> list[str]:
    """Edges from a module to a later layer, or to a common module it may not import."""
    wrong = []
    for edge in s.edges:
        src, dst = s.place(edge.src), s.place(edge.dst)
        if src is None or dst is None:
            continue  # reported by unplaced_modules
        if src.layer == "root":
            continue  # the public facade's lazy names: tests/test_public_api.py loads it and counts modules
        if src.layer == "common":
            allowed = COMMON[s.parts(edge.src)[0]]
            if dst.layer != "common" or s.parts(edge.dst)[0] not in allowed:
                wrong.append(
                    _describe(
                        s,
                        edge,
                        f"common-layer {s.parts(edge.src)[0]} may import only "
                        f"{', '.join(sorted(allowed)) or 'nothing of ours'}",
                    )
                )
        elif src.layer == "grammar":
            if dst.layer != "common":
                wrong.append(_describe(s, edge, "the note grammar may import only the common layer"))
        elif not (dst.rank < src.rank or dst.layer == src.layer):
            wrong.append(_describe(s, edge, f"layer {src.layer!r} may not import the later layer {dst.layer!r}"))
    return sorted(wrong)


def offline_violations(s: Scan) -> list[str]:
    """Edges from the offline backend to anything but models/ and the common layer."""
    wrong = []
    for edge in s.edges:
        if s.parts(edge.src)[:2] != OFFLINE:
            continue
        dst = s.place(edge.dst)
        if dst is None or dst.layer not in ("models", "common", "grammar"):
            wrong.append(
                _describe(s, edge, "the offline backend imports only models/, the note grammar and the common layer")
            )
    return sorted(wrong)


def skipped_layer_violations(s: Scan) -> list[str]:
    """Edges from a stage to an earlier stage it must reach only through a lower one (``SKIPPED``)."""
    wrong = []
    for edge in s.edges:
        src, dst = s.place(edge.src), s.place(edge.dst)
        if src is not None and dst is not None and dst.layer in SKIPPED.get(src.layer, ()):
            wrong.append(_describe(s, edge, f"{src.layer}/ may not import {dst.layer}/ (its formats are in vault/)"))
    return sorted(wrong)


def strongly_connected(graph: dict[str, set[str]]) -> list[list[str]]:
    """Tarjan's SCCs of size > 1 (or with a self-loop), iteratively; each sorted, the list sorted."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    found: list[list[str]] = []
    counter = 0
    for start in sorted(graph):
        if start in index:
            continue
        work = [(start, iter(sorted(graph[start])))]
        index[start] = low[start] = counter
        counter += 1
        stack.append(start)
        on_stack.add(start)
        while work:
            v, children = work[-1]
            for w in children:
                if w not in index:
                    index[w] = low[w] = counter
                    counter += 1
                    stack.append(w)
                    on_stack.add(w)
                    work.append((w, iter(sorted(graph.get(w, ())))))
                    break
                if w in on_stack:
                    low[v] = min(low[v], index[w])
            else:
                work.pop()
                if work:
                    low[work[-1][0]] = min(low[work[-1][0]], low[v])
                if low[v] == index[v]:
                    component = []
                    while True:
                        w = stack.pop()
                        on_stack.discard(w)
                        component.append(w)
                        if w == v:
                            break
                    if len(component) > 1 or v in graph.get(v, ()):
                        found.append(sorted(component))
    return sorted(found)


def _witness(s: Scan, component: list[str]) -> str:
    """One concrete loop through the component's first member, with where each edge is."""
    members = set(component)
    where = {(e.src, e.dst): e.where for e in s.edges}
    graph = s.out()
    start = component[0]
    previous: dict[str, str] = {}
    frontier = [start]
    while frontier:  # breadth-first back to start, inside the component
        nxt = []
        for v in frontier:
            for w in sorted(graph[v] & members):
                if w == start:
                    path = [v]
                    while path[-1] != start:
                        path.append(previous[path[-1]])
                    path.reverse()
                    path.append(start)
                    return " -> ".join(f"{a} ({where[(a, b)]})" for a, b in itertools.pairwise(path)) + f" -> {start}"
                if w not in previous:
                    previous[w] = v
                    nxt.append(w)
        frontier = nxt
    return ""


def cycles(s: Scan) -> list[str]:
    """Each import cycle as its members, with one concrete loop through them."""
    return [f"cycle among {', '.join(c)}\n    e.g. {_witness(s, c)}" for c in strongly_connected(s.out())]


def top_level_modules(package_dir: Path) -> list[str]:
    return sorted(p.stem for p in package_dir.glob("*.py") if p.stem != "__init__")


def _fail(title: str, problems: list[str]) -> str:
    return f"{len(problems)} {title}:\n  " + "\n  ".join(problems)


_SCAN: Scan | None = None


def real() -> Scan:
    global _SCAN
    if _SCAN is None:
        _SCAN = scan(PACKAGE)
    return _SCAN


# --------------------------------------------------------------------------- the real package


def test_every_module_is_placed_by_its_folder():
    problems = unplaced_modules(real())
    assert not problems, _fail("module(s) outside the layout", problems)


def test_every_import_of_ours_names_a_module():
    problems = sorted(real().unresolved)
    assert not problems, _fail("import(s) of modules that do not exist", problems)


def test_modules_import_only_their_folder_earlier_folders_and_the_common_layer():
    problems = layer_violations(real())
    assert not problems, _fail("import(s) against the flow", problems)


def test_retrieve_imports_nothing_of_ingest():
    problems = skipped_layer_violations(real())
    assert not problems, _fail("import(s) of a stage that must be skipped", problems)


def test_common_layer_errors_imports_nothing_config_only_errors_text_nothing():
    s = real()
    problems = [v for v in layer_violations(s) if ": common-layer " in v]
    assert not problems, _fail("common-layer import(s)", problems)


def test_offline_backend_imports_only_models_and_the_common_layer():
    s = real()
    assert any(s.parts(m)[:2] == OFFLINE for m in s.modules), "vault_pipeline/models/offline/ is missing"
    problems = offline_violations(s)
    assert not problems, _fail("offline-backend import(s) outside models/ and the common layer", problems)


def test_no_import_cycles():
    problems = cycles(real())
    assert not problems, _fail("import cycle(s) (TYPE_CHECKING and lazy imports included)", problems)


def test_no_import_module_with_a_non_constant_name():
    # The package __init__ imports the public API's names lazily, from its own table of them.
    problems = sorted(d for d in real().dynamic if not d.startswith("vault_pipeline/__init__.py:"))
    assert not problems, _fail(
        'dynamic import(s) the checker cannot follow; use import_module("vault_pipeline.x.y") with a string '
        "constant or a plain import inside the function",
        problems,
    )


def test_at_most_ten_top_level_modules():
    top = top_level_modules(PACKAGE)
    assert len(top) <= MAX_TOP_LEVEL, (
        f"{len(top)} top-level modules (at most {MAX_TOP_LEVEL}; stages belong in folders): {', '.join(top)}"
    )


def test_only_the_litellm_backend_imports_litellm_and_instructor_and_only_cli_imports_typer_and_rich():
    """The model stack stays behind one backend module; the terminal stack (typer, rich) in the cli/ package."""
    s = real()
    backends = {m for m in s.modules if s.parts(m)[:1] == ("models",) and "litellm" in s.parts(m)[-1]}
    assert backends, "no module under vault_pipeline/models/ has 'litellm' in its name (the LiteLLM backend)"
    cli = f"{s.pkg}.cli"
    problems = []
    for module, names in sorted(s.external.items()):
        for name, where in sorted(names.items()):
            if name in ("litellm", "instructor") and module not in backends:
                problems.append(f"{where}: {module} imports {name} (only {', '.join(sorted(backends))} may)")
            if name in ("typer", "rich") and not (module == cli or module.startswith(cli + ".")):
                problems.append(f"{where}: {module} imports {name} (only {cli} and its modules may)")
    assert not problems, _fail("model-stack or CLI-stack import(s) in the wrong module", problems)


# What only the note grammar may spell (``GRAMMAR``): an atomic body's labels ("Context:", "Source:",
# in any case, as a string or a regex source) and the block-id pattern (``^m-``, ``m-[...]``).
# Docstrings may name them; code must import them (docs/decisions/0083-note-grammar-and-typed-stages.md).
_GRAMMAR_SPELLING = re.compile(r"(?im)^[\s^(?:\\]*(?:context|source)\s*:|\^m-|m-\[")


def grammar_spellings(s: Scan) -> list[str]:
    """String constants outside the note grammar that spell its labels or its block-id pattern."""
    found = []
    for module, path in sorted(s.modules.items()):
        if s.parts(module) == GRAMMAR:
            continue
        tree = ast.parse(path.read_text(encoding="utf-8"), filename=str(path))
        docstrings = {
            id(node.body[0].value)
            for node in ast.walk(tree)
            if isinstance(node, (ast.Module, ast.ClassDef, ast.FunctionDef, ast.AsyncFunctionDef))
            and node.body
            and isinstance(node.body[0], ast.Expr)
            and isinstance(node.body[0].value, ast.Constant)
        }
        strings = [
            node
            for node in ast.walk(tree)
            if isinstance(node, ast.Constant) and isinstance(node.value, str) and id(node) not in docstrings
        ]
        found += [
            f"{s.rel(module)}:{node.lineno}: {module} spells {m.group().strip()!r} itself"
            for node in strings
            if (m := _GRAMMAR_SPELLING.search(node.value))
        ]
    return found


def test_the_note_grammar_is_spelled_in_one_module():
    """The atomic body's labels and the block-id pattern are written only in vault/format.py."""
    s = real()
    assert any(s.parts(m) == GRAMMAR for m in s.modules), "vault_pipeline/vault/format.py is missing"
    problems = grammar_spellings(s)
    assert not problems, _fail("note-grammar spelling(s) outside vault/format.py (import them from it)", problems)


# --------------------------------------------------------------------------- the checker itself


def _fake_package(root: Path) -> Path:
    files = {
        "__init__.py": "",
        "errors.py": "from fakepkg import config\n",  # common layer: errors imports nothing of ours
        "config.py": "from fakepkg.errors import E\n",
        "text.py": "",
        "models/__init__.py": "",
        "models/seam.py": ("def lazy():\n    from fakepkg.index.b import thing  # backwards, hidden in a function\n"),
        "models/offline/__init__.py": "HANDLERS = {'x': 'fakepkg.vault.store:handler'}  # registry string\n",
        "vault/__init__.py": "",
        "vault/store.py": "from ..errors import E\n",
        "vault/format.py": "from fakepkg.vault import store\nLABEL = 'Context:'\n",  # the note grammar reaching into its stage
        "index/__init__.py": "",
        "index/b.py": (
            "from typing import TYPE_CHECKING\n"
            "from fakepkg.models import seam\n"
            "if TYPE_CHECKING:\n"
            "    from .c import C\n"
        ),
        "index/c.py": (
            "import importlib\n"
            "def load(name):\n"
            "    importlib.import_module('fakepkg.index.b')\n"
            "    return importlib.import_module(name)\n"
        ),
        "index/d.py": "import fakepkg.index.gone\n",
        "index/e.py": "from fakepkg.serve import api\n",  # a stage importing the serving layer
        "retrieve/__init__.py": "",
        "retrieve/f.py": "from fakepkg.ingest import g\n",  # retrieval reaching into ingest
        "ingest/__init__.py": "",
        "ingest/g.py": 'CONTEXT = re.compile(r"^context:\\s*(.*)$", re.I)\nID = "^m-" + "x"\n',
        "serve/__init__.py": "",
        "serve/api.py": "from fakepkg.index import b\n",
        "stray.py": "",
    }
    package = root / "fakepkg"
    for rel, text in files.items():
        path = package / rel
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(textwrap.dedent(text), encoding="utf-8")
    return package


def test_checker_catches_violations(tmp_path: Path):
    s = scan(_fake_package(tmp_path))

    layers = layer_violations(s)
    assert any("fakepkg.models.seam imports fakepkg.index.b" in v and "'models'" in v for v in layers), layers
    assert any("fakepkg.errors imports fakepkg.config" in v for v in layers), layers
    assert not any("fakepkg.config imports fakepkg.errors" in v for v in layers), layers
    assert not any("fakepkg.vault.store imports fakepkg.errors" in v for v in layers), layers  # relative, allowed
    assert any("fakepkg.index.e imports fakepkg.serve.api" in v and "'serve'" in v for v in layers), layers
    assert any("fakepkg.vault.format imports fakepkg.vault.store" in v and "note grammar" in v for v in layers), layers
    assert not any(v.startswith("fakepkg/serve/") for v in layers), layers  # serve may import the stages

    skipped = skipped_layer_violations(s)
    assert skipped and all("fakepkg.retrieve.f imports fakepkg.ingest" in v for v in skipped), skipped

    offline = offline_violations(s)
    assert len(offline) == 1 and "fakepkg.models.offline imports fakepkg.vault.store (registry string)" in offline[0]

    assert strongly_connected(s.out()) == [
        ["fakepkg.config", "fakepkg.errors"],
        ["fakepkg.index.b", "fakepkg.index.c", "fakepkg.models.seam"],
    ]
    found = cycles(s)
    assert len(found) == 2 and "fakepkg.index.b, fakepkg.index.c, fakepkg.models.seam" in found[1], found

    assert [d.split(":")[0] for d in s.dynamic] == ["fakepkg/index/c.py"], s.dynamic
    spelled = grammar_spellings(s)
    assert len(spelled) == 2 and all(v.startswith("fakepkg/ingest/g.py:") for v in spelled), spelled
    assert not any("fakepkg/vault/format.py" in v for v in spelled), spelled
    assert any("fakepkg.index.gone" in u for u in s.unresolved), s.unresolved
    assert any("fakepkg.stray" in u for u in unplaced_modules(s)), unplaced_modules(s)
    assert top_level_modules(s.root) == ["config", "errors", "stray", "text"]


def test_checker_passes_a_clean_package(tmp_path: Path):
    package = tmp_path / "okpkg"
    for rel, text in {
        "__init__.py": "",
        "errors.py": "",
        "config.py": "from . import errors\n",
        "text.py": "",
        "models/__init__.py": "",
        "models/offline/__init__.py": "from okpkg.models import seam\n",
        "models/seam.py": "from okpkg.errors import E\nfrom okpkg.vault.format import LABEL\n",
        "vault/__init__.py": "",
        "vault/format.py": "from okpkg import text\n",
        "index/__init__.py": "",
        "index/a.py": "import importlib\nimportlib.import_module('okpkg.models.seam')\n",
        "pipeline.py": "from okpkg.index import a\n",
        "serve/__init__.py": "",
        "serve/tools.py": "from okpkg import pipeline\nfrom okpkg.index import a\n",
        "cli.py": "from okpkg import pipeline\nfrom okpkg.serve import tools\n",
    }.items():
        (package / rel).parent.mkdir(parents=True, exist_ok=True)
        (package / rel).write_text(text, encoding="utf-8")
    s = scan(package)
    assert (unplaced_modules(s), layer_violations(s), offline_violations(s), cycles(s), s.dynamic, s.unresolved) == (
        [],
        [],
        [],
        [],
        [],
        [],
    )
    assert {(e.src, e.dst) for e in s.edges} >= {
        ("okpkg.index.a", "okpkg.models.seam"),
        ("okpkg.models.seam", "okpkg.vault.format"),
        ("okpkg.cli", "okpkg.pipeline"),
        ("okpkg.serve.tools", "okpkg.pipeline"),
        ("okpkg.cli", "okpkg.serve.tools"),
    }
