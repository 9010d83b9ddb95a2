"""``vault status``: what the vault holds, how fresh its index is, which models leave the machine."""

from __future__ import annotations

from typing import TYPE_CHECKING, Annotated

import typer

from vault_pipeline.cli.common import (
    EXIT_OK,
    JsonOpt,
    VaultOpt,
    VerboseOpt,
    build_embedder,
    err,
    open_vault,
    out,
    print_json,
    table,
)
from vault_pipeline.cli.index import say_repaired

if TYPE_CHECKING:
    from vault_pipeline.config import Settings
    from vault_pipeline.pipeline import VaultStatus


def status(
    vault_path: VaultOpt = None,
    lint: Annotated[bool, typer.Option("--lint", help="List heading levels with more than four bullets.")] = False,
    json_out: JsonOpt = False,
    verbose: VerboseOpt = False,
) -> None:
    """Notes per folder, tier, status and category; index freshness; which models are remote.

    \b
    Example:  vault status --vault ~/notes"""
    from vault_pipeline import pipeline

    vault, settings, _ = open_vault(vault_path)
    models = where_models_run(settings)
    # The index is derived: when it is unreadable, the library rebuilds it, then reports.
    result = pipeline.status(
        vault, lint=lint, models=models, embedder=lambda: build_embedder(settings), on_repair=say_repaired
    )
    if json_out:
        print_json(result.to_dict(), EXIT_OK)
    else:
        print_status(result)


def where_models_run(settings: Settings) -> list[tuple[str, str, str]]:
    """(role, model, "local" | "remote") for the extraction, gate, quality and embedding models."""
    from vault_pipeline.models.litellm_backend import is_remote

    roles = (
        ("extract", settings.extract_model),
        ("gate", settings.gate_model),
        ("quality", settings.quality_model),
        ("embed", settings.embed_model),
    )
    return [
        (role, model, "remote" if is_remote(model, settings.api_base) and model != "minilm" else "local")
        for role, model in roles
    ]


def print_status(result: VaultStatus) -> None:
    """Folders, the index's counts and the models, as tables; lint findings as lines."""
    folders = sorted(result.folders.items())
    total = ("all notes", sum(n for _, n in folders))
    out.print(table(f"vault status: {result.vault}", [*folders, total], ("folder", "notes")))
    if result.index is None:
        out.print("index: none yet (run `vault index`)")
    else:
        idx = result.index
        rows = [
            ("notes indexed", idx["notes"]),
            ("chunks", idx["rows"]),
            ("last sync", idx["last_sync"]),
            ("embedder", f"{idx['embedder']} ({idx['dim']}-d)"),
            ("waiting to index", ", ".join(f"{k} {v}" for k, v in result.pending.items())),
            *((f"tier {k or '(none)'}", v) for k, v in sorted(idx["tiers"].items())),
            *((f"status {k or '(none)'}", v) for k, v in sorted(idx["statuses"].items())),
            *((f"category {k or '(none)'}", v) for k, v in sorted(idx["categories"].items())),
        ]
        out.print(table("index (derived from the notes; rebuilt by `vault index`)", rows, ("index", "value")))
    out.print(table("models", result.models, ("role", "model", "where")))
    for relpath, heading, bullets in result.lint:
        out.print(f"lint: {relpath}: '{heading}' has {bullets} bullets (more than four: split the idea)", markup=False)
    for relpath, problem in result.broken:
        err.print(f"warning: {relpath}: {problem} (fix its frontmatter; `vault check` shows it)", markup=False)
