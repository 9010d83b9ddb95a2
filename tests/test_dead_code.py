"""No dead code in the package: vulture over the package, its benchmarks and its tests finds no
function, method, class, variable or import that nothing uses, but for the names below, which a
framework calls or reads by name (vulture cannot see that)."""

from __future__ import annotations

import textwrap
from pathlib import Path

from vulture import Vulture

ROOT = Path(__file__).resolve().parent.parent
SCANNED = ("vault_pipeline", "benchmarks", "tests")
MIN_CONFIDENCE = 60

# (module path under vault_pipeline/, name) -> who uses it.
CALLED_BY_NAME = {
    ("__init__.py", "__getattr__"): "Python: a module's lazy attributes (PEP 562)",
    ("__init__.py", "__dir__"): "Python: a module's dir() (PEP 562)",
    ("clean/judge.py", "_lower"): "pydantic: a field validator",
    ("clean/judge.py", "_one_per_key"): "pydantic: a model validator",
    ("clean/judge.py", "a_created"): "the judge's prompt: a field sent to the model",
    ("clean/judge.py", "b_created"): "the judge's prompt: a field sent to the model",
    ("cli/app.py", "collect_usage_pieces"): "click: an override of the usage line",
    ("cli/app.py", "format_options"): "click: an override of the options' help",
    ("index/chunk.py", "state_cls"): "mistune: the block parser's state class",
    ("index/sync.py", "embed_seconds"): "the index report's JSON (vault index --json)",
    ("ingest/extract.py", "_known_category"): "pydantic: a field validator",
    ("ingest/extract.py", "_one_short_sentence"): "pydantic: a field validator",
    ("ingest/extract.py", "_short_context"): "pydantic: a field validator",
    ("ingest/extract.py", "_provenance"): "pydantic: a field validator",
    ("ingest/extract.py", "_collapse_repetitions"): "pydantic: a field validator",
    ("ingest/extract.py", "_length"): "pydantic: a field validator",
    ("ingest/extract.py", "_known_sessions"): "pydantic: a model validator",
    ("ingest/quality_model.py", "_one_per_key"): "pydantic: a model validator",
    ("models/calllog.py", "exc_text"): "logging: a record's cached traceback text",
    ("models/embed.py", "graph_optimization_level"): "onnxruntime: a session option",
    ("models/embed.py", "intra_op_num_threads"): "onnxruntime: a session option",
    ("models/embed.py", "inter_op_num_threads"): "onnxruntime: a session option",
    ("models/embed.py", "execution_mode"): "onnxruntime: a session option",
    ("models/embed.py", "log_severity_level"): "onnxruntime: a session option",
    ("models/embed.py", "enable_cpu_mem_arena"): "onnxruntime: a session option",
    ("models/litellm_backend.py", "telemetry"): "litellm: a module setting",
    ("models/litellm_backend.py", "suppress_debug_info"): "litellm: a module setting",
    ("retrieve/calibrate.py", "off_topic_kept"): "the calibration report's JSON and the notebook",
    ("retrieve/gate.py", "_one_per_key"): "pydantic: a model validator",
    ("retrieve/types.py", "_non_empty"): "pydantic: a field validator",
    ("serve/mcp_notes.py", "note_resource"): "the MCP SDK: a resource template registered by decorator",
    ("vault/frontmatter.py", "indentless"): "PyYAML: the overridden method's parameter",
}


def unused(root: Path, scanned: tuple[str, ...], package: str) -> list[tuple[str, str, str]]:
    """(module path under ``package``, name, vulture's message) for each unused name in the package."""
    found = Vulture()
    found.scavenge([str(root / s) for s in scanned])
    base = (root / package).resolve()
    out = []
    for item in found.get_unused_code(min_confidence=MIN_CONFIDENCE):
        path = Path(item.filename).resolve()
        if path.is_relative_to(base):
            out.append((path.relative_to(base).as_posix(), item.name, f"{item.message} (line {item.first_lineno})"))
    return out


def test_nothing_in_the_package_is_unused():
    dead = [
        f"{module}: {message}"
        for module, name, message in unused(ROOT, SCANNED, "vault_pipeline")
        if (module, name) not in CALLED_BY_NAME
    ]
    assert not dead, "unused code (remove it, or say in CALLED_BY_NAME who calls it by name):\n" + "\n".join(dead)


def test_every_name_said_to_be_called_by_name_is_still_there():
    reported = {(module, name) for module, name, _ in unused(ROOT, SCANNED, "vault_pipeline")}
    stale = sorted(set(CALLED_BY_NAME) - reported)
    assert not stale, f"no longer unused or gone: drop from CALLED_BY_NAME: {stale}"


def test_the_check_finds_a_function_nothing_calls(tmp_path):
    pkg = tmp_path / "fakepkg"
    pkg.mkdir()
    (pkg / "__init__.py").write_text("")
    (pkg / "a.py").write_text(
        textwrap.dedent(
            """
            def used():
                return 1

            def forgotten():
                return 2
            """
        )
    )
    (pkg / "b.py").write_text("from fakepkg.a import used\n\nprint(used())\n")
    assert [(m, n) for m, n, _ in unused(tmp_path, ("fakepkg",), "fakepkg")] == [("a.py", "forgotten")]
