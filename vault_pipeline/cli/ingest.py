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
    table,
)
from vault_pipeline.cli.progress import progress
from vault_pipeline.errors import VaultError

if TYPE_CHECKING:
    from vault_pipeline.config import Settings
    from vault_pipeline.ingest.select import Selector
    from vault_pipeline.ingest.write import IngestReport


def ingest(
    paths: Annotated[
        list[Path], typer.Argument(metavar="EXPORT...", help="Export .zip/.json, folder, or transcript files.")
    ],
    vault_path: VaultOpt = None,
    model: Annotated[str | None, typer.Option(metavar="MODEL", help="Extraction model (overrides vault.toml).")] = None,
    json_out: JsonOpt = False,
    wait: WaitOpt = 0,
    verbose: VerboseOpt = False,
) -> None:
    """Turn chat exports into atomic notes, session notes, topic hubs and thread maps.

    Exit 1 when a record was skipped or a conversation failed (the last line counts them).

    \b
    Example:  vault ingest ~/Downloads/chatgpt-export.zip"""
    from vault_pipeline import pipeline

    for path in paths:
        if not path.exists():
            raise UsageError(f"{path}: no such file or folder")
    vault, settings, log = open_vault(vault_path)
    llm = build_llm(settings, model or settings.extract_model, log)
    with progress("ingest", "conversations", partial(count_conversations, paths)) as advance:
        report = pipeline.ingest(
            vault,
            paths,
            llm,
            progress=advance,
            wait=wait,
            max_record=int(settings.max_record_mb * 2**20),
            selector=selector_of(settings),
        )
    if json_out:
        print_json(report.to_dict(), exit_for(problems(report)))
    else:
        print_ingest(report, out)
    finish(problems(report))


def selector_of(settings: Settings) -> Selector:
    """The shipped selector with the thresholds vault.toml sets ([ingest] write_threshold, keep_threshold)."""
    from vault_pipeline.ingest.select import shipped

    return shipped(settings.write_threshold, settings.keep_threshold)


def problems(report: IngestReport) -> dict[str, int]:
    """What makes an ingest incomplete (exit 1): skipped records and failed conversations."""
    return {"record(s) skipped": len(report.skipped), "conversation(s) failed": len(report.errors)}


def count_conversations(paths: list[Path]) -> int | None:
    """How many conversations the inputs hold, for the progress ETA: a streaming parse, a small
    fraction of the ingest itself. None when an input cannot be read (the ingest reports it)."""
    from vault_pipeline.ingest.parse import ParseIssue, read_export

    try:
        return sum(1 for path in paths for item in read_export(path) if not isinstance(item, ParseIssue))
    except VaultError:
        return None


def print_ingest(report: IngestReport, console: Console) -> None:
    """What was skipped, refused or warned about on stderr, then the counts as a table."""
    for line in report.skipped + report.errors:
        err.print(f"skipped: {line}", markup=False)
    for line in report.warnings:
        err.print(f"warning: {line}", markup=False)
    for line in report.refused:
        err.print(f"left untouched (edited since written): {line}", markup=False)
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
        *((f"  {reason}", n) for reason, n in report.not_written.most_common(5)),
        ("sentences too long to be a note (left to the transcript)", report.units_skipped),
        ("notes no longer written, archived", len(report.archived)),
        ("topics named only (kept as hubs and tags, not notes)", report.topics_named),
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
    console.print(table("ingest", rows, ("", "count")))
