"""The ``vault`` command: the composition root.

It reads settings and the environment, builds the models and the embedder, calls
one library function per command and renders the result with rich. Heavy
libraries (litellm, lancedb, onnxruntime) are imported only by the commands
that need them, so ``vault --help`` and ``vault status`` start fast.
"""

from __future__ import annotations

import gc
import json
import logging
import os
import sys
from functools import partial
from pathlib import Path
from typing import Annotated, Any

import typer
from rich.console import Console
from typer.core import TyperCommand, TyperGroup

from vault_pipeline.config import BUDGET_RANGE, CONFIG_FILE, WIDE_RANGE, Settings
from vault_pipeline.errors import ConfigError, VaultError
from vault_pipeline.models.threads import one_blas_thread

# Exit codes, the same in every command and in every --json report ("exit_code"):
EXIT_OK = 0  # the command did what was asked
EXIT_INCOMPLETE = 1  # it ran, but some records, conversations, notes or actions failed or were skipped
EXIT_USAGE = 2  # nothing was done: a usage or configuration error


class UsageError(VaultError):
    """A command line that cannot run as given (a missing input file, no query): exit 2."""


def _exit_code(exc: VaultError) -> int:
    return EXIT_USAGE if isinstance(exc, ConfigError | UsageError) else EXIT_INCOMPLETE


def _argument_name(param: Any) -> str:
    """An argument as a shell user reads it: ``EXPORT...``, ``QUERY``."""
    name = param.metavar or param.name.upper()
    return name if param.nargs == 1 or name.endswith("...") else f"{name}..."


class _Command(TyperCommand):
    """Usage lines and argument names without typer's type labels: ``vault ingest [OPTIONS] EXPORT...``."""

    def collect_usage_pieces(self, ctx) -> list[str]:
        pieces = [self.options_metavar] if self.options_metavar else []
        for param in self.get_params(ctx):
            if param.param_type_name == "argument":
                name = _argument_name(param)
                pieces.append(name if param.required else f"[{name}]")
        return pieces

    def format_options(self, ctx, formatter) -> None:
        sections: dict[str, list[tuple[str, str]]] = {"argument": [], "option": []}
        for param in self.get_params(ctx):
            record = param.get_help_record(ctx)
            if record is not None and param.param_type_name in sections:
                name = _argument_name(param) if param.param_type_name == "argument" else record[0]
                sections[param.param_type_name].append((name, record[1]))
        for title, kind in (("Arguments", "argument"), ("Options", "option")):
            if sections[kind]:
                with formatter.section(title):
                    formatter.write_dl(sections[kind])


class _Group(TyperGroup):
    """Every command gets readable usage lines; a VaultError becomes one line and its exit code."""

    def get_command(self, ctx, cmd_name):
        command = super().get_command(ctx, cmd_name)
        if type(command) is TyperCommand:
            command.__class__ = _Command  # a subclass adding no state: only how help is written
        return command

    def invoke(self, ctx):
        try:
            return super().invoke(ctx)
        except VaultError as exc:
            if ctx.meta.get(_VERBOSE):
                err.print_exception()
            err.print(f"error: {exc}", markup=False)
            raise typer.Exit(_exit_code(exc)) from None
        finally:
            installed = ctx.meta.pop(_VERBOSE, None)  # the context's meta is shared with the command's
            if installed is not None:
                handler, level = installed
                logging.root.removeHandler(handler)
                logging.root.setLevel(level)


app = typer.Typer(
    cls=_Group,
    add_completion=False,
    no_args_is_help=True,
    rich_markup_mode=None,
    help="Chat archives in, atomic cited notes out, a precise context package back.\n\n"
    "Exit codes: 0 done; 1 some records, conversations or notes failed or were skipped (counted in the "
    "last line); 2 usage or configuration error.",
)
out = Console(highlight=False, soft_wrap=True)
err = Console(stderr=True, highlight=False, soft_wrap=True)
_VERBOSE = "vault_pipeline.verbose"  # key in the click context's meta: the log handler -v installed


def _set_verbose(ctx: typer.Context, value: bool) -> bool:
    """``-v``: log lines (ours, LiteLLM's, instructor's) on stderr for this command, and an error's traceback."""
    if value and _VERBOSE not in ctx.meta:
        from rich.logging import RichHandler

        handler = RichHandler(console=err, show_path=False)
        ctx.meta[_VERBOSE] = (handler, logging.root.level)
        logging.root.addHandler(handler)
        logging.root.setLevel(logging.INFO)
    return value


VaultOpt = Annotated[
    Path | None,
    typer.Option(
        "--vault",
        metavar="DIR",
        envvar=["VAULT_DIR", "VAULT_PATH"],
        show_default=False,
        help=f"The vault folder (default: $VAULT_DIR, else the nearest folder holding a {CONFIG_FILE}, "
        "from here upwards).",
    ),
]
VerboseOpt = Annotated[
    bool,
    typer.Option(
        "--verbose",
        "-v",
        callback=_set_verbose,
        expose_value=False,
        help="Show log lines (ours and the model libraries') and an error's traceback.",
    ),
]
JsonOpt = Annotated[bool, typer.Option("--json", help="Print the report as JSON (with its exit_code).")]
WaitOpt = Annotated[
    float,
    typer.Option(
        "--wait",
        metavar="SECONDS",
        min=0,
        help="If another vault command holds the vault lock, wait up to "
        "SECONDS for it (default 0: fail at once, naming the holder).",
    ),
]
REPO = Path(__file__).resolve().parent.parent


# --------------------------------------------------------------------------- building blocks


def _find_vault(given: Path | None) -> Path:
    """``--vault`` (or $VAULT_DIR), else the nearest folder holding a vault.toml from here upwards."""
    if given is not None:
        return given
    here = Path.cwd()
    for folder in (here, *here.parents):
        if (folder / CONFIG_FILE).is_file():
            return folder
    raise ConfigError(
        f"{here}: no {CONFIG_FILE} here or in any folder above; pass --vault DIR, set VAULT_DIR, "
        "or make one with `vault init DIR`"
    )


def _open(vault_path: Path | None):
    from vault_pipeline.config import load_settings
    from vault_pipeline.models.calllog import CallLog
    from vault_pipeline.vault.files import STATE_DIR, Vault

    vault = Vault.open(_find_vault(vault_path))
    settings = load_settings(vault.root, os.environ)
    log_path = vault.root / STATE_DIR / "calls.jsonl" if settings.log_calls else None
    return vault, settings, CallLog(log_path, payloads=settings.log_payloads)


def _llm(settings, model: str, log):
    from vault_pipeline.models.build import build_llm

    return build_llm(model, api_base=settings.api_base, api_key=settings.api_key, log=log)


def _gate_llm(vault, settings, log):
    """The fit-gate's backend: the offline one with the vault's fitted weights (``pipeline.gate_llm``)."""
    from vault_pipeline.pipeline import gate_llm

    return gate_llm(vault, settings.gate_model, api_base=settings.api_base, api_key=settings.api_key, log=log)


def _embedder(settings):
    from vault_pipeline.models.embed import build_embedder
    from vault_pipeline.models.litellm_backend import litellm_embed

    embed_fn = partial(litellm_embed, api_base=settings.api_base, api_key=settings.api_key)
    return build_embedder(settings.embed_model, embed_fn=embed_fn)


def _progress():
    from rich.progress import (
        BarColumn,
        MofNCompleteColumn,
        Progress,
        TextColumn,
        TimeElapsedColumn,
        TimeRemainingColumn,
    )

    return Progress(
        TextColumn("{task.description}"),
        BarColumn(),
        MofNCompleteColumn(),
        TimeElapsedColumn(),
        TimeRemainingColumn(),  # the ETA, where the total is known
        console=err,
        transient=True,
        disable=not err.is_terminal,
    )


def _callback(progress, task, known_total: int | None = None):
    """A library progress callback driving one bar; ``known_total`` stands in where the library has none."""

    def update(done: int, total: int | None, label: str = "") -> None:
        progress.update(task, completed=done, total=total or known_total, description=(label or "")[:40])

    return update


def _count_conversations(paths: list[Path]) -> int | None:
    """How many conversations the inputs hold, for the ingest bar's ETA: a streaming parse, a small
    fraction of the ingest itself (README, "Using it on your own archive"). None when an input cannot be read."""
    from vault_pipeline.ingest.parse import ParseIssue, read_export

    try:
        return sum(1 for path in paths for item in read_export(path) if not isinstance(item, ParseIssue))
    except VaultError:
        return None  # the ingest itself reports it


def _table(title: str, rows: list[tuple], headers: tuple[str, ...]):
    from rich.table import Table

    table = Table(title=title, title_justify="left")
    for header in headers:
        table.add_column(header, overflow="fold")
    for row in rows:
        table.add_row(*(str(cell) for cell in row))
    return table


def _exit_for(problems: dict[str, int]) -> int:
    """EXIT_INCOMPLETE when any count of failed or skipped things is non-zero, else EXIT_OK."""
    return EXIT_INCOMPLETE if any(problems.values()) else EXIT_OK


def _finish(problems: dict[str, int]) -> None:
    """End a command: on failures, a last line counting them and exit 1 (a cron job can tell)."""
    code = _exit_for(problems)
    if code != EXIT_OK:
        counted = ", ".join(f"{n} {what}" for what, n in problems.items() if n)
        err.print(f"incomplete: {counted} (exit {code})", markup=False)
        raise typer.Exit(code)


# --------------------------------------------------------------------------- commands


@app.command()
def init(
    path: Annotated[Path, typer.Argument(metavar="DIR", help="Folder to make a vault (an Obsidian vault works).")],
    json_out: JsonOpt = False,
    verbose: VerboseOpt = False,
) -> None:
    """Create the vault folders and <vault>/vault.toml (existing files are left alone).

    \b
    Example:  vault init ~/notes"""
    from vault_pipeline.vault.files import Vault

    vault = Vault.init(path)
    if json_out:
        out.print_json(data={"vault": str(vault.root), "exit_code": EXIT_OK})
    else:
        out.print(f"vault ready at {vault.root}")


@app.command()
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
    from vault_pipeline.pipeline import ingest as run_ingest

    for path in paths:
        if not path.exists():
            raise UsageError(f"{path}: no such file or folder")
    vault, settings, log = _open(vault_path)
    llm = _llm(settings, model or settings.extract_model, log)
    with _progress() as progress:
        task = progress.add_task("counting conversations", total=None)
        total = _count_conversations(paths) if not progress.disable else None  # only for a visible bar
        report = run_ingest(
            vault,
            paths,
            llm,
            progress=_callback(progress, task, total),
            wait=wait,
            max_record=int(settings.max_record_mb * 2**20),
        )
    _print_ingest(report, llm.model, json_out)
    _finish(_ingest_problems(report))


def _ingest_problems(report) -> dict[str, int]:
    return {"record(s) skipped": len(report.skipped), "conversation(s) failed": len(report.errors)}


def _print_ingest(report, model: str, json_out: bool) -> None:
    if json_out:
        out.print_json(json.dumps(_ingest_dict(report, model)))
        return
    for line in report.skipped + report.errors:
        err.print(f"skipped: {line}", markup=False)
    for line in report.warnings:
        err.print(f"warning: {line}", markup=False)
    for line in report.refused:
        err.print(f"left untouched (edited since written): {line}", markup=False)
    rate = report.notes / report.seconds * 60 if report.seconds else 0.0
    rows = [
        ("conversations", report.conversations),
        ("messages", report.messages),
        ("abandoned-branch messages (not ingested)", report.alternates),
        ("atomic notes", report.notes),
        ("thread maps", report.threads),
        *((f"  {cat}", n) for cat, n in sorted(report.notes_by_category.items())),
        ("units skipped (not sayable in 15 words)", report.units_skipped),
        ("topics named only (kept as hubs and tags, not notes)", report.topics_named),
        ("files created", report.writes["created"]),
        ("files updated", report.writes["updated"]),
        ("files unchanged", report.writes["unchanged"] + report.writes["moved-elsewhere"]),
        ("files refused (user-edited)", report.writes["refused"]),
        ("records skipped", len(report.skipped)),
        ("conversations failed", len(report.errors)),
        ("seconds", f"{report.seconds:.1f}"),
        ("notes per minute", f"{rate:,.0f}"),
        ("model", model),
    ]
    out.print(_table("ingest", rows, ("", "count")))


def _ingest_dict(report, model: str) -> dict:
    return {
        "conversations": report.conversations,
        "messages": report.messages,
        "alternates": report.alternates,
        "notes": report.notes,
        "notes_by_category": dict(sorted(report.notes_by_category.items())),
        "units_skipped": report.units_skipped,
        "topics_named": report.topics_named,
        "threads": report.threads,
        "writes": dict(sorted(report.writes.items())),
        "files_written": report.files_written,
        "skipped": report.skipped,
        "warnings": report.warnings,
        "errors": report.errors,
        "refused": report.refused,
        "seconds": round(report.seconds, 3),
        "model": model,
        "exit_code": _exit_for(_ingest_problems(report)),
    }


@app.command()
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
    from vault_pipeline.ingest.keep import keep as run_keep
    from vault_pipeline.models.protocol import OFFLINE_MODEL

    vault, settings, log = _open(vault_path)
    # The offline judge is the fitted gate itself; a model string puts a model in its place.
    judge = None if settings.quality_model == OFFLINE_MODEL else _llm(settings, settings.quality_model, log)
    with _progress() as progress:
        task = progress.add_task("keep", total=None)
        report = run_keep(
            vault,
            targets=list(notes or []),
            all_passing=all_passing,
            force=force,
            dry_run=dry_run,
            wait=wait,
            progress=_callback(progress, task),
            llm=judge,
        )
    problems = _keep_problems(report, all_passing)
    _print_keep(report, json_out, dry_run, _exit_for(problems))
    _finish(problems)


def _keep_problems(report, all_passing: bool) -> dict[str, int]:
    refused = 0 if all_passing else len(report.refused)
    return {"note(s) refused by the gate": refused, "inbox note(s) unreadable": len(report.skipped)}


KEEP_SHOWN = 20  # refusals listed one by one; the rest are counted by reason (all of them with --json)


def _print_keep(report, json_out: bool, dry_run: bool, code: int = EXIT_OK) -> None:
    from collections import Counter

    if json_out:
        out.print_json(
            data={
                "kept": report.kept,
                "refused": [{"path": p, "reasons": r} for p, r in report.refused],
                "skipped": [{"path": p, "reason": r} for p, r in report.skipped],
                "judge": {"by": report.judge, "model_judged": report.model_judged, "errors": report.model_errors},
                "dry_run": dry_run,
                "exit_code": code,
            }
        )
        return
    for path, problems in report.refused[:KEEP_SHOWN]:
        err.print(f"not kept: {path}: {'; '.join(problems)}", markup=False)
    if len(report.refused) > KEEP_SHOWN:
        tally = Counter(reason.split(":")[0] for _, problems in report.refused for reason in problems)
        err.print(f"... and {len(report.refused) - KEEP_SHOWN} more not kept (--json lists all); reasons:")
        for reason, count in tally.most_common():
            err.print(f"  {count:>6}  {reason}", markup=False)
    for error in report.model_errors:
        rest = "the remaining notes of the run" if error.endswith("not asked again") else "these notes"
        err.print(f"quality model: {error}; the fitted gate judged {rest}", markup=False)
    verb = "would keep" if dry_run else "kept"
    out.print(f"{verb} {len(report.kept)} note(s) into engrams/; refused {len(report.refused)}")


@app.command("index")
def index_cmd(
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
    from vault_pipeline.pipeline import index as run_index

    vault, settings, _ = _open(vault_path)
    embedder = _embedder(settings)
    with _progress() as progress:
        task = progress.add_task("index", total=None)
        report = run_index(
            vault, embedder, progress=_callback(progress, task), rebuild=rebuild, verify=verify, wait=wait
        )
    _print_index(report, json_out)
    _finish(_index_problems(report))


def _index_problems(report) -> dict[str, int]:
    return {"note(s) skipped": len(report.skipped)}


def _print_index(report, json_out: bool) -> None:
    from dataclasses import asdict

    if json_out:
        data = {**asdict(report), "exit_code": _exit_for(_index_problems(report))}
        out.print_json(json.dumps(data, default=str))
        return
    for path, reason in report.skipped:
        err.print(f"skipped: {path}: {reason}", markup=False)
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
    out.print(_table("index", rows, ("", "count")))


@app.command("query")
def query_cmd(
    text: Annotated[str | None, typer.Argument(metavar="QUERY", help="The prompt to build context for.")] = None,
    vault_path: VaultOpt = None,
    intent: Annotated[
        str | None, typer.Option(metavar="TEXT", help="The subject domain the gate judges against.")
    ] = None,
    budget: Annotated[
        int | None,
        typer.Option(
            metavar="TOKENS",
            min=BUDGET_RANGE[0],
            max=BUDGET_RANGE[1],
            show_default=f"vault.toml [retrieval] budget, else {Settings.budget}",
            help="Token budget of the package.",
        ),
    ] = None,
    json_out: Annotated[bool, typer.Option("--json", help="Print the package as JSON.")] = False,
    explain: Annotated[bool, typer.Option("--explain", help="Show every candidate's path through the funnel.")] = False,
    batch: Annotated[
        Path | None, typer.Option(metavar="FILE", help='JSONL file of {"query", "intent"?}; one package per line.')
    ] = None,
    no_gate: Annotated[bool, typer.Option("--no-gate", help="Skip the fit-gate (recall-only path).")] = False,
    no_variants: Annotated[bool, typer.Option("--no-variants", help="Skip multi-query decomposition.")] = False,
    floor: Annotated[
        float | None,
        typer.Option(
            metavar="COSINE",
            min=0.0,
            max=1.0,
            show_default="vault.toml [retrieval] floor, else the embedder's calibration",
            help="Similarity floor.",
        ),
    ] = None,
    wide: Annotated[
        int | None,
        typer.Option(
            metavar="N",
            min=WIDE_RANGE[0],
            max=WIDE_RANGE[1],
            show_default=f"vault.toml [retrieval] wide, else {Settings.wide}",
            help="Candidates in the first step to the floor and gate; the depth then doubles until the budget fills.",
        ),
    ] = None,
    verbose: VerboseOpt = False,
) -> None:
    """Build a small, precise, cited context package for a prompt.

    \b
    Example:  vault query "When is the submission deadline?" --budget 800"""
    from vault_pipeline.config import check_overrides
    from vault_pipeline.pipeline import query as run_query
    from vault_pipeline.retrieve.types import FunnelConfig

    check_overrides(budget=budget, floor=floor, wide=wide)  # NaN passes typer's range check
    queries = _batch_queries(batch) if batch else [(text or "", intent)]
    if not batch and not (text or "").strip():
        raise UsageError("give a query, or --batch FILE")
    vault, settings, log = _open(vault_path)
    overrides = {k: v for k, v in {"budget": budget, "floor": floor, "wide": wide}.items() if v is not None}
    if no_gate:
        overrides["gate"] = False
    if no_variants:
        overrides["variants"] = False
    embedder = _embedder(settings)  # its calibration gives the floor unless vault.toml sets one
    config = FunnelConfig.from_settings(settings, embedder, **overrides)
    packages = run_query(
        vault,
        queries,
        embedder=embedder,
        llm_plan=_llm(settings, settings.extract_model, log),
        llm_gate=_gate_llm(vault, settings, log),
        config=config,
    )
    for package in packages:
        _print_package(package, json_out=json_out, explain=explain, one_line=batch is not None)


def _batch_queries(path: Path) -> list[tuple[str, str | None]]:
    if not path.is_file():
        raise UsageError(f"{path}: no such file")
    queries = []
    for number, line in enumerate(path.read_text(encoding="utf-8").splitlines(), 1):
        if not line.strip():
            continue
        try:
            item = json.loads(line)
            queries.append((str(item["query"]), item.get("intent")))
        except (json.JSONDecodeError, KeyError, TypeError, AttributeError) as exc:
            raise VaultError(f'{path} [line {number}]: not a {{"query", "intent"?}} object ({exc})') from None
    return queries


def _print_package(package, *, json_out: bool, explain: bool, one_line: bool = False) -> None:
    if explain:
        err.print(_trace_table(package))
        err.print(_depth_line(package), markup=False)
    if json_out:  # the trace only with --explain
        sys.stdout.write(package.to_json(indent=None if one_line else 2, trace=explain))
        sys.stdout.flush()
    else:
        out.print(package.to_markdown(), markup=False)


def _shown(value) -> str:
    """A trace figure for the table: three decimals, the integer as is, "-" when the stage gave none."""
    if value is None:
        return "-"
    return f"{value:.3f}" if isinstance(value, float) else str(value)


def _depth_line(package) -> str:
    """How deep the funnel went, why it stopped, and what the one hop and the feedback added."""
    return package.stats.walk_line() if package.stats is not None else ""


def _trace_table(package):
    rows = [
        (
            _shown(t.get("rank")),
            t.get("path", ""),
            ",".join(t.get("lanes", [])),
            _shown(t.get("similarity")),
            t.get("floor") or "-",
            t.get("gate", ""),
            (t.get("reason") or "")[:70],
            _shown(t.get("score")),
        )
        for t in package.to_dict(trace=True)["trace"]
    ]
    return _table(
        f"funnel trace: {package.query}  (intent: {package.intent})",
        rows,
        ("rank", "note", "lanes", "sim", "floor", "gate", "reason", "score"),
    )


@app.command()
def status(
    vault_path: VaultOpt = None,
    lint: Annotated[bool, typer.Option("--lint", help="List heading levels with more than four bullets.")] = False,
    json_out: JsonOpt = False,
    verbose: VerboseOpt = False,
) -> None:
    """Notes per folder, tier, status and category; index freshness; which models are remote.

    \b
    Example:  vault status --vault ~/notes"""
    from vault_pipeline.models.litellm_backend import is_remote
    from vault_pipeline.pipeline import status as run_status

    vault, settings, _ = _open(vault_path)
    result = run_status(vault, lint=lint)
    models = [
        (role, model, "remote" if is_remote(model, settings.api_base) and model != "minilm" else "local")
        for role, model in (
            ("extract", settings.extract_model),
            ("gate", settings.gate_model),
            ("embed", settings.embed_model),
        )
    ]
    if json_out:
        _print_status_json(vault.root, result, models)
        return
    folders = sorted(result.folders.items())
    total = ("all notes", sum(n for _, n in folders))
    out.print(_table(f"vault status: {vault.root}", [*folders, total], ("folder", "notes")))
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
        out.print(_table("index (derived from the notes; rebuilt by `vault index`)", rows, ("index", "value")))
    out.print(_table("models", models, ("role", "model", "where")))
    for relpath, heading, bullets in result.lint:
        out.print(f"lint: {relpath}: '{heading}' has {bullets} bullets (more than four: split the idea)", markup=False)


def _print_status_json(root: Path, result, models: list[tuple[str, str, str]]) -> None:
    data = {
        "vault": str(root),
        "folders": dict(sorted(result.folders.items())),
        "index": result.index,
        "pending": result.pending,
        "models": [{"role": r, "model": m, "where": w} for r, m, w in models],
        "lint": [{"path": p, "heading": h, "bullets": b} for p, h, b in result.lint],
        "exit_code": EXIT_OK,
    }
    out.print_json(json.dumps(data, default=str))


@app.command("clean")
def clean_cmd(
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
    from vault_pipeline import pipeline

    if action is not None and not undo:
        raise typer.BadParameter("--action needs --undo RUN", param_hint="--action")
    vault, settings, log = _open(vault_path)
    embedder = _embedder(settings)
    if undo:
        report = pipeline.undo_clean(vault, undo, action=action, embedder=embedder, wait=wait)
        # A file "already as it was before the run" (an undo resumed after a crash) is done, not a failure.
        changed = [line for line in report.skipped if "already as it was before" not in line]
        problems = {"file(s) left alone (changed since the run)": len(changed)}
        if json_out:
            data = {
                "undone": report.undone,
                "restored": report.restored,
                "run_id": report.run_id,
                "skipped": report.skipped,
                "exit_code": _exit_for(problems),
            }
            out.print_json(json.dumps(data))
        else:
            for line in report.skipped:
                err.print(f"left alone: {line}", markup=False)
            out.print(f"undid run {report.undone}: restored {report.restored} file(s) (journaled as {report.run_id})")
        _finish(problems)
        return
    llm = _llm(settings, settings.extract_model, log)
    with _progress() as progress:
        task = progress.add_task("clean", total=None)
        if dry_run:
            plan = pipeline.plan_clean(vault, embedder=embedder, llm=llm, progress=_callback(progress, task), wait=wait)
        else:
            report = pipeline.clean(vault, embedder=embedder, llm=llm, progress=_callback(progress, task), wait=wait)
    if dry_run:
        _print_plan(plan, json_out)
        return
    problems = {"action(s) skipped": len(report.skipped)}
    if json_out:
        out.print_json(
            json.dumps(
                {
                    "run_id": report.run_id,
                    "counts": dict(report.counts),
                    "skipped": report.skipped,
                    "files": report.files,
                    "exit_code": _exit_for(problems),
                }
            )
        )
    else:
        _print_clean_report(report)
    _finish(problems)


def _print_plan(plan, json_out: bool) -> None:
    if json_out:  # a list of actions (no room for exit_code); a plan always exits 0
        sys.stdout.write(json.dumps(plan.to_json(), ensure_ascii=False, indent=1) + "\n")
        return
    for line in plan.skipped:
        err.print(f"skipped: {line}", markup=False)
    rows = [(a.action, ", ".join(a.notes), a.reason) for a in plan.actions]
    out.print(
        _table(
            f"clean plan: {len(plan.actions)} action(s) from {plan.candidates} candidate pair(s) "
            f"over {plan.notes} notes",
            rows,
            ("action", "notes", "reason"),
        )
    )


def _print_clean_report(report) -> None:
    for line in report.skipped:
        err.print(f"skipped: {line}", markup=False)
    counts = ", ".join(f"{k} {v}" for k, v in sorted(report.counts.items())) or "nothing to do"
    out.print(
        f"clean: {counts}; {report.files} file(s) changed; run {report.run_id or '-'} "
        f"(undo: vault clean --undo {report.run_id})"
        if report.run_id
        else f"clean: {counts}"
    )


@app.command("check")
def check_cmd(
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
    from dataclasses import asdict

    from vault_pipeline.index.check import check

    vault, settings, _ = _open(vault_path)
    report = check(vault, embedder=_embedder(settings) if fix else None, fix=fix)
    problems = {"problem(s) found": 0 if fix else report.problems}
    if json_out:
        out.print_json(json.dumps({**asdict(report), "problems": report.problems, "exit_code": _exit_for(problems)}))
    else:
        lines = [
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
            *(f"temp file left by an interrupted write: {p}" for p in report.temp_files),
            *(f"fixed: {line}" for line in report.fixed),
        ]
        for line in lines:
            out.print(line, markup=False)
        out.print(f"checked {report.notes} notes: {report.problems} problem(s)")
    _finish(problems)


@app.command()
def demo(
    out_dir: Annotated[Path, typer.Option("--out", metavar="DIR", help="Where to build the demo vault.")] = Path(
        "vault-demo"
    ),
    example: Annotated[Path, typer.Option(metavar="DIR", help="The example folder.")] = REPO / "vault_example",
    json_out: Annotated[
        bool, typer.Option("--json", help="Print a JSON summary on stdout (the stages' output goes to stderr).")
    ] = False,
    verbose: VerboseOpt = False,
) -> None:
    """The main job, offline: copy vault_example/vault, ingest its exports, clean, index, answer its queries.

    \b
    Example:  vault demo --out /tmp/vault-demo"""
    global out
    if not (example / "exports").is_dir() or not (example / "vault").is_dir():
        raise UsageError(f"{example}: not an example folder (needs exports/ and vault/); pass --example")
    shown = out
    if json_out:
        out = err  # every stage's tables and packages to stderr; stdout carries the one JSON summary
    try:
        summary = _demo(out_dir, example)
    finally:
        out = shown
    if json_out:
        out.print_json(json.dumps(summary, default=str))
    _finish(_ingest_problems(summary.pop("_ingest")))


def _demo(out_dir: Path, example: Path) -> dict:
    import shutil
    from dataclasses import asdict

    from vault_pipeline import pipeline

    if not out_dir.exists():
        shutil.copytree(example / "vault", out_dir)
        out.print(f"copied {example / 'vault'} to {out_dir}")
    vault, settings, log = _open(out_dir)
    before = _snapshot(vault.root)
    exports = sorted(p for p in (example / "exports").iterdir() if not p.name.startswith("."))
    out.rule("1. ingest the example exports")
    ingested = pipeline.ingest(vault, exports, _llm(settings, settings.extract_model, log))
    _print_ingest(ingested, settings.extract_model, False)
    embedder = _embedder(settings)
    out.rule("2. index")
    with _progress() as progress:
        task = progress.add_task("index", total=None)
        indexed = pipeline.index(vault, embedder, progress=_callback(progress, task))
        _print_index(indexed, False)
    _demo_clean(vault, settings, log, embedder)
    out.rule("4. context packages")
    _demo_queries(vault, settings, log, embedder, example / "queries.jsonl")
    written = _written(before, _snapshot(vault.root))
    out.print(f"demo vault: {vault.root} (open it in Obsidian); {written}")
    ingest_json = _ingest_dict(ingested, settings.extract_model)
    return {
        "vault": str(vault.root),
        "ingest": ingest_json,
        "index": asdict(indexed),
        "written": written,
        "exit_code": ingest_json["exit_code"],
        "_ingest": ingested,
    }


# A sweep that archives notes frees their places in other notes' candidate lists (each note keeps
# its few best pairs), so pairs it never saw can come up in the next sweep; the demo sweeps again
# until a sweep changes nothing, which is what makes a second demo run write nothing.
DEMO_CLEAN_ROUNDS = 5


def _demo_clean(vault, settings, log, embedder) -> None:
    from vault_pipeline import pipeline

    out.rule("3. nightly clean (duplicates, supersession) and re-index")
    llm = _llm(settings, settings.extract_model, log)
    for _ in range(DEMO_CLEAN_ROUNDS):
        report = pipeline.clean(vault, embedder=embedder, llm=llm)
        _print_clean_report(report)
        if not report.files:
            break
    else:
        err.print(f"the clean still changed files after {DEMO_CLEAN_ROUNDS} sweeps; the next run goes on")
    pipeline.index(vault, embedder)


def _snapshot(root: Path) -> dict[str, str]:
    """Every file a user sees in the vault (the pipeline's own state folder left out): path -> sha256."""
    import hashlib

    from vault_pipeline.vault.files import STATE_DIR

    found = {}
    for folder, dirs, files in os.walk(root):
        here = Path(folder)
        if here == root:
            dirs[:] = [d for d in dirs if d != STATE_DIR]
        for name in files:
            path = here / name
            found[path.relative_to(root).as_posix()] = hashlib.sha256(path.read_bytes()).hexdigest()
    return found


def _written(before: dict[str, str], after: dict[str, str]) -> str:
    """What a run did to the vault's files, from two snapshots: "N files written[, M removed]"."""
    written = sum(1 for path, sha in after.items() if before.get(path) != sha)  # created or changed
    removed = sum(1 for path in before if path not in after)  # an archived note moved elsewhere
    text = f"{written} file{'' if written == 1 else 's'} written"
    return f"{text}, {removed} moved away or removed" if removed else text


def _demo_queries(vault, settings, log, embedder, path: Path) -> None:
    from vault_pipeline.pipeline import query as run_query
    from vault_pipeline.retrieve.types import FunnelConfig

    queries = _batch_queries(path) if path.is_file() else [("Can we talk about peer review for our paper?", None)]
    packages = run_query(
        vault,
        queries,
        embedder=embedder,
        llm_plan=_llm(settings, settings.extract_model, log),
        llm_gate=_gate_llm(vault, settings, log),
        config=FunnelConfig.from_settings(settings, embedder),
    )
    for package in packages:
        stats = package.to_dict()["stats"]
        out.print(package.to_markdown(), markup=False)
        out.print(
            f"[candidates {stats.get('candidates')}, after floor {stats.get('after_floor')}, "
            f"gate kept {stats.get('gate_kept')} dropped {stats.get('gate_dropped')}, "
            f"{package.tokens} tokens]\n",
            markup=False,
        )


@app.command("gate-calibrate")
def gate_calibrate(
    labels: Annotated[
        list[Path],
        typer.Argument(metavar="LABELS...", help="Labels JSONL file(s) (see vault_example/calibration/README.md)."),
    ],
    vault_path: Annotated[
        Path | None,
        typer.Option("--vault", metavar="DIR", help="Take the gate model and embedder from this vault's vault.toml."),
    ] = None,
    json_out: Annotated[bool, typer.Option("--json", help="Print the summary as one JSON line.")] = False,
    fit: Annotated[
        bool,
        typer.Option("--fit", help="Fit the offline gate on LABELS; with --vault, store it in the vault's gate.json."),
    ] = False,
    verbose: VerboseOpt = False,
) -> None:
    """Measure the fit-gate at two intent altitudes and sweep the similarity floor on labelled candidates.

    \b
    Example:  vault gate-calibrate vault_example/calibration/labels.jsonl"""
    from vault_pipeline.config import load_settings
    from vault_pipeline.models.calllog import CallLog
    from vault_pipeline.models.offline.relevance import DEFAULT
    from vault_pipeline.retrieve.calibrate import calibrate, load_label_files
    from vault_pipeline.retrieve.gatefit import fit_gate
    from vault_pipeline.retrieve.signals import load_relevance, save_relevance
    from vault_pipeline.retrieve.types import FunnelConfig

    items = load_label_files(labels)
    vault = None
    if vault_path is not None:
        vault, settings, log = _open(vault_path)
    else:
        settings, log = load_settings(None, os.environ), CallLog(None)
    embedder = _embedder(settings)
    current = load_relevance(vault.root) if vault is not None else None
    report = calibrate(
        items,
        llm=_gate_llm(vault, settings, log) if vault is not None else _llm(settings, settings.gate_model, log),
        embedder=embedder,
        config=FunnelConfig.from_settings(settings, embedder),
    )
    fitted = fit_gate(items, embedder, source=" ".join(p.name for p in labels))
    stored = save_relevance(vault.root, fitted.model) if fit and vault is not None else None
    if json_out:
        summary = {
            **report.summary(),
            "fitted_gate": fitted.summary(),
            "stored": str(stored) if stored else None,
            "exit_code": EXIT_OK,
        }
        sys.stdout.write(json.dumps(summary, ensure_ascii=False, sort_keys=True) + "\n")
        return
    if report.offline:
        out.print(
            "offline gate: the fitted relevance model; a configured gate model is reported beside it", markup=False
        )
    _print_calibration(
        report, "set in vault.toml or VAULT_FLOOR" if settings.floor is not None else "the embedder's calibration"
    )
    _print_fitted(fitted, report, stored, fit, seen_by(current or DEFAULT, labels) if report.offline else "")


def seen_by(model, labels: list[Path]) -> str:
    """How the configured offline gate's figures on ``labels`` read: in sample when its ``source`` names
    the files, held out when it names none of them."""
    fitted_on = set(model.source.split())
    given = [p.name for p in labels]
    seen = [name for name in given if name in fitted_on]
    if not seen:
        return "current weights: held out (fitted on none of these files)"
    if len(seen) == len(given):
        return "current weights: in-sample on the labels they were fitted on"
    return f"current weights: in-sample on {', '.join(seen)}, held out on the rest"


def _pct(value) -> str:
    return "-" if value is None else f"{value:.0%}"


def _print_fitted(fitted, report, stored, fit: bool, current: str) -> None:
    """The fitted offline gate's held-out figures beside the configured gate's on the same labels."""
    from vault_pipeline.retrieve.gatefit import side_by_side

    rows = [
        (
            r["gate"],
            _pct(r["recall"]),
            _pct(r["precision"]),
            f"{r['contaminants_kept']}/{r['kept']} ({_pct(r['contamination'])})",
            f"{r['ms_per_candidate']:.2f}",
            "-" if r["tokens_per_candidate"] is None else f"{r['tokens_per_candidate']:,.0f}",
        )
        for r in side_by_side(fitted, report)
    ]
    out.print(
        _table(
            f"gate quality and cost on {fitted.candidates} labelled candidates",
            rows,
            ("gate", "recall", "precision", "contaminants/kept", "ms/candidate", "tokens/candidate"),
        )
    )
    out.print(
        "held out: leave-one-query-out, weights and threshold fitted without the judged query"
        + (f"; {current}" if current else ""),
        markup=False,
    )
    model = fitted.model
    weights = ", ".join(f"{n} {w:+.3f}" for n, w in model.weights.items())
    out.print(f"fitted weights: {weights}; bias {model.bias:+.3f}; threshold {model.threshold:.4f}", markup=False)
    if stored is not None:
        out.print(f"stored the fitted gate in {stored}", markup=False)
    elif fit:
        out.print("not stored: pass --vault to store the fitted gate in that vault", markup=False)


def _print_calibration(report, floor_source: str) -> None:
    quality = [
        (
            s.altitude,
            s.candidates,
            _pct(s.keep_rate),
            _pct(s.precision),
            _pct(s.recall),
            f"{s.contaminants_kept}/{s.contaminants}",
            s.fail_open,
        )
        for s in report.altitudes
    ]
    out.print(
        _table(
            f"fit-gate ({report.model}) on {len(report.candidates)} labelled candidates",
            quality,
            ("altitude", "n", "keep rate", "precision", "recall", "contam. kept", "fail-open"),
        )
    )
    cost = [
        (
            s.altitude,
            s.queries,
            f"{s.calls / max(1, s.queries):.1f}",
            "-" if s.tokens is None else f"{s.tokens / max(1, s.queries):,.0f}",
            f"{1000 * s.seconds / max(1, s.queries):.0f}",
        )
        for s in report.altitudes
    ]
    out.print(_table("gate cost per query", cost, ("altitude", "queries", "calls", "tokens", "latency ms")))
    sweep = [(f"{p.floor:.2f}", _pct(p.recall), _pct(p.off_topic_pass), _pct(p.contaminant_pass)) for p in report.sweep]
    out.print(
        _table(
            f"similarity floor sweep ({report.embedder})",
            sweep,
            ("floor", "relevant passing (recall)", "off-topic passing", "contaminants passing"),
        )
    )
    out.print(
        "precision = relevant kept / kept; recall = relevant kept / relevant; fail-open counts as kept", markup=False
    )
    verdict = "" if report.floor_meets_target else " (no swept floor reaches the target: lowest swept floor)"
    exact = "" if report.floor_at_target is None else f"; exact cosine at target: {report.floor_at_target:.3f}"
    out.print(f"suggested floor for {report.embedder}: {report.suggested_floor:.2f}{verdict}{exact}", markup=False)
    out.print(f"floor in use: {report.current_floor:.2f} ({floor_source})", markup=False)
    out.print(f"rule: {report.floor_rule}", markup=False)


# --------------------------------------------------------------------------- serving: MCP and the live index


@app.command("mcp")
def mcp_cmd(
    vault_path: VaultOpt = None,
    http: Annotated[
        int | None,
        typer.Option(
            "--http", metavar="PORT", min=1, max=65535, help="Serve streamable HTTP on 127.0.0.1:PORT, not stdio."
        ),
    ] = None,
    watch: Annotated[
        bool, typer.Option("--watch/--no-watch", help="Keep the index in sync with the files while serving.")
    ] = True,
    json_out: Annotated[bool, typer.Option("--json", help="Log the watcher's syncs to stderr as JSON lines.")] = False,
) -> None:
    """Serve the vault to LLM clients over MCP: query, search, read_note, remember, status.

    Example: vault mcp --vault ~/notes  (stdio, as Claude Desktop and Claude Code start it)"""
    from vault_pipeline.serve.mcp import serve

    tools = _serve_tools(vault_path)
    serve(
        tools,
        port=http,
        watch=watch,
        listener=partial(_watch_event, json_out=json_out, console=err),
        on_ready=lambda line: err.print(line, markup=False),
    )


@app.command("watch")
def watch_cmd(
    vault_path: VaultOpt = None,
    json_out: Annotated[bool, typer.Option("--json", help="Print one JSON line per sync.")] = False,
) -> None:
    """Keep the index in sync as notes are saved, moved or deleted (Ctrl-C stops).

    Example: vault watch --vault ~/notes"""
    from vault_pipeline.serve.watch import Watcher

    vault, settings, _ = _open(vault_path)
    watcher = Watcher(vault.root, _embedder(settings), listener=partial(_watch_event, json_out=json_out, console=out))
    err.print(f"watching {vault.root} (Ctrl-C stops)", markup=False)
    try:
        watcher.run()
    except KeyboardInterrupt:
        err.print("stopped", markup=False)


def _serve_tools(vault_path: Path | None):
    from vault_pipeline.retrieve.types import FunnelConfig
    from vault_pipeline.serve.tools import VaultTools

    vault, settings, log = _open(vault_path)
    embedder = _embedder(settings)
    tools = VaultTools(
        vault.root,
        embedder=embedder,
        llm_extract=_llm(settings, settings.extract_model, log),
        llm_plan=_llm(settings, settings.extract_model, log),
        llm_gate=_gate_llm(vault, settings, log),
        config=FunnelConfig.from_settings(settings, embedder),
    )
    vault.close()
    return tools


def _watch_event(event, *, json_out: bool, console) -> None:
    """One watcher event: a JSON line, or a line of text (waiting and errors on stderr)."""
    if json_out:
        console.print(json.dumps(event.to_dict(), ensure_ascii=False), markup=False, highlight=False, soft_wrap=True)
    else:
        (console if event.kind == "synced" else err).print(event.line(), markup=False)
    console.file.flush()  # a line per sync as it happens, also into a pipe


def main() -> None:
    """Console entry point: a project error is one line and exit 1 (2 for usage and config errors)."""
    # A command builds ~100k small objects per 100k notes (manifest rows, stats, paths) and
    # creates no cycles worth chasing; at the default thresholds the collector re-scanned every
    # long-lived object (LanceDB's thousands of classes) over and over: 0.16 s of a 2.2 s
    # one-note `vault index` at 102k notes.
    gc.set_threshold(100_000, 50, 100)
    one_blas_thread()  # small matrix products: a BLAS thread per core only spins (models/threads.py)
    try:
        app()
    except VaultError as exc:  # raised outside a command (the group maps those inside one)
        err.print(f"error: {exc}", markup=False)
        sys.exit(_exit_code(exc))
    except KeyboardInterrupt:
        err.print("interrupted", markup=False)
        sys.exit(130)


if __name__ == "__main__":
    main()
