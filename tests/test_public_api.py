"""The public API: ``vault_pipeline`` exports exactly these names (as httpx pins its own), each
typed, and importing the package loads nothing else."""

from __future__ import annotations

import inspect
import subprocess
import sys
import typing

import vault_pipeline

EXPORTED = [
    "CheckReport",
    "CleanReport",
    "ContextPackage",
    "Embedder",
    "FunnelConfig",
    "IndexReport",
    "IngestReport",
    "KeepReport",
    "Plan",
    "Settings",
    "StructuredLLM",
    "UndoReport",
    "Vault",
    "VaultError",
    "VaultStatus",
    "__version__",
    "build_embedder",
    "build_llm",
    "check",
    "clean",
    "estimate_ingest",
    "gate_llm",
    "index",
    "ingest",
    "keep",
    "load_settings",
    "plan_clean",
    "query",
    "search",
    "status",
    "undo_clean",
]
# The flow's functions and the result each returns.
RESULTS = {
    "ingest": "IngestReport",
    "keep": "KeepReport",
    "index": "IndexReport",
    "query": "Iterator[ContextPackage]",
    "search": "list[Candidate]",
    "status": "VaultStatus",
    "check": "CheckReport",
    "plan_clean": "Plan",
    "clean": "CleanReport",
    "undo_clean": "UndoReport",
}


def test_the_exported_names_are_pinned():
    assert sorted(vault_pipeline.__all__) == EXPORTED
    for name in EXPORTED:
        assert getattr(vault_pipeline, name) is not None, name


def test_every_function_of_the_flow_is_typed_and_says_what_it_returns():
    for name, result in RESULTS.items():
        function = getattr(vault_pipeline, name)
        signature = inspect.signature(function)
        assert str(signature.return_annotation).replace("collections.abc.", "") == result, name
        untyped = [p for p in signature.parameters.values() if p.annotation is inspect.Parameter.empty]
        assert untyped == [], (name, untyped)
    hints = typing.get_type_hints(
        vault_pipeline.query, vars(sys.modules["vault_pipeline.pipeline"]) | vars(vault_pipeline)
    )
    assert hints["embedder"] is vault_pipeline.Embedder


def test_the_api_functions_win_over_the_stage_packages_of_the_same_name():
    import vault_pipeline.clean.apply
    import vault_pipeline.index.sync
    import vault_pipeline.ingest.write

    assert callable(vault_pipeline.index) and callable(vault_pipeline.ingest) and callable(vault_pipeline.clean)
    from vault_pipeline.index.sync import sync

    assert callable(sync)
    import vault_pipeline.index.sync as index_sync  # the `as` form reaches the module through the function

    assert index_sync.sync is sync and vault_pipeline.index.sync is index_sync


def test_importing_the_package_loads_nothing_else_of_ours():
    code = "import sys, vault_pipeline\nprint(sorted(m for m in sys.modules if m.startswith('vault_pipeline')))"
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert done.stdout.strip() == "['vault_pipeline']"


def test_the_flow_runs_through_the_facade_alone(tmp_path):
    """The module docstring's example, with the fast test embedder: each step returns its report."""
    from pathlib import Path

    from tests.support.fakes import HashEmbedder

    vp = vault_pipeline
    llm, embedder = vp.build_llm("offline"), HashEmbedder(dim=64)
    export = Path(__file__).resolve().parent.parent / "vault_example" / "exports" / "chatgpt" / "conversations.json"
    vault = vp.Vault.init(tmp_path / "notes")
    try:
        assert isinstance(vp.ingest(vault, [export], llm), vp.IngestReport)
        assert isinstance(vp.keep(vault, all_passing=True), vp.KeepReport)
        assert isinstance(vp.index(vault, embedder), vp.IndexReport)
        (package,) = vp.query(vault, [("What did we decide?", None)], embedder=embedder, llm_plan=llm, llm_gate=llm)
        assert isinstance(package, vp.ContextPackage) and package.to_markdown().startswith("# Context:")
        assert isinstance(vp.check(vault), vp.CheckReport)
        assert isinstance(vp.status(vault), vp.VaultStatus)
    finally:
        vault.close()
