"""Import direction: a stage imports only itself and earlier stages; only llm.py imports the model stack."""

from __future__ import annotations

import ast
from pathlib import Path

PACKAGE = Path(__file__).resolve().parent.parent / "vault_pipeline"

# The flow, in order. A module belongs to the first group whose prefix it matches; the offline
# backend's algorithms sit with the stage they serve.
STAGES = [
    ("errors",), ("config",), ("llm", "offline"), ("parse",), ("extract", "offline.extraction", "offline.text"),
    ("notes",), ("vault", "vault_state"), ("keep",), ("chunk",), ("embed",), ("index", "index_store"),
    ("gate", "query", "package", "offline.retrieval"),
    ("candidates", "judge", "clean", "clean_apply", "offline.judging"),
    ("check",), ("calibrate",), ("pipeline",), ("cli",),
]


def module_name(path: Path) -> str:
    parts = path.relative_to(PACKAGE).with_suffix("").parts
    return ".".join(p for p in parts if p != "__init__") or "__init__"


def stage(name: str) -> int:
    best = None
    for index, group in enumerate(STAGES):
        for prefix in group:
            if name == prefix or name.startswith(prefix + "."):
                if best is None or len(prefix) > best[1]:
                    best = (index, len(prefix))
    assert best is not None, f"module {name} is not placed in STAGES"
    return best[0]


def imports(path: Path) -> set[str]:
    found = set()
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        if isinstance(node, ast.ImportFrom) and node.module:
            found.add(node.module)
        elif isinstance(node, ast.Import):
            found.update(alias.name for alias in node.names)
    return found


def modules():
    return [p for p in sorted(PACKAGE.rglob("*.py")) if module_name(p) != "__init__"]


def test_stages_import_only_earlier_stages():
    wrong = []
    for path in modules():
        name = module_name(path)
        for target in imports(path):
            if target.startswith("vault_pipeline.") and stage(target.removeprefix("vault_pipeline.")) > stage(name):
                wrong.append(f"{name} imports the later stage {target}")
    assert not wrong, "\n".join(wrong)


def test_only_llm_imports_litellm_and_instructor_and_only_cli_imports_typer_and_rich():
    for path in modules():
        name, found = module_name(path), {t.split(".")[0] for t in imports(path)}
        if name != "llm":
            assert not found & {"litellm", "instructor"}, name
        if name != "cli":
            assert not found & {"typer", "rich"}, name
