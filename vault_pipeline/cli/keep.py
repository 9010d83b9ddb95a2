"""``vault keep``: promote inbox notes that pass the Note Quality Gate to engrams."""

from __future__ import annotations

from collections import Counter
from typing import TYPE_CHECKING, Annotated

import typer

from vault_pipeline.cli.common import (
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
)
from vault_pipeline.cli.progress import progress

if TYPE_CHECKING:
    from vault_pipeline.ingest.keep import KeepReport

KEEP_SHOWN = 20  # refusals listed one by one; the rest are counted by reason (all of them with --json)


def keep(
    notes: Annotated[
        list[str] | None, typer.Argument(metavar="NOTE...", help="Note ids, file stems or paths in inbox/.")
    ] = None,
    vault_path: VaultOpt = None,
    all_passing: Annotated[
        bool, typer.Option("--all-passing", help="Keep every inbox note that passes the Note Quality Gate.")
    ] = False,
    force: Annotated[bool, typer.Option("--force", help="Keep named notes even if they fail the gate.")] = False,
    dry_run: Annotated[
        bool, typer.Option("--dry-run", help="Report what would be kept and refused; write nothing.")
    ] = False,
    json_out: Annotated[bool, typer.Option("--json", help="Print kept, refused and skipped as JSON.")] = False,
    wait: WaitOpt = 0,
    verbose: VerboseOpt = False,
) -> None:
    """Promote notes to engrams (also picks up notes flipped to `status: kept` in Obsidian).

    Each note the gate evaluates gets its verdict in its `quality` property. Exit 1 when a note
    asked for was refused (not with --all-passing, where refusing is the gate's job) or an inbox
    note could not be read.

    \b
    Example:  vault keep --all-passing --dry-run"""
    from vault_pipeline.cli.ingest import selector_of
    from vault_pipeline.ingest.keep import keep as run_keep
    from vault_pipeline.models.protocol import is_offline

    vault, settings, log = open_vault(vault_path)
    # The offline judge is the fitted gate itself; a model string puts a model in its place.
    judge = None if is_offline(settings.quality_model) else build_llm(settings, settings.quality_model, log)
    with progress("keep", "notes") as advance:
        report = run_keep(
            vault,
            targets=list(notes or []),
            all_passing=all_passing,
            force=force,
            dry_run=dry_run,
            wait=wait,
            progress=advance,
            llm=judge,
            selector=selector_of(settings),
        )
    found = problems(report, all_passing)
    if json_out:
        print_json(report.to_dict(), exit_for(found))
    else:
        print_keep(report)
    finish(found)


def problems(report: KeepReport, all_passing: bool) -> dict[str, int]:
    """What makes a keep incomplete (exit 1): a named note refused, an inbox note unreadable."""
    refused = 0 if all_passing else len(report.refused)
    return {"note(s) refused by the gate": refused, "inbox note(s) unreadable": len(report.skipped)}


def print_keep(report: KeepReport) -> None:
    """The first refusals one by one, the rest counted by reason, then what was kept."""
    for path, reasons in report.refused[:KEEP_SHOWN]:
        err.print(f"not kept: {path}: {'; '.join(reasons)}", markup=False)
    if len(report.refused) > KEEP_SHOWN:
        tally = Counter(reason.split(":")[0] for _, reasons in report.refused for reason in reasons)
        err.print(f"... and {len(report.refused) - KEEP_SHOWN} more not kept (--json lists all); reasons:")
        for reason, count in tally.most_common():
            err.print(f"  {count:>6}  {reason}", markup=False)
    for path, why in report.skipped:  # named, so the user can open them
        err.print(f"skipped: {path}: {why}", markup=False)
    for error in report.model_errors:
        rest = "the remaining notes of the run" if error.endswith("not asked again") else "these notes"
        err.print(f"quality model: {error}; the fitted gate judged {rest}", markup=False)
    verb = "would keep" if report.dry_run else "kept"
    out.print(f"{verb} {len(report.kept)} note(s) into engrams/; refused {len(report.refused)}")
