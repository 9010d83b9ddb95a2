"""``vault clean``: the nightly sweep, its dry-run plan, and undo."""

from __future__ import annotations

from typing import TYPE_CHECKING, Annotated

import typer
from rich.console import Console

from vault_pipeline.cli.common import (
    VaultOpt,
    VerboseOpt,
    WaitOpt,
    build_embedder,
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

if TYPE_CHECKING:
    from vault_pipeline.clean.apply import CleanReport
    from vault_pipeline.clean.types import Plan
    from vault_pipeline.config import Settings
    from vault_pipeline.models.calllog import CallLog
    from vault_pipeline.vault.files import Vault


def clean(
    vault_path: VaultOpt = None,
    dry_run: Annotated[bool, typer.Option("--dry-run", help="Print the plan; change nothing.")] = False,
    json_out: Annotated[bool, typer.Option("--json", help="Print the plan (or report) as JSON.")] = False,
    undo: Annotated[str | None, typer.Option(metavar="RUN", help="Restore exactly what run RUN changed.")] = None,
    action: Annotated[
        int | None,
        typer.Option(
            "--action",
            min=1,
            metavar="N",
            help="With --undo: restore only action N of the run (an archived note's archived_by names it).",
        ),
    ] = None,
    wait: WaitOpt = 0,
    verbose: VerboseOpt = False,
) -> None:
    """The nightly sweep: collapse duplicates, supersede contradictions, link related notes; nothing deleted.

    Exit 1 when an action was skipped (a note changed since planning) or an undo left a file alone.

    \b
    Example:  vault clean --dry-run"""
    if action is not None and not undo:
        raise typer.BadParameter("--action needs --undo RUN", param_hint="--action")
    vault, settings, log = open_vault(vault_path)
    if undo:
        _undo(vault, settings, undo, action, json_out=json_out, wait=wait)
    elif dry_run:
        _plan(vault, settings, log, json_out=json_out, wait=wait)
    else:
        _sweep(vault, settings, log, json_out=json_out, wait=wait)


def _sweep(vault: Vault, settings: Settings, log: CallLog, *, json_out: bool, wait: float) -> None:
    from vault_pipeline import pipeline

    embedder, llm = build_embedder(settings), build_llm(settings, settings.extract_model, log)
    with progress("clean", "pairs judged") as advance:
        report = pipeline.clean(vault, embedder=embedder, llm=llm, progress=advance, wait=wait)
    problems = {"action(s) skipped": len(report.skipped)}
    if json_out:
        print_json(report.to_dict(), exit_for(problems))
    else:
        print_clean_report(report, out)
    finish(problems)


def _plan(vault: Vault, settings: Settings, log: CallLog, *, json_out: bool, wait: float) -> None:
    import json
    import sys

    from vault_pipeline import pipeline

    embedder, llm = build_embedder(settings), build_llm(settings, settings.extract_model, log)
    with progress("clean (plan)", "pairs judged") as advance:
        plan = pipeline.plan_clean(vault, embedder=embedder, llm=llm, progress=advance, wait=wait)
    if json_out:  # a list of actions (no room for exit_code); a plan always exits 0
        sys.stdout.write(json.dumps(plan.to_json(), ensure_ascii=False, indent=1) + "\n")
        return
    print_plan(plan)


def _undo(vault: Vault, settings: Settings, run: str, action: int | None, *, json_out: bool, wait: float) -> None:
    from vault_pipeline import pipeline

    report = pipeline.undo_clean(vault, run, action=action, embedder=build_embedder(settings), wait=wait)
    # A file "already as it was before the run" (an undo resumed after a crash) is done, not a failure.
    changed = [line for line in report.skipped if "already as it was before" not in line]
    problems = {"file(s) left alone (changed since the run)": len(changed)}
    if json_out:
        print_json(report.to_dict(), exit_for(problems))
    else:
        for line in report.skipped:
            err.print(f"left alone: {line}", markup=False)
        out.print(f"undid run {report.undone}: restored {report.restored} file(s) (journaled as {report.run_id})")
    finish(problems)


# --------------------------------------------------------------------------- rendering


def print_clean_report(report: CleanReport, console: Console) -> None:
    """One line: actions per kind, files changed, and how to undo the run."""
    for line in report.skipped:
        err.print(f"skipped: {line}", markup=False)
    counts = ", ".join(f"{k} {v}" for k, v in sorted(report.counts.items())) or "nothing to do"
    console.print(
        f"clean: {counts}; {report.files} file(s) changed; run {report.run_id or '-'} "
        f"(undo: vault clean --undo {report.run_id})"
        if report.run_id
        else f"clean: {counts}"
    )


def print_plan(plan: Plan) -> None:
    """What the plan skipped on stderr, then its actions as a table."""
    for line in plan.skipped:
        err.print(f"skipped: {line}", markup=False)
    rows = [(a.action, ", ".join(a.notes), a.reason) for a in plan.actions]
    out.print(
        table(
            f"clean plan: {len(plan.actions)} action(s) from {plan.candidates} candidate pair(s) "
            f"over {plan.notes} notes",
            rows,
            ("action", "notes", "reason"),
        )
    )
