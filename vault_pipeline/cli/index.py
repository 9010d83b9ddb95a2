"""``vault index``: bring the LanceDB index in line with the notes."""

from __future__ import annotations

from typing import TYPE_CHECKING, Annotated

import typer
from rich.console import Console

from vault_pipeline.cli.common import (
    JsonOpt,
    VaultOpt,
    VerboseOpt,
    WaitOpt,
    build_embedder,
    err,
    exit_for,
    finish,
    open_vault,
    out,
    print_json,
    table,
)
from vault_pipeline.cli.progress import progress

if TYPE_CHECKING:
    from vault_pipeline.index.sync import IndexReport


def index(
    vault_path: VaultOpt = None,
    rebuild: Annotated[bool, typer.Option("--rebuild", help="Drop the index and embed everything again.")] = False,
    verify: Annotated[bool, typer.Option("--verify", help="Re-hash every file, not only changed ones.")] = False,
    json_out: JsonOpt = False,
    wait: WaitOpt = 0,
    verbose: VerboseOpt = False,
) -> None:
    """Embed new and changed notes into the LanceDB index (incremental; integrity-checked).

    Exit 1 when a note was skipped (unreadable, broken frontmatter).

    \b
    Example:  vault index --vault ~/notes"""
    from vault_pipeline import pipeline

    vault, settings, _ = open_vault(vault_path)
    embedder = build_embedder(settings)
    with progress("index", "rows") as advance:
        report = pipeline.index(vault, embedder, progress=advance, rebuild=rebuild, verify=verify, wait=wait)
    if json_out:
        print_json(report.to_dict(), exit_for(problems(report)))
    else:
        print_index(report, out)
    finish(problems(report))


def problems(report: IndexReport) -> dict[str, int]:
    """What makes an index run incomplete (exit 1): skipped notes."""
    return {"note(s) skipped": len(report.skipped)}


def print_index(report: IndexReport, console: Console) -> None:
    """Skips, repairs and rebuilds on stderr, then the counts as a table."""
    for path, reason in report.skipped:
        err.print(f"skipped: {path}: {reason}", markup=False)
    for path, problem in report.warnings:
        err.print(f"warning: {path}: {problem}", markup=False)
    for path, fault in report.repairs:
        err.print(f"repaired: {path}: {fault}", markup=False)
    if report.rebuilt:
        err.print(f"rebuilt the index: {report.rebuild_reason}", markup=False)
    if report.rechunked:
        err.print(f"re-chunked every note ({report.rechunked}); unchanged texts kept their vectors", markup=False)
    rows = [
        ("note files scanned", report.scanned),
        ("unchanged", report.unchanged),
        ("added", report.added),
        ("changed", report.changed),
        ("moved", report.moved),
        ("removed", report.removed),
        ("repaired", report.repaired),
        ("notes re-embedded", report.embedded_notes),
        ("chunks embedded", report.embedded_chunks),
        ("skipped", len(report.skipped)),
        ("rows in index", report.rows),
        ("embedder", report.embedder),
        ("seconds", f"{report.seconds:.2f}"),
    ]
    console.print(table("index", rows, ("", "count")))


def say_repaired(report: IndexReport) -> None:
    """The one-line notice on stderr when a read (query, status) found the index unreadable and the
    library rebuilt it."""
    err.print(f"{report.rebuild_reason}; rebuilt it from the notes ({report.rows} rows)", markup=False)
