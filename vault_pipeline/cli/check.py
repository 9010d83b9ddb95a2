"""``vault check``: find what is broken in the vault and its index, and fix what is safe to fix."""

from __future__ import annotations

from typing import TYPE_CHECKING, Annotated

import typer

from vault_pipeline.cli.common import (
    JsonOpt,
    VaultOpt,
    VerboseOpt,
    build_embedder,
    exit_for,
    finish,
    open_vault,
    out,
    print_json,
)

if TYPE_CHECKING:
    from vault_pipeline.index.check import CheckReport


def check(
    vault_path: VaultOpt = None,
    fix: Annotated[
        bool,
        typer.Option(
            "--fix",
            help="Remove stale temp files, give copied notes (same id) an id of their own, re-sync the index; "
            "changes nothing else in a note.",
        ),
    ] = False,
    json_out: JsonOpt = False,
    verbose: VerboseOpt = False,
) -> None:
    """Find broken frontmatter, dangling links and block links, duplicate ids, stale index rows, temp files.

    Exit 1 when it finds a problem (without --fix).

    \b
    Example:  vault check --fix"""
    from vault_pipeline.index.check import check as run_check

    vault, settings, _ = open_vault(vault_path)
    report = run_check(vault, embedder=build_embedder(settings) if fix else None, fix=fix)
    found = {"problem(s) found": 0 if fix else report.problems}
    if json_out:
        print_json(report.to_dict(), exit_for(found))
    else:
        for line in finding_lines(report):
            out.print(line, markup=False)
        out.print(f"checked {report.notes} notes: {report.problems} problem(s)")
    finish(found)


def finding_lines(report: CheckReport) -> list[str]:
    """One line per problem found, then one per fix made."""
    return [
        *(f"invalid frontmatter: {p}: {why}" for p, why in report.invalid),
        *(f"dangling link: {p} -> [[{t}]]" for p, t in report.dangling_links),
        *(f"dangling block link: {p} -> [[{t}]]" for p, t in report.dangling_blocks),
        *(f"dangling heading link: {p} -> [[{t}]]" for p, t in report.dangling_headings),
        *(
            f"duplicate id {i}: {', '.join(ps)} (fix: `vault check --fix` gives {', '.join(report.copies[i])} "
            "an id of its own)"
            for i, ps in report.duplicate_ids.items()
        ),
        *(f"index: {p}: {why}" for p, why in report.index_mismatches),
        *(
            [f"index: cannot be read ({report.index_damage}); run `vault index` to rebuild it from the notes"]
            if report.index_damage
            else []
        ),
        *(f"temp file left by an interrupted write: {p}" for p in report.temp_files),
        *(
            f"secret-looking text (an API key or token?) in {p}: kept as written; move it out of the vault if it is one"
            for p in report.secrets
        ),
        *(f"fixed: {line}" for line in report.fixed),
    ]
