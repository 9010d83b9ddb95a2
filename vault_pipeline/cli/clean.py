"""``vault clean``: the nightly sweep, its dry-run plan, and undo.

The plan is printed for a person: a summary (actions per kind and what each does) first, then
each action with its reason and, per note, what it becomes, its vault path and its text, all
wrapped to the terminal's width, never cut.
``--json`` prints the plan as the list of actions the journal records.
"""

from __future__ import annotations

from collections import Counter
from typing import TYPE_CHECKING, Annotated, assert_never

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
)
from vault_pipeline.cli.progress import progress

if TYPE_CHECKING:
    from vault_pipeline.clean.apply import CleanReport
    from vault_pipeline.clean.types import Action, NoteRef, Plan
    from vault_pipeline.config import Settings
    from vault_pipeline.models.calllog import CallLog
    from vault_pipeline.vault.files import Vault

# What each kind of action does, in the order a plan lists them.
KINDS = {
    "duplicate": "notes stating one claim: one is kept, the others are archived",
    "supersede": "a newer note contradicts an older one: the older is archived",
    "relate": "two notes about one subject: each gets a related link to the other",
}
PLAN_WIDTH = 120  # columns of the plan when stdout is not a terminal (a file, a pipe)


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
    for line in plan.skipped:
        err.print(f"skipped: {line}", markup=False)
    width = out.width if out.is_terminal else PLAN_WIDTH
    for line in plan_lines(plan, width):
        out.print(line, markup=False)


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


def plan_lines(plan: Plan, width: int) -> list[str]:
    """The plan for a person: the summary, then each action numbered as ``--undo --action`` counts them."""
    counts = Counter(action.action for action in plan.actions)
    head = (
        f"clean plan: {len(plan.actions):,} action(s) from {plan.candidates:,} candidate pair(s) over {plan.notes:,} "
        "notes; a dry run, nothing changed"
    )
    lines = wrapped(head, width, "", "  ")
    for kind, meaning in KINDS.items():
        lines += wrapped(meaning, width, f"  {counts[kind]:>6,}  {kind:<9}  ", " " * 21)
    if plan.actions:
        lines.append("")
    for number, action in enumerate(plan.actions, 1):
        lines.extend(action_lines(number, action, width))
    return lines


def action_lines(number: int, action: Action, width: int) -> list[str]:
    """``N. kind: reason`` wrapped to ``width``, then for each of the action's notes ``role  path`` and
    its text wrapped beneath: nothing is cut (the path opens the note, the reason and text are read)."""
    head = f"{number}. {action.action}: "
    lines = wrapped(action.reason, width, head, " " * 3)
    for role, ref in note_roles(action):
        lines.append(f"   {role:<7}  {ref.path}")
        lines += wrapped(ref.text, width, " " * 12, " " * 12)
    return lines


def wrapped(text: str, width: int, first: str, rest: str) -> list[str]:
    """``text`` on lines of at most ``width`` columns (a word longer than a line stands alone, whole)."""
    import textwrap

    return textwrap.wrap(
        one_line(text),
        width=max(width, len(first) + 20),
        initial_indent=first,
        subsequent_indent=rest,
        break_long_words=False,
        break_on_hyphens=False,
    ) or [first.rstrip()]


def note_roles(action: Action) -> list[tuple[str, NoteRef]]:
    """Each note of an action with what the action does to it: keep, archive or link."""
    from vault_pipeline.clean.types import Collapse, Relate, Supersede

    match action:
        case Collapse(canonical=canonical, duplicates=duplicates):
            return [("keep", canonical), *(("archive", ref) for ref in duplicates)]
        case Supersede(newer=newer, older=older):
            return [("keep", newer), ("archive", older)]
        case Relate(a=a, b=b):
            return [("link", a), ("link", b)]
        case _:
            assert_never(action)


def one_line(text: str) -> str:
    """``text`` with its line breaks and runs of spaces made single spaces."""
    return " ".join(text.split())
