"""``vault query``: a small, precise, cited context package for a prompt.

``--explain`` prints on stderr how every candidate went through the funnel: a table with one
line per candidate (paths shortened from the left, the reason cut to the line) and a line on
how deep the funnel went. Both are read from the package's JSON form (``to_dict()["trace"]``
and ``stats``), whose shape is stable.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Any

import typer

from vault_pipeline.cli.common import (
    EXIT_INCOMPLETE,
    UsageError,
    VaultOpt,
    VerboseOpt,
    build_embedder,
    build_gate,
    build_llm,
    err,
    finish,
    open_vault,
    out,
    schema_option,
)
from vault_pipeline.cli.index import say_repaired

if TYPE_CHECKING:
    from rich.table import Table

    from vault_pipeline.retrieve.package import ContextPackage

TRACE_WIDTH = 120  # columns of the trace table when stderr is not a terminal
NOTE_WIDTH = (22, 34)  # a candidate's path, shortened from the left to fit between these widths
REASON_WIDTH = 30  # what the note column leaves the reason on a narrow terminal, where it can
# Columns beside the note and the reason: rank, lanes ("vector,text"), sim, floor, gate ("skipped"), score.
OTHER_COLUMNS = 4 + 11 + 6 + 5 + 7 + 5 + 7  # and a space between every two columns


def query(
    text: Annotated[str | None, typer.Argument(metavar="QUERY", help="The prompt to build context for.")] = None,
    vault_path: VaultOpt = None,
    intent: Annotated[
        str | None, typer.Option(metavar="TEXT", help="The subject domain the gate judges against.")
    ] = None,
    budget: Annotated[int | None, schema_option("budget", "TOKENS")] = None,
    json_out: Annotated[bool, typer.Option("--json", help="Print the package as JSON.")] = False,
    explain: Annotated[bool, typer.Option("--explain", help="Show every candidate's path through the funnel.")] = False,
    batch: Annotated[
        Path | None, typer.Option(metavar="FILE", help='JSONL file of {"query", "intent"?}; one package per line.')
    ] = None,
    no_gate: Annotated[bool, typer.Option("--no-gate", help="Skip the fit-gate (recall-only path).")] = False,
    no_variants: Annotated[bool, typer.Option("--no-variants", help="Skip multi-query decomposition.")] = False,
    floor: Annotated[float | None, schema_option("floor", "COSINE")] = None,
    wide: Annotated[int | None, schema_option("wide", "N")] = None,
    verbose: VerboseOpt = False,
) -> None:
    """Build a small, precise, cited context package for a prompt.

    Exit 1 when the package is degraded (the fit-gate or decomposition model failed: the package is
    printed all the same, and one line on stderr says why).

    \b
    Example:  vault query "When is the submission deadline?" --budget 800"""
    from vault_pipeline import pipeline
    from vault_pipeline.config import check_overrides
    from vault_pipeline.models.protocol import MCP_SAMPLING
    from vault_pipeline.retrieve.types import FunnelConfig

    check_overrides(budget=budget, floor=floor, wide=wide)  # NaN passes typer's range check
    queries, skipped = batch_queries(batch) if batch else ([(text or "", intent)], [])
    for line in skipped:
        err.print(f"skipped: {line}", markup=False)
    if not batch and not (text or "").strip():
        raise UsageError("give a query, or --batch FILE")
    vault, settings, log = open_vault(vault_path)
    overrides: dict[str, Any] = {
        k: v for k, v in {"budget": budget, "floor": floor, "wide": wide}.items() if v is not None
    }
    if no_gate:
        overrides["gate_enabled"] = False
    if no_variants:
        overrides["variants"] = False
    embedder = build_embedder(settings)  # its calibration gives the floor unless vault.toml sets one
    config = FunnelConfig.from_settings(settings, embedder, **overrides)
    llm_plan, llm_gate = build_llm(settings, settings.extract_model, log), build_gate(vault, settings, log)
    if settings.gate_model == MCP_SAMPLING:
        err.print("gate: mcp-sampling asks an MCP client's model, in `vault mcp`; here the offline gate judged")

    degraded = 0
    # The index is derived: when it is unreadable, the library rebuilds it and answers what is left.
    for package in pipeline.query(
        vault, queries, embedder=embedder, llm_plan=llm_plan, llm_gate=llm_gate, config=config, on_repair=say_repaired
    ):
        print_package(package, json_out=json_out, explain=explain, one_line=batch is not None)
        degraded += say_degraded(package, batch is not None)
    if skipped:
        finish({"batch line(s) skipped": len(skipped), "package(s) degraded": degraded})
    if degraded:
        raise typer.Exit(EXIT_INCOMPLETE)


def say_degraded(package: ContextPackage, in_batch: bool) -> bool:
    """One line on stderr, after the package (printed all the same), when its gate or plan failed open."""
    if package.stats is None or not package.stats.degraded:
        return False
    where = f" ({package.query[:60]})" if in_batch else ""
    err.print(f"degraded package{where}: {package.stats.degraded_line()}", markup=False)
    return True


def batch_queries(path: Path) -> tuple[list[tuple[str, str | None]], list[str]]:
    """(the (query, intent) pairs, a line naming each line skipped) of a JSONL file of
    ``{"query", "intent"?}`` objects: a bad line is skipped and the rest answered (exit 1), as a bad
    record of an export is; a missing file is a usage error (exit 2)."""
    if not path.is_file():
        raise UsageError(f"{path}: no such file")
    try:
        text = path.read_text(encoding="utf-8")
    except (OSError, UnicodeError) as exc:
        raise UsageError(f"{path}: cannot be read as UTF-8 text ({exc.__class__.__name__})") from None
    queries, skipped = [], []
    for number, line in enumerate(text.splitlines(), 1):
        if not line.strip():
            continue
        try:
            item = json.loads(line)
            queries.append((str(item["query"]), item.get("intent")))
        except (json.JSONDecodeError, KeyError, TypeError, AttributeError) as exc:
            skipped.append(f'{path} [line {number}]: not a {{"query", "intent"?}} object ({exc})')
    return queries, skipped


def print_package(package: ContextPackage, *, json_out: bool, explain: bool, one_line: bool = False) -> None:
    """The package as Markdown (or JSON, one line per package in a batch); with ``explain``, its trace on stderr."""
    if explain:
        err.print(trace_table(package, err.width if err.is_terminal else TRACE_WIDTH))
        err.print(depth_line(package), markup=False)
    if json_out:
        sys.stdout.write(package.to_json(indent=None if one_line else 2, trace=explain))  # the trace with --explain
        sys.stdout.flush()
    else:
        out.print(package.to_markdown(), markup=False)


# --------------------------------------------------------------------------- --explain


def shown(value: object) -> str:
    """A trace figure for the table: three decimals, the integer as is, "-" when the stage gave none."""
    if value is None:
        return "-"
    return f"{value:.3f}" if isinstance(value, float) else str(value)


def trace_table(package: ContextPackage, width: int = TRACE_WIDTH) -> Table:
    """A row per candidate: rank, note, lanes, similarity, floor, gate, score and the reason; the path
    and the reason wrap to fit (never cut: the path is what opens the note, the reason is read)."""
    from rich import box
    from rich.table import Table

    table = Table(
        title=f"funnel trace: {package.query}  (intent: {package.intent})",
        title_justify="left",
        box=box.SIMPLE_HEAD,  # a rule under the header, a space between columns
        show_edge=False,
        padding=0,
        width=width,
    )
    note_width = min(NOTE_WIDTH[1], max(NOTE_WIDTH[0], width - OTHER_COLUMNS - REASON_WIDTH))
    for header in ("rank", "note", "lanes", "sim", "floor", "gate", "score"):
        wraps = {"no_wrap": False, "overflow": "fold", "width": note_width} if header == "note" else {"no_wrap": True}
        table.add_column(header, justify="right" if header in ("rank", "sim", "score") else "left", **wraps)
    table.add_column("reason", no_wrap=False, overflow="fold", ratio=1)
    for entry in package.to_dict(trace=True)["trace"]:
        table.add_row(
            shown(entry.get("rank")),
            str(entry.get("path", "")).removesuffix(".md"),
            ",".join(entry.get("lanes", [])),
            shown(entry.get("similarity")),
            entry.get("floor") or "-",
            entry.get("gate") or "-",
            shown(entry.get("score")),
            " ".join((entry.get("reason") or "").split()),
        )
    return table


def depth_line(package: ContextPackage) -> str:
    """How deep the funnel went, why it stopped, and what the one hop and the feedback added."""
    return package.stats.walk_line() if package.stats is not None else ""
