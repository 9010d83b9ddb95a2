"""``vault ingest``: chat exports in, atomic notes out."""

from __future__ import annotations

from functools import partial
from pathlib import Path
from typing import TYPE_CHECKING, Annotated

import typer
from rich.console import Console

from vault_pipeline.cli.common import (
    JsonOpt,
    UsageError,
    VaultOpt,
    VerboseOpt,
    WaitOpt,
    build_llm,
    err,
    exit_for,
    finish,
    open_vault,
    out,
    print_json,
    schema_option,
    table,
)
from vault_pipeline.cli.progress import progress
from vault_pipeline.errors import VaultError

if TYPE_CHECKING:
    from vault_pipeline.config import Settings
    from vault_pipeline.ingest.select import Selector
    from vault_pipeline.ingest.write import IngestReport
    from vault_pipeline.models.calllog import Usage
    from vault_pipeline.models.protocol import StructuredLLM
    from vault_pipeline.vault.files import Vault


def ingest(
    paths: Annotated[
        list[Path], typer.Argument(metavar="EXPORT...", help="Export .zip/.json, folder, or transcript files.")
    ],
    vault_path: VaultOpt = None,
    model: Annotated[str | None, typer.Option(metavar="MODEL", help="Extraction model (overrides vault.toml).")] = None,
    json_out: JsonOpt = False,
    wait: WaitOpt = 0,
    estimate: Annotated[
        bool,
        typer.Option(
            "--estimate", help="Print the model calls, tokens and cost the ingest would take; call and write nothing."
        ),
    ] = False,
    concurrency: Annotated[int | None, schema_option("concurrency", "N")] = None,
    verbose: VerboseOpt = False,
) -> None:
    """Turn chat exports into atomic notes, session notes, topic hubs and thread maps.

    With a model, answers are kept under .vault_pipeline/: an interrupted ingest, run again, does
    not pay again for what was answered. Exit 1 when a record was skipped or a conversation failed
    (the last line counts them).

    \b
    Example:  vault ingest ~/Downloads/chatgpt-export.zip --estimate"""
    from vault_pipeline import pipeline

    for path in paths:
        if not path.exists():
            raise UsageError(f"{path}: no such file or folder")
    vault, settings, log = open_vault(vault_path)
    model = model or settings.extract_model
    if model == "mcp-sampling":
        err.print("extract: mcp-sampling asks an MCP client's model, in `vault mcp`; the offline extractor works here")
    max_record = int(settings.max_record_mb * 2**20)
    if estimate:
        print_estimate(vault, settings, model, paths, max_record, json_out)
        return
    llm = cached(vault, build_llm(settings, model, log))
    status = (lambda: log.usage.line()) if llm.model != "offline" else None
    with progress("ingest", "conversations", partial(count_conversations, paths), status) as advance:
        report = pipeline.ingest(
            vault,
            paths,
            llm,
            progress=advance,
            wait=wait,
            max_record=max_record,
            selector=selector_of(settings),
            concurrency=concurrency or settings.concurrency,
        )
    if json_out:
        data = report.to_dict()
        if status is not None:  # a model was asked: its calls, tokens and cost
            data["model_usage"] = usage_dict(log.usage)
        print_json(data, exit_for(problems(report)))
    else:
        print_ingest(report, out, log.usage)
    finish(problems(report))


def cached(vault: Vault, llm: StructuredLLM) -> StructuredLLM:
    """A model's answers kept in the vault's answer cache (``models.answers``); the offline backend as it is."""
    from vault_pipeline.models.answers import ANSWERS_FILE, AnswerCache, CachedLLM
    from vault_pipeline.models.protocol import is_offline
    from vault_pipeline.vault.files import STATE_DIR

    if is_offline(llm.model):
        return llm
    return CachedLLM(llm, AnswerCache(vault.root / STATE_DIR / ANSWERS_FILE))


def print_estimate(vault: Vault, settings: Settings, model: str, paths: list[Path], max_record: int, json_out: bool):
    """``--estimate``: what the ingest would ask the model and cost, before anything is spent."""
    from vault_pipeline import pipeline
    from vault_pipeline.models.answers import ANSWERS_FILE, AnswerCache
    from vault_pipeline.models.estimate import DryRunLLM
    from vault_pipeline.models.litellm_backend import is_remote
    from vault_pipeline.models.protocol import is_offline
    from vault_pipeline.vault.files import STATE_DIR

    if is_offline(model):
        err.print("the offline extractor calls no model: nothing to estimate, nothing to pay", markup=False)
        return
    kept = vault.root / STATE_DIR / ANSWERS_FILE
    answers = AnswerCache(kept) if kept.is_file() else None
    dry = DryRunLLM(
        model, api_base=settings.api_base, answers=answers, remote_model=is_remote(model, settings.api_base)
    )
    estimate = pipeline.estimate_ingest(paths, dry, max_record=max_record)
    if json_out:
        print_json(estimate.to_dict(), 0)
        return
    priced = (
        f"${estimate.cost:.4f}" if estimate.priced else "$0 (not in LiteLLM's price table: a local or unlisted model)"
    )
    rows = [
        ("model", model),
        ("conversations", f"{estimate.conversations:,}"),
        ("calls to make", f"{sum(estimate.calls.values()):,}"),
        *((f"  {name}", f"{n:,}") for name, n in sorted(estimate.calls.items())),
        ("calls answered already (cache)", f"{estimate.cached:,}"),
        ("prompt tokens", f"{estimate.prompt_tokens:,}"),
        ("answer tokens (estimated)", f"{estimate.completion_tokens:,}"),
        ("cost (USD)", priced),
    ]
    out.print(table("ingest estimate (nothing called, nothing written)", rows, ("", "")))


def usage_dict(usage: Usage) -> dict[str, int | float]:
    """The model calls of a run, as ``--json`` reports them."""
    return {
        "calls": usage.calls,
        "cached": usage.cached,
        "failed": usage.failed,
        "prompt_tokens": usage.prompt_tokens,
        "completion_tokens": usage.completion_tokens,
        "cost_usd": round(usage.cost, 6),
    }


def selector_of(settings: Settings) -> Selector:
    """The shipped selector with the thresholds vault.toml sets ([ingest] write_threshold, keep_threshold)."""
    from vault_pipeline.ingest.select import shipped

    return shipped(settings.write_threshold, settings.keep_threshold)


def problems(report: IngestReport) -> dict[str, int]:
    """What makes an ingest incomplete (exit 1): skipped records and failed conversations."""
    return {
        "record(s) skipped": len(report.skipped),
        "conversation(s) failed": len(report.errors),
        "file(s) not writable": len(report.unwritable),
    }


def count_conversations(paths: list[Path]) -> int | None:
    """How many conversations the inputs hold, for the progress ETA: a streaming parse, a small
    fraction of the ingest itself. None when an input cannot be read (the ingest reports it)."""
    from vault_pipeline.ingest.parse import ParseIssue, read_export

    try:
        return sum(1 for path in paths for item in read_export(path) if not isinstance(item, ParseIssue))
    except VaultError:
        return None


def print_ingest(report: IngestReport, console: Console, usage: Usage | None = None) -> None:
    """What was skipped, refused or warned about on stderr, then the counts as a table (with the
    model's calls and cost when ``usage`` counted any)."""
    for line in report.skipped + report.errors:
        err.print(f"skipped: {line}", markup=False)
    for line in report.warnings:
        err.print(f"warning: {line}", markup=False)
    for line in report.refused:
        err.print(f"left untouched (edited since written): {line}", markup=False)
    for line in report.unwritable:
        err.print(f"not written: {line}", markup=False)
    if report.archived:
        err.print(
            f"archived {len(report.archived)} note(s) the extractor no longer writes "
            f"(undo: vault clean --undo {report.archive_run})",
            markup=False,
        )
    rate = report.notes / report.seconds * 60 if report.seconds else 0.0
    rows = [
        ("conversations", report.conversations),
        ("messages", report.messages),
        ("abandoned-branch messages (not ingested)", report.alternates),
        ("atomic notes", report.notes),
        ("thread maps", report.threads),
        *((f"  {cat}", n) for cat, n in sorted(report.notes_by_category.items())),
        ("candidates not written (below the selector's bar)", sum(report.not_written.values())),
        # Every reason selection gave, however many kinds: the rows add up to the total above.
        *((f"  {reason}", n) for reason, n in report.not_written.most_common()),
        ("sentences too long to be a note (left to the transcript)", report.units_skipped),
        ("notes no longer written, archived", len(report.archived)),
        ("topics named only (the conversation's hub, not a note)", report.topics_named),
        ("files created", report.writes["created"]),
        ("files updated", report.writes["updated"]),
        ("files unchanged", report.writes["unchanged"] + report.writes["moved-elsewhere"]),
        ("files refused (user-edited)", report.writes["refused"]),
        ("records skipped", len(report.skipped)),
        ("conversations failed", len(report.errors)),
        ("seconds", f"{report.seconds:.1f}"),
        ("notes per minute", f"{rate:,.0f}"),
        ("model", report.model),
    ]
    if usage is not None and (usage.calls or usage.cached):
        rows += [
            ("model calls", f"{usage.calls:,}"),
            ("answers from the cache (not paid again)", f"{usage.cached:,}"),
            ("tokens", f"{usage.prompt_tokens + usage.completion_tokens:,}"),
            ("cost (USD)", f"{usage.cost:.4f}"),
        ]
    console.print(table("ingest", rows, ("", "count")))
